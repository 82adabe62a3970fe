"""Builders and a small framework harness for the preemption tests (kube's st.MakePod /
st.MakeNode / tf.NewFramework, re-expressed). Objects go through `schedmesh.api.load`, so the
tests see what real manifests produce."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Optional, Sequence

from schedmesh.api.load import admit_pod, load_text
from schedmesh.api.types import Node, Pod, PodDisruptionBudget
from schedmesh.cache.node_info import NodeInfo, PodInfo
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import (Code, CycleState, FilterPlugin, NodeToStatus, PreFilterExtensions,
                                           PreFilterPlugin, Status)
from schedmesh.framework.profile import PluginRef, PluginSet, Profile
from schedmesh.framework.registry import Registry
from schedmesh.framework.runtime import Framework
from schedmesh.preemption.candidates import Victims

# kube's test priorities and resources (default_preemption_test.go).
NEG, LOW, MID, HIGH, VERY_HIGH = -100, 0, 100, 1000, 10000
SMALL = {"cpu": "100m", "memory": "100"}
MEDIUM = {"cpu": "200m", "memory": "200"}
LARGE = {"cpu": "300m", "memory": "300"}
VERY_LARGE = {"cpu": "500m", "memory": "500"}
ONE_POD = {"pods": "1"}
NODE_RES = {"cpu": "200m", "memory": "400"}

# metav1.NewTime(time.Unix(0, n)): n nanoseconds after the epoch.
def epoch(n: int) -> float:
    return n * 1e-9


def make_pod(name: str, node: str = "", priority: Optional[int] = None, req: Optional[dict] = None,
             labels: Optional[dict] = None, namespace: str = "default", start: Optional[float] = None,
             policy: Optional[str] = None, nominated: str = "", terminating: bool = False,
             conditions: Sequence[dict] = (), spec: Optional[dict] = None, uid: Optional[str] = None) -> Pod:
    container: dict[str, Any] = {"name": "c", "image": "pause"}
    if req:
        container["resources"] = {"requests": dict(req)}
    pod_spec: dict[str, Any] = {"containers": [container]}
    if node:
        pod_spec["nodeName"] = node
    if priority is not None:
        pod_spec["priority"] = priority
    if policy:
        pod_spec["preemptionPolicy"] = policy
    pod_spec.update(spec or {})
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or name}
    if labels:
        meta["labels"] = dict(labels)
    status: dict[str, Any] = {}
    if nominated:
        status["nominatedNodeName"] = nominated
    if conditions:
        status["conditions"] = list(conditions)
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec, "status": status}
    pod = admit_pod(load_text(json.dumps(doc)).pods[0], {})
    pod.start_time = start
    if terminating:
        pod.meta.deletion_timestamp = 1.0
    return pod


def make_node(name: str, capacity: Optional[dict] = None, labels: Optional[dict] = None) -> Node:
    """st.MakeNode().Capacity(res): capacity = allocatable, with 32 pods unless given."""
    cap = {"pods": "32"}
    cap.update(capacity or {})
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    doc = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": {"capacity": cap}}
    return load_text(json.dumps(doc)).nodes[0]


def topo_node(spec: str, capacity: Optional[dict] = None) -> Node:
    """"name/zone/region" -> a node with hostname/zone/region labels (kube's test convention)."""
    parts = spec.split("/")
    labels = dict(zip(("hostname", "zone", "region"), parts))
    return make_node(parts[0], capacity, labels)


def make_pdb(name: str, match_labels: Optional[dict] = None, allowed: int = 0, namespace: str = "default",
             selector: Any = "default", disrupted: Iterable[str] = ()) -> PodDisruptionBudget:
    spec: dict[str, Any] = {}
    if selector == "default":
        if match_labels is not None:
            spec["selector"] = {"matchLabels": dict(match_labels)}
    elif selector is not None:
        spec["selector"] = selector
    doc = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": name, "namespace": namespace}, "spec": spec,
           "status": {"disruptionsAllowed": allowed,
                      "disruptedPods": {n: "2026-01-01T00:00:00Z" for n in disrupted}}}
    return load_text(json.dumps(doc)).pdbs[0]


def statuses(**by_node: Code) -> NodeToStatus:
    """NewNodeToStatus(map, absent=UnschedulableAndUnresolvable)."""
    m = NodeToStatus()
    for n, code in by_node.items():
        m.set(n, Status(code))
    return m


