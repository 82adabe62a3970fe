"""Filter and Score a run of pods on the shards in two requests, decided pod by pod as kube does.

kube-scheduler decides one pod at a time, each on a cluster where the pods before it are
assumed. Asking the shards once per pod costs two round trips per pod (the ceiling of the
per-pod fan-out); asking once per run of pods needs the answers to stay exact when the pods
before one are assumed after the shards answered. That holds for node-local pods (every plugin
of their profile says `node_local`: no inter-pod affinity, no spreading, no claims): assuming
such a pod changes verdicts and scores only on the node it is assumed on. So:

1. Under the cache lock, the queue-manager takes the view (the nominated pods) and each shard's
   feed (mesh/shard_feed.py), and starts recording which snapshot rows change
   (`Snapshot.watch_changes`).
2. FilterBatch: each filter shard filters every pod on all of its nodes (no quota, no start
   index: those depend on the pods before), against that one view: one pod per template with
   replicas in the run (`templates_of`); a pod alone of its template is evaluated by the
   queue-manager itself (`asked_and_alone`: all nodes' verdicts for one pod cost more to merge than its
   sampled search).
3. The queue-manager walks kube's node order for each pod from the start index the pods before
   it would leave (numFeasibleNodesToFind, the cancelling node, the index advance: the walk of
   `SchedulingAlgorithm.filter_in_order`), which gives the nodes each pod is expected to score.
4. ScoreBatch: each score shard raw-scores its own nodes of those.
5. Then each pod goes through the ordinary cycle (`schedule_pod`), whose evaluator takes the
   answers from here, re-evaluating in this process the rows changed since the view (the pods
   of the batch assumed so far, bindings and deletions that came in meanwhile) and any row it
   was not given (when a change moved the walk). Normalisation, weights and selection are the
   cycle's own, over the actual feasible nodes.

Anything that reaches beyond single rows ends the batch for the pods still to come (they are
then evaluated pod by pod): a node added or removed, a pod with affinity terms added or
removed, namespace labels, a nomination (preemption) made or dropped. Speed never changes a
decision: each pod gets exactly what one process evaluating it on the current cluster gets.
"""
from __future__ import annotations

import logging
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from schedmesh.api import convert
from schedmesh.api.types import same_template, template_key
from schedmesh.cache.snapshot import Snapshot, SnapshotChanges
from schedmesh.framework.interface import Code, CycleState, Status
from schedmesh.framework.runtime import Framework, Nominator
from schedmesh.scheduling.cycle import Diagnosis, SchedulingAlgorithm
from schedmesh.mesh.answers import FEASIBLE, NOT_EVALUATED, TemplateAnswers, node_local
from schedmesh.v1 import scheduling_pb2 as spb

log = logging.getLogger("schedmesh.queue_manager")

def _rows(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i4").astype(np.int64)


def rows_bytes(rows: np.ndarray) -> bytes:
    return np.asarray(rows, "<i4").tobytes()


def bitmap_bytes(rows: np.ndarray, n: int) -> bytes:
    mask = np.zeros(n, bool)
    mask[rows] = True
    return np.packbits(mask).tobytes()


def bitmap_rows(data: bytes, n: int) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(np.frombuffer(data, np.uint8), count=n))


def encode_raw(out, plugin: str, raw: np.ndarray) -> None:
    """One plugin's raw scores into a RawScores message, as small as they allow."""
    raw = np.asarray(raw, np.int64)
    if len(raw) == 0 or (raw == raw[0]).all():
        out.add(plugin=plugin, width=0, constant=int(raw[0]) if len(raw) else 0)
    elif raw.min() >= -(1 << 31) and raw.max() < (1 << 31):
        out.add(plugin=plugin, width=4, raw=raw.astype("<i4").tobytes())
    else:
        out.add(plugin=plugin, width=8, raw=raw.astype("<i8").tobytes())


def decode_raw(ps, count: int) -> np.ndarray:
    if ps.width == 0:
        return np.full(count, ps.constant, np.int64)
    return np.frombuffer(ps.raw, "<i4" if ps.width == 4 else "<i8").astype(np.int64)


