"""NodeUnschedulable, re-expressing kube's node_unschedulable_test.go plus toleration edge cases."""
from __future__ import annotations

import pytest

from schedmesh.api.load import load_text
from schedmesh.api.types import Node, ObjectMeta, Pod, Toleration
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code, CycleState
from schedmesh.plugins.node_unschedulable import NodeUnschedulable

KEY = "node.kubernetes.io/unschedulable"


def node(name: str, unschedulable: bool) -> Node:
    return Node(meta=ObjectMeta(name=name), unschedulable=unschedulable)


def pod(*tolerations: Toleration, uid: str = "u1") -> Pod:
    return Pod(meta=ObjectMeta(name="p", namespace="default", uid=uid), tolerations=list(tolerations))


CASES = [
    ("unschedulable-node-rejects", True, [], False),
    ("schedulable-node", False, [], True),
    ("toleration-key-noschedule", True, [Toleration(KEY, "Exists", "", "NoSchedule")], True),
    ("toleration-key-equal-empty-value", True, [Toleration(KEY, "Equal", "", "NoSchedule")], True),
    ("toleration-key-empty-effect", True, [Toleration(KEY, "Exists")], True),
    ("toleration-tolerate-everything", True, [Toleration("", "Exists")], True),
    ("toleration-noexecute-only", True, [Toleration(KEY, "Exists", "", "NoExecute")], False),
    ("toleration-prefer-only", True, [Toleration(KEY, "Exists", "", "PreferNoSchedule")], False),
    ("toleration-value-set", True, [Toleration(KEY, "Equal", "true", "NoSchedule")], False),
    ("other-key", True, [Toleration("other", "Exists")], False),
]


@pytest.mark.parametrize("name,unschedulable,tolerations,fits", CASES, ids=[c[0] for c in CASES])
def test_filter(name, unschedulable, tolerations, fits):
    snap = Snapshot([node("n1", unschedulable)])
    pl = NodeUnschedulable()
    p = pod(*tolerations)
    st = pl.filter(CycleState(), p, snap.get("n1"))
    if fits:
        assert st is None
    else:
        assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and st.reasons == ("node(s) were unschedulable",)
    v = pl.filter_nodes(CycleState(), p, snap, snap.all_indices())
    assert bool(v.failed[0] == -1) is fits


def test_bulk_agrees_with_per_node_on_mixed_cluster():
    snap = Snapshot([node(f"n{i}", i % 3 == 0) for i in range(10)])
    pl = NodeUnschedulable()
    rows = snap.all_indices()
    for p in (pod(), pod(Toleration(KEY, "Exists", "", "NoSchedule"))):
        v = pl.filter_nodes(CycleState(), p, snap, rows)
        for i, ni in enumerate(snap.node_info_list):
            st = pl.filter(CycleState(), p, ni)
            assert (st is None) == (v.failed[i] == -1)
            if st is not None:
                assert v.statuses[v.failed[i]].reasons == st.reasons


def test_from_yaml():
    m = load_text("""
kind: Node
apiVersion: v1
metadata: {name: cordoned}
spec: {unschedulable: true}
---
kind: Pod
apiVersion: v1
metadata: {name: p}
spec:
  containers: [{name: c, image: i}]
  tolerations: [{key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}]
""")
    snap = Snapshot(m.nodes)
    assert NodeUnschedulable().filter(CycleState(), m.pods[0], snap.get("cordoned")) is None


def test_events_to_register():
    ev = NodeUnschedulable().events_to_register()
    assert [(e.event.resource, e.event.action) for e in ev] == [
        (EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
        (EventResource.POD, ActionType.UPDATE_POD_TOLERATION)]


NODE_HINTS = [
    ("wrong-object", None, "not-a-node", QueueingHint.QUEUE),
    ("added-schedulable", None, node("n", False), QueueingHint.QUEUE),
    ("added-unschedulable", None, node("n", True), QueueingHint.QUEUE_SKIP),
    ("uncordoned", node("n", True), node("n", False), QueueingHint.QUEUE),
    ("stays-schedulable", node("n", False), node("n", False), QueueingHint.QUEUE_SKIP),
    ("cordoned", node("n", False), node("n", True), QueueingHint.QUEUE_SKIP),
    ("stays-unschedulable", node("n", True), node("n", True), QueueingHint.QUEUE_SKIP),
]


@pytest.mark.parametrize("name,old,new,want", NODE_HINTS, ids=[c[0] for c in NODE_HINTS])
def test_is_schedulable_after_node_change(name, old, new, want):
    assert NodeUnschedulable().is_schedulable_after_node_change(pod(), old, new) == want


POD_HINTS = [
    ("same-pod-now-tolerates", pod(Toleration(KEY, "Exists", "", "NoSchedule"), uid="u1"), QueueingHint.QUEUE),
    ("same-pod-unrelated-toleration", pod(Toleration("foo", "Exists"), uid="u1"), QueueingHint.QUEUE_SKIP),
    ("other-pod-tolerates", pod(Toleration(KEY, "Exists", "", "NoSchedule"), uid="u2"), QueueingHint.QUEUE_SKIP),
    ("wrong-object", "not-a-pod", QueueingHint.QUEUE),
]


@pytest.mark.parametrize("name,new,want", POD_HINTS, ids=[c[0] for c in POD_HINTS])
def test_is_schedulable_after_pod_toleration_change(name, new, want):
    assert NodeUnschedulable().is_schedulable_after_pod_toleration_change(pod(uid="u1"), pod(uid="u1"), new) == want
