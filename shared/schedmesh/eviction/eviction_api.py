"""The Eviction API's decision: what kube-apiserver answers to POST .../pods/NAME/eviction
(pkg/registry/core/pod/storage/eviction.go, v1.35: Create, canIgnorePDB, checkAndDecrement,
getPodDisruptionBudgets).

In order:
1. A pod that is Succeeded, Failed, Pending or already terminating is deleted without looking at
   PDBs (201).
2. The PDBs of the pod's namespace whose selector matches it; a nil or empty selector (or one
   that does not convert) matches nothing here. More than one: 500 "This pod has more than one
   PodDisruptionBudget, which the eviction subresource does not support.". None: 201.
3. A pod that is not Ready is deleted without spending the budget when the PDB's
   unhealthyPodEvictionPolicy is AlwaysAllow, or (IfHealthyBudget, the default) when
   currentHealthy >= desiredHealthy > 0. kube then deletes with a resourceVersion precondition:
   `delete_only_if_unchanged` says so.
4. checkAndDecrement: disruptionsAllowed < 0 is 403 Forbidden; more than 2000 disruptedPods is 403;
   0 is 429 "Cannot evict pod as it would violate the pod's disruption budget." with the cause
   "The disruption budget NAME needs D healthy pods and has C currently"; otherwise the budget is
   spent (disruptionsAllowed - 1, the pod recorded in disruptedPods at `now`, unless dry run) and
   the pod is deleted (201).

Codes are the HTTP status kube-apiserver returns: a successful eviction is 201 (the create
handler's default for a Status without a code). Our PodDisruptionBudget has no
generation/observedGeneration, so kube's "still being processed by the server" 429 never occurs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

from schedmesh.api.types import Pod, PodDisruptionBudget
from schedmesh.eviction.disruption import DisruptionBudgetStatus, is_pod_ready, is_terminating
from schedmesh.preemption.pdb import pdb_selector

IF_HEALTHY_BUDGET = "IfHealthyBudget"
ALWAYS_ALLOW = "AlwaysAllow"

# eviction.MaxDisruptedPodSize
MAX_DISRUPTED_POD_SIZE = 2000

MSG_MULTIPLE_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
MSG_VIOLATES_BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."
CAUSE_DISRUPTION_BUDGET = "DisruptionBudget"  # policyv1.DisruptionBudgetCause

# The condition kube-apiserver adds to a pod it evicts (PodDisruptionConditions, GA).
DISRUPTION_TARGET = "DisruptionTarget"
REASON_EVICTION_BY_EVICTION_API = "EvictionByEvictionAPI"
MESSAGE_EVICTION_BY_EVICTION_API = "Eviction API: evicting"

TERMINAL_OR_PENDING_PHASES = ("Succeeded", "Failed", "Pending")


@dataclass(frozen=True)
class EvictionResult:
    """The API server's answer. When `allowed`, the caller deletes the pod (with the pod's own
    grace period unless the request said otherwise) and stores `pdb_status` on `pdb_name`."""

    allowed: bool
    code: int  # HTTP status: 201, 429, 403 or 500
    message: str = ""
    reason: str = ""  # metav1.StatusReason: "", "TooManyRequests", "Forbidden"
    causes: tuple[str, ...] = ()  # StatusCause messages (type DisruptionBudget)
    retry_after_seconds: int = 0
    pdb_name: str = ""  # the PDB that was consulted, if any
    pdb_status: Optional[DisruptionBudgetStatus] = None  # its status after a spent budget
    delete_only_if_unchanged: bool = False  # kube sets a resourceVersion precondition on the delete
    pdb_ignored: bool = False  # terminal, pending or terminating pod: no PDB was looked at


def can_ignore_pdb(pod: Pod) -> bool:
    """canIgnorePDB: the pod's eviction is its deletion, PDBs aside."""
    return pod.phase in TERMINAL_OR_PENDING_PHASES or is_terminating(pod)


