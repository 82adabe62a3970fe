"""Node pools' simulated kubelets: the kubeletConfiguration block (KubeletConfiguration's field
names, kube's defaults), allocatable as the kubelet computes it, the usage model's capacities and
system usage, and errors that name the file, the pool and the field."""
from __future__ import annotations

import pytest

from schedmesh.eviction.node_pressure import (ALLOCATABLE_MEMORY_AVAILABLE, MEMORY_AVAILABLE, NodeCapacity,
                                              SystemUsage)
from schedmesh.mesh.nodepool import (DEFAULT_MAX_PIDS, PoolError, load_pool_file_simulated, load_pools,
                                     load_pools_simulated)

Mi, Gi = 2**20, 2**30


def one(pool: dict):
    (first, *_rest) = load_pools_simulated([{"name": "p", "count": 1, "cpu": "4", "memory": "8Gi", **pool}])
    return first


def test_without_a_block_kube_defaults_and_allocatable_is_capacity():
    s = one({"images": [{"names": ["a"], "sizeBytes": 1000}, {"names": ["b"], "sizeBytes": 500}]})
    assert s.node.allocatable == s.node.capacity
    assert [str(t) for t in s.kubelet.eviction.thresholds] == [
        "memory.available<100Mi", "nodefs.available<10%", "nodefs.inodesFree<5%", "imagefs.available<15%",
        "imagefs.inodesFree<5%", "allocatableMemory.available<100Mi"]
    assert s.kubelet.eviction.pressure_transition_period == 300.0
    assert s.kubelet.capacity == NodeCapacity(memory=8 * Gi, allocatable_memory=8 * Gi, nodefs_bytes=100 * Gi,
                                              nodefs_inodes=100 * Gi // (16 * 1024), max_pids=DEFAULT_MAX_PIDS)
    assert s.kubelet.system == SystemUsage(imagefs_bytes=1500)  # images take room on nodefs


def test_kubelet_configuration_block():
    s = one({
        "ephemeralStorage": "20Gi", "inodes": 1000, "maxPids": 500, "imagefs": {"storage": "50Gi", "inodes": 300},
        "systemUsage": {"memory": "1Gi", "ephemeral-storage": "2Gi", "inodes": 10, "pids": 40},
        "kubeletConfiguration": {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "evictionHard": {"memory.available": "500Mi", "nodefs.available": "10%"},
            "evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "30s"},
            "evictionMaxPodGracePeriod": 20, "evictionPressureTransitionPeriod": "2s",
            "evictionMinimumReclaim": {"memory.available": "100Mi"},
            "systemReserved": {"memory": "1Gi", "cpu": "500m"}, "kubeReserved": {"cpu": "500m", "memory": "512Mi"}}})
    cfg = s.kubelet.eviction
    assert [(t.signal, str(t.value), t.grace_period, str(t.min_reclaim)) for t in cfg.thresholds] == [
        (MEMORY_AVAILABLE, "500Mi", 0.0, "100Mi"), ("nodefs.available", "10%", 0.0, "None"),
        (MEMORY_AVAILABLE, "1Gi", 30.0, "100Mi"), (ALLOCATABLE_MEMORY_AVAILABLE, "500Mi", 0.0, "100Mi")]
    assert (cfg.max_pod_grace_period, cfg.pressure_transition_period) == (20, 2.0)
    # allocatable = capacity - systemReserved - kubeReserved - hard eviction (memory.available, nodefs.available)
    assert s.node.allocatable["cpu"] == 3
    assert s.node.allocatable["memory"] == 8 * Gi - Gi - 512 * Mi - 500 * Mi
    assert s.node.allocatable["ephemeral-storage"] == 20 * Gi - 2147483680  # 10% as float32 of 20Gi, truncated
    assert s.node.capacity["memory"] == 8 * Gi
    assert s.kubelet.capacity == NodeCapacity(memory=8 * Gi, allocatable_memory=8 * Gi - Gi - 512 * Mi - 500 * Mi,
                                              nodefs_bytes=20 * Gi, nodefs_inodes=1000, imagefs_bytes=50 * Gi,
                                              imagefs_inodes=300, max_pids=500)
    assert s.kubelet.system == SystemUsage(memory=Gi, nodefs_bytes=2 * Gi, nodefs_inodes=10, pids=40)


@pytest.mark.parametrize("pool, error", [
    ({"kubeletConfiguration": {"evictionHard": {"cpu.available": "1"}}},
     r'pools\[0\]\.kubeletConfiguration: evictionHard\["cpu.available"\]: unsupported eviction signal cpu.available '
     r"\(pool 'p'\)"),
    ({"kubeletConfiguration": {"evictionHard": {"memory.available": "lots"}}},
     r'evictionHard\["memory.available"\]: eviction threshold memory.available: .*lots'),
    ({"kubeletConfiguration": {"evictionSoft": {"memory.available": "1Gi"}}},
     r"evictionSoftGracePeriod: grace period must be specified for the soft eviction threshold memory.available"),
    ({"kubeletConfiguration": {"evictionSoftGracePeriod": {"memory.available": "soon"}}},
     r'evictionSoftGracePeriod\["memory.available"\]: time: invalid duration "soon"'),
    ({"kubeletConfiguration": {"evictionPressureTransitionPeriod": "later"}}, r"evictionPressureTransitionPeriod"),
    ({"kubeletConfiguration": {"evictionMaxPodGracePeriod": "1m"}}, r"evictionMaxPodGracePeriod: must be"),
    ({"kubeletConfiguration": {"maxPods": 10}},
     r"pools\[0\]\.kubeletConfiguration\.maxPods: not a KubeletConfiguration field the simulated kubelet supports"),
    ({"kubeletConfiguration": {"systemReserved": {"gpu": 1}}},
     r"kubeletConfiguration\.systemReserved\.gpu: unknown resource"),
    ({"kubeletConfiguration": ["evictionHard"]}, r"kubeletConfiguration: must be a map"),
    ({"systemUsage": {"memory": "-1Gi"}}, r"pools\[0\]\.systemUsage\.memory: must not be negative"),
    ({"systemUsage": {"pids": "1.5"}}, r"pools\[0\]\.systemUsage\.pids: must be a whole number"),
    ({"systemUsage": {"cpu": "1"}}, r"pools\[0\]\.systemUsage\.cpu: unknown resource"),
    ({"inodes": "many"}, r"pools\[0\]\.inodes"),
    ({"imagefs": {"inodes": 5}}, r"pools\[0\]\.imagefs\.storage: required"),
    ({"imagefs": {"storage": "1Gi", "size": 1}}, r"pools\[0\]\.imagefs\.size: unknown field"),
    ({"kubelet": {}}, r"pools\[0\]: unknown field\(s\) kubelet"),
])
def test_errors_name_the_pool_and_field(pool, error):
    with pytest.raises(PoolError, match=error):
        one(pool)


def test_file_errors_name_the_file(tmp_path):
    f = tmp_path / "nodes.yaml"
    f.write_text("pools:\n  - {name: a, count: 1, cpu: '1', memory: 1Gi}\n"
                 "  - {name: b, count: 1, cpu: '1', memory: 1Gi,\n"
                 "     kubeletConfiguration: {evictionHard: {memory.available: 200%}}}\n")
    with pytest.raises(PoolError, match=r"nodes.yaml: pools\[1\]\.kubeletConfiguration: evictionHard\[\"memory.available"
                                        r"\"\]: eviction percentage threshold memory.available must be <= 100%: 200% "
                                        r"\(pool 'b'\)"):
        load_pool_file_simulated(f)


def test_load_pools_still_gives_nodes():
    (n,) = load_pools([{"name": "x", "count": 1, "cpu": "1", "memory": "1Gi"}])
    assert n.name == "x-0" and n.allocatable["cpu"] == 1
