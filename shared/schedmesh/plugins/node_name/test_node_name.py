"""NodeName, re-expressing kube's node_name_test.go plus bulk-form edge cases."""
from __future__ import annotations

import numpy as np
import pytest

from schedmesh.api.types import Node, ObjectMeta, Pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.events import ActionType, EventResource
from schedmesh.framework.interface import Code, CycleState
from schedmesh.plugins.node_name import NodeName


def pod(node_name: str = "") -> Pod:
    return Pod(meta=ObjectMeta(name="p", namespace="default"), node_name=node_name)


SNAP = Snapshot([Node(meta=ObjectMeta(name=n)) for n in ("foo", "bar", "baz")])

CASES = [
    ("no-node-name-fits-every-node", "", {"foo": True, "bar": True, "baz": True}),
    ("node-name-matches-only-that-node", "foo", {"foo": True, "bar": False, "baz": False}),
    ("unknown-node-name-matches-nothing", "qux", {"foo": False, "bar": False, "baz": False}),
]


@pytest.mark.parametrize("name,node_name,want", CASES, ids=[c[0] for c in CASES])
def test_filter(name, node_name, want):
    pl = NodeName()
    p = pod(node_name)
    got = {}
    for ni in SNAP.node_info_list:
        st = pl.filter(CycleState(), p, ni)
        got[ni.name] = st is None
        if st is not None:
            assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            assert st.reasons == ("node(s) didn't match the requested node name",)
    assert got == want
    v = pl.filter_nodes(CycleState(), p, SNAP, SNAP.all_indices())
    assert dict(zip(SNAP.cols.names, (v.failed == -1).tolist())) == want


def test_bulk_on_candidate_subset():
    pl = NodeName()
    rows = np.array([SNAP.cols.index_of("bar"), SNAP.cols.index_of("baz")], dtype=np.int64)
    v = pl.filter_nodes(CycleState(), pod("baz"), SNAP, rows)
    assert v.failed.tolist() == [0, -1]


def test_events_to_register():
    ev = NodeName().events_to_register()
    assert len(ev) == 1 and ev[0].event.resource == EventResource.NODE
    assert ev[0].event.action == ActionType.ADD and ev[0].hint is None
