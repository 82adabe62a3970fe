"""The benchmark workloads of kube-scheduler's scheduler_perf, and `Mixed` and `DistinctPods`.

Each scheduler_perf workload is rebuilt with kube's shapes (test/integration/scheduler_perf:
misc/, affinity/ and topology_spreading/performance-config.yaml and templates/):

- nodes from node-default.yaml (4 cpu, 32Gi, 110 pods), labelled by labelNodePrepareStrategy
  where the config says so: every node in `zone1` (pod affinity, node affinity, mixed), or
  `moon-1`..`moon-3` round-robin (topology spreading); the other workloads' nodes have no zone;
- pods from the templates (pod-default.yaml: 100m / 500Mi; the affinity, anti-affinity,
  node-affinity and spreading variants add their terms), kept here as the manifests they are and
  read once through schedmesh.api.load and admission, as the mesh reads what it is given;
- namespaces as scheduler_perf names them: an explicit `namespace:` (sched-0, sched-1), else
  `namespace-<index of the createPods op>`;
- sizes of the 5000Nodes variants (`SIZES`), every one overridable.

Two differences, both deliberate: every node carries `kubernetes.io/hostname` (a kubelet sets it;
the mesh's simulated kubelets do), and init pods are placed, not scheduled: pod i on node
i mod N, which is where kube-scheduler spreads identical pods on identical empty nodes, keeps
required anti-affinity satisfied (init pods never exceed the nodes) and costs no mesh time.

`Unschedulable` is SchedulingBasic with 1,000 pods that fit nowhere applied first (kube's
pod-high-priority-large-cpu.yaml: priority 10, 9 cpu, more than any node has): they churn in the
queue, ahead of the measured pods by priority, while the schedulable stream is measured. Its
pods_per_second set against SchedulingBasic's (same sizes) is what the churn costs.
"""
from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Optional

from schedmesh.api.labels import LabelSelector
from schedmesh.api.load import admit_all, load_text
from schedmesh.api.types import (Affinity, Container, Node, NodeAffinity, NodeCondition, NodeSelector,
                                 NodeSelectorRequirement, NodeSelectorTerm, ObjectMeta, Pod, PodAffinity,
                                 PodAffinityTerm, Taint, Toleration, TopologySpreadConstraint)

ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONES = ("zone-a", "zone-b", "zone-c")  # Mixed's zones
GiB = 2**30

# ---- kube's pod templates (test/integration/scheduler_perf/templates/) ----------------------
_CONTAINER = {"name": "pause", "image": "registry.k8s.io/pause:3.10.1", "ports": [{"containerPort": 80}],
              "resources": {"limits": {"cpu": "100m", "memory": "500Mi"},
                            "requests": {"cpu": "100m", "memory": "500Mi"}}}
_SCHED_NAMESPACES = ["sched-1", "sched-0"]


def _pod_template(labels: Optional[dict] = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "template", "labels": dict(labels or {})},
            "spec": {**spec, "containers": [_CONTAINER]}}


def _term(color: str, topology_key: str) -> dict:
    return {"labelSelector": {"matchLabels": {"color": color}}, "topologyKey": topology_key,
            "namespaces": _SCHED_NAMESPACES}


TEMPLATES: dict[str, dict] = {
    "pod-default": _pod_template(),
    "pod-with-pod-anti-affinity": _pod_template(
        {"color": "green"},
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            _term("green", HOSTNAME_LABEL)]}}),
    "pod-with-pod-affinity": _pod_template(
        {"color": "blue"},
        affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_term("blue", ZONE_LABEL)]}}),
    "pod-with-preferred-pod-affinity": _pod_template(
        {"color": "red"},
        affinity={"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"podAffinityTerm": _term("red", HOSTNAME_LABEL), "weight": 1}]}}),
    "pod-with-preferred-pod-anti-affinity": _pod_template(
        {"color": "yellow"},
        affinity={"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"podAffinityTerm": _term("yellow", HOSTNAME_LABEL), "weight": 1}]}}),
    "pod-with-node-affinity": _pod_template(
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["zone1", "zone2"]}]}]}}}),
    "pod-with-topology-spreading": _pod_template(
        {"color": "blue"},
        topologySpreadConstraints=[{"maxSkew": 5, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule",
                                    "labelSelector": {"matchLabels": {"color": "blue"}}}]),
    "pod-with-preferred-topology-spreading": _pod_template(
        {"color": "blue"},
        topologySpreadConstraints=[{"maxSkew": 5, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "ScheduleAnyway",
                                    "labelSelector": {"matchLabels": {"color": "blue"}}}]),
    "pod-high-priority-large-cpu": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "template"},
        "spec": {"priority": 10, "containers": [{
            "name": "pause", "image": "registry.k8s.io/pause:3.10.1", "ports": [{"containerPort": 80}],
            "resources": {"requests": {"cpu": "9", "memory": "500Mi"}}}]}},
}


