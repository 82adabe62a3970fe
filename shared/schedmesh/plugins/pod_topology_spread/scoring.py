"""PreScore / Score / NormalizeScore of PodTopologySpread (kube's podtopologyspread/scoring.go, v1.35).

Per ScheduleAnyway constraint a node scores `count * log(size + 2) + (maxSkew - 1)`, summed in
float64 over the constraints whose key the node has, rounded half away from zero; count is the
matching pods of the node's domain (for kubernetes.io/hostname: of the node itself), size the
number of domains among the filtered nodes (for hostname: the filtered, not ignored nodes).
NormalizeScore inverts: fewer matching pods score higher.

Domains are "buckets" over the snapshot's label codes of the key. kube reads a missing label as
the value "", so nodes without the key share the bucket of the value "" (which matters only with
system defaulting, where nodes need not carry every key).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.plugins.helper.gomath import go_log, round_half_away, round_half_away_arr
from schedmesh.plugins.pod_topology_spread.common import (LABEL_HOSTNAME, NodeInclusion, SpreadConstraint,
                                                          count_pods_match_selector)

PRE_SCORE_STATE_KEY = "PreScorePodTopologySpread"
MAX_NODE_SCORE = 100
MAX_INT64 = 2**63 - 1

def topology_normalizing_weight(size: int) -> float:
    return go_log(float(size + 2))


def score_for_count(cnt: int, max_skew: int, weight: float) -> float:
    return float(cnt) * weight + float(max_skew - 1)


@dataclass
class PreScoreState:
    """preScoreState, with its maps as arrays over snapshot rows / label codes."""

    constraints: list[SpreadConstraint]
    namespace: str
    weights: list[float]
    ignored_rows: np.ndarray  # bool per snapshot row: filtered node missing a topology key
    ignored_names: frozenset[str]
    cols: list  # LabelColumn per constraint
    buckets: list[Optional[np.ndarray]]  # bucket id per snapshot row (None for hostname)
    bucket_counts: list[Optional[np.ndarray]]  # matching pods per bucket (None for hostname)
    node_counts: list[np.ndarray]  # matching pods per snapshot row
    nodes: np.ndarray  # the rows PreScore was given
    score_order: Optional[np.ndarray] = None  # rows of the last bulk Score: NormalizeScore's order

    def __post_init__(self) -> None:
        if self.score_order is None:
            self.score_order = self.nodes

    def clone(self) -> "PreScoreState":
        return self  # kube does not copy it either

    def bucket_of_value(self, i: int, value: str) -> Optional[int]:
        col = self.cols[i]
        code = col.code_of.get(value)
        if code is None and value == "":
            return len(col.values)  # the bucket of nodes without the label
        return code


def compute_pre_score_state(constraints: list[SpreadConstraint], pod: Pod, snapshot, nodes: np.ndarray,
                            require_all_topologies: bool, index) -> PreScoreState:
    """initPreScoreState + PreScore's count over all nodes."""
    cols = snapshot.cols
    n = cols.n
    nodes = np.asarray(nodes, dtype=np.int64)
    inclusion = NodeInclusion(pod)
    has_all = np.ones(n, dtype=bool)
    for c in constraints:
        has_all &= cols.label(c.topology_key).present()
    ignored_rows = np.zeros(n, dtype=bool)
    if require_all_topologies:
        ignored_rows[nodes] = ~has_all[nodes]
    kept = nodes[~ignored_rows[nodes]]
    counted = has_all if require_all_topologies else np.ones(n, dtype=bool)

    weights, col_list, buckets, bucket_counts, node_counts = [], [], [], [], []
    counts_by_selector: dict = {}
    for c in constraints:
        col = cols.label(c.topology_key)
        col_list.append(col)
        nc = counts_by_selector.get(c.selector)
        if nc is None:
            nc = counts_by_selector[c.selector] = index.node_counts(pod.meta.namespace, c.selector)
        node_counts.append(nc)
        if c.topology_key == LABEL_HOSTNAME:
            # Per-node counts are read at Score time; the size is the number of scored nodes.
            buckets.append(None)
            bucket_counts.append(None)
            weights.append(topology_normalizing_weight(len(nodes) - int(ignored_rows[nodes].sum())))
            continue
        k = len(col.values)
        empty = col.code_of.get("", k)
        bucket = np.where(col.codes >= 0, col.codes, empty).astype(np.int64)
        exists = np.zeros(k + 1, dtype=bool)
        exists[bucket[kept]] = True
        eligible = counted
        policy = inclusion.mask(c, cols)
        if policy is not None:
            eligible = eligible & policy
        sums = np.bincount(bucket[eligible], weights=nc[eligible], minlength=k + 1)[:k + 1]
        # Buckets no filtered node is in have no entry in kube; nothing reads them.
        bucket_counts.append(np.where(exists, sums, 0).astype(np.int64))
        buckets.append(bucket)
        weights.append(topology_normalizing_weight(int(exists.sum())))
    names = cols.names
    ignored_names = frozenset(names[r] for r in np.flatnonzero(ignored_rows).tolist())
    return PreScoreState(constraints, pod.meta.namespace, weights, ignored_rows, ignored_names, col_list,
                         buckets, bucket_counts, node_counts, nodes)


def score_rows(s: PreScoreState, nodes: np.ndarray) -> np.ndarray:
    """Bulk Score: raw int64 scores for snapshot rows `nodes`."""
    nodes = np.asarray(nodes, dtype=np.int64)
    total = np.zeros(len(nodes), dtype=np.float64)
    for i, c in enumerate(s.constraints):
        codes = s.cols[i].codes[nodes]
        if c.topology_key == LABEL_HOSTNAME:
            cnt = s.node_counts[i][nodes]
        else:
            cnt = s.bucket_counts[i][s.buckets[i][nodes]]
        term = cnt.astype(np.float64) * s.weights[i] + float(c.max_skew - 1)
        # Adding 0.0 for nodes without the key leaves their sum bit-for-bit unchanged.
        total = total + np.where(codes >= 0, term, 0.0)
    out = round_half_away_arr(total).astype(np.int64)
    out[s.ignored_rows[nodes]] = 0
    return out


def score_node(s: PreScoreState, node_info) -> int:
    """Score for one node, kube's shape (the hostname count walks the node's own pods)."""
    node = node_info.node
    if node.meta.name in s.ignored_names:
        return 0
    labels = node.meta.labels
    total = 0.0
    for i, c in enumerate(s.constraints):
        value = labels.get(c.topology_key)
        if value is None:
            continue
        if c.topology_key == LABEL_HOSTNAME:
            cnt = count_pods_match_selector(node_info.pods, c.selector, s.namespace)
        else:
            b = s.bucket_of_value(i, value)
            cnt = 0 if b is None else int(s.bucket_counts[i][b])
        total += score_for_count(cnt, c.max_skew, s.weights[i])
    return int(round_half_away(total))


def normalize(scores: np.ndarray, ignored: np.ndarray) -> None:
    """NormalizeScore in place: ignored nodes get 0, the others MaxNodeScore*(max+min-s)/max
    (every node MaxNodeScore when the maximum is 0)."""
    valid = ~ignored
    if valid.any():
        vals = scores[valid]
        lo = int(vals.min())
        hi = max(0, int(vals.max()))
    else:
        lo, hi = MAX_INT64, 0
    if hi == 0:
        scores[valid] = MAX_NODE_SCORE
    else:
        # All operands are non-negative, so floor division is Go's truncation.
        scores[valid] = MAX_NODE_SCORE * (hi + lo - scores[valid]) // hi
    scores[ignored] = 0
