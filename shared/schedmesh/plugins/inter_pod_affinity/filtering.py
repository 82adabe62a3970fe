"""InterPodAffinity PreFilter, its AddPod/RemovePod extensions and Filter (kube's filtering.go)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.cache.node_info import PodInfo
from schedmesh.cache.snapshot import Columns, Snapshot
from schedmesh.framework.interface import FilterVerdicts, Status
from schedmesh.plugins.inter_pod_affinity.pod_index import label_groups_matching_all, pod_index
from schedmesh.plugins.inter_pod_affinity.terms import NsLabelsOf, incoming_term_matches, matches_all
from schedmesh.plugins.inter_pod_affinity.topology import TopologyCounts

PRE_FILTER_STATE_KEY = "PreFilterInterPodAffinity"

ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"


@dataclass(slots=True)
class PreFilterState:
    """What Filter needs, computed once per pod (kube's preFilterState)."""

    pod_info: PodInfo  # the incoming pod
    namespace_labels: Mapping[str, str]  # the incoming pod's namespace labels
    ns_labels_of: NsLabelsOf  # resolves the incoming pod's namespaceSelectors
    cols: Columns
    # (key, value) -> existing pods whose required anti-affinity terms match the incoming pod
    existing_anti_affinity: TopologyCounts
    # (key, value) -> existing pods matching all of the incoming pod's required affinity terms
    affinity: TopologyCounts
    # (key, value) -> existing pods matching the incoming pod's required anti-affinity terms
    anti_affinity: TopologyCounts
    # The incoming pod matches all its own affinity terms ("first pod of a collection").
    matches_own_affinity: bool

    def clone(self) -> "PreFilterState":
        return PreFilterState(self.pod_info, self.namespace_labels, self.ns_labels_of, self.cols,
                              self.existing_anti_affinity.clone(), self.affinity.clone(),
                              self.anti_affinity.clone(), self.matches_own_affinity)

    def update_with_pod(self, other: PodInfo, node_labels: Mapping[str, str], multiplier: int) -> None:
        """Counts `other` (multiplier 1) or uncounts it (-1) as running on a node with these labels."""
        incoming = self.pod_info.pod
        for t in other.required_anti_affinity_terms:
            if t.matches(incoming, self.namespace_labels):
                self.existing_anti_affinity.add(t.topology_key, node_labels, multiplier)
        terms = self.pod_info.required_affinity_terms
        if matches_all(terms, other.pod, self.ns_labels_of):
            for t in terms:
                self.affinity.add(t.topology_key, node_labels, multiplier)
        for t in self.pod_info.required_anti_affinity_terms:
            if incoming_term_matches(t, other.pod, self.ns_labels_of):
                self.anti_affinity.add(t.topology_key, node_labels, multiplier)


def compute_pre_filter_state(pod: Pod, snapshot: Snapshot) -> Optional[PreFilterState]:
    """kube's PreFilter; None means Skip (no existing anti-affinity matches the pod and the pod
    has no required affinity or anti-affinity terms)."""
    pi = PodInfo(pod)
    req_affinity, req_anti = pi.required_affinity_terms, pi.required_anti_affinity_terms
    anti_nodes = snapshot.any_pods_with_required_anti_affinity()
    if not anti_nodes and not req_affinity and not req_anti:
        return None  # nothing could be counted: the common case, kept free
    cols = snapshot.cols
    ns_labels_of = snapshot.namespace_labels_of
    ns_labels = ns_labels_of(pod.meta.namespace)
    index = pod_index(snapshot, labels=bool(req_affinity or req_anti))
    token = index.token

    # Each group's nodes added at once, from its pods' counts per topology value (Group.totals).
    existing = TopologyCounts(cols)
    if anti_nodes:
        for terms, group in index.by_anti_terms.items():
            for t in terms:
                if t.matches(pod, ns_labels):
                    existing.add_group(t.topology_key, group, token, 1)
    if existing.is_empty() and not req_affinity and not req_anti:
        return None

    affinity = TopologyCounts(cols)
    if req_affinity:
        for group in label_groups_matching_all(index, req_affinity, ns_labels_of):
            for t in req_affinity:
                affinity.add_group(t.topology_key, group, token, 1)
    anti = TopologyCounts(cols)
    for t in req_anti:
        for group in index.by_labels.values():
            if incoming_term_matches(t, group.sample, ns_labels_of):
                anti.add_group(t.topology_key, group, token, 1)
    return PreFilterState(pi, ns_labels, ns_labels_of, cols, existing, affinity, anti,
                          matches_all(req_affinity, pod, ns_labels_of))


# ---- Filter, one node (kube's shape) -----------------------------------------------------------

def satisfy_existing_pods_anti_affinity(s: PreFilterState, node_labels: Mapping[str, str]) -> bool:
    counts = s.existing_anti_affinity
    if not counts.is_empty():
        for key in counts.keys():
            if counts.for_node(key, node_labels) > 0:
                return False
    return True


def satisfy_pod_anti_affinity(s: PreFilterState, node_labels: Mapping[str, str]) -> bool:
    counts = s.anti_affinity
    if not counts.is_empty():
        for t in s.pod_info.required_anti_affinity_terms:
            if counts.for_node(t.topology_key, node_labels) > 0:
                return False
    return True


def satisfy_pod_affinity(s: PreFilterState, node_labels: Mapping[str, str]) -> bool:
    pods_exist = True
    for t in s.pod_info.required_affinity_terms:
        value = node_labels.get(t.topology_key)
        if value is None:
            return False  # every topology label must exist on the node
        if s.affinity.get(t.topology_key, value) <= 0:
            pods_exist = False
    if not pods_exist:
        # The first pod of a collection with affinity to itself: nothing matches anywhere
        # yet but the pod matches its own terms.
        return s.affinity.is_empty() and s.matches_own_affinity
    return True


def filter_node(s: PreFilterState, node_labels: Mapping[str, str]) -> Optional[Status]:
    if not satisfy_pod_affinity(s, node_labels):
        return Status.unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH)
    if not satisfy_pod_anti_affinity(s, node_labels):
        return Status.unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH)
    if not satisfy_existing_pods_anti_affinity(s, node_labels):
        return Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)
    return None