@functools.lru_cache(maxsize=None)
def template_pod(template: str) -> Pod:
    """The template read as the mesh reads a manifest (schema, validation, admission)."""
    if template not in TEMPLATES:
        raise ValueError(f"unknown pod template {template!r} (known: {', '.join(sorted(TEMPLATES))})")
    return admit_all(load_text(json.dumps(TEMPLATES[template]), f"template {template}")).pods[0]


def pod_from_template(template: str, name: str, namespace: str, node_name: str = "") -> Pod:
    pod = copy.deepcopy(template_pod(template))
    pod.meta.name, pod.meta.namespace, pod.meta.uid = name, namespace, f"uid-{namespace}-{name}"
    pod.node_name = node_name
    return pod


# ---- nodes ------------------------------------------------------------------------------------
def make_node(i: int, gpu: bool = False, zone: Optional[str] = "", region: str = "") -> Node:
    """node-default.yaml: 4 cpu, 32Gi, 110 pods, Ready. `zone` None means Mixed's zone-a/b/c
    round-robin; "" means no zone label."""
    name = f"node-{i:05d}"
    labels = {HOSTNAME_LABEL: name, "kubernetes.io/os": "linux"}
    if zone is None:
        zone = ZONES[i % len(ZONES)]
    if zone:
        labels[ZONE_LABEL] = zone
    if region:
        labels["topology.kubernetes.io/region"] = region
    alloc = {"cpu": Fraction(4), "memory": Fraction(32 * GiB), "pods": Fraction(110)}
    taints = []
    if gpu:
        labels["accelerator"] = "nvidia"
        alloc["nvidia.com/gpu"] = Fraction(4)
        taints.append(Taint("nvidia.com/gpu", "NoSchedule", "present"))
    return Node(ObjectMeta(name=name, uid=f"node-uid-{i}", labels=labels), taints=taints,
                allocatable=dict(alloc), capacity=dict(alloc), conditions=[NodeCondition("Ready", "True")])


def make_pod(name: str, namespace: str = "default", cpu: str = "100m", mem_mi: int = 500,
             labels: dict | None = None, node_name: str = "") -> Pod:
    from schedmesh.api.quantity import parse_quantity
    return Pod(ObjectMeta(name=name, namespace=namespace, uid=f"uid-{namespace}-{name}", labels=dict(labels or {})),
               containers=[Container("c", image="registry.k8s.io/pause:3.10",
                                     requests={"cpu": parse_quantity(cpu), "memory": Fraction(mem_mi * 2**20)})],
               node_name=node_name, priority=0)


# ---- workloads --------------------------------------------------------------------------------
@dataclass
class Workload:
    name: str
    nodes: list[Node]
    init: list[Pod]  # already on their nodes (spec.nodeName)
    measured: list[Pod]  # scheduled and measured, in this order
    # Applied before the measured pods, never schedulable: the churn they cause is part of the figure.
    unschedulable: list[Pod] = field(default_factory=list)

    @property
    def namespaces(self) -> list[str]:
        return sorted({p.namespace for p in self.init + self.unschedulable + self.measured})


@dataclass(frozen=True)
class PodGroup:
    """One createPods op of scheduler_perf: a template, a namespace, a count."""
    template: str
    namespace: str


@dataclass(frozen=True)
class WorkloadShape:
    description: str
    zones: tuple[str, ...]  # labelNodePrepareStrategy's values, round-robin; () = no zone label
    init_groups: tuple[PodGroup, ...]  # each of init_pods pods
    measured: PodGroup
    nodes: int  # the 5000Nodes variant's sizes
    init_pods: int
    pods: int
    unschedulable: Optional[PodGroup] = None
    unschedulable_pods: int = 0


def _basic(description: str, measured_template: str = "pod-default", zones: tuple[str, ...] = (), init_pods=1000,
           pods=1000, **kw) -> WorkloadShape:
    """createNodes, createPods (init), createPods (measured): namespaces namespace-1 and -2."""
    return WorkloadShape(description, zones, (PodGroup("pod-default", "namespace-1"),),
                         PodGroup(measured_template, "namespace-2"), 5000, init_pods, pods, **kw)


