"""A template's replicas (a Deployment's pods in a row) filtered and scored once, decided pod by pod as kube does.

kube-scheduler filters and scores each pod on its own, as does the queue-manager without shards.
Pods of one ReplicaSet, Job or StatefulSet differ only in their identity (name, uid), and for
node-local pods (every plugin says so: mesh/batch.py) placing one changes verdicts and raw
scores only on the node it took. So once a second node-local pod in a row has the same
template as the one before it, the queue-manager filters that pod on every node and raw-scores
it on every feasible node, and keeps those answers for the template. Each following pod of the
template goes through its ordinary cycle (PreFilter, kube's walk from the start index with
numFeasibleNodesToFind and the node where the search cancels, PreScore, normalisation,
weights, selection); only its Filter and raw Score come from the answers, after the rows
changed since they were taken (the node the pod before took, bindings, deletions) have been
filtered and scored again here and folded in. Whatever reaches beyond single rows (a node
added, removed or updated, a pod with affinity terms, namespace labels: `SnapshotChanges`), a
nomination made or dropped, or a different PreFilter narrowing or PreScore skip drops the
answers, and the pod is evaluated as usual. Speed never changes a decision: every pod gets
exactly what the cycle would compute for it on the current cluster (mesh/test_replicas.py
checks it pod for pod).

Replicas whose Filter plugins (those their PreFilter leaves) are all node-local while a Score
plugin is not (preferred inter-pod affinity, spreading that only scores) keep the node-local
plugins' answers alone: every Filter verdict and the node-local raw scores (a pod with affinity
terms placed changes them only on its node), InterPodAffinity's or PodTopologySpread's scores
computed for each pod on its feasible nodes (answers.py). Replicas with a Filter plugin that is
not node-local (required spreading or inter-pod affinity) are filtered pod by pod as usual and
keep the node-local plugins' raw scores alone.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from schedmesh.api.types import Pod, same_template
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState
from schedmesh.framework.runtime import Framework, Nominator
from schedmesh.mesh.answers import (FEASIBLE, NOT_EVALUATED, TemplateAnswers, node_local_plugins, nominations,
                                    rows_only_for_affinity_pods, runs_only_node_local_filters)
from schedmesh.scheduling.cycle import Diagnosis, LocalEvaluator, SchedulingAlgorithm
from schedmesh.telemetry.metrics import REPLICA_ANSWERS

_ANSWERED = REPLICA_ANSWERS.labels("pod_answered")
_BUILT = REPLICA_ANSWERS.labels("template_built")

_NOT_ANSWERED = object()


class ReplicaAnswers:
    """The answers of the template being scheduled, for the evaluator of one scheduling loop.

    `filter` and `raw_scores` are called from the cycle under the cache lock; None means "not
    answered here" (the evaluator computes as usual)."""

    def __init__(self) -> None:
        self.current: Optional[TemplateAnswers] = None
        self._last: Optional[Pod] = None  # the pod before
        self._answered_uid = ""  # the pod whose filter() the answers gave (its raw_scores may follow)
        self.templates = 0  # answers built (for the log)
        self._done_pods = self._done_rows = 0  # of answers dropped since

    @property
    def answered(self) -> tuple[int, int]:
        """(pods answered, rows filtered or scored again), over every template so far."""
        a = self.current
        return (self._done_pods + (a.pods if a else 0), self._done_rows + (a.local_rows if a else 0))

    def drop(self) -> None:
        if self.current is not None:
            self._done_pods += self.current.pods
            self._done_rows += self.current.local_rows
            self.current.close()
            self.current = None

    def filter(self, algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
               ordered: np.ndarray, to_find: int, diagnosis: Diagnosis,
               nominator: Optional[Nominator]) -> Optional[np.ndarray]:
        self._answered_uid = ""
        part = self._node_local_part(algo, fw, state, pod, nominator)
        if part is _NOT_ANSWERED:
            self._last = None
            self.drop()
            return None
        local, filters = part
        last, self._last = self._last, pod
        a = self.current
        if a is not None and (not same_template(a.template, pod) or not a.valid_for(fw, snapshot, nominator)
                              or a.local != local or a.filters != filters):
            self.drop()
            a = None
        if not filters:  # raw scores only: filtered as usual
            if a is None and last is not None and same_template(last, pod):
                a = self._build_scores(fw, pod, snapshot, nominator, local)
            if a is not None:
                self._answered_uid = pod.meta.uid  # (its raw_scores come from the answers)
            return None
        if a is None:
            if last is None or not same_template(last, pod):
                return None  # a template seen once: evaluated as usual
            a = self._build(algo, fw, state, pod, snapshot, ordered, nominator, local)
            found = a.filter(algo, fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator, observed=True)
        else:
            found = a.filter(algo, fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)
        if found is None:
            self.drop()
            return None
        self._answered_uid = pod.meta.uid
        _ANSWERED.inc()
        return found

    def raw_scores(self, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
                   rows: np.ndarray) -> Optional[dict[str, np.ndarray]]:
        a = self.current
        if a is None or self._answered_uid != pod.meta.uid or snapshot is not a.snapshot:
            return None
        got = a.raw_scores(fw, state, pod, snapshot, rows)
        if got is None:
            self.drop()
        elif not a.filters:
            _ANSWERED.inc()
        return got

    @staticmethod
    def _node_local_part(algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod,
                         nominator: Optional[Nominator]) -> object:
        """What of the pod's answers can be kept, as (plugins, filters): (None, True) when every
        plugin is node-local for it (all of its answers); (the node-local plugins' names, True)
        when every Filter plugin it runs is among them and no pod is nominated anywhere (the
        others would count nominated pods node by node): their verdicts and raw scores; (the
        names, False) otherwise: their raw scores only (Score never counts nominated pods).
        _NOT_ANSWERED when none of its Score plugins is node-local, with extenders, or for a pod
        with a nominated node (kube tries that node alone first)."""
        if algo.extenders or pod.nominated_node_name:
            return _NOT_ANSWERED
        local = node_local_plugins(fw, pod)
        if len(local) == len(fw.plugins):
            return None, True
        if runs_only_node_local_filters(fw, state, local) and not nominations(nominator):
            return local, True
        if not any(p.name in local for p in fw.points["score"]):
            return _NOT_ANSWERED
        return local, False

    def _build_scores(self, fw: Framework, pod, snapshot: Snapshot, nominator: Optional[Nominator],
                      local: frozenset) -> TemplateAnswers:
        """Answers holding the node-local plugins' raw scores alone, each row scored when a pod
        first reads it (under the cache lock, as the cycle: the change log starts now)."""
        changes = snapshot.watch_changes(ignore_status_updates=True, ignore_affinity=rows_only_for_affinity_pods(local))
        self.current = a = TemplateAnswers(pod, fw, snapshot, changes, nominations(nominator), None, [], local)
        self.templates += 1
        _BUILT.inc()
        return a

    def _build(self, algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
               ordered: np.ndarray, nominator: Optional[Nominator], local: Optional[frozenset] = None
               ) -> TemplateAnswers:
        """Filter `pod` (after its PreFilter) on every node its PreFilter leaves (`ordered`):
        the template's verdicts. Observed as this cycle's Filter search, which the caller then
        answers from them."""
        rows = np.sort(ordered)
        feasible, rejected, statuses = algo.filter_rows(fw, state, pod, snapshot, rows, nominator)
        # Under the cache lock, as the cycle: the change log starts from these verdicts.
        changes = snapshot.watch_changes(ignore_status_updates=True, ignore_affinity=rows_only_for_affinity_pods(local))
        status = np.full(snapshot.cols.n, NOT_EVALUATED, np.int32)
        status[feasible] = FEASIBLE
        self.current = a = TemplateAnswers(pod, fw, snapshot, changes, nominations(nominator), status, [], local)
        for r, st in zip(rejected.tolist(), statuses):
            status[r] = a.index_of(st)
        self.templates += 1
        _BUILT.inc()
        return self.current


class ReplicaEvaluator(LocalEvaluator):
    """Filter and raw Score in this process, replicas answered from their template's answers."""

    def __init__(self) -> None:
        self.replicas = ReplicaAnswers()

    def filter(self, algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
               ordered: np.ndarray, to_find: int, diagnosis: Diagnosis, nominator: Optional[Nominator]) -> np.ndarray:
        got = self.replicas.filter(algo, fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)
        if got is not None:
            return got
        return super().filter(algo, fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)

    def raw_scores(self, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
                   rows: np.ndarray) -> dict[str, np.ndarray]:
        got = self.replicas.raw_scores(fw, state, pod, snapshot, rows)
        if got is not None:
            return got
        return super().raw_scores(fw, state, pod, snapshot, rows)
