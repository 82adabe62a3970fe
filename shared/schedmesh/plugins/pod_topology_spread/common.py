"""What PodTopologySpread's Filter and Score share (kube's podtopologyspread/common.go and
helper/spread.go, v1.35): the parsed constraints, their selectors, the default constraints and
the selector deduced from the pod's Services / ReplicationControllers / ReplicaSets /
StatefulSets, and the node inclusion policies.

Selectors are `LabelSelector` objects; `None` stands for `labels.Nothing()` (what a nil
labelSelector converts to): it matches no pod. An empty selector matches every pod, yet
countPodsMatchSelector counts nothing with it (`selector.Empty()` short-circuits).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import MutableMapping
from typing import Iterable, Iterator, Mapping, Optional, Protocol, Sequence

import numpy as np

from schedmesh.api.labels import IN, LabelSelector, LabelSelectorRequirement
from schedmesh.api.types import Node, Pod, TopologySpreadConstraint, WorkloadSelector
from schedmesh.plugins.node_affinity.matcher import RequiredNodeAffinity, required_node_affinity
from schedmesh.plugins.taint_toleration.tolerations import (do_not_schedule_taints_filter,
                                                            find_matching_untolerated_taint, untolerated_groups)

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone"

# Used when the plugin args ask for System defaulting (plugin.go's systemDefaultConstraints).
SYSTEM_DEFAULT_CONSTRAINTS: tuple[TopologySpreadConstraint, ...] = (
    TopologySpreadConstraint(max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY),
    TopologySpreadConstraint(max_skew=5, topology_key=LABEL_TOPOLOGY_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY),
)

Selector = Optional[LabelSelector]  # None = labels.Nothing()


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """kube's internal topologySpreadConstraint: the selector is parsed, the policies resolved."""

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    def with_selector(self, selector: Selector) -> "SpreadConstraint":
        return SpreadConstraint(self.max_skew, self.topology_key, selector, self.min_domains,
                                self.node_affinity_policy, self.node_taints_policy)


def selector_matches(selector: Selector, labels: Mapping[str, str]) -> bool:
    return selector is not None and selector.matches(labels)


def selector_is_empty(selector: Selector) -> bool:
    """labels.Selector.Empty(): Nothing() is not empty, a selector without requirements is."""
    return selector is not None and selector.is_empty()


def merge_label_set(match_labels: Mapping[str, str], selector: Selector) -> Selector:
    """mergeLabelSetWithSelector: the pod's values for matchLabelKeys ANDed with the selector.
    Nothing() has no requirements to merge into and stays Nothing()."""
    if selector is None:
        return None
    extra = [LabelSelectorRequirement(k, IN, (v,)) for k, v in sorted(match_labels.items())]
    return selector.with_requirements(extra)


def filter_constraints(constraints: Iterable[TopologySpreadConstraint], pod_labels: Mapping[str, str],
                       action: str) -> list[SpreadConstraint]:
    """filterTopologySpreadConstraints with v1.35's default gates (MatchLabelKeysInPodTopologySpread
    and NodeInclusionPolicyInPodTopologySpread on): the scheduler itself merges matchLabelKeys.
    (The API server's own merge, MatchLabelKeysInPodTopologySpreadSelectorMerge, only adds the same
    `key in (value)` requirements again, so a pod merged by either reads the same.)"""
    out = []
    for c in constraints:
        if c.when_unsatisfiable != action:
            continue
        selector = c.label_selector
        if c.match_label_keys:
            match_labels = {k: pod_labels[k] for k in c.match_label_keys if k in pod_labels}
            if match_labels:
                selector = merge_label_set(match_labels, selector)
        out.append(SpreadConstraint(
            max_skew=c.max_skew, topology_key=c.topology_key, selector=selector,
            min_domains=c.min_domains if c.min_domains is not None else 1,
            node_affinity_policy=c.node_affinity_policy or HONOR,
            node_taints_policy=c.node_taints_policy or IGNORE))
    return out


def node_labels_match_constraints(node_labels: Mapping[str, str], constraints: Sequence[SpreadConstraint]) -> bool:
    """nodeLabelsMatchSpreadConstraints: the node has every constraint's topology key."""
    return all(c.topology_key in node_labels for c in constraints)


def pod_labels_match_constraints(constraints: Sequence[SpreadConstraint], labels: Mapping[str, str]) -> bool:
    return any(selector_matches(c.selector, labels) for c in constraints)


def count_pods_match_selector(pod_infos: Iterable, selector: Selector, namespace: str) -> int:
    """countPodsMatchSelector: same-namespace, non-terminating pods the selector matches."""
    if selector is None or selector.is_empty():
        return 0
    n = 0
    for pi in pod_infos:
        p = pi.pod
        if p.meta.deletion_timestamp is not None or p.meta.namespace != namespace:
            continue
        if selector.matches(p.meta.labels):
            n += 1
    return n


# ---------------------------------------------------------------------------------------------
# Default constraints: the selector comes from the objects that select the pod
# ---------------------------------------------------------------------------------------------