def _sched_namespaces(template: str, zones: tuple[str, ...] = (), init_pods=5000, pods=1000) -> WorkloadShape:
    """createNodes, createNamespaces sched-0/1, init pods in sched-0, measured pods in sched-1, same template."""
    return WorkloadShape(f"{template}.yaml pods: init in sched-0, measured in sched-1", zones,
                         (PodGroup(template, "sched-0"),), PodGroup(template, "sched-1"), 5000, init_pods, pods)


SHAPES: dict[str, WorkloadShape] = {
    "SchedulingBasic": _basic("pod-default.yaml pods on node-default.yaml nodes (misc/)"),
    "Unschedulable": WorkloadShape(
        "SchedulingBasic with pod-high-priority-large-cpu.yaml pods (priority 10, 9 cpu) applied first, "
        "churning in the queue", (), (PodGroup("pod-default", "namespace-1"),), PodGroup("pod-default", "namespace-3"),
        5000, 1000, 1000, unschedulable=PodGroup("pod-high-priority-large-cpu", "namespace-2"),
        unschedulable_pods=1000),
    "SchedulingPodAntiAffinity": _sched_namespaces("pod-with-pod-anti-affinity", init_pods=1000),
    "SchedulingPodAffinity": _sched_namespaces("pod-with-pod-affinity", zones=("zone1",)),
    "SchedulingPreferredPodAffinity": _sched_namespaces("pod-with-preferred-pod-affinity"),
    "SchedulingPreferredPodAntiAffinity": _sched_namespaces("pod-with-preferred-pod-anti-affinity"),
    "SchedulingNodeAffinity": WorkloadShape(
        "pod-with-node-affinity.yaml pods (zone1 or zone2) on nodes all in zone1", ("zone1",),
        (PodGroup("pod-with-node-affinity", "namespace-1"),), PodGroup("pod-with-node-affinity", "namespace-2"),
        5000, 5000, 1000),
    "TopologySpreading": _basic("pod-with-topology-spreading.yaml pods (maxSkew 5 over zones, DoNotSchedule)",
                                "pod-with-topology-spreading", ("moon-1", "moon-2", "moon-3"), 5000, 2000),
    "PreferredTopologySpreading": _basic(
        "pod-with-preferred-topology-spreading.yaml pods (maxSkew 5 over zones, ScheduleAnyway)",
        "pod-with-preferred-topology-spreading", ("moon-1", "moon-2", "moon-3"), 5000, 2000),
    # createNodes(0), createNamespaces(1), five init createPods in sched-0 (2-6), measured (7).
    "MixedSchedulingBasePod": WorkloadShape(
        "pod-default.yaml pods among init pods of five kinds (default, affinity, anti-affinity, preferred "
        "affinity, preferred anti-affinity), each init_pods strong", ("zone1",),
        tuple(PodGroup(t, "sched-0") for t in (
            "pod-default", "pod-with-pod-affinity", "pod-with-pod-anti-affinity", "pod-with-preferred-pod-affinity",
            "pod-with-preferred-pod-anti-affinity")),
        PodGroup("pod-default", "namespace-7"), 5000, 2000, 1000),
}


def build_shaped(name: str, nodes: Optional[int] = None, init_pods: Optional[int] = None, pods: Optional[int] = None,
                 unschedulable_pods: Optional[int] = None) -> Workload:
    shape = SHAPES[name]
    nodes = shape.nodes if nodes is None else nodes
    init_pods = shape.init_pods if init_pods is None else init_pods
    pods = shape.pods if pods is None else pods
    n_unsched = shape.unschedulable_pods if unschedulable_pods is None else unschedulable_pods
    if n_unsched and shape.unschedulable is None:
        raise ValueError(f"workload {name} has no unschedulable pods to set a count for")
    zones = shape.zones
    node_list = [make_node(i, zone=zones[i % len(zones)] if zones else "") for i in range(nodes)]
    init: list[Pod] = []
    for g, group in enumerate(shape.init_groups):
        for i in range(init_pods):
            k = len(init)
            init.append(pod_from_template(group.template, f"init-{g}-{i}", group.namespace,
                                          node_list[k % nodes].name))
    unsched = []
    if n_unsched:
        unsched = [pod_from_template(shape.unschedulable.template, f"unschedulable-{i}", shape.unschedulable.namespace)
                   for i in range(n_unsched)]
    measured = [pod_from_template(shape.measured.template, f"pod-{i}", shape.measured.namespace) for i in range(pods)]
    return Workload(name, node_list, init, measured, unsched)


