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
"""
from __future__ import annotations

from time import perf_counter
from typing import Optional

import numpy as np

from schedmesh.api.types import Pod, same_template
from schedmesh.cache.snapshot import Snapshot, SnapshotChanges
from schedmesh.framework.interface import Code, CycleState, Status
from schedmesh.framework.runtime import Framework, Nominator
from schedmesh.mesh.batch import (FEASIBLE, NOT_EVALUATED, batchable, filter_again, nominations, score_again, search_end,
                                  walk)
from schedmesh.scheduling.cycle import Diagnosis, LocalEvaluator, SchedulingAlgorithm
from schedmesh.telemetry.metrics import REPLICA_ANSWERS

_ANSWERED = REPLICA_ANSWERS.labels("pod_answered")
_BUILT = REPLICA_ANSWERS.labels("template_built")

class TemplateAnswers:
    """Per snapshot row, one template's Filter verdict and (where taken) raw scores."""

    def __init__(self, template: Pod, fw: Framework, snapshot: Snapshot, changes: SnapshotChanges,
                 nominated: frozenset, status: np.ndarray, statuses: list[Status]) -> None:
        self.template, self.fw, self.snapshot, self.cols = template, fw, snapshot, snapshot.cols
        self.changes, self.nominated = changes, nominated
        self.status, self.statuses = status, statuses  # FEASIBLE, NOT_EVALUATED or an index in statuses
        self._status_index = {(s.code, s.plugin, s.reasons): i for i, s in enumerate(statuses)}
        self.raw: Optional[dict[str, np.ndarray]] = None  # plugin -> raw score per row
        self.scored = np.zeros(self.cols.n, bool)  # rows whose raw scores are current
        self.dirty = np.zeros(self.cols.n, bool)  # rows changed since their verdict was taken
        self.pods = 0  # pods answered (for the log)
        self.local_rows = 0  # rows filtered or scored again

    def close(self) -> None:
        self.snapshot.unwatch(self.changes)

    def valid_for(self, fw: Framework, snapshot: Snapshot, nominator: Optional[Nominator]) -> bool:
        return (fw is self.fw and snapshot is self.snapshot and snapshot.cols is self.cols
                and not self.changes.beyond_rows and nominations(nominator) == self.nominated)

    def _take_changes(self) -> None:
        changed = self.changes.take_rows()
        if changed:
            rows = np.fromiter(changed, np.int64, len(changed))
            self.dirty[rows] = True
            self.scored[rows] = False

    def _refilter(self, algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
                  nominator: Optional[Nominator], rows: np.ndarray) -> None:
        feasible, rejected, statuses = filter_again(algo, fw, state, pod, snapshot, nominator, rows)
        self.status[feasible] = FEASIBLE
        for r, st in zip(rejected.tolist(), statuses):
            self.status[r] = self.index_of(st)
        self.dirty[rows] = False
        self.local_rows += len(rows)

    def index_of(self, st: Status) -> int:
        key = (st.code, st.plugin, st.reasons)
        i = self._status_index.get(key)
        if i is None:
            i = self._status_index[key] = len(self.statuses)
            self.statuses.append(st)
        return i

    def filter(self, algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
               ordered: np.ndarray, to_find: int, diagnosis: Diagnosis, nominator: Optional[Nominator],
               observed: bool = False) -> Optional[np.ndarray]:
        """`SchedulingAlgorithm.filter_in_order` from the answers; None when they do not cover
        this pod's nodes (the caller drops them and filters as usual). `observed`: this search's
        Filter observation is made already.

        Rows changed since they were filtered are filtered again only where this pod's search
        reads them: up to the node where it cancels (with sampling, the node the pod before took
        is usually behind the start index and waits for a later pod)."""
        t0 = perf_counter()
        self._take_changes()
        # A prefix of the order holds the search on a large cluster: read more only when it
        # does not reach the node where the search cancels.
        end = min(len(ordered), max(2 * to_find + 2, 1024))
        while True:
            part = ordered[:end]
            seq = self.status[part]
            if (seq == NOT_EVALUATED).any():
                return None  # PreFilter narrowed differently for this pod
            reach = search_end(seq, to_find)
            if reach == end and end < len(ordered):
                end = min(len(ordered), 2 * end)
                continue
            read = part[:reach]
            stale = read[self.dirty[read]]
            if not len(stale):
                break
            self._refilter(algo, fw, state, pod, snapshot, nominator, np.sort(stale))
        found = walk(seq, part, to_find, self.statuses, snapshot, diagnosis)
        if not observed:  # one Filter observation per search, as filter_in_order makes
            fw.observe_extension_point("Filter", Code.SUCCESS, perf_counter() - t0)
        self.pods += 1
        return found

    def raw_scores(self, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
                   rows: np.ndarray) -> Optional[dict[str, np.ndarray]]:
        """Raw scores of `rows` (this pod's feasible nodes): kept ones where current, computed
        here elsewhere; None when this pod's PreScore skipped other plugins than the template's."""
        wanted = {p.name for p in fw.points["score"] if p.name not in state.skip_score_plugins}
        if self.raw is None:  # the first pod of the template scores every feasible node
            every = np.flatnonzero(self.status == FEASIBLE)
            got = fw.run_raw_score(state, pod, snapshot, every)
            self.raw = {}
            for p, arr in got.items():
                full = np.zeros(self.cols.n, np.int64)
                full[every] = arr
                self.raw[p] = full
            self.scored[every] = True
            return {p: full[rows] for p, full in self.raw.items()}
        if wanted != set(self.raw):
            return None
        missing = rows[~self.scored[rows]]
        for p, arr in score_again(fw, state, pod, snapshot, missing, wanted).items():
            self.raw[p][missing] = arr
        self.scored[missing] = True
        self.local_rows += len(missing)
        return {p: full[rows] for p, full in self.raw.items()}


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
        if algo.extenders or not batchable(fw, pod):
            self._last = None
            self.drop()
            return None
        last, self._last = self._last, pod
        a = self.current
        if a is not None and (not same_template(a.template, pod) or not a.valid_for(fw, snapshot, nominator)):
            self.drop()
            a = None
        if a is None:
            if last is None or not same_template(last, pod):
                return None  # a template seen once: evaluated as usual
            a = self._build(algo, fw, state, pod, snapshot, ordered, nominator)
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
        return got

    def _build(self, algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
               ordered: np.ndarray, nominator: Optional[Nominator]) -> TemplateAnswers:
        """Filter `pod` (after its PreFilter) on every node its PreFilter leaves (`ordered`):
        the template's verdicts. Observed as this cycle's Filter search, which the caller then
        answers from them."""
        rows = np.sort(ordered)
        feasible, rejected, statuses = algo.filter_rows(fw, state, pod, snapshot, rows, nominator)
        # Under the cache lock, as the cycle: the change log starts from these verdicts.
        changes = snapshot.watch_changes(ignore_status_updates=True)
        status = np.full(snapshot.cols.n, NOT_EVALUATED, np.int32)
        status[feasible] = FEASIBLE
        self.current = a = TemplateAnswers(pod, fw, snapshot, changes, nominations(nominator), status, [])
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
