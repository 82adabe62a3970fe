"""The StatefulSet controller's decisions (kube v1.35, pkg/controller/statefulset,
stateful_set_control.go: updateStatefulSet's processReplica and processCondemned).

Each ordinal in [0, replicas) has one pod, "<statefulset>-<ordinal>". A missing ordinal is
created with that name again once the old pod is gone (a pod being deleted still holds its
name); an ended pod (Failed or Succeeded) is deleted, to be made again at a later sync. Pods of
higher ordinals (a scale-down) are deleted, highest first. podManagementPolicy OrderedReady
(the default) does one step at a time, in ordinal order: nothing is created while a lower
ordinal is missing, being deleted, or not Running and Ready, and a scale-down deletes one pod at
a time, each only once every pod below it is Running and Ready. Parallel does every step at once.

Not modelled: rolling updates (a template change updates no pod; they are made from the new
template when next created), ControllerRevisions, spec.ordinals.start (ordinals start at 0),
minReadySeconds (a pod is available once Running and Ready), volumeClaimTemplates (volumes are
not modelled), the pod-name and pod-index labels and the hostname kube gives each pod.
"""
from __future__ import annotations

from typing import Optional, Sequence

from schedmesh.api.types import PARALLEL, Pod, WorkloadSelector
from schedmesh.eviction.disruption import is_pod_ready
from schedmesh.workloads.replicas import WorkloadPlan, is_terminal, is_terminating


def ordinal(w: WorkloadSelector, pod: Pod) -> int:
    """getOrdinal: the number after "<statefulset>-", -1 for a name not of that form."""
    parent, _, number = pod.name.rpartition("-")
    return int(number) if parent == w.name and number.isdigit() else -1


def running_and_ready(pod: Pod) -> bool:
    return pod.phase == "Running" and is_pod_ready(pod)


def healthy(pod: Optional[Pod]) -> bool:
    """isHealthy: Running and Ready and not being deleted (a missing pod is not)."""
    return pod is not None and running_and_ready(pod) and not is_terminating(pod)


def _preferred(a: Pod, b: Pod) -> Pod:
    """Of two pods with one ordinal (an ended one and its successor), the live one."""
    return b if (is_terminal(a) or is_terminating(a)) and not (is_terminal(b) or is_terminating(b)) else a


def stateful_set_plan(w: WorkloadSelector, pods: Sequence[Pod]) -> WorkloadPlan:
    """One sync of a StatefulSet given its own pods (ended and terminating ones included)."""
    plan = WorkloadPlan()
    replicas: dict[int, Pod] = {}
    condemned: list[Pod] = []
    for p in pods:
        o = ordinal(w, p)
        if 0 <= o < w.spec.replicas:
            replicas[o] = _preferred(replicas[o], p) if o in replicas else p
        elif o >= w.spec.replicas:
            condemned.append(p)
    condemned.sort(key=lambda p: ordinal(w, p), reverse=True)
    monotonic = w.spec.pod_management_policy != PARALLEL
    first_unhealthy: Optional[Pod] = None
    for o in range(w.spec.replicas):
        if not healthy(replicas.get(o)):
            break
    else:
        first_unhealthy = next((p for p in reversed(condemned) if not healthy(p)), None)
    for o in range(w.spec.replicas):  # processReplica, in ordinal order
        p = replicas.get(o)
        if p is not None and is_terminal(p):
            if not is_terminating(p):
                plan.delete.append((p, f"ended {p.phase}: made again once gone"))
            if monotonic:
                return plan
            continue
        if p is None:
            plan.create.append(o)
            if monotonic:
                return plan
            continue
        if monotonic and (is_terminating(p) or not running_and_ready(p)):
            return plan
    for p in condemned:  # processCondemned, highest ordinal first
        if is_terminating(p):
            if monotonic:
                return plan
            continue
        if monotonic and not running_and_ready(p) and p is not first_unhealthy:
            return plan
        plan.delete.append((p, f"ordinal {ordinal(w, p)} is past the {w.spec.replicas} replicas"))
        if monotonic:
            return plan
    return plan
