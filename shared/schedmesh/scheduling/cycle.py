"""One scheduling cycle's algorithm (kube-scheduler's schedule_one.go): find the nodes that fit,
score them, pick one. Used by `schedmesh explain`, the queue-manager and preemption."""
from __future__ import annotations

import random
from collections import Counter
from time import perf_counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from schedmesh.framework.interface import Code, CycleState, NodeToStatus, PluginError, Status
from schedmesh.framework.runtime import Framework, Nominator

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.api.types import Pod
    from schedmesh.cache.snapshot import Snapshot

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE = 0  # 0 means adaptive
EXTENDER_NAME = "Extender"
MAX_EXTENDER_PRIORITY = 10
NO_NODE_AVAILABLE_MSG = "0/{} nodes are available"


def rotated(rows: np.ndarray, start: int) -> np.ndarray:
    """`rows` from index `start` on, then the ones before it: kube's walk from nextStartNodeIndex
    (np.roll's result, without its generic-axis overhead on every cycle)."""
    return np.concatenate((rows[start:], rows[:start])) if start else rows


class NoNodesAvailableError(Exception):
    def __init__(self) -> None:
        super().__init__("no nodes available to schedule pods")


@dataclass(slots=True)
class Diagnosis:
    node_to_status: NodeToStatus = field(default_factory=NodeToStatus)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    pre_filter_msg: str = ""
    post_filter_msg: str = ""

    def add_plugin_status(self, st: Status) -> None:
        if not st.plugin:
            return
        if st.code == Code.PENDING:
            self.pending_plugins.add(st.plugin)
        elif st.is_rejected():
            self.unschedulable_plugins.add(st.plugin)


class FitError(Exception):
    """No node fits the pod; `message()` is kube-scheduler's FailedScheduling text."""

    def __init__(self, pod: "Pod", num_all_nodes: int, diagnosis: Diagnosis) -> None:
        super().__init__()
        self.pod, self.num_all_nodes, self.diagnosis = pod, num_all_nodes, diagnosis

    def message(self) -> str:
        d = self.diagnosis
        msg = NO_NODE_AVAILABLE_MSG.format(self.num_all_nodes) + ":"
        if d.pre_filter_msg:
            msg += f" {d.pre_filter_msg}."
        else:
            reasons: Counter[str] = Counter()
            for _, st in d.node_to_status.items():
                for r in st.reasons:
                    reasons[r] += 1
            absent = self.num_all_nodes - len(d.node_to_status)
            if absent > 0:
                for r in d.node_to_status.absent.reasons:
                    reasons[r] += absent
            hist = sorted(f"{n} {r}" for r, n in reasons.items())
            if hist:
                msg += f" {', '.join(hist)}."
        if d.post_filter_msg:
            msg += f" {d.post_filter_msg}"
        return msg

    __str__ = message


@dataclass(slots=True)
class ScheduleResult:
    suggested_host: str
    evaluated_nodes: int
    feasible_nodes: int
    # What explain shows: the feasible rows, their weighted scores per plugin, and totals.
    feasible_rows: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    plugin_scores: dict[str, np.ndarray] = field(default_factory=dict)
    totals: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    diagnosis: Optional[Diagnosis] = None


class LocalEvaluator:
    """Runs Filter and Score in this process over the snapshot's columns."""

    def filter(self, algo: "SchedulingAlgorithm", fw: Framework, state: CycleState, pod: "Pod",
               snapshot: "Snapshot", ordered: np.ndarray, to_find: int, diagnosis: Diagnosis,
               nominator: Optional[Nominator]) -> np.ndarray:
        return algo.filter_in_order(fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)

    def raw_scores(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                   rows: np.ndarray) -> dict[str, np.ndarray]:
        return fw.run_raw_score(state, pod, snapshot, rows)


