"""The kubelet's admission (predicate.go's Admit and generalFilter, the eviction manager's Admit):
kube's reasons and messages, the first failure reported, handlers in the kubelet's order."""
from __future__ import annotations

import dataclasses

import pytest

from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, ContainerPort, Taint, Toleration
from schedmesh.cache.node_info import NodeInfo
from schedmesh.eviction.admission import admit, predicate_admit, rejection_message
from schedmesh.eviction.node_pressure import EvictionConfig, EvictionManager, NodeCapacity
from schedmesh.eviction.testkit import T0, container, node, pod

NODE = node("n1", capacity={"cpu": "2", "memory": "4Gi", "pods": "3", "ephemeral-storage": "10Gi"})


def node_info(*pods, the_node=NODE) -> NodeInfo:
    ni = NodeInfo(the_node)
    for p in pods:
        ni.add_pod(dataclasses.replace(p, node_name=the_node.name))
    return ni


def bound(p):
    return dataclasses.replace(p, node_name="n1")


@pytest.mark.parametrize("the_pod, others, reason, message", [
    (pod("big", requests={"cpu": "3"}), [], "OutOfcpu",
     "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"),
    (pod("mem", requests={"memory": "1Gi"}), [pod("a", requests={"memory": "3.5Gi"})], "OutOfmemory",
     "Node didn't have enough resource: memory, requested: 1073741824, used: 3758096384, capacity: 4294967296"),
    (pod("disk", requests={"ephemeral-storage": "11Gi"}), [], "OutOfephemeral-storage",
     "Node didn't have enough resource: ephemeral-storage, requested: 11811160064, used: 0, capacity: 10737418240"),
    (pod("fourth"), [pod("a"), pod("b"), pod("c")], "OutOfpods",
     "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"),
    # every failure is collected, the first (pods, then cpu, memory, ...) is reported
    (pod("both", requests={"cpu": "3", "memory": "5Gi"}), [pod("a"), pod("b"), pod("c")], "OutOfpods",
     "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"),
    (pod("gpu", requests={"nvidia.com/gpu": "1", "cpu": "1"}), [], None, None),  # not the node's: not checked
])
def test_resources(the_pod, others, reason, message):
    got = predicate_admit(bound(the_pod), node_info(*others))
    assert (got.admit, got.reason or None, got.message or None) == (reason is None, reason, message)


def test_extended_resource_the_node_has_is_checked():
    gpu_node = node("n1", capacity={"cpu": "2", "memory": "4Gi", "pods": "3", "nvidia.com/gpu": "1"})
    got = predicate_admit(bound(pod("gpu", requests={"nvidia.com/gpu": "2"})), node_info(the_node=gpu_node))
    assert (got.reason, got.message) == (
        "OutOfnvidia.com/gpu", "Node didn't have enough resource: nvidia.com/gpu, requested: 2, used: 0, capacity: 1")


def test_node_selector_host_ports_and_noexecute_taints():
    p = bound(pod("sel"))
    p.node_selector = {"disk": "ssd"}
    got = predicate_admit(p, node_info())
    assert (got.admit, got.reason, got.message) == (
        False, "NodeAffinity", "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector")
    web = bound(pod("web", containers=[dataclasses.replace(container("c"), ports=[ContainerPort(80, host_port=8080)])]))
    got = predicate_admit(web, node_info(web))
    assert (got.reason, got.message) == (
        "NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
    tainted = node("n1", capacity={"cpu": "2", "memory": "4Gi", "pods": "3"},
                   taints=[Taint("dedicated", NO_SCHEDULE, "x"), Taint("gone", NO_EXECUTE)])
    got = predicate_admit(bound(pod("p")), node_info(the_node=tainted))
    assert (got.reason, got.message) == (
        "TaintToleration", "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate")
    tolerant = bound(pod("p", tolerations=[Toleration("gone", "Exists", "", NO_EXECUTE)]))
    assert predicate_admit(tolerant, node_info(the_node=tainted)).admit  # NoSchedule is not the kubelet's concern
    static = bound(pod("p", annotations={"kubernetes.io/config.source": "file"}))
    assert predicate_admit(static, node_info(the_node=tainted)).admit


def test_os_label():
    windows = bound(pod("w"))
    windows.meta.labels["kubernetes.io/os"] = "windows"
    got = predicate_admit(windows, node_info())
    assert (got.reason, got.message) == (
        "PodOSSelectorNodeLabelDoesNotMatch", "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")


def test_eviction_admit_runs_first():
    m = EvictionManager(EvictionConfig.from_kubelet_configuration({"evictionHard": {"memory.available": "1Gi"}}),
                        NodeCapacity(memory=4 * 2**30))
    m.synchronize(T0, pods=[pod("hog", usage={"memory": "3.5Gi"})])
    best_effort = bound(pod("be", requests={"cpu": "3"}))  # would also be OutOfcpu: pressure is checked first
    best_effort.containers[0].requests.clear()
    got = admit(best_effort, node_info(), m)
    assert (got.admit, got.reason, got.message) == (False, "Evicted", "The node had condition: [MemoryPressure]. ")
    assert rejection_message(got) == "Pod was rejected: The node had condition: [MemoryPressure]. "
    burstable = bound(pod("b", requests={"cpu": "3"}))
    assert admit(burstable, node_info(), m).reason == "OutOfcpu"
    assert admit(bound(pod("ok", requests={"cpu": "1"})), node_info(), m).admit
