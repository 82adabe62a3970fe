"""The Job controller's decisions (kube v1.35, pkg/controller/job: syncJob and manageJob).

* Active pods (not ended, not being deleted) are kept at parallelism, or at the completions
  still to go when that is fewer (none once a pod of a Job without completions succeeded);
  extra ones are deleted in ActivePods' order, an Indexed Job's duplicate and out-of-range
  indexes first. An Indexed Job creates the lowest indexes that neither succeeded nor have an
  active pod, "<job>-<index>-<5 characters>".
* A failed pod is one that ended Failed, one marked for deletion before it succeeded
  (podReplacementPolicy TerminatingOrFailed, the default without a podFailurePolicy: it is
  replaced at once), or one that went away unfinished; pods this controller deletes itself do
  not count. More failures than spec.backoffLimit (default 6) fail the Job,
  BackoffLimitExceeded: its active pods are deleted and no pod is made again. With
  podReplacementPolicy Failed a pod being deleted is replaced only once it is gone.
* After failures, a new pod waits out the pod failure backoff: 10 s doubled with each failure
  since the last success, at most 10 min, from the last failure seen.
* A Job whose succeeded pods reach its completions (or, without completions, that has a
  succeeded pod and no active one) is Complete and makes nothing more. A suspended Job deletes
  its active pods.

kube keeps the counts in the Job's status (through its pods' tracking finalizers); here
`JobHistory` keeps them in the controller-manager, so a restart counts again from the pods
still listed (ended pods stay listed until deleted; pods that went away are forgotten). The
simulated pods never succeed, so a Job of the mesh never completes. Not modelled: podFailurePolicy
rules (read for the replacement policy's default only), backoffLimitPerIndex, activeDeadlineSeconds,
successPolicy, ttlSecondsAfterFinished, OnFailure's container restarts (pastBackoffLimitOnFailure).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from schedmesh.api.types import INDEXED, REPLACE_FAILED, Pod, WorkloadSelector
from schedmesh.workloads.replicas import (BURST_REPLICAS, WorkloadPlan, completion_index, is_active, is_terminal,
                                          is_terminating, removal_order)

# DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff
POD_FAILURE_BACKOFF = 10.0
POD_FAILURE_BACKOFF_MAX = 10 * 60.0
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
COMPLETE = "Complete"


@dataclass
class JobHistory:
    """What the job controller knows of a Job's pods beyond those listed now: the uids counted
    succeeded and failed, those it deleted itself, the unfinished ones it saw last (one that goes
    away unfinished failed), the failures since the last success and when the last was seen, and
    the condition the Job finished with."""

    succeeded: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    unfinished: set[str] = field(default_factory=set)
    failures_after_success: int = 0
    last_failure: Optional[float] = None
    finished: str = ""

    def observe(self, w: WorkloadSelector, pods: Sequence[Pod], now: float) -> None:
        """Count the pods' ends since the last observation."""
        terminating_fails = w.spec.pod_replacement_policy != REPLACE_FAILED
        new_failed = 0
        present = set()
        for p in pods:
            present.add(p.uid)
            if p.uid in self.succeeded or p.uid in self.failed:
                continue
            if p.phase == "Succeeded":
                self.succeeded.add(p.uid)
                self.failures_after_success = 0
            elif p.uid not in self.removed and (p.phase == "Failed" or (terminating_fails and is_terminating(p))):
                self.failed.add(p.uid)
                new_failed += 1
        for uid in self.unfinished - present:  # gone unfinished: deleted before it could end
            if uid not in self.removed and uid not in self.failed and uid not in self.succeeded:
                self.failed.add(uid)
                new_failed += 1
        self.unfinished = {p.uid for p in pods if not is_terminal(p)}
        self.removed &= present
        if new_failed:
            self.failures_after_success += new_failed
            self.last_failure = now

    def backoff_until(self) -> Optional[float]:
        """getRemainingTime's end: when a pod may be created again after failures."""
        if not self.failures_after_success or self.last_failure is None:
            return None
        delay = min(POD_FAILURE_BACKOFF * 2 ** (self.failures_after_success - 1), POD_FAILURE_BACKOFF_MAX)
        return self.last_failure + delay