def all_unschedulable(nodes: Sequence[Node]) -> NodeToStatus:
    return statuses(**{n.meta.name: Code.UNSCHEDULABLE for n in nodes})


def victims(*pods: Pod, pdb: int = 0) -> Victims:
    return Victims(list(pods), pdb)


# ---- fake plugins (kube's testing/framework fakes) ----------------------------------------------
class FakeFilter(FilterPlugin):
    """tf.FakeFilterPlugin: returns a per-node code (default Success) and counts its calls."""

    name: ClassVar[str] = "FakeFilter"

    def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        self.codes: dict[str, Code] = dict((args or {}).get("codes", {}))
        self.calls = 0

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Optional[Status]:
        self.calls += 1
        code = self.codes.get(node_info.name, Code.SUCCESS)
        return None if code == Code.SUCCESS else Status(code, (f"injecting failure for pod {pod.name}",))


class FalseFilter(FilterPlugin):
    name: ClassVar[str] = "FalseFilter"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Optional[Status]:
        return Status.unschedulable("injecting failure for pod " + pod.name)


class TrueFilter(FilterPlugin):
    name: ClassVar[str] = "TrueFilter"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Optional[Status]:
        return None


class MatchFilter(FilterPlugin):
    """Passes only the node named like the pod."""

    name: ClassVar[str] = "MatchFilter"

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Optional[Status]:
        return None if node_info.name == pod.name else Status.unschedulable("node name does not match")


class _ErrorExtensions(PreFilterExtensions):
    def add_pod(self, state, pod_to_schedule, pod_info_to_add, node_info):
        if node_info.node.meta.labels.get("error") == "true":
            return Status.as_error(f"failed to add pod: {pod_to_schedule.name}")
        return None

    def remove_pod(self, state, pod_to_schedule, pod_info_to_remove, node_info):
        if node_info.node.meta.labels.get("error") == "true":
            return Status.as_error(f"failed to remove pod: {pod_to_schedule.name}")
        return None


class ErrorExtensionsPlugin(PreFilterPlugin, FilterPlugin):
    """kube's "test-plugin": AddPod/RemovePod fail on nodes labelled error=true."""

    name: ClassVar[str] = "test-plugin"

    def pre_filter(self, state, pod, snapshot):
        return None, None

    def pre_filter_extensions(self):
        return _ErrorExtensions()

    def filter(self, state, pod, node_info):
        return None


FAKES = (FakeFilter, FalseFilter, TrueFilter, MatchFilter, ErrorExtensionsPlugin)


@dataclass
class StaticNominator:
    """Pods nominated to nodes (the queue's nominator, fixed)."""

    by_node: dict[str, list[Pod]] = field(default_factory=dict)

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        return [PodInfo(p) for p in self.by_node.get(node_name, [])]

    def nominated_node_names(self) -> list[str]:
        return list(self.by_node)


def build_framework(nodes: Sequence[Node], pods: Sequence[Pod], plugins: Sequence[str],
                    services: Optional[dict] = None, plugin_config: Optional[dict] = None,
                    pre_filter_only: Sequence[str] = ()) -> tuple[Framework, Snapshot]:
    """A framework whose preFilter / filter points run `plugins` in order, with PrioritySort,
    DefaultPreemption as PostFilter and DefaultBinder (tf.NewFramework with Register* calls)."""
    registry = Registry()
    for cls in FAKES:
        registry.register(cls)
    snap = Snapshot(nodes, pods)
    filter_plugins = [p for p in plugins if p not in pre_filter_only]
    pre_filter = [p for p in plugins if p in ("NodeResourcesFit", "PodTopologySpread", "InterPodAffinity",
                                              "test-plugin") or p in pre_filter_only]
    prof = Profile(plugins={
        "queueSort": PluginSet([PluginRef("PrioritySort")]),
        "preFilter": PluginSet([PluginRef(p) for p in pre_filter]),
        "filter": PluginSet([PluginRef(p) for p in filter_plugins]),
        "postFilter": PluginSet([PluginRef("DefaultPreemption")]),
        "bind": PluginSet([PluginRef("DefaultBinder")]),
    }, plugin_config=dict(plugin_config or {}))
    fw = Framework(prof, registry, snapshot_fn=lambda: snap, services=dict(services or {}))
    return fw, snap


def run_pre_filter(fw: Framework, pod: Pod, snap: Snapshot) -> CycleState:
    state = CycleState()
    _, st, _ = fw.run_pre_filter(state, pod, snap)
    assert st is None or st.is_success(), st
    return state
