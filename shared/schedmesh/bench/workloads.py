"""Synthetic clusters and pods shaped like kube-scheduler's scheduler_perf workloads.

SchedulingBasic: nodes of 4 cpu / 32Gi / 110 pods (scheduler_perf's node-default), pods
requesting 100m cpu / 500Mi (pod-default). `mixed` adds what real clusters have: 3 zones,
tainted gpu nodes, node affinity, topology spread and anti-affinity pods.
"""
from __future__ import annotations

import random
from fractions import Fraction

from schedmesh.api.labels import LabelSelector
from schedmesh.api.types import (Affinity, Container, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement,
                                 NodeSelectorTerm, ObjectMeta, Pod, PodAffinity, PodAffinityTerm, Taint, Toleration,
                                 TopologySpreadConstraint)

ZONES = ("zone-a", "zone-b", "zone-c")
GiB = 2**30


def make_node(i: int, gpu: bool = False) -> Node:
    name = f"node-{i:05d}"
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": ZONES[i % 3],
              "topology.kubernetes.io/region": "region-1", "kubernetes.io/os": "linux"}
    alloc = {"cpu": Fraction(4), "memory": Fraction(32 * GiB), "pods": Fraction(110)}
    taints = []
    if gpu:
        labels["accelerator"] = "nvidia"
        alloc["nvidia.com/gpu"] = Fraction(4)
        taints.append(Taint("nvidia.com/gpu", "NoSchedule", "present"))
    return Node(ObjectMeta(name=name, uid=f"node-uid-{i}", labels=labels), taints=taints,
                allocatable=dict(alloc), capacity=dict(alloc))


def make_pod(name: str, namespace: str = "default", cpu: str = "100m", mem_mi: int = 500,
             labels: dict | None = None, node_name: str = "") -> Pod:
    from schedmesh.api.quantity import parse_quantity
    return Pod(ObjectMeta(name=name, namespace=namespace, uid=f"uid-{namespace}-{name}", labels=dict(labels or {})),
               containers=[Container("c", image="registry.k8s.io/pause:3.10",
                                     requests={"cpu": parse_quantity(cpu), "memory": Fraction(mem_mi * 2**20)})],
               node_name=node_name, priority=0)


def scheduling_basic(nodes: int, init_pods: int, pods: int, seed: int = 1) -> tuple[list[Node], list[Pod], list[Pod]]:
    rng = random.Random(seed)
    node_list = [make_node(i) for i in range(nodes)]
    init = [make_pod(f"init-{i}", node_name=node_list[rng.randrange(nodes)].name) for i in range(init_pods)]
    pending = [make_pod(f"pod-{i}") for i in range(pods)]
    return node_list, init, pending


def mixed(nodes: int, init_pods: int, pods: int, seed: int = 1) -> tuple[list[Node], list[Pod], list[Pod]]:
    """Real-world shapes: gpu nodes with taints, spread and anti-affinity apps, node affinity."""
    rng = random.Random(seed)
    node_list = [make_node(i, gpu=(i % 20 == 0)) for i in range(nodes)]
    init = []
    for i in range(init_pods):
        app = f"app-{i % 10}"
        init.append(make_pod(f"init-{i}", labels={"app": app}, node_name=node_list[rng.randrange(nodes)].name))
    pending = []
    for i in range(pods):
        kind = i % 4
        app = f"app-{i % 10}"
        p = make_pod(f"pod-{i}", labels={"app": app})
        if kind == 1:
            p.topology_spread_constraints = [TopologySpreadConstraint(
                1, "topology.kubernetes.io/zone", "DoNotSchedule", LabelSelector.of({"app": app}))]
        elif kind == 2:
            p.affinity = Affinity(pod_anti_affinity=PodAffinity(preferred=[]), node_affinity=NodeAffinity(
                NodeSelector([NodeSelectorTerm([NodeSelectorRequirement("topology.kubernetes.io/zone", "In",
                                                                        ["zone-a", "zone-b"])])])))
        elif kind == 3:
            p.affinity = Affinity(pod_anti_affinity=PodAffinity(required=[PodAffinityTerm(
                "kubernetes.io/hostname", LabelSelector.of({"app": app}))]))
            p.tolerations = [Toleration("nvidia.com/gpu", "Exists")]
        pending.append(p)
    return node_list, init, pending


WORKLOADS = {"SchedulingBasic": scheduling_basic, "Mixed": mixed}
