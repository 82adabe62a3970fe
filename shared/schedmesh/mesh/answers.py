"""A template's answers, kept per node row and corrected where rows change: what shard batches
(mesh/batch.py) and replica answers (mesh/replicas.py) hand the cycle instead of filtering and
scoring every pod from scratch.

For node-local pods (every plugin of the profile says `node_local`: no inter-pod affinity, no
spreading, no claims, no nominated node) a pod's Filter verdict and raw scores on a node change
only when that node's pods change. So the verdicts (FEASIBLE, NOT_EVALUATED or a status) and raw
scores taken once for a template stay exact for its replicas, once the rows changed since have
been filtered and scored again (`filter_again`, `score_again`: node by node for a few rows, as
kube's per-node calls, in bulk past PER_NODE_ROWS); `walk` then reads them in kube's search
order (`search_end`: through the node where kube's search cancels).

For replicas whose Filter plugins (those their PreFilter does not skip) are all node-local but
some Score plugins are not (preferred inter-pod affinity, soft spreading), the answers hold the
node-local plugins alone (`TemplateAnswers.local`): every Filter verdict, and the node-local
raw scores, which still change only where a node's pods change (a pod with affinity terms
placed changes no other row for them, unless InterPodAffinity is among them:
`rows_only_for_affinity_pods`); each pod runs its other Score plugins on its feasible nodes.

Replicas with a Filter plugin that is not node-local (required spreading or inter-pod affinity)
keep the node-local raw scores alone (`TemplateAnswers.filters` False): each pod is filtered as
usual, and its feasible nodes' node-local raw scores are taken where current, computed where not
(a row changed, or no pod before read it).
"""
from __future__ import annotations

from time import perf_counter
from typing import Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.cache.snapshot import Snapshot, SnapshotChanges
from schedmesh.framework.interface import Code, CycleState, PluginError, Status
from schedmesh.framework.runtime import Framework, Nominator
from schedmesh.plugins.inter_pod_affinity.plugin import NAME as INTER_POD_AFFINITY
from schedmesh.scheduling.cycle import Diagnosis, SchedulingAlgorithm

FEASIBLE = -1
NOT_EVALUATED = -2  # outside the pod's PreFilter narrowing (or not answered)
# Changed rows up to this many are filtered and scored again node by node (kube's per-node
# calls), more in bulk: a row or two cost less than setting up the bulk path.
PER_NODE_ROWS = 4


def node_local(fw: Framework, pod) -> bool:
    """Whether every plugin of `pod`'s profile is node-local for it (framework/interface.py)."""
    return all(p.node_local(pod) for p in fw.plugins.values())


def batchable(fw: Framework, pod) -> bool:
    """Whether `pod` may be evaluated in a batch: every plugin of its profile is node-local for
    it, and it has no nominated node (kube tries that node alone first)."""
    return not pod.nominated_node_name and node_local(fw, pod)


def node_local_plugins(fw: Framework, pod) -> frozenset:
    """The names of the plugins of `pod`'s profile that are node-local for it (node_local asks
    whether that is every one)."""
    return frozenset(name for name, p in fw.plugins.items() if p.node_local(pod))


def runs_only_node_local_filters(fw: Framework, state: CycleState, local: frozenset) -> bool:
    """Whether every Filter plugin the pod runs after its PreFilter is in `local` (node-local
    for it)."""
    return all(p.name in local for p in fw.points["filter"] if p.name not in state.skip_filter_plugins)


def rows_only_for_affinity_pods(local: Optional[frozenset]) -> bool:
    """Whether placing or removing a pod with affinity terms changes the answers of the plugins
    `local` (None: every plugin) on its own node only (a change feed may then keep such pods to
    their rows). Not when InterPodAffinity is among them: for a pod without terms of its own (the
    pods it is node-local for) it filters and scores by the existing pods' terms that select it,
    over each term's whole topology domain."""
    return local is not None and INTER_POD_AFFINITY not in local


def nominations(nominator: Optional[Nominator]) -> frozenset:
    if nominator is None or not hasattr(nominator, "nominated_node_names"):
        return frozenset()
    return frozenset((node, pi.pod.meta.uid) for node in nominator.nominated_node_names()
                     for pi in nominator.nominated_pods_for_node(node))


def filter_again(algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
                 nominator: Optional[Nominator], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Status]]:
    """algo.filter_rows(observe=False) of rows changed since their answers were taken: feasible
    rows, rejected rows and their statuses; node by node (nominated pods counted) up to
    PER_NODE_ROWS rows."""
    if len(rows) > PER_NODE_ROWS:
        return algo.filter_rows(fw, state, pod, snapshot, rows, nominator, observe=False)
    infos = snapshot.node_info_list
    feasible: list[int] = []
    rejected: list[int] = []
    statuses: list[Status] = []
    for r in rows.tolist():
        st = fw.run_filter_with_nominated_pods(state, pod, infos[r], nominator)
        if st is None or st.is_success():
            feasible.append(r)
        elif st.is_rejected():
            rejected.append(r)
            statuses.append(st)
        else:
            raise PluginError(st)
    return np.array(feasible, np.int64), np.array(rejected, np.int64), statuses


