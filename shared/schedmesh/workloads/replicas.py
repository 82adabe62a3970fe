"""What the controllers of replicated workloads share (kube v1.35, pkg/controller/controller_utils.go
and the pod control of the ReplicaSet, StatefulSet and Job controllers): which pods a workload
owns, which are active, the pod made from its template, its name, and the order in which extra
pods are chosen for deletion.

A workload here is the record Apply keeps for a ReplicaSet (a Deployment's among them), a
ReplicationController, a StatefulSet or a Job (api.types.WorkloadSelector with its
WorkloadSpec). Its pods are those naming it as their controller (kind and name): adopting orphans
and releasing pods its selector no longer matches are not modelled.

* `is_active` is IsPodActive: not Succeeded, not Failed, not marked for deletion.
* `deletion_order` is ActivePodsWithRanks (getPodsToDelete's sort): unscheduled before scheduled,
  Pending before Unknown before Running, not ready before ready, lower
  controller.kubernetes.io/pod-deletion-cost first, more active related pods on the same node
  first, then newer before older by creation time on kube's logarithmic scale (LogarithmicScaleDown,
  GA: times within the same power of two of their age tie, and the uid breaks the tie). The
  ready time (rule 6) and container restarts (rule 7) are not kept in this model: they tie.
  `removal_order` is ActivePods (the Job controller's): the same first three rules, then newer
  before older.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Sequence

from schedmesh.api.evolve import evolve
from schedmesh.api.load import JOB_COMPLETION_INDEX, generated_names, indexed_pods_prefix, pod_name_candidates
from schedmesh.api.types import INDEXED, ObjectMeta, Pod, WorkloadSelector
from schedmesh.eviction.disruption import is_pod_ready

# controller.kubernetes.io/pod-deletion-cost (PodDeletionCost, GA): lower is deleted first.
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# burstReplicas: the most pods one sync of a ReplicaSet creates or deletes (kube's default 500;
# the Job controller's MaxPodCreateDeletePerSync is 500 too).
BURST_REPLICAS = 500

_PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}


@dataclass
class WorkloadPlan:
    """What one sync of a workload does: the pods to create (one entry each: the StatefulSet
    ordinal or Indexed Job completion index it is for, None for a pod with a generated name), the
    pods to delete (each with why, for logs), when a backed-off creation may be tried again
    (None: nothing waits), and a Job's finished condition when it reached one."""

    create: list[Optional[int]] = field(default_factory=list)
    delete: list[tuple[Pod, str]] = field(default_factory=list)
    retry_at: Optional[float] = None
    condition: str = ""

    def __bool__(self) -> bool:
        return bool(self.create or self.delete)


def controlled_by(w: WorkloadSelector, pod: Pod) -> bool:
    """Whether `pod` names `w` as its controller (by kind and name)."""
    return pod.namespace == w.namespace and any(
        r.controller and r.kind == w.kind and r.name == w.name for r in pod.meta.owner_references)


def is_terminal(pod: Pod) -> bool:
    return pod.phase in ("Succeeded", "Failed")


def is_terminating(pod: Pod) -> bool:
    return pod.meta.deletion_timestamp is not None


def is_active(pod: Pod) -> bool:
    """IsPodActive."""
    return not is_terminal(pod) and not is_terminating(pod)


def completion_index(pod: Pod) -> int:
    """getCompletionIndex: the pod's batch.kubernetes.io/job-completion-index annotation, -1 when
    absent or not a non-negative integer."""
    value = pod.meta.annotations.get(JOB_COMPLETION_INDEX, "")
    return int(value) if value.isdigit() else -1


def workload_pod(w: WorkloadSelector, name: str, uid: str, index: Optional[int] = None) -> Pod:
    """The pod `w`'s controller creates (unscheduled; no creation time: the caller's clock gives
    it), made from its template; an Indexed Job's carries its completion index (label and
    annotation, as addCompletionIndexLabel and addCompletionIndexAnnotation set them)."""
    t = w.spec.template
    labels, annotations = dict(t.meta.labels), dict(t.meta.annotations)
    if index is not None and w.kind == "Job":
        labels[JOB_COMPLETION_INDEX] = annotations[JOB_COMPLETION_INDEX] = str(index)
    meta = ObjectMeta(name=name, namespace=w.namespace, uid=uid, labels=labels, annotations=annotations,
                      owner_references=list(t.meta.owner_references))
    return evolve(t, meta=meta)


