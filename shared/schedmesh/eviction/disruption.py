"""A PodDisruptionBudget's status as kube-controller-manager's disruption controller computes it
(pkg/controller/disruption/disruption.go, v1.35: trySync, getExpectedPodCount,
buildDisruptedPodMap, countHealthyPods, updatePdbStatus).

* Pods: those in the PDB's namespace its selector matches. policy/v1: a nil selector selects
  nothing, an empty one every pod of the namespace; a selector that does not convert (In /
  NotIn without values, ...) fails the sync, and kube's failSafe then only sets
  disruptionsAllowed to 0 (`sync_error` says why).
* expectedPods: for an integer minAvailable, the number of selected pods (as kube). For a
  percentage minAvailable or any maxUnavailable kube sums the scale of the pods' controllers;
  we have no controllers' scale, so `expected_count` may pass it in, and without it the number
  of selected pods is used. (kube counts unmanaged pods as 0 there; using the pods is what
  kube's own event tells users to expect from an integer minAvailable instead.)
* desiredHealthy: minAvailable as given, or scaled from its percentage rounding up; for
  maxUnavailable, expectedPods minus maxUnavailable (percentages round up), never below 0.
* currentHealthy: selected pods that are Ready, not terminating, and not in disruptedPods
  within DeletionTimeout (2 minutes) of their eviction.
* disruptedPods keeps only entries for selected, non-terminating pods younger than
  DeletionTimeout; `recheck_at` is when the oldest kept entry expires (kube requeues then).
* disruptionsAllowed = currentHealthy - desiredHealthy, 0 when negative or expectedPods is 0.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from schedmesh.api.types import Pod, PodDisruptionBudget
from schedmesh.preemption.pdb import pdb_selector

# A pod in disruptedPods is assumed about to go for this long (disruption.DeletionTimeout).
DELETION_TIMEOUT = 120.0

POD_READY = "Ready"


def is_pod_ready(pod: Pod) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    return any(c.type == POD_READY and c.status == "True" for c in pod.conditions)


def is_terminating(pod: Pod) -> bool:
    return pod.meta.deletion_timestamp is not None


@dataclass(frozen=True)
class DisruptionBudgetStatus:
    """policy/v1 PodDisruptionBudgetStatus, plus what the controller would do next."""

    expected_pods: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    disruptions_allowed: int = 0
    disrupted_pods: Mapping[str, float] = field(default_factory=dict)
    recheck_at: Optional[float] = None  # when a disruptedPods entry expires and the PDB must be synced again
    sync_error: str = ""  # set when the sync failed and only disruptionsAllowed was zeroed

    @staticmethod
    def of(pdb: PodDisruptionBudget) -> "DisruptionBudgetStatus":
        """The status the PodDisruptionBudget object carries."""
        return DisruptionBudgetStatus(expected_pods=pdb.expected_pods, current_healthy=pdb.current_healthy,
                                      desired_healthy=pdb.desired_healthy,
                                      disruptions_allowed=pdb.disruptions_allowed,
                                      disrupted_pods=dict(pdb.disrupted_pods))


def with_status(pdb: PodDisruptionBudget, status: DisruptionBudgetStatus) -> PodDisruptionBudget:
    """A copy of the PDB carrying `status`."""
    return dataclasses.replace(pdb, disruptions_allowed=status.disruptions_allowed,
                               disrupted_pods=dict(status.disrupted_pods), expected_pods=status.expected_pods,
                               current_healthy=status.current_healthy, desired_healthy=status.desired_healthy)


class IntOrPercentError(ValueError):
    pass


def scaled_value(value: str, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: "5" is 5, "30%" is 30% of total, rounded up or down."""
    if value.endswith("%"):
        digits = value[:-1]
        if not digits.lstrip("-").isdigit():
            raise IntOrPercentError(f"invalid value for IntOrString: invalid value {value!r}")
        percent = int(digits)
        return math.ceil(percent * total / 100) if round_up else math.floor(percent * total / 100)
    try:
        return int(value)
    except ValueError:
        raise IntOrPercentError("invalid value for IntOrString: invalid type: string is not a percentage") from None


def selected_pods(pdb: PodDisruptionBudget, pods: Iterable[Pod]) -> list[Pod]:
    """The pods the disruption controller counts for this PDB (nil selects none, empty all).
    Raises ValueError for a selector that does not convert."""
    sel = pdb.selector
    if sel is None:
        return []
    in_namespace = [p for p in pods if p.meta.namespace == pdb.meta.namespace]
    if sel.is_empty():
        return in_namespace
    if pdb_selector(pdb) is None:
        raise ValueError(f"invalid label selector {sel}")
    return [p for p in in_namespace if sel.matches(p.meta.labels)]


def expected_and_desired(pdb: PodDisruptionBudget, selected: int,
                         expected_count: Optional[int] = None) -> tuple[int, int]:
    """getExpectedPodCount: (expectedPods, desiredHealthy). `expected_count` stands in for the sum
    of the controllers' scale where kube would use it."""
    scale = selected if expected_count is None else expected_count
    if pdb.max_unavailable is not None:
        max_unavailable = scaled_value(pdb.max_unavailable, scale, True)
        return scale, max(0, scale - max_unavailable)
    if pdb.min_available is not None:
        if not pdb.min_available.endswith("%"):
            return selected, scaled_value(pdb.min_available, selected, True)
        return scale, scaled_value(pdb.min_available, scale, True)
    return 0, 0


def build_disrupted_pod_map(pdb: PodDisruptionBudget, selected: Iterable[Pod],
                            now: float) -> tuple[dict[str, float], Optional[float]]:
    """buildDisruptedPodMap: the entries still pending, and when the earliest of them expires."""
    result: dict[str, float] = {}
    recheck: Optional[float] = None
    for pod in selected:
        if is_terminating(pod):
            continue
        at = pdb.disrupted_pods.get(pod.meta.name)
        if at is None:
            continue
        expires = at + DELETION_TIMEOUT
        if expires < now:  # expected to be gone by now but it was not: stop discounting it
            continue
        result[pod.meta.name] = at
        if recheck is None or expires < recheck:
            recheck = expires
    return result, recheck


def count_healthy_pods(selected: Iterable[Pod], disrupted: Mapping[str, float], now: float) -> int:
    """countHealthyPods: Ready pods that are neither terminating nor just evicted."""
    healthy = 0
    for pod in selected:
        if is_terminating(pod):
            continue
        at = disrupted.get(pod.meta.name)
        if at is not None and at + DELETION_TIMEOUT > now:
            continue
        if is_pod_ready(pod):
            healthy += 1
    return healthy


def disruption_status(pdb: PodDisruptionBudget, pods: Iterable[Pod], now: float,
                      expected_count: Optional[int] = None) -> DisruptionBudgetStatus:
    """The status the disruption controller would write for `pdb`, given every pod it can see
    (other namespaces are ignored) at time `now` (seconds since the epoch)."""
    try:
        selected = selected_pods(pdb, pods)
        expected, desired = expected_and_desired(pdb, len(selected), expected_count)
    except ValueError as e:
        # failSafe: keep the old status, forbid disruptions.
        return DisruptionBudgetStatus(disruptions_allowed=0, disrupted_pods=dict(pdb.disrupted_pods),
                                      sync_error=str(e))
    disrupted, recheck = build_disrupted_pod_map(pdb, selected, now)
    healthy = count_healthy_pods(selected, disrupted, now)
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    return DisruptionBudgetStatus(expected_pods=expected, current_healthy=healthy, desired_healthy=desired,
                                  disruptions_allowed=allowed, disrupted_pods=disrupted, recheck_at=recheck)
