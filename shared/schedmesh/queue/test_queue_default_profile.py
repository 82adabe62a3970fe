"""The queue with kube's default profile and the real in-tree plugins (SchedulingGates,
PrioritySort, NodeResourcesFit's hints)."""
from __future__ import annotations

import pytest

from schedmesh.api.load import load_text
from schedmesh.framework.events import ActionType, ClusterEvent, EventResource
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework, ProfileError
from schedmesh.queue import ACTIVE_Q, BACKOFF_Q, GATED, UNSCHEDULABLE_Q, PriorityQueue, pod_scheduling_properties_change
from schedmesh.queue.testing import clone, fake_clock

NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)

MANIFESTS = """
apiVersion: v1
kind: Pod
metadata: {name: gated, namespace: default}
spec:
  schedulingGates: [{name: example.com/wait}]
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: default}
spec:
  priority: 10
  containers: [{name: c, image: nginx, resources: {requests: {cpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: small, namespace: default}
spec:
  priority: 1
  containers: [{name: c, image: nginx}]
---
apiVersion: v1
kind: Node
metadata: {name: tiny}
status: {allocatable: {cpu: "1", memory: 1Gi, pods: "10"}}
---
apiVersion: v1
kind: Node
metadata: {name: roomy}
status: {allocatable: {cpu: "8", memory: 8Gi, pods: "10"}}
"""


@pytest.fixture
def env():
    try:
        fw = Framework(default_profile())
    except (ProfileError, ImportError) as e:  # pragma: no cover - while plugins are being written
        pytest.skip(f"default profile not buildable yet: {e}")
    m = load_text(MANIFESTS)
    pods = {p.name: p for p in m.pods}
    nodes = {n.name: n for n in m.nodes}
    return PriorityQueue.from_frameworks({fw.name: fw}, clock=fake_clock()), pods, nodes


def test_default_profile_orders_by_priority(env):
    q, pods, _ = env
    q.add(pods["small"])
    q.add(pods["big"])
    assert [q.try_pop().pod.name for _ in range(2)] == ["big", "small"]


def test_scheduling_gates_gate_and_release(env):
    q, pods, _ = env
    gated = pods["gated"]
    q.add(gated)
    (pending,) = q.pending_pods()
    assert (pending.queue, pending.info.gating_plugin) == (GATED, "SchedulingGates")
    ungated = clone(gated, scheduling_gates=[])
    assert pod_scheduling_properties_change(ungated, gated) == [
        ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)]
    q.update(gated, ungated)
    assert q.queue_of(ungated) == ACTIVE_Q
    assert q.try_pop().pod is ungated


@pytest.mark.parametrize("node, want", [("tiny", UNSCHEDULABLE_Q), ("roomy", BACKOFF_Q)])
def test_node_resources_fit_hint_on_node_add(env, node, want):
    q, pods, nodes = env
    big = pods["big"]
    q.add(big)
    p = q.try_pop()
    p.unschedulable_plugins = {"NodeResourcesFit"}
    q.add_unschedulable_if_not_present(p, q.scheduling_cycle())
    q.move_all_to_active_or_backoff_queue(NODE_ADD, None, nodes[node])
    assert q.queue_of(big) == want
