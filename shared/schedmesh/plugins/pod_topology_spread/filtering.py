"""PreFilter / Filter of PodTopologySpread (kube's podtopologyspread/filtering.go, v1.35).

Per DoNotSchedule constraint, PreFilter counts the matching pods of every eligible domain
(TpValueToMatchNum) and keeps the two "critical paths" (domains with the fewest matches).
Filter then checks, per node, `matchNum + selfMatch - globalMin <= maxSkew`.

Domains are kept as arrays indexed by the snapshot's label codes of the topology key
(`DomainCounts`), so the bulk Filter is a gather per constraint. `present` marks the domains that
are map keys in kube (a domain with at least one eligible node, or one AddPod/RemovePod touched).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from schedmesh.api.types import Node, Pod
from schedmesh.plugins.pod_topology_spread.common import (NodeInclusion, SpreadConstraint,
                                                          node_labels_match_constraints, selector_matches)

PRE_FILTER_STATE_KEY = "PreFilterPodTopologySpread"
ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

MAX_INT32 = 2**31 - 1
UNKNOWN_DOMAIN = -2  # a node value the state has never seen (only with a foreign snapshot)


class CriticalPaths:
    """criticalPaths: [0] always holds the minimum match number; [1] is >= [0] but not
    necessarily the second minimum after incremental updates (exactly kube's update rule)."""

    __slots__ = ("values", "nums")

    def __init__(self, values: Optional[list[str]] = None, nums: Optional[list[int]] = None) -> None:
        self.values = values if values is not None else ["", ""]
        self.nums = nums if nums is not None else [MAX_INT32, MAX_INT32]

    def update(self, tp_val: str, num: int) -> None:
        v, n = self.values, self.nums
        i = 0 if tp_val == v[0] else 1 if tp_val == v[1] else -1
        if i >= 0:
            n[i] = num
            if n[0] > n[1]:
                v[0], v[1] = v[1], v[0]
                n[0], n[1] = n[1], n[0]
        elif num < n[0]:
            v[1], n[1] = v[0], n[0]
            v[0], n[0] = tp_val, num
        elif num < n[1]:
            v[1], n[1] = tp_val, num

    def clone(self) -> "CriticalPaths":
        return CriticalPaths(list(self.values), list(self.nums))

    def as_tuples(self) -> list[tuple[str, int]]:
        return [(self.values[0], self.nums[0]), (self.values[1], self.nums[1])]

    def __repr__(self) -> str:
        return f"CriticalPaths({self.as_tuples()})"


def initial_critical_paths(values: Sequence[str], counts: np.ndarray, present: np.ndarray) -> CriticalPaths:
    """What feeding every present domain, in code order, to `update` yields, in O(1) Python:
    [0] is the first domain with the minimum; [1] the second domain with the minimum if there is
    one, else the first domain with the next larger count. (kube iterates a Go map, i.e. in
    random order; any order gives the same numbers.) A domain named "" collides with the paths'
    empty initial names, so that rare case runs the literal loop."""
    idx = np.flatnonzero(present)
    paths = CriticalPaths()
    if len(idx) == 0:
        return paths
    if "" in values and present[values.index("")]:
        for i in idx.tolist():
            paths.update(values[i], int(counts[i]))
        return paths
    c = counts[idx]
    lo = c.min()
    at_min = np.flatnonzero(c == lo)
    paths.values[0], paths.nums[0] = values[idx[at_min[0]]], int(lo)
    if len(at_min) > 1:
        paths.values[1], paths.nums[1] = values[idx[at_min[1]]], int(lo)
    elif len(idx) > 1:
        higher = c > lo
        second = c[higher].min()
        j = np.flatnonzero(higher & (c == second))[0]
        paths.values[1], paths.nums[1] = values[idx[j]], int(second)
    return paths


class DomainCounts:
    """TpValueToMatchNum of one constraint, indexed by label code of its topology key."""

    __slots__ = ("col", "values", "code_of", "counts", "present", "num_present")

    def __init__(self, col, counts: np.ndarray, present: np.ndarray) -> None:
        self.col = col  # the snapshot LabelColumn the codes come from
        self.values: list[str] = col.values
        self.code_of: dict[str, int] = col.code_of
        self.counts = counts
        self.present = present
        self.num_present = int(present.sum())

    def get(self, value: str) -> int:
        code = self.code_of.get(value)
        return 0 if code is None else int(self.counts[code])

    def add(self, value: str, delta: int) -> int:
        """TpValueToMatchNum[i][value] += delta (creating the entry), returns the new count."""
        code = self.code_of.get(value)
        if code is None:  # a value no snapshot node had: grow (copy-on-write of the shared maps)
            code = len(self.values)
            self.values = self.values + [value]
            self.code_of = dict(self.code_of)
            self.code_of[value] = code
            self.counts = np.append(self.counts, 0)
            self.present = np.append(self.present, False)
        self.counts[code] += delta
        if not self.present[code]:
            self.present[code] = True
            self.num_present += 1
        return int(self.counts[code])

    def codes_for(self, col) -> np.ndarray:
        """This state's codes for the nodes of `col` (-1: no label, UNKNOWN_DOMAIN: unseen value)."""
        if col is self.col:
            return col.codes
        table = np.array([self.code_of.get(v, UNKNOWN_DOMAIN) for v in col.values] + [-1], dtype=np.int64)
        return table[col.codes]

    def lookup(self, codes: np.ndarray) -> np.ndarray:
        """Match numbers for codes >= 0 or UNKNOWN_DOMAIN (which reads 0)."""
        safe = np.where(codes >= 0, codes, 0)
        out = self.counts[safe] if len(self.counts) else np.zeros(len(codes), np.int64)
        return np.where(codes >= 0, out, 0)

    def as_dict(self) -> dict[str, int]:
        return {self.values[i]: int(self.counts[i]) for i in np.flatnonzero(self.present).tolist()}

    def clone(self) -> "DomainCounts":
        c = DomainCounts.__new__(DomainCounts)
        c.col, c.values, c.code_of = self.col, self.values, self.code_of
        c.counts, c.present, c.num_present = self.counts.copy(), self.present.copy(), self.num_present
        return c


@dataclass
class PreFilterState:
    """preFilterState: constraints (shared by clones), per constraint its domains and paths."""

    constraints: list[SpreadConstraint]
    domains: list[DomainCounts]
    paths: list[CriticalPaths]
    inclusion: Optional[NodeInclusion] = None  # the incoming pod's, reused by AddPod/RemovePod

    def min_match_num(self, i: int) -> int:
        """Global minimum for the skew, 0 while fewer domains than minDomains are eligible."""
        if self.domains[i].num_present < self.constraints[i].min_domains:
            return 0
        return self.paths[i].nums[0]

    def clone(self) -> "PreFilterState":
        return PreFilterState(self.constraints, [d.clone() for d in self.domains],
                              [p.clone() for p in self.paths], self.inclusion)

    def update_with_pod(self, updated_pod: Pod, preemptor: Pod, node: Optional[Node], delta: int) -> None:
        """updateWithPod: AddPod (+1) / RemovePod (-1) of `updated_pod` on `node`. Terminating
        pods are not skipped here, as in kube."""
        if updated_pod.meta.namespace != preemptor.meta.namespace or node is None:
            return
        labels = node.meta.labels
        if not node_labels_match_constraints(labels, self.constraints):
            return
        inclusion = self.inclusion
        if inclusion is None or inclusion.pod is not preemptor:
            inclusion = NodeInclusion(preemptor)
        pod_labels = updated_pod.meta.labels
        for i, c in enumerate(self.constraints):
            if not selector_matches(c.selector, pod_labels):
                continue
            if not inclusion.matches(c, node):
                continue
            v = labels[c.topology_key]
            self.paths[i].update(v, self.domains[i].add(v, delta))


def compute_pre_filter_state(constraints: list[SpreadConstraint], pod: Pod, snapshot, index) -> PreFilterState:
    """calPreFilterState over every node of the snapshot, as arrays."""
    cols = snapshot.cols
    inclusion = NodeInclusion(pod)
    # The nodes with every constraint's key; None when that is every node (most clusters).
    has_all: Optional[np.ndarray] = None
    if not all(cols.label(c.topology_key).on_every_node() for c in constraints):
        has_all = np.ones(cols.n, dtype=bool)
        for c in constraints:
            has_all &= cols.label(c.topology_key).present()
    domains, paths = [], []
    counts_by_selector: dict = {}
    for c in constraints:
        col = cols.label(c.topology_key)
        eligible = has_all
        policy = inclusion.mask(c, cols)
        if policy is not None:
            eligible = policy if eligible is None else eligible & policy
        key = c.selector
        node_counts = counts_by_selector.get(key)
        if node_counts is None:
            node_counts = counts_by_selector[key] = index.node_counts(pod.meta.namespace, c.selector)
        ndom = len(col.values)
        if eligible is None:
            # Every node: each value of the column is some node's, so every domain is present.
            codes, weights = col.codes, node_counts
            present = np.ones(ndom, bool)
        else:
            codes, weights = col.codes[eligible], node_counts[eligible]
            present = np.bincount(codes, minlength=ndom)[:ndom] > 0 if len(codes) else np.zeros(ndom, bool)
        # Float weights are exact for any realistic pod count (< 2**53).
        counts = (np.bincount(codes, weights=weights, minlength=ndom)[:ndom].astype(np.int64)
                  if len(codes) else np.zeros(ndom, np.int64))
        d = DomainCounts(col, counts, present)
        domains.append(d)
        paths.append(initial_critical_paths(d.values, counts, present))
    return PreFilterState(constraints, domains, paths, inclusion)


def filter_node(s: PreFilterState, pod: Pod, node: Node):
    """Filter for one node: None (fits) or the reason and whether it is unresolvable."""
    labels = node.meta.labels
    pod_labels = pod.meta.labels
    for i, c in enumerate(s.constraints):
        tp_val = labels.get(c.topology_key)
        if tp_val is None:
            return ERR_REASON_NODE_LABEL_NOT_MATCH, True
        self_match = 1 if selector_matches(c.selector, pod_labels) else 0
        if s.domains[i].get(tp_val) + self_match - s.min_match_num(i) > c.max_skew:
            return ERR_REASON_CONSTRAINTS_NOT_MATCH, False
    return None


def filter_rows(s: PreFilterState, pod: Pod, cols, candidates: np.ndarray) -> np.ndarray:
    """Bulk Filter: int8 per candidate, 0 fits, 1 missing topology label, 2 skew too large
    (the first constraint that fails decides, as in the per-node loop)."""
    out = np.zeros(len(candidates), np.int8)
    pending = np.ones(len(candidates), dtype=bool)
    pod_labels = pod.meta.labels
    for i, c in enumerate(s.constraints):
        d = s.domains[i]
        codes = d.codes_for(cols.label(c.topology_key))[candidates]
        missing = pending & (codes == -1)
        out[missing] = 1
        pending &= ~missing
        self_match = 1 if selector_matches(c.selector, pod_labels) else 0
        skew = d.lookup(codes) + (self_match - s.min_match_num(i))
        too_skewed = pending & (skew > c.max_skew)
        out[too_skewed] = 2
        pending &= ~too_skewed
    return out
