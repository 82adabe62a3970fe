"""qos_class against kube's qos_test.go cases (ComputePodQOS), PodLevelResources included."""
from __future__ import annotations

import pytest

from schedmesh.eviction.qos import BEST_EFFORT, BURSTABLE, GUARANTEED, qos_class
from schedmesh.eviction.testkit import container, pod

G = {"cpu": "100m", "memory": "100Mi"}


@pytest.mark.parametrize("name, containers, init, pod_requests, pod_limits, want", [
    ("no resources", [container("a")], [], None, None, BEST_EFFORT),
    ("zero requests are ignored", [container("a", {"cpu": "0", "memory": "0"})], [], None, None, BEST_EFFORT),
    ("extended resources do not count", [container("a", limits={"nvidia.com/gpu": "1"})], [], None, None, BEST_EFFORT),
    ("limits equal requests", [container("a", limits=G)], [], None, None, GUARANTEED),
    ("two guaranteed containers", [container("a", limits=G), container("b", limits=G)], [], None, None, GUARANTEED),
    ("guaranteed plus extended", [container("a", limits={**G, "nvidia.com/gpu": "2"})], [], None, None, GUARANTEED),
    ("requests below limits", [container("a", {"cpu": "50m", "memory": "100Mi"}, G)], [], None, None, BURSTABLE),
    ("requests only", [container("a", {"cpu": "100m"})], [], None, None, BURSTABLE),
    ("cpu limit only", [container("a", limits={"cpu": "100m"})], [], None, None, BURSTABLE),
    ("one guaranteed, one best-effort", [container("a", limits=G), container("b")], [], None, None, BURSTABLE),
    ("init container counts", [container("a", limits=G)], [container("i", {"memory": "10Mi"})], None, None, BURSTABLE),
    ("guaranteed init container", [container("a", limits=G)], [container("i", limits=G)], None, None, GUARANTEED),
    ("pod-level requests and limits", [container("a")], [], G, G, GUARANTEED),
    ("pod-level requests only", [container("a", limits=G)], [], G, None, BURSTABLE),
    ("pod-level cpu limit only", [container("a")], [], {"cpu": "1"}, {"cpu": "1"}, BURSTABLE),
    ("pod-level overrides guaranteed containers", [container("a", limits=G)], [], {"cpu": "1"}, None, BURSTABLE),
])
def test_qos_class(name, containers, init, pod_requests, pod_limits, want):
    p = pod("p", containers=containers, init_containers=init, pod_requests=pod_requests, pod_limits=pod_limits)
    assert qos_class(p) == want
