"""Preemption candidates and how the best one is picked (framework/preemption/preemption.go
pickOneNodeForPreemption, scheduler/util GetPodStartTime / GetEarliestPodStartTime / MoreImportantPod)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from schedmesh.api.types import Pod
# extenderv1.Victims (pods most important first, num_pdb_violations): one definition, shared
# with the extenders that may rewrite it.
from schedmesh.framework.extender import Victims
# corev1helpers.PodPriority (spec.priority, 0 when unset); one copy, kept by PrioritySort.
from schedmesh.plugins.queue_sort.plugin import pod_priority

# Go's math.MaxInt32 + 1: added to every victim's priority before summing so that a node with
# a few negative-priority victims is not preferred over one with fewer of them.
PRIORITY_OFFSET = 2**31
MIN_INT64 = -(2**63)


@dataclass(slots=True)
class Candidate:
    """A node where the preemptor fits once `victims` are gone."""

    name: str
    victims: Victims


Clock = Callable[[], float]


def pod_start_time(pod: Pod, clock: Clock) -> float:
    """GetPodStartTime: status.startTime, or "now" for a pod that has not started (assumed pods);
    kube reads the clock at every such call."""
    return pod.start_time if pod.start_time is not None else clock()


def more_important_pod(a: Pod, b: Pod, clock: Clock) -> bool:
    """MoreImportantPod: higher priority first; on equal priority the pod that started earlier
    (a's start time is read before b's)."""
    pa, pb = pod_priority(a), pod_priority(b)
    if pa != pb:
        return pa > pb
    ta = pod_start_time(a, clock)
    return ta < pod_start_time(b, clock)


def earliest_pod_start_time(victims: Victims, clock: Clock) -> Optional[float]:
    """GetEarliestPodStartTime: the earliest start time among the highest-priority victims."""
    if not victims.pods:
        return None
    earliest = pod_start_time(victims.pods[0], clock)
    max_priority = pod_priority(victims.pods[0])
    for p in victims.pods:
        prio = pod_priority(p)
        if prio == max_priority:
            t = pod_start_time(p, clock)
            if t < earliest:
                earliest = t
        elif prio > max_priority:
            max_priority = prio
            earliest = pod_start_time(p, clock)
    return earliest


ScoreFunc = Callable[[str], int | float]


def default_score_funcs(nodes_to_victims: Mapping[str, Victims], clock: Clock) -> list[ScoreFunc]:
    """kube's criteria, in order of precedence; each scores higher = better."""

    def fewest_pdb_violations(node: str) -> int:
        return -nodes_to_victims[node].num_pdb_violations

    def lowest_highest_priority(node: str) -> int:
        # Victims are ordered most important first, so pods[0] has the highest priority.
        return -pod_priority(nodes_to_victims[node].pods[0])

    def smallest_priority_sum(node: str) -> int:
        return -sum(pod_priority(p) + PRIORITY_OFFSET for p in nodes_to_victims[node].pods)

    def fewest_victims(node: str) -> int:
        return -len(nodes_to_victims[node].pods)

    def latest_start_time(node: str) -> float:
        t = earliest_pod_start_time(nodes_to_victims[node], clock)
        return MIN_INT64 if t is None else t

    return [fewest_pdb_violations, lowest_highest_priority, smallest_priority_sum, fewest_victims,
            latest_start_time]


def pick_one_node_for_preemption(nodes_to_victims: Mapping[str, Victims],
                                 score_funcs: Optional[Sequence[ScoreFunc]] = None,
                                 now: Optional[float] = None) -> str:
    """pickOneNodeForPreemption: apply the score functions in order, keeping the best-scoring
    nodes, until one is left. kube iterates a Go map here, so its final tie goes to a random
    node; we start from the nodes sorted by name, so that tie goes to the smallest name."""
    if not nodes_to_victims:
        return ""
    if not score_funcs:
        # One reading of "now" for every unstarted victim, so such nodes tie on start time
        # (kube reads the clock per node, in random map order).
        fixed = time.time() if now is None else now
        score_funcs = default_score_funcs(nodes_to_victims, lambda: fixed)
    candidates = sorted(nodes_to_victims)
    for f in score_funcs:
        best: list[str] = []
        best_score: int | float = MIN_INT64
        for node in candidates:
            s = f(node)
            if s > best_score:
                best_score, best = s, []
            if s == best_score:
                best.append(node)
        if len(best) == 1:
            return best[0]
        candidates = best
    return candidates[0]
