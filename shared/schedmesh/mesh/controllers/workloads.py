"""The workload controller: the ReplicaSets (each Deployment's among them), ReplicationControllers,
StatefulSets and Jobs applied keep their replicas, as kube's controllers (pkg/controller/replicaset,
replication, statefulset, job) keep them; the decisions are schedmesh.workloads', this module
publishes them through the pod control the DaemonSet controller shares (podcontrol.py:
admission, expectations, graceful deletion, the garbage collector's part).

Apply expands a workload into its first pods and publishes its record (records.workload_record:
the selector, and the WorkloadSpec with the template, the replicas and the names of the pods the
Apply made). From then on this controller keeps its pods: a pod deleted (`schedmesh delete pod`,
drained through the Eviction API, preempted, evicted by taint) or ended (Failed: evicted by its
kubelet agent) is replaced by a pod made from the template, admitted and scheduled like any pod;
re-applying with other replicas makes or deletes pods; deleting the workload deletes its pods.

A workload's record may be read before its first pods (another topic): the pods the Apply made
are expected for APPLY_GRACE from when this process first sees that incarnation of the workload
(its WorkloadSpec.created_at), and nothing is decided for it while they are on their way. So a
controller-manager that starts after a pod went missing repairs it after that grace, and one
that reads a record before its pods makes none twice.
"""
from __future__ import annotations

import logging
from typing import Optional

from schedmesh.api.types import OwnerReference, Pod, WorkloadSelector
from schedmesh.mesh.controllers.podcontrol import ORPHAN_GRACE, Cluster, PodControl
from schedmesh.v1 import events_pb2
from schedmesh.workloads.job import JobHistory, job_plan
from schedmesh.workloads.replicas import controlled_by, pod_name, workload_pod
from schedmesh.workloads.replicaset import replica_set_plan
from schedmesh.workloads.statefulset import stateful_set_plan

log = logging.getLogger("schedmesh.controllers.workloads")

#: The kinds of pod controllers kept here (a Deployment is its ReplicaSets).
WORKLOAD_KINDS = ("ReplicaSet", "ReplicationController", "StatefulSet", "Job")
#: How long the pods an Apply made are awaited once their workload is seen.
APPLY_GRACE = ORPHAN_GRACE


def owner_key(w: WorkloadSelector) -> str:
    """The controller's key of a workload ("Kind/namespace/name"; its record's key on the pdbs
    topic is records.workload_key)."""
    return f"{w.kind}/{w.namespace}/{w.name}"


class WorkloadController(PodControl):
    what = "workload"

    def __init__(self, cache, source: str = "", **kw) -> None:
        super().__init__(cache, source, log=log, **kw)
        self._jobs: dict[str, JobHistory] = {}
        # workload key -> (the incarnation seen: created_at, {name of a pod its Apply made: awaited until})
        self._applied: dict[str, tuple[float, dict[str, float]]] = {}

    def _what(self, key: str) -> str:
        kind, rest = key.split("/", 1)
        return f"{kind.lower()} {rest}"

    def _owners(self) -> dict[str, object]:
        return {owner_key(w): w for w in self.cache.workloads.values()
                if w.spec is not None and w.kind in WORKLOAD_KINDS}

    def _owner_key(self, namespace: str, ref: OwnerReference) -> Optional[str]:
        return f"{ref.kind}/{namespace}/{ref.name}" if ref.kind in WORKLOAD_KINDS else None

    def _controlled(self, owner: WorkloadSelector, pod: Pod) -> bool:
        return controlled_by(owner, pod)

    def _forget(self, live: dict[str, object]) -> None:
        for kept in (self._jobs, self._applied):
            for key in [k for k in kept if k not in live]:
                del kept[key]

    def _waiting(self, key: str, w: WorkloadSelector, pods: list[Pod], now: float) -> Optional[float]:
        """The pods its Apply made that are not here yet: awaited until APPLY_GRACE after this
        incarnation was first seen (see the module's docstring)."""
        present = {p.name for p in pods}
        seen = self._applied.get(key)
        if seen is None or seen[0] != w.spec.created_at:
            seen = self._applied[key] = (w.spec.created_at, {n: now + APPLY_GRACE for n in w.spec.created_pods
                                                             if n not in present})
        awaited = seen[1]
        for name in [n for n in awaited if n in present or awaited[n] <= now]:
            if name not in present:
                log.info("%s: pod %s, made by its Apply, not seen after %.0f s: deciding without it",
                         self._what(key), name, APPLY_GRACE)
            del awaited[name]
        return min(awaited.values()) if awaited else None

    def _related(self, w: WorkloadSelector, pods: list[Pod], cluster: Cluster) -> list[Pod]:
        """The pods that rank a ReplicaSet's pods for deletion: its Deployment's ReplicaSets' pods."""
        if not w.spec.deployment:
            return pods
        return [p for key, o in self._known.items() if o.kind == "ReplicaSet" and o.namespace == w.namespace
                and o.spec.deployment == w.spec.deployment for p in cluster.owned.get(key, ()) if controlled_by(o, p)]

    def _sync_owner(self, key: str, w: WorkloadSelector, pods: list[Pod], cluster: Cluster,
                    now: float) -> tuple[list[events_pb2.PodRecord], Optional[float]]:
        if w.kind == "StatefulSet":
            plan = stateful_set_plan(w, pods)
        elif w.kind == "Job":
            history = self._jobs.setdefault(key, JobHistory())
            history.observe(w, pods, now)
            plan = job_plan(w, pods, history, now)
            if plan.condition and not history.finished:
                history.finished = plan.condition
                log.info("%s finished: %s (%d failed pods, backoffLimit %d)", self._what(key), plan.condition,
                         len(history.failed), w.spec.backoff_limit)
            history.removed |= {p.uid for p, _ in plan.delete}
        else:
            plan = replica_set_plan(w, pods, self._related(w, pods, cluster), now)
        made: set[str] = set()
        create = []
        for index in plan.create:
            uid = self.new_uid()
            name = pod_name(w, index, uid, lambda n: n in made or self.cache.get_pod(w.namespace, n) is not None)
            if name in made or self.cache.get_pod(w.namespace, name) is not None:  # a StatefulSet's, taken by another pod
                log.warning("%s: cannot create pod %s: a pod of that name exists", self._what(key), name)
                continue
            made.add(name)
            what = "ordinal" if w.kind == "StatefulSet" else "index"
            create.append((workload_pod(w, name, uid, index), "" if index is None else f"({what} {index})"))
        out = self._carry_out(key, create, plan.delete, cluster.node_names, now)
        if w.kind == "Job":  # a pod gone before the next sync saw it failed all the same (its finalizer, in kube)
            self._jobs[key].unfinished |= {p.uid for p, _ in create if p.meta.creation_timestamp is not None}
        return out, plan.retry_at
