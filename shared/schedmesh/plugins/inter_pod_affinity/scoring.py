"""InterPodAffinity PreScore, Score and NormalizeScore (kube's scoring.go)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.cache.node_info import PodInfo
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import MAX_NODE_SCORE
from schedmesh.plugins.inter_pod_affinity.pod_index import pod_index
from schedmesh.plugins.inter_pod_affinity.terms import incoming_term_matches
from schedmesh.plugins.inter_pod_affinity.topology import TopologyCounts

PRE_SCORE_STATE_KEY = "PreScoreInterPodAffinity"


@dataclass(slots=True)
class PreScoreState:
    """(key, value) -> summed weights (kube's scoreMap); a node scores the sum over its labels."""

    topology_score: TopologyCounts

    def clone(self) -> "PreScoreState":
        return self  # read-only after PreScore, as in kube


def has_preferred_terms(pod: Pod) -> bool:
    a = pod.affinity
    return a is not None and (
        (a.pod_affinity is not None and len(a.pod_affinity.preferred) > 0)
        or (a.pod_anti_affinity is not None and len(a.pod_anti_affinity.preferred) > 0))


def compute_pre_score_state(pod: Pod, snapshot: Snapshot, hard_pod_affinity_weight: int,
                            ignore_preferred_terms_of_existing_pods: bool) -> Optional[PreScoreState]:
    """kube's PreScore; None means Skip (nothing matched on a node with the term's topology key)."""
    has_constraints = has_preferred_terms(pod)
    if ignore_preferred_terms_of_existing_pods and not has_constraints:
        return None
    if not has_constraints and not snapshot.any_pods_with_affinity():
        return None  # no term anywhere: the common case, kept free
    pi = PodInfo(pod)
    ns_labels_of = snapshot.namespace_labels_of
    ns_labels = ns_labels_of(pod.meta.namespace)
    index = pod_index(snapshot, labels=has_constraints)
    token = index.token
    scores = TopologyCounts(snapshot.cols)
    touched = False  # kube skips when no node produced an entry, even a zero-sum one

    # The incoming pod's preferred terms against every existing pod. Each matching group's nodes
    # are added at once (TopologyCounts.add_group): adding a 5,000-node group row by row each
    # cycle was a tenth of an affinity workload's cycle.
    if has_constraints:
        for weighted, sign in ([(w, 1) for w in pi.preferred_affinity_terms]
                               + [(w, -1) for w in pi.preferred_anti_affinity_terms]):
            for g in index.by_labels.values():
                if incoming_term_matches(weighted.term, g.sample, ns_labels_of):
                    touched |= scores.add_group(weighted.term.topology_key, g, token, weighted.weight * sign)

    # Existing pods' terms against the incoming pod (groups are empty without such pods).
    for (required, preferred, preferred_anti), group in index.by_affinity_terms.items():
        contributions: list[tuple[str, int]] = []
        if hard_pod_affinity_weight > 0:
            contributions += [(t.topology_key, hard_pod_affinity_weight) for t in required
                              if t.matches(pod, ns_labels)]
        contributions += [(w.term.topology_key, w.weight) for w in preferred if w.term.matches(pod, ns_labels)]
        contributions += [(w.term.topology_key, -w.weight) for w in preferred_anti if w.term.matches(pod, ns_labels)]
        for key, amount in contributions:
            touched |= scores.add_group(key, group, token, amount)

    return PreScoreState(scores) if touched else None


def score_node(s: PreScoreState, node_labels: Mapping[str, str]) -> int:
    ts = s.topology_score
    return sum(ts.for_node(key, node_labels) for key in ts.keys())


def score_rows(s: PreScoreState, rows: np.ndarray) -> np.ndarray:
    ts = s.topology_score
    cols = ts.cols
    out = np.zeros(len(rows), np.int64)
    for key in ts.keys():
        out += ts.at_codes(key, cols.label(key).codes[rows])
    return out


def normalize(scores: np.ndarray) -> None:
    """In place: 100 * (s - min) / (max - min) in float64, truncated; all 0 when max == min."""
    if len(scores) == 0:
        return
    lo, hi = int(scores.min()), int(scores.max())
    diff = hi - lo
    if diff > 0:
        scores[:] = (float(MAX_NODE_SCORE) * ((scores - lo).astype(np.float64) / float(diff))).astype(np.int64)
    else:
        scores[:] = 0