def matching_pdbs(pod: Pod, pdbs: Sequence[PodDisruptionBudget]) -> list[PodDisruptionBudget]:
    """getPodDisruptionBudgets: same namespace, a selector that converts, is not empty and matches."""
    out = []
    for pdb in pdbs:
        if pdb.meta.namespace != pod.meta.namespace:
            continue
        sel = pdb_selector(pdb)
        if sel is not None and sel.matches(pod.meta.labels):
            out.append(pdb)
    return out


def unhealthy_pod_eviction_policy(pdb: PodDisruptionBudget, policies: Optional[Mapping[str, str]] = None) -> str:
    """spec.unhealthyPodEvictionPolicy: from `policies` (PDB name -> policy), else from the object
    if it carries the field, else kube's default IfHealthyBudget."""
    if policies and pdb.meta.name in policies:
        return policies[pdb.meta.name]
    return getattr(pdb, "unhealthy_pod_eviction_policy", None) or IF_HEALTHY_BUDGET


def _forbidden(pdb_name: str, why: str) -> EvictionResult:
    # errors.NewForbidden(policy.Resource("poddisruptionbudget"), name, err)
    return EvictionResult(False, 403, f'poddisruptionbudget.policy "{pdb_name}" is forbidden: {why}',
                          reason="Forbidden", pdb_name=pdb_name)


def check_and_decrement(pod: Pod, pdb_name: str, status: DisruptionBudgetStatus, now: float,
                        dry_run: bool = False) -> EvictionResult:
    """checkAndDecrement: refuse, or spend one disruption of the budget."""
    if status.disruptions_allowed < 0:
        return _forbidden(pdb_name, "pdb disruptions allowed is negative")
    if len(status.disrupted_pods) > MAX_DISRUPTED_POD_SIZE:
        return _forbidden(pdb_name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if status.disruptions_allowed == 0:
        cause = (f"The disruption budget {pdb_name} needs {status.desired_healthy} healthy pods "
                 f"and has {status.current_healthy} currently")
        return EvictionResult(False, 429, MSG_VIOLATES_BUDGET, reason="TooManyRequests", causes=(cause,),
                              pdb_name=pdb_name)
    disrupted = dict(status.disrupted_pods)
    if not dry_run:
        disrupted[pod.meta.name] = now
    spent = replace(status, disruptions_allowed=status.disruptions_allowed - 1, disrupted_pods=disrupted)
    return EvictionResult(True, 201, pdb_name=pdb_name, pdb_status=spent)


def evict(pod: Pod, pdbs: Sequence[PodDisruptionBudget], now: float,
          statuses: Optional[Mapping[str, DisruptionBudgetStatus]] = None,
          dry_run: bool = False, policies: Optional[Mapping[str, str]] = None) -> EvictionResult:
    """Decide an eviction of `pod` at `now`. `pdbs` may be every PDB (other namespaces are
    skipped); `statuses` maps a PDB name to its computed status (disruption.disruption_status),
    and a PDB without one is judged by the status fields it carries (DisruptionBudgetStatus.of);
    `policies` maps a PDB name to its unhealthyPodEvictionPolicy (IfHealthyBudget by default)."""
    if can_ignore_pdb(pod):
        return EvictionResult(True, 201, pdb_ignored=True)
    found = matching_pdbs(pod, pdbs)
    if len(found) > 1:
        return EvictionResult(False, 500, MSG_MULTIPLE_PDBS)
    if not found:
        return EvictionResult(True, 201)
    pdb = found[0]
    status = (statuses or {}).get(pdb.meta.name) or DisruptionBudgetStatus.of(pdb)
    if not is_pod_ready(pod):
        # An unready pod does not count as healthy, so evicting it spends nothing.
        if unhealthy_pod_eviction_policy(pdb, policies) == ALWAYS_ALLOW or (
                status.current_healthy >= status.desired_healthy and status.desired_healthy > 0):
            return EvictionResult(True, 201, pdb_name=pdb.meta.name, delete_only_if_unchanged=True)
    return check_and_decrement(pod, pdb.meta.name, status, now, dry_run)
