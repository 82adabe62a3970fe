"""NoExecute taint-based eviction and the tolerations pods get by default.

The taint eviction controller (pkg/controller/tainteviction/taint_eviction.go, v1.35:
processPodOnNode, getMinTolerationTime, and GetMatchingTolerations from the core v1 helper):
* only the node's NoExecute taints matter; with none, nothing is scheduled (any pending
  deletion is cancelled);
* if some NoExecute taint is tolerated by none of the pod's tolerations, the pod is deleted now;
* otherwise each taint is matched by the first toleration that tolerates it, and the smallest
  tolerationSeconds among those gives the deadline: none set means never, <= 0 means now;
* a deletion already scheduled for the pod keeps its deadline when it was created earlier
  (kube only replaces work created at the same instant).
The deletion uses the pod's own grace period; the pod first gets the DisruptionTarget condition
(reason DeletionByTaintManager) and the Event "Marking for deletion Pod NS/NAME".

`default_tolerations(pod)` adds what pods get without asking:
* DefaultTolerationSeconds admission (plugin/pkg/admission/defaulttolerationseconds):
  node.kubernetes.io/not-ready and node.kubernetes.io/unreachable, Exists, NoExecute, 300 s,
  each unless some toleration already has that key (or an empty key) with effect NoExecute
  (or an empty effect);
* DaemonSet pods (controlled by a DaemonSet) first get the DaemonSet controller's tolerations
  (AddOrUpdateDaemonPodTolerations): not-ready and unreachable NoExecute without
  tolerationSeconds, memory-pressure, disk-pressure, pid-pressure and unschedulable NoSchedule,
  and network-unavailable NoSchedule for host-network pods;
* memory-pressure NoSchedule (Exists) for pods whose QoS class is not BestEffort: kube-apiserver's
  PodTolerationRestriction admission plugin adds it (plugin/pkg/admission/podtolerationrestriction,
  Admit: on create and update, merged after the namespace's default tolerations, skipped when a
  toleration already covers it). That plugin is not in kube-apiserver's default plugin set, so
  `include_memory_pressure` is False by default, as kube's API objects are; the mesh's Apply
  admits with DefaultTolerationSeconds only. (DaemonSet pods get memory-pressure from their
  controller, whatever their QoS.)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, Pod, Taint, Toleration
from schedmesh.eviction.qos import BEST_EFFORT, qos_class
from schedmesh.plugins.taint_toleration.tolerations import (TAINT_NODE_UNSCHEDULABLE, TOLERATION_OP_EXISTS,
                                                            toleration_tolerates_taint, tolerations_tolerate_taint)

TAINT_NODE_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_NODE_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NODE_MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
TAINT_NODE_DISK_PRESSURE = "node.kubernetes.io/disk-pressure"
TAINT_NODE_PID_PRESSURE = "node.kubernetes.io/pid-pressure"
TAINT_NODE_NETWORK_UNAVAILABLE = "node.kubernetes.io/network-unavailable"

# --default-not-ready-toleration-seconds / --default-unreachable-toleration-seconds
DEFAULT_NOT_READY_TOLERATION_SECONDS = 300
DEFAULT_UNREACHABLE_TOLERATION_SECONDS = 300

# What the controller writes on the pod and records as Events.
REASON_DELETION_BY_TAINT_MANAGER = "DeletionByTaintManager"
MESSAGE_DELETION_BY_TAINT_MANAGER = "Taint manager: deleting due to NoExecute taint"
EVENT_REASON_TAINT_MANAGER_EVICTION = "TaintManagerEviction"


def marking_for_deletion_message(pod: Pod) -> str:
    return f"Marking for deletion Pod {pod.key}"


def cancelling_deletion_message(pod: Pod) -> str:
    return f"Cancelling deletion of Pod {pod.key}"


def no_execute_taints(taints: Sequence[Taint]) -> list[Taint]:
    return [t for t in taints if t.effect == NO_EXECUTE]


def matching_tolerations(taints: Sequence[Taint], tolerations: Sequence[Toleration]
                         ) -> tuple[bool, list[Toleration]]:
    """GetMatchingTolerations: (all tolerated, the first toleration matching each taint)."""
    used: list[Toleration] = []
    for taint in taints:
        match = next((t for t in tolerations if toleration_tolerates_taint(t, taint)), None)
        if match is None:
            return False, []
        used.append(match)
    return True, used


def min_toleration_seconds(tolerations: Sequence[Toleration]) -> Optional[int]:
    """getMinTolerationTime in seconds: None for "forever", 0 for an empty list or any value <= 0."""
    if not tolerations:
        return 0
    smallest: Optional[int] = None
    for t in tolerations:
        if t.toleration_seconds is None:
            continue
        if t.toleration_seconds <= 0:
            return 0
        if smallest is None or t.toleration_seconds < smallest:
            smallest = t.toleration_seconds
    return smallest


@dataclass(frozen=True)
class ScheduledDeletion:
    """A pod's pending deletion in the controller's timed queue."""

    created_at: float
    fire_at: float
    untolerated_taint: Optional[Taint] = None  # set when some taint is not tolerated at all

    def due(self, now: float) -> bool:
        return now >= self.fire_at


def schedule_deletion(pod: Pod, taints: Sequence[Taint], now: float,
                      scheduled: Optional[ScheduledDeletion] = None) -> Optional[ScheduledDeletion]:
    """processPodOnNode: the pod's deletion after this node/pod update, or None when it must not
    be deleted (a scheduled one is then cancelled). `taints` may be all of the node's taints;
    `scheduled` is the deletion already pending for the pod, if any."""
    taints = no_execute_taints(taints)
    if not taints:
        return None
    all_tolerated, used = matching_tolerations(taints, pod.tolerations)
    if not all_tolerated:
        untolerated = next(t for t in taints if not tolerations_tolerate_taint(pod.tolerations, t))
        return ScheduledDeletion(now, now, untolerated)
    seconds = min_toleration_seconds(used)
    if seconds is None:
        return None
    fire_at = now + seconds
    if scheduled is not None:
        if scheduled.created_at + seconds < fire_at:
            return scheduled  # earlier work stands, with its own deadline
        return ScheduledDeletion(scheduled.created_at, fire_at)
    return ScheduledDeletion(now, fire_at)


# ---- tolerations added on the way in ---------------------------------------------------------

def _tolerates_key_no_execute(tolerations: Sequence[Toleration], key: str) -> bool:
    return any((t.key == key or not t.key) and (t.effect == NO_EXECUTE or not t.effect) for t in tolerations)


def default_toleration_seconds(tolerations: Sequence[Toleration]) -> list[Toleration]:
    """The DefaultTolerationSeconds admission plugin's result."""
    out = list(tolerations)
    if not _tolerates_key_no_execute(tolerations, TAINT_NODE_NOT_READY):
        out.append(Toleration(key=TAINT_NODE_NOT_READY, operator=TOLERATION_OP_EXISTS, effect=NO_EXECUTE,
                              toleration_seconds=DEFAULT_NOT_READY_TOLERATION_SECONDS))
    if not _tolerates_key_no_execute(tolerations, TAINT_NODE_UNREACHABLE):
        out.append(Toleration(key=TAINT_NODE_UNREACHABLE, operator=TOLERATION_OP_EXISTS, effect=NO_EXECUTE,
                              toleration_seconds=DEFAULT_UNREACHABLE_TOLERATION_SECONDS))
    return out