class NotFound(LookupError):
    """A workload object the pod's controller reference names does not exist."""


class SelectorSources(Protocol):
    """Where helper.DefaultSelector finds the selectors of the objects that select a pod. The mesh
    plugs one in through the handle (`handle.spread_selector_sources`) once it tracks them."""

    def services(self, namespace: str) -> Iterable[Optional[Mapping[str, str]]]:
        """spec.selector of every Service in the namespace (None for a nil selector)."""

    def replication_controller(self, namespace: str, name: str) -> Optional[Mapping[str, str]]:
        """spec.selector of the ReplicationController; raises NotFound when there is none."""

    def replica_set(self, namespace: str, name: str) -> Optional[LabelSelector]:
        """spec.selector of the ReplicaSet (None when nil); raises NotFound when there is none."""

    def stateful_set(self, namespace: str, name: str) -> Optional[LabelSelector]:
        """spec.selector of the StatefulSet (None when nil); raises NotFound when there is none."""


@dataclass
class StaticSelectorSources:
    """SelectorSources over plain dicts: services by namespace, controllers by (namespace, name)."""

    service_selectors: dict[str, list[Optional[dict[str, str]]]] = field(default_factory=dict)
    replication_controllers: dict[tuple[str, str], Optional[dict[str, str]]] = field(default_factory=dict)
    replica_sets: dict[tuple[str, str], Optional[LabelSelector]] = field(default_factory=dict)
    stateful_sets: dict[tuple[str, str], Optional[LabelSelector]] = field(default_factory=dict)

    def services(self, namespace: str) -> Iterable[Optional[Mapping[str, str]]]:
        return self.service_selectors.get(namespace, ())

    @staticmethod
    def _get(table: dict, namespace: str, name: str):
        try:
            return table[(namespace, name)]
        except KeyError:
            raise NotFound(f"{namespace}/{name}") from None

    def replication_controller(self, namespace: str, name: str) -> Optional[Mapping[str, str]]:
        return self._get(self.replication_controllers, namespace, name)

    def replica_set(self, namespace: str, name: str) -> Optional[LabelSelector]:
        return self._get(self.replica_sets, namespace, name)

    def stateful_set(self, namespace: str, name: str) -> Optional[LabelSelector]:
        return self._get(self.stateful_sets, namespace, name)


#: The handle service a framework's owner plugs its SelectorSources in as.
SELECTOR_SOURCES_SERVICE = "spread_selector_sources"

# Without sources nothing selects any pod, so the default constraints select nothing (exactly
# what the golden clusters, which have no Services and no ReplicaSets, show).
NO_SELECTOR_SOURCES: SelectorSources = StaticSelectorSources()


class WorkloadSelectors(MutableMapping):
    """The selectors schedmesh knows (api.types.WorkloadSelector: the ReplicaSets, StatefulSets
    and ReplicationControllers of the workloads applied, the Services applied) by (kind,
    namespace, name), with the Services also by namespace: helper.DefaultSelector asks for a
    namespace's Services for every pod, which a scan of every workload would make cost as many
    steps as there are workloads."""

    def __init__(self, selectors: Iterable[WorkloadSelector] = ()) -> None:
        self._by_key: dict[tuple[str, str, str], WorkloadSelector] = {}
        self._services: dict[str, dict[str, WorkloadSelector]] = {}
        for w in selectors:
            self[w.key] = w

    def __getitem__(self, key: tuple[str, str, str]) -> WorkloadSelector:
        return self._by_key[key]

    def __setitem__(self, key: tuple[str, str, str], w: WorkloadSelector) -> None:
        self._by_key[key] = w
        if w.kind == "Service":
            self._services.setdefault(w.namespace, {})[w.name] = w

    def __delitem__(self, key: tuple[str, str, str]) -> None:
        w = self._by_key.pop(key)
        if w.kind == "Service":
            in_ns = self._services[w.namespace]
            del in_ns[w.name]
            if not in_ns:
                del self._services[w.namespace]

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def services(self, namespace: str) -> list[WorkloadSelector]:
        return list(self._services.get(namespace, {}).values())


class WorkloadSelectorSources:
    """SelectorSources over WorkloadSelectors, read at each lookup, so a cluster cache's may
    change underneath."""

    def __init__(self, workloads: WorkloadSelectors) -> None:
        self._workloads = workloads

    def services(self, namespace: str) -> Iterable[Optional[Mapping[str, str]]]:
        return [None if w.selector is None else dict(w.selector.match_labels)
                for w in self._workloads.services(namespace)]

    def _selector(self, kind: str, namespace: str, name: str) -> Optional[LabelSelector]:
        w = self._workloads.get((kind, namespace, name))
        if w is None:
            raise NotFound(f"{kind} {namespace}/{name}")
        return w.selector

    def replication_controller(self, namespace: str, name: str) -> Optional[Mapping[str, str]]:
        # An RC's spec.selector is a plain label map, kept as matchLabels.
        selector = self._selector("ReplicationController", namespace, name)
        return None if selector is None else dict(selector.match_labels)

    def replica_set(self, namespace: str, name: str) -> Optional[LabelSelector]:
        return self._selector("ReplicaSet", namespace, name)

    def stateful_set(self, namespace: str, name: str) -> Optional[LabelSelector]:
        return self._selector("StatefulSet", namespace, name)

