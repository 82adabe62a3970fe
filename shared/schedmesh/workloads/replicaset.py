"""The ReplicaSet controller's decisions (kube v1.35, pkg/controller/replicaset: manageReplicas),
which the ReplicationController controller shares (pkg/controller/replication wraps it): a
Deployment's pods are its ReplicaSet's.

Its active pods (not ended, not being deleted) are compared with spec.replicas: too few, the
missing ones are created (at most burstReplicas, 500, per sync); too many, the extra ones are
deleted in getPodsToDelete's order (schedmesh.workloads.replicas.deletion_order). A pod that
ends (Failed or Succeeded: evicted by its kubelet, say) or is marked for deletion (drained,
preempted, tainted out) stops counting at once, so its replacement is made while it terminates;
an ended pod stays listed, as kube keeps it (the pod garbage collector's threshold, 12,500 ended
pods, is not modelled).
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from schedmesh.api.types import Pod, WorkloadSelector
from schedmesh.workloads.replicas import BURST_REPLICAS, WorkloadPlan, deletion_order, is_active


def replica_set_plan(w: WorkloadSelector, pods: Sequence[Pod], related: Optional[Iterable[Pod]] = None,
                     now: Optional[float] = None) -> WorkloadPlan:
    """One sync of a ReplicaSet or ReplicationController given its own pods (ended and terminating
    ones included); `related`: the pods that rank a pod by how many share its node (its
    Deployment's other ReplicaSets' too; default: its own); `now` for the creation times' scale."""
    plan = WorkloadPlan()
    active = [p for p in pods if is_active(p)]
    diff = len(active) - w.spec.replicas
    if diff < 0:
        plan.create = [None] * min(-diff, BURST_REPLICAS)
    elif diff > 0:
        diff = min(diff, BURST_REPLICAS)
        chosen = deletion_order(active, pods if related is None else related, now)[:diff]
        plan.delete = [(p, f"{len(active)} active pods, {w.spec.replicas} wanted") for p in chosen]
    return plan