def mixed_workload(nodes: int, init_pods: int, pods: int, seed: int = 1) -> Workload:
    """Real-world shapes (not scheduler_perf's): gpu nodes with taints, spread and anti-affinity
    apps, node affinity; nodes in zone-a/b/c; init pods at random nodes."""
    import random
    rng = random.Random(seed)
    node_list = [make_node(i, gpu=(i % 20 == 0), zone=None, region="region-1") for i in range(nodes)]
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
                1, ZONE_LABEL, "DoNotSchedule", LabelSelector.of({"app": app}))]
        elif kind == 2:
            p.affinity = Affinity(pod_anti_affinity=PodAffinity(preferred=[]), node_affinity=NodeAffinity(
                NodeSelector([NodeSelectorTerm([NodeSelectorRequirement(ZONE_LABEL, "In", ["zone-a", "zone-b"])])])))
        elif kind == 3:
            p.affinity = Affinity(pod_anti_affinity=PodAffinity(required=[PodAffinityTerm(
                HOSTNAME_LABEL, LabelSelector.of({"app": app}))]))
            p.tolerations = [Toleration("nvidia.com/gpu", "Exists")]
        pending.append(p)
    return Workload("Mixed", node_list, init, pending)


MIXED_SIZES = (5000, 1000, 3000)


DISTINCT_BASE = "SchedulingBasic"  # DistinctPods' cluster and sizes


def distinct_workload(nodes: Optional[int], init_pods: Optional[int], pods: Optional[int]) -> Workload:
    """`DistinctPods` (not scheduler_perf's): SchedulingBasic with every measured pod of its own
    kind, its requests (= limits, as pod-default's) 1-100m cpu and 300-499Mi memory, 20,000 kinds
    in all. Replicas are answered from their template; these pods are each evaluated whole."""
    w = build_shaped(DISTINCT_BASE, nodes, init_pods, pods)
    for i, pod in enumerate(w.measured):
        c = pod.containers[0]
        own = {"cpu": Fraction(1 + i % 100, 1000), "memory": Fraction((300 + i // 100 % 200) * 2**20)}
        c.requests, c.limits = dict(c.requests, **own), dict(c.limits, **own)
    return Workload("DistinctPods", w.nodes, w.init, w.measured)


def build(name: str, nodes: Optional[int] = None, init_pods: Optional[int] = None, pods: Optional[int] = None,
          seed: int = 1, unschedulable_pods: Optional[int] = None) -> Workload:
    """Workload `name` at its default sizes, or the ones given. Refuses unknown names and bad sizes."""
    if name not in WORKLOAD_NAMES:
        raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOAD_NAMES)})")
    for what, v in (("nodes", nodes), ("pods", pods)):
        if v is not None and v < 1:
            raise ValueError(f"{what} must be at least 1, not {v}")
    for what, v in (("init pods", init_pods), ("unschedulable pods", unschedulable_pods)):
        if v is not None and v < 0:
            raise ValueError(f"{what} must not be negative, not {v}")
    if name == "Mixed":
        if unschedulable_pods:
            raise ValueError("workload Mixed has no unschedulable pods to set a count for")
        d_nodes, d_init, d_pods = MIXED_SIZES
        return mixed_workload(nodes or d_nodes, d_init if init_pods is None else init_pods, pods or d_pods, seed)
    if name == "DistinctPods":
        if unschedulable_pods:
            raise ValueError("workload DistinctPods has no unschedulable pods to set a count for")
        return distinct_workload(nodes, init_pods, pods)
    return build_shaped(name, nodes, init_pods, pods, unschedulable_pods)


def default_sizes(name: str) -> tuple[int, int, int]:
    if name == "Mixed":
        return MIXED_SIZES
    s = SHAPES[DISTINCT_BASE if name == "DistinctPods" else name]
    return s.nodes, s.init_pods, s.pods


WORKLOAD_NAMES = tuple(SHAPES) + ("Mixed", "DistinctPods")


# The two the mesh sampling tests build clusters from: (nodes, init pods, pending pods).
def scheduling_basic(nodes: int, init_pods: int, pods: int, seed: int = 1) -> tuple[list[Node], list[Pod], list[Pod]]:
    w = build("SchedulingBasic", nodes, init_pods, pods, seed)
    return w.nodes, w.init, w.measured


def mixed(nodes: int, init_pods: int, pods: int, seed: int = 1) -> tuple[list[Node], list[Pod], list[Pod]]:
    w = mixed_workload(nodes, init_pods, pods, seed)
    return w.nodes, w.init, w.measured


WORKLOADS: dict[str, Callable[..., Workload]] = {name: functools.partial(build, name) for name in WORKLOAD_NAMES}