@dataclass
class PodAnswers:
    """The shards' answers for one pod of a batch, on the batch's view."""
    pod: object
    # Per snapshot row: FEASIBLE, NOT_EVALUATED, or the index of its status in `statuses`.
    status: np.ndarray
    statuses: list[Status]
    usable: bool = True  # False: a shard could not evaluate it (the cycle does, pod by pod)
    checked: bool = False  # filter() found the batch still valid for this pod's cycle
    window: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # rows scored, sorted
    raw: Optional[dict[str, np.ndarray]] = None  # plugin -> raw scores aligned with `window`
    template: Optional["TemplateAnswers"] = None  # its template's answers, corrected as rows change (seal)


class ShardBatch:
    """One batch's answers, handed out pod by pod by FanOutEvaluator."""

    def __init__(self, snapshot: Snapshot, changes: Optional[SnapshotChanges], nominated: frozenset,
                 here: frozenset = frozenset()) -> None:
        """`changes` None: nothing was asked of the shards (every pod of the run is `here`)."""
        self.snapshot = snapshot
        self.cols = snapshot.cols
        self.changes = changes
        self.nominated = nominated
        self._here = here  # uids of the run's pods evaluated in this process (`asked_and_alone`)
        self.answers: dict[str, PodAnswers] = {}
        self.templates: list[TemplateAnswers] = []
        self.next_start: Optional[int] = None  # the start index expected after the batch
        self.trace_id = ""  # the batch's own trace (its RPCs), named on each pod's filter span
        self.hits = 0  # pods answered from the batch (tests)

    @property
    def local_rows(self) -> int:
        """Rows filtered or scored again here."""
        return sum(t.local_rows for t in self.templates)

    def close(self) -> None:
        if self.changes is not None:
            self.snapshot.unwatch(self.changes)
        for t in self.templates:
            t.close()

    @property
    def evaluated_here(self) -> int:
        """How many pods of the run are evaluated in this process (`asked_and_alone`)."""
        return len(self._here)

    def here(self, pod) -> bool:
        """Whether `pod` is evaluated in this process, not asked of the shards (`asked_and_alone`)."""
        return pod.meta.uid in self._here

    def seal(self, items: Sequence[tuple[Framework, object]], first: Sequence[int], lock) -> None:
        """Each template's answers become a TemplateAnswers its replicas in the batch share: a
        row changed since the view is filtered and scored again once per change, where a pod's
        search reads it, not once by every replica that reads it. Their change logs go on from
        the batch's (the rows changed since the view start dirty), under the cache lock so that
        no change falls between the two."""
        by_first: dict[int, TemplateAnswers] = {}
        with lock:
            if self.changes.beyond_rows or self.snapshot.cols is not self.cols:
                # A change beyond single rows since the view, or nodes changed (the columns rebuilt,
                # rows renumbered when one was added or removed): no pod is answered from this
                # batch (_answers), and its rows may not index the snapshot's.
                self.answers.clear()
                return
            changed = self._changed_rows()
            for i, (fw, pod) in enumerate(items):
                a = self.answers.get(pod.meta.uid)
                if a is None or not a.usable:
                    continue
                j = first[i]
                if j not in by_first:
                    t = TemplateAnswers(pod, fw, self.snapshot, self.snapshot.watch_changes(ignore_status_updates=True),
                                        self.nominated, a.status.copy(), list(a.statuses))
                    self.templates.append(t)  # (closed with the batch, whatever happens next)
                    if a.raw is not None:
                        t.take_scores(a.window, a.raw)
                    t.changed(changed)
                    by_first[j] = t
                a.template = by_first[j]

    def _answers(self, pod, fw: Framework, snapshot: Snapshot, nominator: Optional[Nominator]) -> Optional[PodAnswers]:
        a = self.answers.get(pod.meta.uid)
        if a is None or not a.usable or a.pod is not pod or a.template is None:
            return None
        if (self.changes.beyond_rows or snapshot is not self.snapshot or snapshot.cols is not self.cols
                or not a.template.valid_for(fw, snapshot, nominator)):
            self.answers.clear()  # the rest of the batch goes pod by pod
            return None
        if not node_local(fw, pod):
            # Node-local when the batch was prepared, no longer: a Service or a controller
            # selecting it was applied meanwhile, and its default spreading reads other nodes.
            return None
        return a

    def _changed_rows(self) -> np.ndarray:
        return np.fromiter(self.changes.rows, np.int64, len(self.changes.rows)) if self.changes.rows else \
            np.empty(0, np.int64)

    # ---- the cycle's two questions ---------------------------------------------------------
    def filter(self, algo: SchedulingAlgorithm, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
               ordered: np.ndarray, to_find: int, diagnosis: Diagnosis,
               nominator: Optional[Nominator]) -> Optional[np.ndarray]:
        """`SchedulingAlgorithm.filter_in_order` from the shards' answers; None when this pod
        has none (the caller asks the shards for it alone). Rows changed since the view are
        filtered again here where this pod's search reads them (up to the node where it
        cancels), into its template's answers. One Filter observation."""
        a = self._answers(pod, fw, snapshot, nominator)
        if a is None:
            return None
        found = a.template.filter(algo, fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)
        if found is None:
            return None  # PreFilter narrowed differently here than on the shards
        self.hits += 1
        a.checked = True
        return found

    def raw_scores(self, fw: Framework, state: CycleState, pod, snapshot: Snapshot,
                   rows: np.ndarray) -> Optional[dict[str, np.ndarray]]:
        """The raw scores of `rows`: the shards' where they scored the row on an unchanged node,
        this process's elsewhere; None when this pod has no scores here."""
        a = self.answers.get(pod.meta.uid)
        # Only right after filter() took this pod's answers (same cycle, same cache lock).
        if (a is None or not a.checked or a.template is None or a.template.raw is None or a.pod is not pod
                or snapshot is not self.snapshot):
            return None
        got = a.template.raw_scores(fw, state, pod, snapshot, rows)
        if got is None:  # a PreScore Skip differs from the template's: take this process's alone
            return fw.run_raw_score(state, pod, snapshot, rows)
        return got


