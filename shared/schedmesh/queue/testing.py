"""Helpers for the queue's tests: a pod builder, PrioritySort's less, canned queueing hints, and
small test plugins to build Frameworks from (kube's queue/testing.go plus st.MakePod)."""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterable, Mapping, Optional

from schedmesh.api.labels import LabelSelector, LabelSelectorRequirement
from schedmesh.api.quantity import parse_quantity
from schedmesh.api.types import (Affinity, Container, Node, ObjectMeta, Pod, PodAffinity, PodAffinityTerm,
                                 Toleration, TopologySpreadConstraint)
from schedmesh.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from schedmesh.framework.interface import (BindPlugin, Code, EnqueueExtensions, FilterPlugin, PreEnqueuePlugin,
                                           QueueSortPlugin, Status)
from schedmesh.framework.profile import PluginRef, PluginSet, Profile
from schedmesh.framework.registry import Registry
from schedmesh.framework.runtime import Framework
from schedmesh.queue.clock import FakeClock
from schedmesh.queue.hints import QueueingHintFunction, QueueingHintMap
from schedmesh.queue.queued_pod_info import QueuedPodInfo
from schedmesh.queue.scheduling_queue import PriorityQueue

DEFAULT_SCHEDULER = "default-scheduler"
# A start time on a whole second, so backoff windows are easy to reason about.
T0 = 1_700_000_000.0

NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
NODE_UPDATE_LABEL = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL)
NODE_UPDATE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)
NODE_UPDATE_CONDITION = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_CONDITION)
NODE_UPDATE_ANNOTATION = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_ANNOTATION)


def make_pod(name: str, namespace: str = "ns1", *, uid: Optional[str] = None, priority: int = 0,
             nominated_node_name: str = "", node_name: str = "", labels: Optional[Mapping[str, str]] = None,
             annotations: Optional[Mapping[str, str]] = None, gates: Iterable[str] = (),
             tolerations: Iterable[Toleration] = (), cpu: Optional[str] = None,
             scheduler_name: str = DEFAULT_SCHEDULER, affinity: Optional[Affinity] = None,
             spread: Iterable[TopologySpreadConstraint] = ()) -> Pod:
    requests = {"cpu": parse_quantity(cpu)} if cpu is not None else {}
    return Pod(meta=ObjectMeta(name=name, namespace=namespace, uid=uid if uid is not None else f"{name}{namespace}",
                               labels=dict(labels or {}), annotations=dict(annotations or {})),
               containers=[Container(name="c", requests=requests)], priority=priority,
               nominated_node_name=nominated_node_name, node_name=node_name, scheduling_gates=list(gates),
               tolerations=list(tolerations), scheduler_name=scheduler_name, affinity=affinity,
               topology_spread_constraints=list(spread))


def clone(pod: Pod, **changes: Any) -> Pod:
    """A deep copy of pod (a new object, as an informer update delivers) with attributes replaced."""
    p = copy.deepcopy(pod)
    for k, v in changes.items():
        if k in ("labels", "annotations", "name", "uid", "namespace"):
            setattr(p.meta, k, v)
        else:
            setattr(p, k, v)
    return p


def pod_affinity_exists(label_key: str, topology_key: str) -> Affinity:
    """st.PodAffinityExists(key, topologyKey, required): pods with label_key, in the pod's namespace."""
    term = PodAffinityTerm(topology_key=topology_key,
                           label_selector=LabelSelector.of(match_expressions=[LabelSelectorRequirement(label_key, "Exists")]))
    return Affinity(pod_affinity=PodAffinity(required=[term]))


def make_node(name: str, labels: Optional[Mapping[str, str]] = None) -> Node:
    return Node(meta=ObjectMeta(name=name, labels=dict(labels or {})))


def priority_sort_less(a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
    """PrioritySort.Less: higher priority first, then the earlier timestamp."""
    pa, pb = a.pod.priority, b.pod.priority
    return pa > pb or (pa == pb and a.timestamp < b.timestamp)


def hint_queue(pod: Pod, old: Any, new: Any) -> QueueingHint:
    return QueueingHint.QUEUE


def hint_skip(pod: Pod, old: Any, new: Any) -> QueueingHint:
    return QueueingHint.QUEUE_SKIP


def hint_error(pod: Pod, old: Any, new: Any) -> QueueingHint:
    raise RuntimeError("unexpected error")


def fake_clock(start: float = T0) -> FakeClock:
    return FakeClock(start)


# ---- test plugins ------------------------------------------------------------------------------

class FakePrioritySort(QueueSortPlugin):
    name = "FakePrioritySort"

    def less(self, a: Any, b: Any) -> bool:
        return priority_sort_less(a, b)


class FakeSchedulingGates(PreEnqueuePlugin, EnqueueExtensions):
    """kube's SchedulingGates: gate while .spec.schedulingGates is non-empty; requeue on the pod's own
    gate removal."""

    name = "FakeSchedulingGates"

    def pre_enqueue(self, pod: Pod) -> Optional[Status]:
        if not pod.scheduling_gates:
            return None
        return Status.of(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
                                     self._gates_eliminated)]

    @staticmethod
    def _gates_eliminated(pod: Pod, old: Any, new: Any) -> QueueingHint:
        return QueueingHint.QUEUE if isinstance(new, Pod) and new.meta.uid == pod.meta.uid else QueueingHint.QUEUE_SKIP