def _for_removal(w: WorkloadSelector, active: list[Pod], at_least: int) -> list[Pod]:
    """activePodsForRemoval: an Indexed Job's pods of no valid index or of an index held twice
    (all but the one ActivePods ranks last), then as many more as needed in ActivePods' order."""
    rm: list[Pod] = []
    left = active
    if w.spec.completion_mode == INDEXED:
        left = []
        by_index: dict[int, list[Pod]] = {}
        for p in active:
            i = completion_index(p)
            if 0 <= i < (w.spec.completions or 0):
                by_index.setdefault(i, []).append(p)
            else:
                rm.append(p)
        for same in by_index.values():
            ordered = removal_order(same)
            rm += ordered[:-1]
            left.append(ordered[-1])
    if len(rm) < at_least:
        rm += removal_order(left)[:at_least - len(rm)]
    return rm


def _pending_indexes(w: WorkloadSelector, pods: Sequence[Pod], history: JobHistory, active: list[Pod],
                     count: int) -> list[int]:
    """firstPendingIndexes: the lowest indexes that neither succeeded nor have an active pod."""
    taken = {completion_index(p) for p in active}
    taken |= {completion_index(p) for p in pods if p.uid in history.succeeded}
    out = []
    for i in range(w.spec.completions or 0):
        if len(out) == count:
            break
        if i not in taken:
            out.append(i)
    return out


def job_plan(w: WorkloadSelector, pods: Sequence[Pod], history: JobHistory, now: float) -> WorkloadPlan:
    """One sync of a Job given its own pods (ended and terminating ones included), after
    `history.observe` saw them."""
    spec = w.spec
    plan = WorkloadPlan()
    active = [p for p in pods if is_active(p)]
    if history.finished:  # a finished Job's pods are left alone, but none may stay running
        plan.delete = [(p, f"the Job finished: {history.finished}") for p in active]
        return plan
    if len(history.failed) > spec.backoff_limit:
        plan.condition = BACKOFF_LIMIT_EXCEEDED
        plan.delete = [(p, f"{BACKOFF_LIMIT_EXCEEDED}: {len(history.failed)} failed pods, backoffLimit "
                           f"{spec.backoff_limit}") for p in active]
        return plan
    if spec.completion_mode == INDEXED:
        succeeded = len({completion_index(p) for p in pods if p.uid in history.succeeded} - {-1})
    else:
        succeeded = len(history.succeeded)
    if spec.suspend:
        plan.delete = [(p, "the Job is suspended") for p in active]
        return plan
    if spec.completions is None:
        want = len(active) if succeeded > 0 else spec.replicas
    else:
        want = max(0, min(spec.completions - succeeded, spec.replicas))
    extra = _for_removal(w, active, max(0, len(active) - want))[:BURST_REPLICAS]
    if extra:
        plan.delete = [(p, f"{len(active)} active pods, {want} wanted") for p in extra]
        return plan
    terminating = sum(1 for p in pods if is_terminating(p) and not is_terminal(p))
    diff = want - len(active) - (terminating if spec.pod_replacement_policy == REPLACE_FAILED else 0)
    if diff > 0:
        until = history.backoff_until()
        if until is not None and until > now:
            plan.retry_at = until
            return plan
        diff = min(diff, BURST_REPLICAS)
        if spec.completion_mode == INDEXED:
            plan.create = list(_pending_indexes(w, pods, history, active, diff))
        else:
            plan.create = [None] * diff
    if not plan.create and not active and succeeded > 0 and (spec.completions is None or
                                                             succeeded >= spec.completions):
        plan.condition = COMPLETE
    return plan