# ---- Filter, many nodes ------------------------------------------------------------------------

def filter_rows(s: PreFilterState, rows: np.ndarray) -> FilterVerdicts:
    """The same verdicts as filter_node for the snapshot nodes `rows`, in bulk."""
    n = len(rows)
    cols = s.cols
    failed = np.full(n, -1, dtype=np.int32)
    statuses: list[Status] = []

    def reject(bad: np.ndarray, status: Status) -> None:
        bad &= failed < 0  # the first failing check decides, as in kube's Filter
        if bad.any():
            failed[bad] = len(statuses)
            statuses.append(status)

    terms = s.pod_info.required_affinity_terms
    if terms:
        all_keys = np.ones(n, bool)
        pods_exist = np.ones(n, bool)
        for t in terms:
            codes = cols.label(t.topology_key).codes[rows]
            all_keys &= codes >= 0
            pods_exist &= s.affinity.at_codes(t.topology_key, codes) > 0
        first_pod = s.affinity.is_empty() and s.matches_own_affinity
        ok = all_keys if first_pod else all_keys & pods_exist
        reject(~ok, Status.unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH))

    if not s.anti_affinity.is_empty():
        bad = np.zeros(n, bool)
        for t in s.pod_info.required_anti_affinity_terms:
            bad |= s.anti_affinity.at_codes(t.topology_key, cols.label(t.topology_key).codes[rows]) > 0
        reject(bad, Status.unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH))

    if not s.existing_anti_affinity.is_empty():
        bad = np.zeros(n, bool)
        for key in s.existing_anti_affinity.keys():
            bad |= s.existing_anti_affinity.at_codes(key, cols.label(key).codes[rows]) > 0
        reject(bad, Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH))

    return FilterVerdicts(failed, statuses)