_RC_GVK = ("", "v1", "ReplicationController")
_RS_GVK = ("apps", "v1", "ReplicaSet")
_SS_GVK = ("apps", "v1", "StatefulSet")


def _parse_group_version(api_version: str) -> Optional[tuple[str, str]]:
    """schema.ParseGroupVersion: "" -> ("", ""), "v1" -> ("", "v1"), "apps/v1" -> ("apps", "v1")."""
    if not api_version:
        return "", ""
    if api_version == "v1":
        return "", "v1"
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", api_version
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def default_selector(pod: Pod, sources: SelectorSources) -> LabelSelector:
    """helper.DefaultSelector: the Services' selectors merged, then the controller's selector."""
    label_set: dict[str, str] = {}
    for sel in sources.services(pod.meta.namespace):
        # Services with a nil selector match nothing (not everything).
        if sel is None:
            continue
        if all(pod.meta.labels.get(k) == v for k, v in sel.items()):
            label_set.update(sel)  # labels.Merge: later keys overwrite
    selector = LabelSelector.of(label_set)
    owner = next((o for o in pod.meta.owner_references if o.controller), None)
    if owner is None:
        return selector
    gv = _parse_group_version(owner.api_version)
    if gv is None:
        return selector
    gvk = (gv[0], gv[1], owner.kind)
    ns = pod.meta.namespace
    try:
        if gvk == _RC_GVK:
            rc = sources.replication_controller(ns, owner.name)
            label_set.update(rc or {})
            selector = LabelSelector.of(label_set)
        elif gvk in (_RS_GVK, _SS_GVK):
            other = (sources.replica_set if gvk == _RS_GVK else sources.stateful_set)(ns, owner.name)
            # A nil selector is Nothing(), which has no requirements to add.
            if other is not None:
                reqs = [LabelSelectorRequirement(k, IN, (v,)) for k, v in other.match_labels]
                selector = selector.with_requirements(reqs + list(other.match_expressions))
    except NotFound:
        pass
    return selector


def build_default_constraints(defaults: Sequence[TopologySpreadConstraint], pod: Pod, action: str,
                              sources: SelectorSources) -> list[SpreadConstraint]:
    """buildDefaultConstraints: the default constraints for `action`, all with the deduced
    selector; none when that selector is empty."""
    # The selector first: for most pods (no Service or controller selects them) it is empty, and
    # the constraints need not be built (a twentieth of a replica's cycle, asked several times).
    if not any(c.when_unsatisfiable == action for c in defaults):
        return []
    selector = default_selector(pod, sources)
    if selector.is_empty():
        return []
    return [c.with_selector(selector) for c in filter_constraints(defaults, pod.meta.labels, action)]


# ---------------------------------------------------------------------------------------------
# Node inclusion policies
# ---------------------------------------------------------------------------------------------

class NodeInclusion:
    """matchNodeInclusionPolicies for one incoming pod: per node, or as masks over node rows."""

    __slots__ = ("pod", "required", "_affinity_mask", "_taints_ok_mask", "_cols")

    def __init__(self, pod: Pod) -> None:
        self.pod = pod
        # Parse errors in the pod's required terms make those terms match nothing (kube ignores
        # the error here "for backwards compatibility").
        self.required: RequiredNodeAffinity = required_node_affinity(pod)
        self._cols = None
        self._affinity_mask: Optional[np.ndarray] = None
        self._taints_ok_mask: Optional[np.ndarray] = None

    def matches(self, c: SpreadConstraint, node: Node) -> bool:
        if c.node_affinity_policy == HONOR and not self.required.match(node):
            return False
        if c.node_taints_policy == HONOR and find_matching_untolerated_taint(
                node.taints, self.pod.tolerations, do_not_schedule_taints_filter) is not None:
            return False
        return True

    def mask(self, c: SpreadConstraint, cols) -> Optional[np.ndarray]:
        """bool per node row, or None when every node qualifies."""
        if self._cols is not cols:
            self._cols, self._affinity_mask, self._taints_ok_mask = cols, None, None
        out: Optional[np.ndarray] = None
        if c.node_affinity_policy == HONOR and not self.required.is_trivial():
            if self._affinity_mask is None:
                self._affinity_mask = self.required.match_columns(cols)
            out = self._affinity_mask
        if c.node_taints_policy == HONOR:
            if self._taints_ok_mask is None:
                bad = untolerated_groups(cols.taint_groups, self.pod.tolerations, do_not_schedule_taints_filter)
                self._taints_ok_mask = ~bad[cols.taint_group] if bad.any() else np.ones(cols.n, dtype=bool)
            out = self._taints_ok_mask if out is None else out & self._taints_ok_mask
        return out