# ---- building a batch from the shards' answers --------------------------------------------
def filter_answers(batch: ShardBatch, pods: Sequence, responses: Sequence[spb.FilterBatchResponse]) -> None:
    """Merge every filter shard's FilterBatchResponse into one PodAnswers per pod."""
    n = batch.cols.n
    status_of: dict[tuple, tuple[int, Status]] = {}
    for i, pod in enumerate(pods):
        status = np.full(n, NOT_EVALUATED, np.int32)
        statuses: list[Status] = []
        local: dict[int, int] = {}  # batch-wide status number -> index in this pod's list
        usable = True
        for resp in responses:
            r = resp.results[i]
            if r.error or r.HasField("prefilter_rejection"):
                usable = False  # the cycle runs PreFilter itself and says why
                break
            status[bitmap_rows(r.evaluated, n)] = FEASIBLE  # failures overwrite theirs below
            for g in r.failures:
                key = (g.code, g.plugin, tuple(g.reasons))
                got = status_of.get(key)
                if got is None:
                    got = status_of[key] = (len(status_of), Status(Code(g.code), key[2], g.plugin))
                j = local.get(got[0])
                if j is None:
                    j = local[got[0]] = len(statuses)
                    statuses.append(got[1])
                status[_rows(g.rows)] = j
        batch.answers[pod.meta.uid] = PodAnswers(pod, status, statuses, usable)


