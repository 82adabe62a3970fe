"""DynamicResources for pods without ResourceClaims (the only kind schedmesh has), as v1.35 treats them."""
from __future__ import annotations

import pytest

from schedmesh.api.types import Node, ObjectMeta, Pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code, CycleState, NodeToStatus, PluginError, PreScorePlugin
from schedmesh.plugins.dynamic_resources import DynamicResources

POD = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1"))
SNAP = Snapshot([Node(meta=ObjectMeta(name=f"n{i}")) for i in range(3)])


def prefiltered() -> CycleState:
    st = CycleState()
    _, status = DynamicResources().pre_filter(st, POD, SNAP)
    assert status is not None and status.code == Code.SKIP
    return st


def test_prefilter_skips_but_writes_state():
    st = prefiltered()
    assert st.get("DynamicResources") is not None


def test_filter_with_and_without_state():
    pl = DynamicResources()
    ni = SNAP.node_info_list[0]
    assert pl.filter(prefiltered(), POD, ni) is None
    err = pl.filter(CycleState(), POD, ni)
    assert err.code == Code.ERROR and err.message() == "not found"
    v = pl.filter_nodes(prefiltered(), POD, SNAP, SNAP.all_indices())
    assert (v.failed == -1).all()
    v = pl.filter_nodes(CycleState(), POD, SNAP, SNAP.all_indices())
    assert (v.failed == 0).all() and v.statuses[0].code == Code.ERROR


@pytest.mark.parametrize("ran_prefilter,code,message", [
    (True, Code.UNSCHEDULABLE, "no new claims to deallocate"),
    (False, Code.ERROR, "not found"),
], ids=["prefilter-ran", "prefilter-never-ran"])
def test_post_filter(ran_prefilter, code, message):
    st = prefiltered() if ran_prefilter else CycleState()
    result, status = DynamicResources().post_filter(st, POD, NodeToStatus())
    assert result is None and status.code == code and status.message() == message


def test_score_is_zero_everywhere_and_not_skipped():
    pl = DynamicResources()
    assert not isinstance(pl, PreScorePlugin)  # no PreScore, so Score always runs
    st = prefiltered()
    rows = SNAP.all_indices()
    scores = pl.score_nodes(st, POD, SNAP, rows)
    assert scores.tolist() == [pl.score(st, POD, ni)[0] for ni in SNAP.node_info_list] == [0, 0, 0]
    assert pl.has_normalize
    pl.normalize_score(st, POD, scores)
    assert scores.tolist() == [0, 0, 0]
    with pytest.raises(PluginError):
        pl.score_nodes(CycleState(), POD, SNAP, rows)


def test_reserve_and_prebind_are_no_ops_with_state():
    pl = DynamicResources()
    st = prefiltered()
    assert pl.pre_enqueue(POD) is None
    assert pl.reserve(st, POD, "n0") is None
    assert pl.pre_bind(st, POD, "n0") is None
    assert pl.reserve(CycleState(), POD, "n0").code == Code.ERROR
    pl.unreserve(st, POD, "n0")


def test_events_and_hint():
    pl = DynamicResources()
    ev = pl.events_to_register()
    assert [(e.event.resource, e.event.action) for e in ev] == [
        (EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE),
        (EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM)]
    other = Pod(meta=ObjectMeta(name="q", uid="u2"))
    assert pl.is_schedulable_after_pod_change(POD, None, POD) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_pod_change(POD, None, other) == QueueingHint.QUEUE_SKIP