def _add_or_update(tolerations: list[Toleration], toleration: Toleration) -> None:
    """v1helper.AddOrUpdateTolerationInPodSpec: replace every toleration with the same key,
    operator, value and effect, else append."""
    ident = (toleration.key, toleration.operator, toleration.value, toleration.effect)
    updated = False
    for i, t in enumerate(tolerations):
        if (t.key, t.operator, t.value, t.effect) == ident:
            tolerations[i] = replace(toleration)
            updated = True
    if not updated:
        tolerations.append(replace(toleration))


def is_daemonset_pod(pod: Pod) -> bool:
    return any(ref.controller and ref.kind == "DaemonSet" for ref in pod.meta.owner_references)


def daemonset_tolerations(tolerations: Sequence[Toleration], host_network: bool = False) -> list[Toleration]:
    """The DaemonSet controller's AddOrUpdateDaemonPodTolerations."""
    out = list(tolerations)
    for key in (TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE):
        _add_or_update(out, Toleration(key=key, operator=TOLERATION_OP_EXISTS, effect=NO_EXECUTE))
    keys = [TAINT_NODE_DISK_PRESSURE, TAINT_NODE_MEMORY_PRESSURE, TAINT_NODE_PID_PRESSURE, TAINT_NODE_UNSCHEDULABLE]
    if host_network:
        keys.append(TAINT_NODE_NETWORK_UNAVAILABLE)
    for key in keys:
        _add_or_update(out, Toleration(key=key, operator=TOLERATION_OP_EXISTS, effect=NO_SCHEDULE))
    return out


MEMORY_PRESSURE_TAINT = Taint(TAINT_NODE_MEMORY_PRESSURE, NO_SCHEDULE)


def memory_pressure_toleration(pod: Pod) -> Optional[Toleration]:
    """The memory-pressure toleration PodTolerationRestriction gives a non-BestEffort pod, or None
    (BestEffort, or the pod already tolerates the taint)."""
    if qos_class(pod) == BEST_EFFORT or tolerations_tolerate_taint(pod.tolerations, MEMORY_PRESSURE_TAINT):
        return None
    return Toleration(key=TAINT_NODE_MEMORY_PRESSURE, operator=TOLERATION_OP_EXISTS, effect=NO_SCHEDULE)


def default_tolerations(pod: Pod, include_memory_pressure: bool = False) -> list[Toleration]:
    """The pod's tolerations after the DaemonSet controller (DaemonSet pods only),
    DefaultTolerationSeconds and, with `include_memory_pressure`, PodTolerationRestriction, in
    kube-apiserver's admission order."""
    tolerations = list(pod.tolerations)
    if is_daemonset_pod(pod):
        tolerations = daemonset_tolerations(tolerations, pod.host_network)
    tolerations = default_toleration_seconds(tolerations)
    if include_memory_pressure:
        extra = memory_pressure_toleration(replace(pod, tolerations=tolerations))
        if extra is not None:
            tolerations.append(extra)
    return tolerations