class _Walk:
    """One answers array as kube's search walks it: the evaluated rows in order, and the
    positions among them of the feasible ones. Replicas share their template's array, so the
    batch builds this once per template, and each pod's walk from its start index costs its
    window's length, not the node count (a full pass per pod was 40 us of the queue-manager's
    CPU per pod of a 64-pod batch at 5,000 nodes)."""

    __slots__ = ("rows", "feasible", "_positions")

    def __init__(self, status: np.ndarray) -> None:
        self.rows = np.flatnonzero(status != NOT_EVALUATED)
        self.feasible = np.flatnonzero(status[self.rows] == FEASIBLE)
        self._positions = self.feasible.tolist()  # for bisect: a run's pods walk it one by one

    def from_start(self, s: int, to_find: int) -> tuple[int, np.ndarray]:
        """From position `s` (wrapping around): how many rows the search processes before it
        stops at the (to_find+1)-th feasible one (all of them when it does not), and the rows of
        the first `to_find` feasible ones, ascending (the score window: a sort per pod was a
        third of this walk)."""
        n, f = len(self.rows), self._positions
        k = bisect_left(f, s)  # the first feasible position at or after s
        after = len(f) - k  # feasible positions from s to the end, before the wrap
        if not f:
            processed = n
        elif to_find < n and len(f) > to_find:
            processed = f[k + to_find] - s if after > to_find else f[to_find - after] + n - s
        else:
            processed = n
        if after >= to_find:
            return processed, self.rows[self.feasible[k:k + to_find]]
        # Wrapped around: those taken from the start lie before position s, so their rows come first.
        wrapped = min(k, to_find - after)
        return processed, self.rows[np.concatenate((self.feasible[:wrapped], self.feasible[k:]))]


def expected_windows(batch: ShardBatch, algo: SchedulingAlgorithm, items: Sequence[tuple[Framework, object]],
                     start: int) -> list[tuple[int, np.ndarray]]:
    """The nodes each pod is expected to score: kube's walk over the shards' answers from
    `start` and then the start index the pods before it leave, as if none of them changed a
    verdict (a change is corrected in `ShardBatch.filter`). Returns (item index, sorted rows)
    for pods with more than one feasible node (one is chosen without scoring); the start index
    expected after the last pod is left in `batch.next_start`."""
    n_all = batch.cols.n
    out = []
    # id(answers array) -> its walk and numFeasibleNodesToFind (an array is shared by replicas of
    # one template, of one profile: templates_of); the arrays live in batch.answers
    walks: dict[int, tuple[_Walk, int]] = {}
    for i, (fw, pod) in enumerate(items):
        a = batch.answers.get(pod.meta.uid)
        if a is None or not a.usable or n_all == 0:
            continue  # a PreFilter rejection does not move the start index
        got = walks.get(id(a.status))
        if got is None:
            walk = _Walk(a.status)
            got = walks[id(a.status)] = (walk, algo.nodes_to_find(fw, len(walk.rows)) if len(walk.rows) else 0)
        walk, to_find = got
        if len(walk.rows) == 0:
            continue
        processed, window = walk.from_start(start % len(walk.rows), to_find)
        start = (start + processed) % n_all
        if len(window) > 1 and fw.has_score_plugins():
            out.append((i, window))
    batch.next_start = start
    return out


def score_answers(batch: ShardBatch, items: Sequence[tuple[Framework, object]], asked: list[tuple[int, np.ndarray]],
                  responses: Sequence[spb.ScoreBatchResponse]) -> None:
    """Merge every score shard's ScoreBatchResponse into the pods' answers."""
    for k, (i, window) in enumerate(asked):
        a = batch.answers[items[i][1].meta.uid]
        raw: dict[str, np.ndarray] = {}
        pos_of = np.full(batch.cols.n, -1, np.int64)
        pos_of[window] = np.arange(len(window))
        covered = np.zeros(len(window), bool)
        ok = True
        for resp in responses:
            r = resp.results[k]
            if r.error:
                ok = False
                break
            pos = pos_of[_rows(r.rows)]
            covered[pos] = True
            for ps in r.scores:
                arr = raw.get(ps.plugin)
                if arr is None:
                    arr = raw[ps.plugin] = np.zeros(len(window), np.int64)
                arr[pos] = decode_raw(ps, len(pos))
        if ok and covered.all():
            a.window, a.raw = window, raw


def templates_of(items: Sequence[tuple[Framework, object]]) -> list[int]:
    """Per item, the index of the first item with its profile and template (api.types.same_template):
    replicas are asked of the shards once, their answers shared (`share_answers`). Replicas come
    together as a rule: an item is compared with the template of the item before it first, else
    looked up by its template's key (comparing it with every template before it made a run of
    1,024 distinct pods 520,000 comparisons, 0.5 s)."""
    by_key: dict[tuple, list[int]] = {}
    out: list[int] = []
    last = -1
    for i, (fw, pod) in enumerate(items):
        if last >= 0 and items[last][0] is fw and same_template(items[last][1], pod):
            out.append(last)
            continue
        firsts = by_key.setdefault((id(fw), template_key(pod)), [])
        j = next((j for j in firsts if same_template(items[j][1], pod)), None)
        if j is None:
            firsts.append(i)
            j = i
        out.append(j)
        last = j
    return out