def pod_name(w: WorkloadSelector, index: Optional[int], seed: str, taken: Callable[[str], bool]) -> str:
    """A StatefulSet's "<name>-<ordinal>"; an Indexed Job's "<job>-<index>-<5 characters>"; any
    other "<controller>-<5 characters>", from kube's alphabet, drawn by a generator seeded with
    `seed` (a new pod's uid: as random as kube's, reproducible in tests) and drawn again while taken."""
    if w.kind == "StatefulSet":
        return f"{w.name}-{index}"
    if index is not None and w.spec.completion_mode == INDEXED:
        names = generated_names(indexed_pods_prefix(w.name, index), seed)
    else:
        names = pod_name_candidates(w.name, seed)
    for name in names:
        if not taken(name):
            return name
    raise AssertionError("generated names never end")


# ---- which pods go first ------------------------------------------------------------------

def deletion_cost(pod: Pod) -> int:
    """GetDeletionCostFromPodAnnotations: an int32; absent or invalid counts as 0."""
    text = pod.meta.annotations.get(POD_DELETION_COST)
    try:
        value = int(text) if text is not None else 0
    except ValueError:
        return 0
    return value if -2**31 <= value < 2**31 else 0


def _after_or_zero(t1: Optional[float], t2: Optional[float]) -> bool:
    if not t1 or not t2:
        return not t1
    return t1 > t2


def _log_rank(t: float, now: float) -> int:
    d = (now - t) * 1e9  # kube compares durations in nanoseconds
    return int(math.log2(d)) if d > 0 else -1


def _before(a: Pod, b: Pod, rank_a: int, rank_b: int, now: Optional[float], ranked: bool) -> bool:
    """ActivePodsWithRanks.Less (ranked) or ActivePods.Less: whether `a` goes before `b`."""
    if a.node_name != b.node_name and (not a.node_name or not b.node_name):
        return not a.node_name
    pa, pb = _PHASE_ORDINAL.get(a.phase, 0), _PHASE_ORDINAL.get(b.phase, 0)
    if pa != pb:
        return pa < pb
    ra, rb = is_pod_ready(a), is_pod_ready(b)
    if ra != rb:
        return not ra
    if ranked:
        ca, cb = deletion_cost(a), deletion_cost(b)
        if ca != cb:
            return ca < cb
        if rank_a != rank_b:
            return rank_a > rank_b
    ta, tb = a.meta.creation_timestamp, b.meta.creation_timestamp
    if ta != tb:
        if not ranked or now is None or not ta or not tb:
            return _after_or_zero(ta, tb)
        diff = _log_rank(ta, now) - _log_rank(tb, now)
        return a.uid < b.uid if diff == 0 else diff < 0
    return False


def _sorted(pods: Sequence[Pod], ranks: dict[str, int], now: Optional[float], ranked: bool) -> list[Pod]:
    def cmp(a: Pod, b: Pod) -> int:
        ra, rb = ranks.get(a.uid, 0), ranks.get(b.uid, 0)
        if _before(a, b, ra, rb, now, ranked):
            return -1
        return 1 if _before(b, a, rb, ra, now, ranked) else 0
    return sorted(pods, key=functools.cmp_to_key(cmp))


def deletion_order(pods: Sequence[Pod], related: Iterable[Pod], now: Optional[float]) -> list[Pod]:
    """`pods` as getPodsToDelete sorts them, each ranked by the active pods of `related` (the
    workload's own, and its Deployment's other ReplicaSets') on its node."""
    on_node: dict[str, int] = {}
    for p in related:
        if is_active(p):
            on_node[p.node_name] = on_node.get(p.node_name, 0) + 1
    return _sorted(pods, {p.uid: on_node.get(p.node_name, 0) for p in pods}, now, True)


def removal_order(pods: Sequence[Pod]) -> list[Pod]:
    """`pods` as ActivePods sorts them (activePodsForRemoval)."""
    return _sorted(pods, {}, None, False)
