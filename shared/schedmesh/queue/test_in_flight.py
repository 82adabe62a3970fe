"""In-flight pods and the events received while they are scheduled (kube's Test_InFlightPods,
TestPop, TestPriorityQueue_UpdateWhenInflight). kube's PV/PVC/CSINode events are replaced by Node
events with distinct actions, which match each other exactly as those did."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from schedmesh.api.types import Pod, Toleration
from schedmesh.framework.events import EVENT_UNSCHEDULABLE_TIMEOUT, ActionType, ClusterEvent, EventResource
from schedmesh.queue import (EVENT_ASSIGNED_POD_ADD, EVENT_UNSCHEDULED_POD_UPDATE, InFlightEvent, QueuedPodInfo,
                             QueueError)
from schedmesh.queue.testing import (NODE_ADD, NODE_UPDATE_ANNOTATION, NODE_UPDATE_CONDITION, NODE_UPDATE_LABEL,
                                     NODE_UPDATE_TAINT, clone, fake_clock, hint_map, hint_queue, hint_skip, lookup,
                                     make_pod, new_queue)

PV_ADD = NODE_UPDATE_LABEL  # a registered event
PV_UPDATE = NODE_UPDATE_ANNOTATION  # nobody registers it
PVC_ADD = NODE_UPDATE_TAINT
CSI_NODE_UPDATE = NODE_UPDATE_CONDITION

pod1 = make_pod("targetpod", "", uid="pod1")
pod2 = make_pod("targetpod2", "", uid="pod2")
pod3 = make_pod("targetpod3", "", uid="pod3")

ALL_FOO = hint_map({PV_ADD: [("fooPlugin1", hint_queue)], NODE_ADD: [("fooPlugin1", hint_queue)],
                    PVC_ADD: [("fooPlugin1", hint_queue)], CSI_NODE_UPDATE: [("fooPlugin1", hint_queue)],
                    EVENT_ASSIGNED_POD_ADD: [("fooPlugin1", hint_queue)]})


def pop(pod: Pod):
    return ("pop", pod)


def event(ev):
    return ("event", ev)


def enqueue(make: Callable[[], QueuedPodInfo]):
    return ("enqueue", make)


def run_actions(q, actions: list[tuple[str, Any]]) -> None:
    popped: dict[str, QueuedPodInfo] = {}
    for kind, arg in actions:
        if kind == "pop":
            p = q.try_pop()
            assert p is not None and p.pod.uid == arg.uid, f"popped {p}, want {arg}"
            popped[arg.uid] = p
        elif kind == "event":
            q.move_all_to_active_or_backoff_queue(arg)
        elif kind == "enqueue":
            q.add_unschedulable_if_not_present(arg(), q.scheduling_cycle())
        elif kind == "create":
            q.add(arg)
        elif kind == "call":
            arg(q, popped)


def describe_events(q) -> list:
    return [v.uid if isinstance(v, Pod) else v.event for v in q.in_flight_events()]


CASES = [
    pytest.param(
        [pod1], [event(PVC_ADD), pop(pod1), event(PV_ADD), event(PV_UPDATE)],
        hint_map({PV_ADD: [("fooPlugin1", hint_queue)]}),
        dict(in_flight=["pod1"], events=["pod1", PV_ADD]),
        id="pod-and-interesting-events-recorded"),
    pytest.param(
        [pod1, pod2], [event(PVC_ADD), pop(pod1), event(PV_ADD), pop(pod2), event(NODE_ADD),
                       enqueue(lambda: lookup(pod1))],
        ALL_FOO, dict(backoff=["targetpod"], in_flight=["pod2"], events=["pod2", NODE_ADD]),
        id="errored-pod-back-to-backoffQ-prunes-its-events"),
    pytest.param(
        [pod1, pod2], [event(PVC_ADD), pop(pod1), event(PV_ADD), pop(pod2), event(NODE_ADD),
                       enqueue(lambda: lookup(pod1)), event(CSI_NODE_UPDATE), enqueue(lambda: lookup(pod2))],
        ALL_FOO, dict(backoff=["targetpod", "targetpod2"], in_flight=[], events=[]),
        id="all-in-flight-pods-back"),
    pytest.param(
        [pod1, pod2, pod3], [event(PVC_ADD), pop(pod1), event(PV_ADD), pop(pod2), event(NODE_ADD), pop(pod3),
                             event(EVENT_ASSIGNED_POD_ADD), enqueue(lambda: lookup(pod2))],
        ALL_FOO, dict(backoff=["targetpod2"], in_flight=["pod1", "pod3"],
                      events=["pod1", PV_ADD, NODE_ADD, "pod3", EVENT_ASSIGNED_POD_ADD]),
        id="intermediate-pod-back-keeps-others-events"),
    pytest.param(
        [pod1], [event(EVENT_UNSCHEDULABLE_TIMEOUT), pop(pod1), event(EVENT_ASSIGNED_POD_ADD),
                 enqueue(lambda: lookup(pod1, "fooPlugin1"))],
        hint_map({EVENT_ASSIGNED_POD_ADD: [("fooPlugin1", hint_skip)]}),
        dict(unschedulable=["targetpod"], in_flight=[], events=[]),
        id="events-before-pop-are-ignored"),
    pytest.param(
        [pod1], [pop(pod1), event(EVENT_ASSIGNED_POD_ADD), enqueue(lambda: lookup(pod1))],
        hint_map({EVENT_ASSIGNED_POD_ADD: [("fooPlugin1", hint_queue)]}),
        dict(backoff=["targetpod"], in_flight=[], events=[]),
        id="no-failed-plugin-goes-to-backoff"),
    pytest.param(
        [pod1], [pop(pod1), event(NODE_ADD), enqueue(lambda: lookup(pod1, "fooPlugin1"))],
        hint_map({EVENT_ASSIGNED_POD_ADD: [("fooPlugin1", hint_queue)]}),
        dict(unschedulable=["targetpod"], in_flight=[], events=[]),
        id="no-registered-event-stays-unschedulable"),
    pytest.param(
        [pod1], [pop(pod1), event(EVENT_ASSIGNED_POD_ADD), enqueue(lambda: lookup(pod1, "fooPlugin1"))],
        hint_map({EVENT_ASSIGNED_POD_ADD: [("fooPlugin1", hint_skip)]}),
        dict(unschedulable=["targetpod"], in_flight=[], events=[]),
        id="hint-skip-stays-unschedulable"),
    pytest.param(
        [pod1], [pop(pod1), event(EVENT_ASSIGNED_POD_ADD),
                 enqueue(lambda: _with_pending(lookup(pod1, "fooPlugin2", "fooPlugin3"), "fooPlugin1"))],
        hint_map({EVENT_ASSIGNED_POD_ADD: [("fooPlugin3", hint_skip), ("fooPlugin2", hint_queue),
                                           ("fooPlugin1", hint_queue)]}),
        dict(active=["targetpod"], in_flight=[], events=[]),
        id="pending-plugin-queue-goes-to-activeQ"),
    pytest.param(
        [pod1], [pop(pod1), event(EVENT_ASSIGNED_POD_ADD), enqueue(lambda: lookup(pod1, "fooPlugin1", "fooPlugin2"))],
        hint_map({EVENT_ASSIGNED_POD_ADD: [("fooPlugin2", hint_skip), ("fooPlugin1", hint_queue)]}),
        dict(backoff=["targetpod"], in_flight=[], events=[]),
        id="unschedulable-plugin-queue-goes-to-backoffQ"),
]


def _with_pending(p: QueuedPodInfo, *pending: str) -> QueuedPodInfo:
    p.pending_plugins = set(pending)
    return p


@pytest.mark.parametrize("initial, actions, hints, want", CASES)
def test_in_flight_pods(initial, actions, hints, want):
    clock = fake_clock()
    q = new_queue(hints, clock=clock)
    for p in initial:
        q.add(p)
        clock.step(1)  # distinct timestamps keep the pop order by addition
    run_actions(q, actions)
    assert sorted(p.uid for p in q.in_flight_pods()) == sorted(want["in_flight"])
    assert describe_events(q) == want["events"]
    if "active" in want:
        assert sorted(p.name for p in q.pods_in_active_q()) == want["active"]
    if "backoff" in want:
        assert sorted(p.name for p in q.pods_in_backoff_q()) == want["backoff"]
    for name in want.get("unschedulable", ()):
        assert name in [p.name for p in q.unschedulable_pods()]


def test_concurrent_event_while_another_pod_is_in_flight():
    q = new_queue(hint_map({EVENT_ASSIGNED_POD_ADD: [("fooPlugin3", hint_skip), ("fooPlugin2", hint_queue),
                                                     ("fooPlugin1", hint_queue)]}))
    q.add(pod1)
    q.clock.step(1)
    q.add(pod2)
    p1 = q.try_pop()
    q.move_all_to_active_or_backoff_queue(NODE_ADD)  # nobody registered it: not even recorded
    p2 = q.try_pop()
    q.move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_ADD)
    q.add_unschedulable_if_not_present(p1, q.scheduling_cycle())  # error: backoffQ
    p2.unschedulable_plugins = {"fooPlugin2", "fooPlugin3"}
    p2.pending_plugins = {"fooPlugin1"}
    q.add_unschedulable_if_not_present(p2, q.scheduling_cycle())  # Pending + Queue: activeQ
    assert [p.name for p in q.pods_in_active_q()] == ["targetpod2"]
    assert [p.name for p in q.pods_in_backoff_q()] == ["targetpod"]
    assert q.in_flight_pods() == [] and q.in_flight_events() == []


def test_pop_twice_for_the_same_pod_discards_the_duplicate():
    q = new_queue(ALL_FOO)
    for p in (pod1, pod2):
        q.add(p)
        q.clock.step(1)
    q.move_all_to_active_or_backoff_queue(PVC_ADD)
    assert q.try_pop().pod is pod1
    q.move_all_to_active_or_backoff_queue(PV_ADD)
    assert q.try_pop().pod is pod2
    q._active.add(lookup(pod1))  # simulate a bug: pod1 queued again while in flight
    q.add(pod3)
    assert q.try_pop().pod is pod3  # the pod1 copy is discarded on the way
    assert len(q.pods_in_active_q()) == 0
    q.move_all_to_active_or_backoff_queue(NODE_ADD)
    for p in (pod1, pod2, pod3):
        q.add_unschedulable_if_not_present(lookup(p), q.scheduling_cycle())
        if p is pod1:
            q.move_all_to_active_or_backoff_queue(CSI_NODE_UPDATE)
    assert sorted(p.name for p in q.pods_in_backoff_q()) == ["targetpod", "targetpod2", "targetpod3"]
    assert q.in_flight_pods() == [] and q.in_flight_events() == []


def test_pop_clears_the_previous_attempts_plugins():
    # v1.35 clears UnschedulablePlugins / PendingPlugins / the gating plugin on Pop (newer kube keeps them).
    q = new_queue(hint_map({PV_ADD: [("fooPlugin1", hint_queue)]}))
    q.add(pod1)
    p = q.try_pop()
    p.pending_plugins = {"fooPlugin1"}
    q.add_unschedulable_if_not_present(p, q.scheduling_cycle())
    assert q.queue_of(pod1) == "unschedulable"
    q.move_all_to_active_or_backoff_queue(PV_ADD)
    assert q.queue_of(pod1) == "activeQ"  # Pending plugin said Queue: straight to activeQ
    p = q.try_pop()
    assert p.pod is pod1 and p.attempts == 2
    assert p.pending_plugins == set() and p.unschedulable_plugins == set() and p.gating_plugin == ""


def test_update_while_in_flight_requeues_the_pod_when_it_comes_back():
    q = new_queue(hint_map({EVENT_UNSCHEDULED_POD_UPDATE: [("fakePlugin", hint_queue)]}))
    pod = make_pod("test-pod", "test-ns", uid="test-uid")
    q.add(pod)
    assert q.try_pop().pod is pod
    updated = clone(pod, tolerations=[Toleration("foo", effect="NoSchedule")])
    q.update(pod, updated)
    assert q.queue_of(updated) is None  # in flight: only recorded
    assert [e.event for e in q.in_flight_events() if isinstance(e, InFlightEvent)] == [
        ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_TOLERATION)]
    q.add_unschedulable_if_not_present(lookup(updated, "fakePlugin"), q.scheduling_cycle())
    info = q.get_pod("test-pod", "test-ns")
    assert q.queue_of(updated) == "backoffQ" and info.pod is updated


def test_add_unschedulable_if_not_present_errors_when_already_queued_but_still_ends_the_flight():
    q = new_queue({})
    q.add(pod1)
    p = q.try_pop()
    q.add(pod1)  # re-added while in flight
    with pytest.raises(QueueError, match="already present in the active queue"):
        q.add_unschedulable_if_not_present(p, q.scheduling_cycle())
    assert q.in_flight_pods() == []
