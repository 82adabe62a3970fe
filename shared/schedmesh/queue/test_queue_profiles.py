"""A queue built from Frameworks (test plugins in a test Registry), shared by two profiles: less
from the QueueSort plugin, PreEnqueue plugins and queueing hints from each pod's own profile."""
from __future__ import annotations

import pytest

from schedmesh.framework.events import ActionType, ClusterEvent, EventResource
from schedmesh.queue import ACTIVE_Q, BACKOFF_Q, GATED, UNSCHEDULABLE_Q, PriorityQueue
from schedmesh.queue.testing import (NODE_ADD, NODE_UPDATE_LABEL, NODE_UPDATE_TAINT, clone, fake_clock, make_framework,
                                     make_node, make_pod)

OTHER = "other-scheduler"


def make_queue() -> PriorityQueue:
    frameworks = {
        "default-scheduler": make_framework(),
        # No PreEnqueue plugin, and only the filter without EnqueueExtensions.
        OTHER: make_framework(OTHER, filters=["FakeNoExtensionsFilter"], pre_enqueue=[]),
    }
    return PriorityQueue.from_frameworks(frameworks, clock=fake_clock())


def rejected(q: PriorityQueue, pod, *plugins: str):
    q.add(pod)
    p = q.try_pop()
    assert p.pod is pod
    p.unschedulable_plugins = set(plugins)
    q.add_unschedulable_if_not_present(p, q.scheduling_cycle())
    assert q.queue_of(pod) == UNSCHEDULABLE_Q
    return p


def test_queue_sort_comes_from_the_profile():
    q = make_queue()
    pods = [make_pod("low", priority=1), make_pod("high", priority=10, scheduler_name=OTHER), make_pod("mid", priority=5)]
    for p in pods:
        q.add(p)
    assert [q.try_pop().pod.name for _ in pods] == ["high", "mid", "low"]


def test_gated_pod_released_when_its_gates_are_removed():
    q = make_queue()
    pod = make_pod("g", gates=["example.com/wait"])
    q.add(pod)
    assert q.queue_of(pod) == GATED and q.try_pop() is None
    relabelled = clone(pod, labels={"x": "y"})
    q.update(pod, relabelled)  # UpdatePodLabel: the gating plugin didn't register it
    assert q.queue_of(pod) == GATED
    ungated = clone(relabelled, scheduling_gates=[])
    q.update(relabelled, ungated)  # UpdatePodSchedulingGatesEliminated, hint says Queue
    assert q.queue_of(pod) == ACTIVE_Q
    p = q.try_pop()
    assert p.pod is ungated and not p.gated and p.attempts == 1


def test_gates_only_matter_to_profiles_with_the_plugin():
    q = make_queue()
    pod = make_pod("g", gates=["wait"], scheduler_name=OTHER)
    q.add(pod)
    assert q.queue_of(pod) == ACTIVE_Q


@pytest.mark.parametrize("event, new_obj, want", [
    pytest.param(NODE_ADD, make_node("n"), UNSCHEDULABLE_Q, id="node-add-hint-skip"),
    pytest.param(NODE_ADD, make_node("n", {"fits": "true"}), BACKOFF_Q, id="node-add-hint-queue"),
    pytest.param(NODE_UPDATE_TAINT, make_node("n"), BACKOFF_Q, id="taint-update-default-hint"),
    pytest.param(NODE_UPDATE_LABEL, make_node("n", {"fits": "true"}), UNSCHEDULABLE_Q, id="unregistered-event"),
])
def test_hints_of_the_rejecting_plugin(event, new_obj, want):
    q = make_queue()
    pod = make_pod("p")
    rejected(q, pod, "FakeNodeFit")
    q.move_all_to_active_or_backoff_queue(event, None, new_obj)
    assert q.queue_of(pod) == want


def test_plugin_without_enqueue_extensions_moves_on_any_event():
    q = make_queue()
    pod = make_pod("p")
    rejected(q, pod, "FakeNoExtensionsFilter")
    q.move_all_to_active_or_backoff_queue(NODE_UPDATE_LABEL, make_node("n"), make_node("n", {"a": "b"}))
    assert q.queue_of(pod) == BACKOFF_Q
    q.clock.step(2)
    q.flush_backoff_q_completed()
    assert q.queue_of(pod) == ACTIVE_Q


def test_hints_come_from_the_pods_profile():
    q = make_queue()
    pod = make_pod("p", scheduler_name=OTHER)
    # FakeNodeFit isn't in the other profile: nothing there registered NodeAdd for it.
    rejected(q, pod, "FakeNodeFit")
    q.move_all_to_active_or_backoff_queue(NODE_ADD, None, make_node("n", {"fits": "true"}))
    assert q.queue_of(pod) == UNSCHEDULABLE_Q


def test_event_of_interest_over_all_profiles():
    q = make_queue()
    assert q.is_event_of_interest(NODE_ADD)
    assert q.is_event_of_interest(ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE))  # Pod/All (no-ext)
    assert not q.is_event_of_interest(ClusterEvent(EventResource.WILDCARD, ActionType.ADD))


def test_pending_plugin_moves_straight_to_active():
    q = make_queue()
    pod = make_pod("p")
    q.add(pod)
    p = q.try_pop()
    p.pending_plugins = {"FakeNodeFit"}
    q.add_unschedulable_if_not_present(p, q.scheduling_cycle())
    q.move_all_to_active_or_backoff_queue(NODE_ADD, None, make_node("n", {"fits": "true"}))
    assert q.queue_of(pod) == ACTIVE_Q