def asked_and_alone(items: Sequence[tuple[Framework, object]], first: Sequence[int]) -> tuple[list[int], frozenset]:
    """The templates (their first items, ascending) with more than one pod in the run, asked of
    the shards once for all of them; and the uids of the run's pods alone of their template,
    evaluated in the queue-manager as with no shards. The shards' answers for a pod are a verdict
    per node from each shard, merged per pod (arrays over every node) and filtered on every node
    (a batch cannot know the start index): a run of distinct pods cost the queue-manager 1.4 ms a
    pod that way against 0.6 here with kube's sampled search (SchedulingBasic's cluster, each pod
    its own requests, 1 + 1)."""
    counts = Counter(first)
    asked = sorted(j for j, n in counts.items() if n > 1)
    alone = frozenset(pod.meta.uid for (_, pod), j in zip(items, first) if counts[j] == 1)
    return asked, alone


def share_answers(batch: ShardBatch, items: Sequence[tuple[Framework, object]], first: Sequence[int],
                  scores: bool = False) -> None:
    """Each replica takes its template's first item's answers (each pod its own PodAnswers over
    shared arrays, which ShardBatch.filter copies before correcting); with `scores`, its raw
    scores and their window too."""
    for i, (_, pod) in enumerate(items):
        j = first[i]
        if j == i:
            continue
        src = batch.answers.get(items[j][1].meta.uid)
        if src is None:
            continue
        if not scores:
            batch.answers[pod.meta.uid] = PodAnswers(pod, src.status, src.statuses, src.usable)
        else:
            a = batch.answers.get(pod.meta.uid)
            if a is not None and src.raw is not None:
                a.window, a.raw = src.window, src.raw


def template_windows(asked: Sequence[tuple[int, np.ndarray]], first: Sequence[int],
                     firsts: Sequence[int]) -> list[tuple[int, np.ndarray]]:
    """The score windows to ask for: per template, the union of its replicas' windows, indexed
    in `firsts` (the items asked of the shards)."""
    windows: dict[int, list[np.ndarray]] = {}
    for i, window in asked:
        windows.setdefault(first[i], []).append(window)
    position = {j: k for k, j in enumerate(firsts)}
    return [(position[j], _union(ws)) for j, ws in windows.items()]


def _union(windows: list[np.ndarray]) -> np.ndarray:
    """The sorted union of sorted row arrays, through one mask (np.union1d pair by pair sorted
    the growing union again for each of a template's 64 replicas: 55 ms a batch)."""
    if len(windows) == 1:
        return windows[0]
    size = max((int(w[-1]) + 1 for w in windows if len(w)), default=0)
    mask = np.zeros(size, bool)
    for w in windows:
        mask[w] = True
    return np.flatnonzero(mask)


def batch_request(view: spb.ClusterView, items: Sequence[tuple[Framework, object]], order_digest: int,
                  encoded: dict[str, spb.Pod], traceparents: dict[str, str],
                  windows: Optional[list[tuple[int, np.ndarray]]] = None) -> spb.BatchRequest:
    req = spb.BatchRequest(view=view, order_digest=order_digest)
    if windows is None:
        for fw, pod in items:
            req.pods.add(pod=encoded[pod.meta.uid], scheduler_name=fw.name,
                         traceparent=traceparents.get(pod.meta.uid, ""))
    else:
        for i, window in windows:
            fw, pod = items[i]
            req.pods.add(pod=encoded[pod.meta.uid], scheduler_name=fw.name, rows=rows_bytes(window),
                         traceparent=traceparents.get(pod.meta.uid, ""))
    return req


def encode_pods(items: Sequence[tuple[Framework, object]]) -> dict[str, spb.Pod]:
    return {pod.meta.uid: convert.pod_to_proto(pod) for _, pod in items}