def score_again(fw: Framework, state: CycleState, pod, snapshot: Snapshot, rows: np.ndarray,
                wanted: set[str]) -> dict[str, np.ndarray]:
    """fw.run_raw_score of rows changed since their scores were taken, by the plugins `wanted`
    (those this pod's PreScore did not skip); node by node up to PER_NODE_ROWS rows, with one
    Score observation either way (plugin metrics, when this cycle records them, come in bulk)."""
    if len(rows) > PER_NODE_ROWS or (len(rows) and state.record_plugin_metrics):
        return fw.run_raw_score(state, pod, snapshot, rows, only=wanted)
    t0 = perf_counter()
    infos = snapshot.node_info_list
    out: dict[str, np.ndarray] = {}
    for p in fw.points["score"]:
        if p.name not in wanted:
            continue
        arr = out[p.name] = np.empty(len(rows), np.int64)
        for k, r in enumerate(rows.tolist()):
            score, st = p.score(state, pod, infos[r])
            if st is not None and not st.is_success():
                raise PluginError(Status(Code.ERROR, (f'plugin "{p.name}" failed with: {st.message()}',), p.name))
            arr[k] = score
    fw.observe_extension_point("Score", Code.SUCCESS, perf_counter() - t0)
    return out


def search_end(seq: np.ndarray, to_find: int) -> int:
    """How far kube's search reads `seq` (verdicts in search order, FEASIBLE or a status
    index): through the (to_find+1)-th feasible node, where it cancels, or to the end."""
    if to_find >= len(seq):
        return len(seq)
    feasible_pos = np.flatnonzero(seq == FEASIBLE)
    return int(feasible_pos[to_find]) + 1 if len(feasible_pos) > to_find else len(seq)


def walk(seq: np.ndarray, ordered: np.ndarray, to_find: int, statuses: list[Status], snapshot: Snapshot,
         diagnosis: Diagnosis) -> np.ndarray:
    """kube's search over known verdicts (`seq`: per node of `ordered`, FEASIBLE or a status
    index): the first `to_find` feasible nodes, the failures examined before the node where the
    search cancels (the (to_find+1)-th feasible one) into `diagnosis`."""
    feasible_pos = np.flatnonzero(seq == FEASIBLE)
    search_all = to_find >= len(ordered)
    # kube cancels the search at the (to_find+1)-th feasible node: what follows it was never
    # examined (the walk of filter_in_order).
    cutoff = int(feasible_pos[to_find]) if not search_all and len(feasible_pos) > to_find else len(ordered)
    failed_pos = np.flatnonzero(seq[:cutoff] >= 0)
    if len(failed_pos):
        names = snapshot.cols.names
        idx = seq[failed_pos].tolist()
        diagnosis.node_to_status.update(zip([names[r] for r in ordered[failed_pos].tolist()],
                                            [statuses[i] for i in idx]))
        for i in set(idx):
            diagnosis.add_plugin_status(statuses[i])
    return ordered[feasible_pos[:to_find]]


class TemplateAnswers:
    """Per snapshot row, one template's Filter verdict and (where taken) raw scores, corrected
    where rows change: replica answers (mesh/replicas.py) build them here, shard batches seed
    them with the shards' answers (ShardBatch.seal)."""

    def __init__(self, template: Pod, fw: Framework, snapshot: Snapshot, changes: SnapshotChanges,
                 nominated: frozenset, status: Optional[np.ndarray], statuses: list[Status],
                 local: Optional[frozenset] = None) -> None:
        self.template, self.fw, self.snapshot, self.cols = template, fw, snapshot, snapshot.cols
        # None: the answers are every plugin's. Else the names of the plugins node-local for the
        # template: its raw scores are kept for those alone.
        self.local = local
        self.changes, self.nominated = changes, nominated
        # FEASIBLE, NOT_EVALUATED or an index in statuses; None: raw scores only, each pod
        # filtered as usual (a Filter plugin the template runs is not node-local).
        self.status, self.statuses = status, statuses
        self.filters = status is not None
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
            self.changed(np.fromiter(changed, np.int64, len(changed)))

    def changed(self, rows: np.ndarray) -> None:
        """`rows` changed since their verdicts and scores were taken: both are taken again where read."""
        self.dirty[rows] = True
        self.scored[rows] = False

    def take_scores(self, window: np.ndarray, raw: dict[str, np.ndarray]) -> None:
        """Raw scores taken elsewhere (the shards), `raw[plugin]` aligned with the rows of `window`."""
        self.raw = {}
        for plugin, arr in raw.items():
            full = self.raw[plugin] = np.zeros(self.cols.n, np.int64)
            full[window] = arr
        self.scored[window] = True

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
        here elsewhere; None when this pod's PreScore skipped other plugins than the template's.
        With node-local answers (`local`), the pod's other Score plugins run on `rows`; one
        Score observation either way. Answers without verdicts (`filters` False) take the
        snapshot's changes here, and score each row when a pod first reads it."""
        runs = [p.name for p in fw.points["score"] if p.name not in state.skip_score_plugins]
        wanted = set(runs) if self.local is None else {n for n in runs if n in self.local}
        if not self.filters:  # (filter() takes the changes when it answers the search)
            self._take_changes()
            self.pods += 1
            if self.raw is None:  # each row is scored when a pod first reads it
                self.raw = {p: np.zeros(self.cols.n, np.int64) for p in wanted}
        if self.raw is None:  # the first pod of the template scores every feasible node
            every = np.flatnonzero(self.status == FEASIBLE)
            got = fw.run_raw_score(state, pod, snapshot, every, only=wanted)
            self.raw = {}
            for p, arr in got.items():
                full = self.raw[p] = np.zeros(self.cols.n, np.int64)
                full[every] = arr
            self.scored[every] = True
        else:
            if wanted != set(self.raw):
                return None
            missing = rows[~self.scored[rows]]
            for p, arr in score_again(fw, state, pod, snapshot, missing, wanted).items():
                self.raw[p][missing] = arr
            self.scored[missing] = True
            self.local_rows += len(missing)
        out = {p: full[rows] for p, full in self.raw.items()}
        others = set(runs) - wanted
        if others:
            out.update(fw.run_raw_score(state, pod, snapshot, rows, only=others, observe=False))
        return out
