"""SchedulingGates, re-expressing kube's scheduling_gates_test.go."""
from __future__ import annotations

import pytest

from schedmesh.api.load import load_text
from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code
from schedmesh.plugins.scheduling_gates import SchedulingGates


def pod(*gates: str, uid: str = "u1") -> Pod:
    return Pod(meta=ObjectMeta(name="p", uid=uid), scheduling_gates=list(gates))


@pytest.mark.parametrize("gates,want", [
    ((), None),
    (("foo",), "waiting for scheduling gates: [foo]"),
    (("foo", "bar"), "waiting for scheduling gates: [foo bar]"),
], ids=["no-gates", "one-gate", "two-gates"])
def test_pre_enqueue(gates, want):
    st = SchedulingGates().pre_enqueue(pod(*gates))
    if want is None:
        assert st is None
    else:
        assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and st.message() == want


def test_pre_enqueue_from_yaml():
    m = load_text("""
apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  schedulingGates: [{name: example.com/quota}]
  containers: [{name: c, image: i}]
""")
    assert SchedulingGates().pre_enqueue(m.pods[0]).message() == "waiting for scheduling gates: [example.com/quota]"


@pytest.mark.parametrize("new,want", [
    (pod(uid="u1"), QueueingHint.QUEUE),
    (pod(uid="u2"), QueueingHint.QUEUE_SKIP),
    ("not-a-pod", QueueingHint.QUEUE),
], ids=["target-pod-ungated", "other-pod", "wrong-object"])
def test_hint(new, want):
    pl = SchedulingGates()
    assert pl.is_schedulable_after_scheduling_gates_eliminated(pod("foo", uid="u1"), pod("foo", uid="u1"), new) == want


def test_events_to_register():
    ev = SchedulingGates().events_to_register()
    assert [(e.event.resource, e.event.action) for e in ev] == [
        (EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)]