class AllowlistPreEnqueue(PreEnqueuePlugin):
    """kube's test preEnqueuePlugin: admits pods carrying one of the allowed label keys."""

    name = "preEnqueuePlugin"

    def __init__(self, allowlist: Iterable[str] = ()) -> None:
        super().__init__()
        self.allowlist = list(allowlist)

    def pre_enqueue(self, pod: Pod) -> Optional[Status]:
        if any(k in pod.meta.labels for k in self.allowlist):
            return None
        return Status.unresolvable("pod name not in allowlists")


class FakeNodeFit(FilterPlugin, EnqueueExtensions):
    """Rejects every node without label fits=true; a node add helps only if the node has it."""

    name = "FakeNodeFit"

    def filter(self, state: Any, pod: Pod, node_info: Any) -> Optional[Status]:
        return None if node_info.node.labels.get("fits") == "true" else Status.unschedulable("node(s) didn't fit")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(NODE_ADD, self._node_added)]

    @staticmethod
    def _node_added(pod: Pod, old: Any, new: Any) -> QueueingHint:
        return QueueingHint.QUEUE if isinstance(new, Node) and new.labels.get("fits") == "true" else QueueingHint.QUEUE_SKIP


class FakeNoExtensionsFilter(FilterPlugin):
    """A filter without EnqueueExtensions: kube registers every event for it."""

    name = "FakeNoExtensionsFilter"

    def filter(self, state: Any, pod: Pod, node_info: Any) -> Optional[Status]:
        return None


class FakeBinder(BindPlugin):
    name = "FakeBinder"

    def bind(self, state: Any, pod: Pod, node_name: str) -> Optional[Status]:
        return None


FAKE_PLUGINS = (FakePrioritySort, FakeSchedulingGates, FakeNodeFit, FakeNoExtensionsFilter, FakeBinder)


def make_registry() -> Registry:
    r = Registry()
    for cls in FAKE_PLUGINS:
        r.register(cls)
    return r


def make_framework(scheduler_name: str = DEFAULT_SCHEDULER, *, filters: Iterable[str] = ("FakeNodeFit", "FakeNoExtensionsFilter"),
                   pre_enqueue: Iterable[str] = ("FakeSchedulingGates",)) -> Framework:
    def refs(names: Iterable[str]) -> PluginSet:
        return PluginSet(enabled=[PluginRef(n) for n in names])

    profile = Profile(scheduler_name=scheduler_name, plugins={
        "queueSort": refs(["FakePrioritySort"]), "preEnqueue": refs(pre_enqueue), "filter": refs(filters),
        "bind": refs(["FakeBinder"])})
    return Framework(profile, make_registry())


# ---- queues ------------------------------------------------------------------------------------

def lookup(pod: Pod, *unschedulable_plugins: str) -> QueuedPodInfo:
    """A fresh QueuedPodInfo for pod (kube's newQueuedPodInfoForLookup)."""
    return QueuedPodInfo.of(pod, *unschedulable_plugins)


def hint_map(mapping: Mapping[ClusterEvent, Iterable[tuple[str, Callable[..., QueueingHint]]]]) -> QueueingHintMap:
    """{event: [(plugin, hint fn), ...]} as a QueueingHintMap."""
    return {ev: [QueueingHintFunction(name, fn) for name, fn in fns] for ev, fns in mapping.items()}


def new_queue(hints: Optional[QueueingHintMap] = None, *, clock: Optional[FakeClock] = None,
              pre_enqueue: Optional[Iterable[PreEnqueuePlugin]] = None, **kwargs: Any) -> PriorityQueue:
    """A queue for the default profile with the given hints / PreEnqueue plugins and a fake clock."""
    return PriorityQueue(priority_sort_less, clock=clock or fake_clock(),
                         queueing_hints=None if hints is None else {DEFAULT_SCHEDULER: hints},
                         pre_enqueue_plugins=None if pre_enqueue is None else {DEFAULT_SCHEDULER: list(pre_enqueue)},
                         **kwargs)