class SchedulingAlgorithm:
    """The per-scheduler state of schedule_one: where the next node search starts, how many
    nodes to find, extenders, and how ties are broken."""

    def __init__(self, percentage_of_nodes_to_score: int = DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE,
                 extenders: Sequence = (), tie_break: str = "random", seed: Optional[int] = None,
                 evaluator: Optional[LocalEvaluator] = None) -> None:
        if tie_break not in ("random", "name"):
            raise ValueError(f"tie-break must be 'random' or 'name', not {tie_break!r}")
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self.extenders = list(extenders)
        self.tie_break = tie_break
        self.rng = random.Random(seed)
        self.next_start_node_index = 0
        # Where Filter and Score run: here, or fanned out to node shards (schedmesh.mesh).
        self.evaluator = evaluator or LocalEvaluator()

    # ---- how many nodes -------------------------------------------------------------------
    def num_feasible_nodes_to_find(self, profile_percentage: Optional[int], num_all_nodes: int) -> int:
        if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
            return num_all_nodes
        percentage = profile_percentage if profile_percentage is not None else self.percentage_of_nodes_to_score
        if percentage == 0:
            percentage = 50 - num_all_nodes // 125
            if percentage < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND:
                percentage = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND
        num = num_all_nodes * percentage // 100
        return max(num, MIN_FEASIBLE_NODES_TO_FIND)

    def nodes_to_find(self, fw: Framework, n: int) -> int:
        """How many feasible nodes the search stops at, among `n` (PreFilter-narrowed) nodes."""
        if not self._has_extender_filters() and not self._has_scoring(fw):
            return 1
        return self.num_feasible_nodes_to_find(fw.profile.percentage_of_nodes_to_score, n)

    def _has_scoring(self, fw: Framework) -> bool:
        return fw.has_score_plugins() or any(e.is_prioritizer() for e in self.extenders)

    def _has_extender_filters(self) -> bool:
        return any(e.is_filter() for e in self.extenders)

    # ---- the cycle ------------------------------------------------------------------------
    def schedule_pod(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot", *,
                     nominator: Optional[Nominator] = None, evaluate_all: bool = False,
                     always_score: bool = False) -> ScheduleResult:
        """Raises FitError when nothing fits. `evaluate_all` checks every node (explain);
        `always_score` scores even a single feasible node (explain shows the scores)."""
        n_all = snapshot.num_nodes()
        if n_all == 0:
            raise NoNodesAvailableError()
        feasible, diagnosis = self._find_nodes_that_fit(fw, state, pod, snapshot, nominator, evaluate_all)
        if len(feasible) == 0:
            raise FitError(pod, n_all, diagnosis)
        evaluated = len(feasible) + len(diagnosis.node_to_status)
        if len(feasible) == 1 and not always_score:
            return ScheduleResult(snapshot.cols.names[feasible[0]], evaluated, 1, feasible, {},
                                  np.zeros(1, np.int64), diagnosis)
        plugin_scores, totals = self._prioritize(fw, state, pod, snapshot, feasible)
        host = self._select_host(snapshot, feasible, totals)
        return ScheduleResult(host, evaluated, len(feasible), feasible, plugin_scores, totals, diagnosis)

    def _find_nodes_that_fit(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                             nominator: Optional[Nominator], evaluate_all: bool
                             ) -> tuple[np.ndarray, Diagnosis]:
        diagnosis = Diagnosis()
        cols = snapshot.cols
        pre_res, st, narrowing = fw.run_pre_filter(state, pod, snapshot)
        if st is not None and not st.is_success():
            if not st.is_rejected():
                raise PluginError(st)
            diagnosis.node_to_status.absent = st
            diagnosis.pre_filter_msg = st.message()
            diagnosis.add_plugin_status(st)
            if narrowing:
                diagnosis.unschedulable_plugins |= narrowing
            return np.empty(0, np.int64), diagnosis
        diagnosis.unschedulable_plugins |= narrowing

        # A nominated node (from an earlier preemption) is tried alone first.
        if pod.nominated_node_name and not evaluate_all:
            ni = snapshot.get(pod.nominated_node_name)
            if ni is not None:
                t0 = perf_counter()
                nst = fw.run_filter_with_nominated_pods(state, pod, ni, nominator)
                # kube's evaluateNominatedNode is a search of its own (findNodesThatPassFilters)
                fw.observe_extension_point("Filter", Code.SUCCESS if nst is None or nst.is_rejected()
                                           or nst.is_success() else Code.ERROR, perf_counter() - t0)
                if nst is None or nst.is_success():
                    rows = np.array([ni.index], np.int64)
                    try:
                        # kube logs an extender failure here and falls back to all nodes.
                        rows = self._run_extender_filters(pod, snapshot, rows, Diagnosis())
                    except PluginError:
                        rows = rows[:0]
                    if len(rows):
                        return rows, diagnosis
                elif not nst.is_rejected():
                    raise PluginError(nst)

        all_rows = snapshot.all_indices()
        if pre_res is not None and not pre_res.all_nodes():
            keep = [cols.index_of(n) for n in pre_res.node_names]
            rows = np.array(sorted(i for i in keep if i >= 0), np.int64)
            # Nodes outside the PreFilter result carry the narrowing plugin(s)' rejection.
            diagnosis.node_to_status.absent = Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(narrowing))}]",),
                ",".join(sorted(narrowing)))
        else:
            rows = all_rows
        n = len(rows)
        to_find = n if evaluate_all else self.nodes_to_find(fw, n)
        if n == 0:
            return rows, diagnosis
        start = 0 if evaluate_all else self.next_start_node_index % n
        ordered = rotated(rows, start)

        if not fw.has_filter_plugins():
            feasible = ordered[:to_find]
        else:
            feasible = self.evaluator.filter(self, fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)
        processed = len(feasible) + len(diagnosis.node_to_status)
        self.next_start_node_index = (self.next_start_node_index + processed) % len(all_rows)
        feasible = self._run_extender_filters(pod, snapshot, feasible, diagnosis)
        return feasible, diagnosis

    def filter_in_order(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                        ordered: np.ndarray, to_find: int, diagnosis: Diagnosis,
                        nominator: Optional[Nominator]) -> np.ndarray:
        """The search below, timed as kube times it: one Filter extension point observation per
        search (kube's findNodesThatPassFilters; the framework's filter runs are per node or per
        chunk), Error when a plugin failed."""
        t0 = perf_counter()
        code = Code.ERROR
        try:
            out = self._filter_in_order(fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)
            code = Code.SUCCESS
            return out
        finally:
            fw.observe_extension_point("Filter", code, perf_counter() - t0)

    def _filter_in_order(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                         ordered: np.ndarray, to_find: int, diagnosis: Diagnosis,
                         nominator: Optional[Nominator]) -> np.ndarray:
        """Filter nodes in `ordered` order and keep the first `to_find` that pass.

        kube's search (findNodesThatPassFilters) cancels when the (to_find+1)-th feasible node
        is found: that node is dropped, and every failure examined before it counts as
        processed (it is in NodeToStatus and advances the next start index). Walked in order,
        as one worker would, the examined nodes are exactly those before that node. Chunks keep
        NumPy busy while stopping early on large clusters."""
        names = snapshot.cols.names
        nominated_rows = self._rows_with_nominated_pods(pod, snapshot, nominator)
        found: list[np.ndarray] = []
        n_found = 0
        pos = 0
        search_all = to_find >= len(ordered)
        chunk = len(ordered) if search_all else max(2 * to_find, 512)
        position = np.empty(snapshot.cols.n, np.int64)  # row -> position in the current chunk
        while pos < len(ordered):
            part = ordered[pos:pos + chunk]
            pos += len(part)
            position[part] = np.arange(len(part))
            feasible, rows, index, statuses = self._filter_chunk(fw, state, pod, snapshot, part, nominated_rows,
                                                                 nominator, position)
            need = to_find - n_found
            if not search_all and len(feasible) > need:
                # The (to_find+1)-th feasible node cancels the search: it and everything after
                # it was never examined.
                cutoff = position[feasible[need]]
                feasible = feasible[:need]
                keep = position[rows] < cutoff
                rows, index = rows[keep], index[keep]
                pos = len(ordered)
            found.append(feasible)
            n_found += len(feasible)
            diagnosis.node_to_status.add_rows(names, rows, index, statuses)
            for i in set(index.tolist()):  # each way of failing once
                diagnosis.add_plugin_status(statuses[i])
        return np.concatenate(found) if found else np.empty(0, np.int64)

    def filter_rows(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot", rows: np.ndarray,
                    nominator: Optional[Nominator], observe: bool = True
                    ) -> tuple[np.ndarray, np.ndarray, list[Status]]:
        """Filter every node of `rows`, no quota: feasible rows, and rejected rows with their
        statuses, in `rows` order. A search as filter_in_order's: one Filter observation (unless
        `observe` is False: part of a search the caller observes)."""
        t0 = perf_counter()
        code = Code.ERROR
        try:
            position = np.empty(snapshot.cols.n, np.int64)
            position[rows] = np.arange(len(rows))
            feasible, rejected, index, statuses = self._filter_chunk(
                fw, state, pod, snapshot, rows, self._rows_with_nominated_pods(pod, snapshot, nominator), nominator,
                position)
            code = Code.SUCCESS
            return feasible, rejected, [statuses[i] for i in index.tolist()]
        finally:
            if observe or code != Code.SUCCESS:
                fw.observe_extension_point("Filter", code, perf_counter() - t0)

    def _filter_chunk(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot", part: np.ndarray,
                      nominated_rows: set[int], nominator: Optional[Nominator],
                      position: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Status]]:
        """Feasible rows, rejected rows, and for each rejected row the index of its status in
        the statuses returned (nodes that failed the same way share one)."""
        if nominated_rows:
            feasible, rejected, statuses = self._filter_chunk_with_nominated(
                fw, state, pod, snapshot, part, nominated_rows, nominator, position)
            return feasible, rejected, np.arange(len(statuses)), statuses
        out = fw.run_filter_nodes(state, pod, snapshot, part)
        return out.feasible, out.rejected_rows, out.rejected_status_index, out.statuses

    def _filter_chunk_with_nominated(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                                     part: np.ndarray, nominated_rows: set[int], nominator: Optional[Nominator],
                                     position: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Status]]:
        """Nodes with nominated pods go through the per-node path that counts those pods; the
        rest in bulk. Returns feasible rows and rejected rows with statuses, in chunk order."""
        special = np.fromiter((r in nominated_rows for r in part.tolist()), bool, len(part))
        out = fw.run_filter_nodes(state, pod, snapshot, part[~special])
        feasible = list(out.feasible.tolist())
        rejected = list(zip(out.rejected_rows.tolist(), out.rejected_status))
        infos = snapshot.node_info_list
        for r in part[special].tolist():
            st = fw.run_filter_with_nominated_pods(state, pod, infos[r], nominator)
            if st is None or st.is_success():
                feasible.append(r)
            elif st.is_rejected():
                rejected.append((r, st))
            else:
                raise PluginError(st)
        feasible.sort(key=lambda r: position[r])
        rejected.sort(key=lambda rs: position[rs[0]])
        return (np.array(feasible, np.int64), np.array([r for r, _ in rejected], np.int64),
                [st for _, st in rejected])

    @staticmethod
    def _rows_with_nominated_pods(pod: "Pod", snapshot: "Snapshot", nominator: Optional[Nominator]) -> set[int]:
        if nominator is None or not hasattr(nominator, "nominated_node_names"):
            return set()
        rows = set()
        for name in nominator.nominated_node_names():
            ni = snapshot.get(name)
            if ni is not None and any(pi.pod.priority >= pod.priority and pi.pod.meta.uid != pod.meta.uid
                                      for pi in nominator.nominated_pods_for_node(name)):
                rows.add(ni.index)
        return rows

    def _run_extender_filters(self, pod: "Pod", snapshot: "Snapshot", rows: np.ndarray,
                              diagnosis: Diagnosis) -> np.ndarray:
        if not self.extenders or len(rows) == 0:
            return rows
        infos = snapshot.node_info_list
        current = [infos[r] for r in rows]
        before = len(current)
        for ext in self.extenders:
            if not current:
                break
            if not ext.is_filter() or not ext.is_interested(pod):
                continue
            try:
                current, failed, unresolvable = ext.filter(pod, current)
            except Exception as e:  # an ignorable extender may fail without failing the pod
                if ext.is_ignorable():
                    continue
                raise PluginError(Status.as_error(f"extender {ext.name}: {e}")) from e
            for node, msg in unresolvable.items():
                diagnosis.node_to_status.set(node, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (msg,)))
            for node, msg in failed.items():
                if node not in unresolvable:
                    diagnosis.node_to_status.set(node, Status(Code.UNSCHEDULABLE, (msg,)))
        if len(current) != before:
            diagnosis.unschedulable_plugins.add(EXTENDER_NAME)
        return np.array([ni.index for ni in current], np.int64)

    def _prioritize(self, fw: Framework, state: CycleState, pod: "Pod", snapshot: "Snapshot",
                    rows: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        if not self.extenders and not fw.has_score_plugins():
            return {}, np.ones(len(rows), np.int64)
        fw.run_pre_score(state, pod, snapshot, rows)
        # Normalisation needs every feasible node's raw score, so it happens here, after the
        # (possibly sharded) raw scoring.
        plugin_scores = fw.normalize_and_weigh(state, pod, self.evaluator.raw_scores(fw, state, pod, snapshot, rows))
        totals = np.zeros(len(rows), np.int64)
        for s in plugin_scores.values():
            totals += s
        if self.extenders:
            infos = snapshot.node_info_list
            nodes = [infos[r] for r in rows]
            pos = {int(r): i for i, r in enumerate(rows)}
            for ext in self.extenders:
                if not ext.is_prioritizer() or not ext.is_interested(pod):
                    continue
                try:
                    host_scores, weight = ext.prioritize(pod, nodes)
                except Exception:
                    continue  # kube ignores a prioritizer's errors
                arr = np.zeros(len(rows), np.int64)
                for host, score in host_scores:
                    i = pos.get(snapshot.cols.index_of(host))
                    if i is not None:
                        # Extenders score 0-10; scale to the framework's 0-100 range.
                        arr[i] += score * weight * (100 // MAX_EXTENDER_PRIORITY)
                plugin_scores[ext.name] = plugin_scores.get(ext.name, 0) + arr
                totals += arr
        return plugin_scores, totals

    def _select_host(self, snapshot: "Snapshot", rows: np.ndarray, totals: np.ndarray) -> str:
        names = snapshot.cols.names
        best = np.flatnonzero(totals == totals.max())
        if len(best) == 1:
            return names[rows[best[0]]]
        if self.tie_break == "name":  # the smallest name (names are unique: one row has it)
            tied = rows[best]
            return names[tied[np.argmin(snapshot.cols.name_rank[tied])]]
        return names[rows[best[self.rng.randrange(len(best))]]]


def run_post_filter(fw: Framework, state: CycleState, pod: "Pod", err: FitError):
    """PostFilter after a FitError; records its message in the diagnosis (kube's handling in
    schedulingCycle). Returns the PostFilterResult (or None) and the status."""
    if not fw.has_post_filter_plugins():
        return None, Status(Code.UNSCHEDULABLE)
    result, st = fw.run_post_filter(state, pod, err.diagnosis.node_to_status)
    err.diagnosis.post_filter_msg = st.message()
    return result, st
