"""The queue-manager side of Filter/Score: fan a pod out to every node shard and merge.

Plugs into `SchedulingAlgorithm` as its evaluator, so the cycle (PreFilter, node ordering,
normalisation, weights, host selection) is the same code `schedmesh explain` runs.

Sampling is kube's, across shards: every shard walks the same global node order from the
queue-manager's start index and stops once it has found numFeasibleNodesToFind + 1 nodes of
its own; the merge keeps the first numFeasibleNodesToFind feasible nodes in global order and
the failures before the next feasible one (where kube's search cancels), which is exactly what
one process walking that order examines (no shard can stop before that point: it would need
that many feasible nodes of its own before it). The start index then advances by the same
count as in one process.

Each request carries, per shard, the changes to this process's snapshot since the previous
request to that shard (mesh/shard_feed.py): the shards evaluate on this process's cluster and
read no topic.

A shard that fails makes the whole attempt fail with an error: the pod goes back to the
queue with backoff and is retried, never half-evaluated; that shard's next request carries
the whole cluster.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

import grpc
import numpy as np
from opentelemetry import trace

from schedmesh.api import convert
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import Code, CycleState, PluginError, Status
from schedmesh.framework.runtime import Framework, Nominator
from schedmesh.mesh import batch as batching
from schedmesh.mesh.answers import node_local, nominations
from schedmesh.mesh.replicas import ReplicaEvaluator
from schedmesh.mesh.runtime import peer_channel
from schedmesh.mesh.shard_feed import FeedReader, ShardFeed, SharedFeed, encode_node, encode_pod
from schedmesh.mesh.shard_stream import ShardStream
from schedmesh.scheduling.cycle import Diagnosis
from schedmesh.telemetry import inject_grpc_metadata
from schedmesh.telemetry.propagation import traceparent_of
from schedmesh.v1 import scheduling_pb2 as spb
from schedmesh.v1 import scheduling_pb2_grpc as sgrpc

ViewFn = Callable[[], spb.ClusterView]

# A shard's stream unused this long is closed (ShardStream.close_if_idle): runs come far more
# often while pods arrive, and opening a stream again costs the shard about what one call does.
STREAM_IDLE_SECONDS = 5.0


class FanOutEvaluator(ReplicaEvaluator):
    """Filter on the filter shards and raw Score on the score shards; either phase runs in
    this process (ReplicaEvaluator: a template's answers kept for its replicas) when it has no
    shards."""

    def __init__(self, filter_targets: Sequence[str], score_targets: Sequence[str], view_fn: ViewFn,
                 timeout: float = 10.0, encode: Callable[[object], bytes] = encode_pod, ask_alone: bool = False) -> None:
        """`view_fn`: the nominated pods (the shards take the rest from their feeds); `encode`:
        a pod's serialized Pod, for the feeds; `ask_alone`: a run's pods alone of their template
        are asked of the shards too (by default evaluated here: batching.asked_and_alone)."""
        super().__init__()
        self.view_fn = view_fn
        self.ask_alone = ask_alone
        self.timeout = timeout
        self._channels = []
        self.filter_stubs = [sgrpc.FilterWorkerStub(self._channel(t)) for t in filter_targets]
        self.score_stubs = [sgrpc.ScoreWorkerStub(self._channel(t)) for t in score_targets]
        # A run's requests (and the idle feeds) go on one stream per shard (mesh/shard_stream.py)
        self.filter_streams = [ShardStream(stub.FilterBatches, f"filter-shard-{i}", timeout)
                               for i, stub in enumerate(self.filter_stubs)]
        self.score_streams = [ShardStream(stub.ScoreBatches, f"score-shard-{i}", timeout)
                              for i, stub in enumerate(self.score_stubs)]
        self._encode = encode
        # Each pod and node encoded once for all feeds: uid or name -> (object, its bytes)
        self._encoded: dict[str, tuple[object, bytes]] = {}
        self._encoded_nodes: dict[str, tuple[object, bytes]] = {}
        # Shard i of n is sent its own nodes' pods and other nodes' pods with affinity terms: it
        # is asked about node-local pods only (others are evaluated here).
        # Filter shard i and score shard i of as many own the same nodes: one feed, read by both.
        self.filter_feeds, self.score_feeds = self._feeds(len(self.filter_stubs), len(self.score_stubs))
        # Blocking calls on long-lived threads: grpc's `.future()` starts a channel spin
        # thread for a call when none is running, which cost milliseconds per fan-out.
        # Twice the shards: a batch being prepared and a pod asking alone may overlap.
        self._pool = ThreadPoolExecutor(max_workers=2 * max(len(filter_targets), len(score_targets), 1),
                                        thread_name_prefix="fanout")
        self._batch: Optional[batching.ShardBatch] = None  # the run of pods being decided (mesh/batch.py)
        # Where a batch's time goes (seconds, summed), and how many rows its pods' cycles filtered
        # or scored again here (nodes changed since the batch's view): the queue-manager's log
        # shows both.
        self.batch_phases = dict.fromkeys(("view", "encode", "filter_rpc", "merge", "score_rpc"), 0.0)
        self.batch_local_rows = 0

    def _feeds(self, filters: int, scores: int) -> tuple[list[FeedReader], list[FeedReader]]:
        def shared(i: int, n: int, readers: int) -> SharedFeed:
            return SharedFeed(lambda: ShardFeed(self._encode_once, self._encode_node_once, i, n), readers)
        if filters == scores:
            pairs = [shared(i, filters, 2).readers for i in range(filters)]
            return [p[0] for p in pairs], [p[1] for p in pairs]
        return ([shared(i, filters, 1).readers[0] for i in range(filters)],
                [shared(i, scores, 1).readers[0] for i in range(scores)])

    def _encode_once(self, pod) -> bytes:
        return _once(self._encoded, pod.meta.uid, pod, self._encode, 8192)

    def _encode_node_once(self, node) -> bytes:
        return _once(self._encoded_nodes, node.meta.name, node, encode_node, 1 << 20)

    def keep_fed(self, lock, snapshot_fn, stop, idle: float = 1.0) -> None:
        """Until `stop` is set: send each shard the changes no request has carried for `idle`
        seconds, in an empty batch (its first feed, the whole cluster, as soon as it answers).
        So a request after a quiet spell (the first pods after the nodes registered) carries
        a few changes, not the backlog, and a restarted shard is fed before it is needed.
        A shard's stream unused for STREAM_IDLE_SECONDS is closed (ShardStream.close_if_idle)."""
        plans = [*zip(self.filter_streams, self.filter_feeds), *zip(self.score_streams, self.score_feeds)]
        self._probe(plans)  # at once: before the cluster is sent, each shard says what feeds it reads
        while plans and not stop.wait(idle / 2):
            self._probe(plans)
            for stream, feed in plans:
                if time.monotonic() - feed.sent_at < idle:
                    continue
                with lock:
                    snapshot = snapshot_fn()
                    if not feed.pending(snapshot):
                        continue
                    req = spb.BatchRequest(view=self.view_fn(), order_digest=snapshot.cols.order_digest)
                    feed.take(snapshot, req.view)
                try:
                    feed.confirm(stream.send(req).result().reads_earlier_feeds)
                except grpc.RpcError as e:
                    feed.reset()
                    batching.log.debug("feeding an idle shard failed (%s); the next request sends the cluster",
                                       e.code().name)
            for stream, _ in plans:
                stream.close_if_idle(STREAM_IDLE_SECONDS)

    def _probe(self, plans) -> None:
        """Ask each shard that has not answered yet, with a feed of an empty cluster, whether it
        applies earlier feeds (SharedFeed.probe)."""
        empty = Snapshot().cols.order_digest
        for stream, feed in plans:
            req = spb.BatchRequest(view=self.view_fn(), order_digest=empty)
            if not feed.probe(req.view):
                continue
            try:
                feed.confirm(stream.send(req).result().reads_earlier_feeds)
            except grpc.RpcError:
                feed.reset()  # (not up yet: asked again next time)

    @property
    def sharded(self) -> bool:
        return bool(self.filter_stubs or self.score_stubs)

    def _channel(self, target: str) -> grpc.Channel:
        # Mutual TLS with this process's certificate (the shards admit the queue-manager's only).
        ch = peer_channel(target)
        self._channels.append(ch)
        return ch

    def close(self) -> None:
        for feed in (*self.filter_feeds, *self.score_feeds):
            feed.reset()
        self._pool.shutdown(wait=False)
        for stream in (*self.filter_streams, *self.score_streams):
            stream.close()
        for ch in self._channels:
            ch.close()

    @staticmethod
    def _send(targets: list, feeds: list[FeedReader], request, snapshot, call: Callable) -> list:
        """`request` to every shard, each with its feed (taken now: call under the lock the
        snapshot's writers take), by `call(target, request)`, which returns the answer's future;
        the calls in flight, for `_gather`."""
        calls = []
        for i, (target, feed) in enumerate(zip(targets, feeds)):
            req = type(request)()
            req.CopyFrom(request)
            feed.take(snapshot, req.view)
            calls.append((i, feed, call(target, req)))
        return calls

    def _unary(self, method: str, md) -> Callable:
        """A `call` for `_send`: `method` of a shard's stub, on the pool."""
        return lambda stub, req: self._pool.submit(getattr(stub, method), req, timeout=self.timeout, metadata=md)

    def _gather(self, calls: list) -> list:
        out, failed = [], None
        for shard, feed, fut in calls:
            try:
                out.append(fut.result())
                feed.confirm(out[-1].reads_earlier_feeds)
            except grpc.RpcError as e:
                feed.reset()  # it may not have applied its feed: the whole cluster next time
                failed = failed or PluginError(Status(Code.ERROR, (f"shard {shard} failed: {e.code().name}: "
                                                                   f"{e.details()}",)))
        if failed is not None:
            raise failed
        return out

    # ---- a run of pods in one request per shard ------------------------------------------
    def prepare_batch(self, algo, items: Sequence[tuple[Framework, object]], lock, snapshot_fn,
                      nominator: Optional[Nominator], traceparents: Optional[dict[str, str]],
                      start: int) -> Optional[batching.ShardBatch]:
        """The shards' answers for `items` (node-local pods, in queue order) on the cluster as it
        is now, expecting the node search to start at `start` for the first of them; None when
        there are no shards, too few pods, or a shard failed (the pods then ask one by one). Pods
        alone of their template in the run are not asked: they are evaluated here (batching.asked_and_alone);
        a run of such pods alone gets a batch that asked the shards nothing (`changes` None).
        `traceparents`: each pod's attempt, which the shards' spans for that pod join. Safe to
        run beside the cycles of an earlier batch (the change log starts with the view)."""
        if not self.filter_stubs or len(items) < 2:
            return None
        traceparents = traceparents or {}
        clock = self.batch_phases
        t0 = time.perf_counter()
        # Replicas of one template are asked once; their answers are shared. A pod alone of its
        # template in the run is evaluated here (batching.asked_and_alone).
        first = batching.templates_of(items)
        firsts, here = (sorted(set(first)), frozenset()) if self.ask_alone else batching.asked_and_alone(items, first)
        if not firsts:
            return batching.ShardBatch(snapshot_fn(), None, frozenset(), here)
        asked_items = [items[j] for j in firsts]
        encoded = batching.encode_pods(asked_items)
        parent = traceparent_of(trace.get_current_span())  # each shard's span for a request joins this trace
        t1 = time.perf_counter()
        clock["encode"] += t1 - t0
        with lock:  # the feeds and the change log start from one cluster state
            snapshot = snapshot_fn()
            view = self.view_fn()
            batch = batching.ShardBatch(snapshot, snapshot.watch_changes(ignore_status_updates=True),
                                        nominations(nominator), here)
            req = batching.batch_request(view, asked_items, batch.cols.order_digest, encoded, traceparents)
            req.traceparent = parent
            try:
                calls = self._send(self.filter_streams, self.filter_feeds, req, snapshot, ShardStream.send)
            except BaseException:  # (the pool shut down by stop()): the change log goes too
                batch.close()
                raise
        t2 = time.perf_counter()
        clock["view"] += t2 - t1
        try:
            responses = self._gather(calls)
            t3 = time.perf_counter()
            clock["filter_rpc"] += t3 - t2
            batching.filter_answers(batch, [pod for _, pod in asked_items], responses)
            batching.share_answers(batch, items, first)
            asked = batching.expected_windows(batch, algo, items, start)
            t4 = time.perf_counter()
            clock["merge"] += t4 - t3
            if asked and self.score_stubs:
                windows = batching.template_windows(asked, first, firsts)
                req = batching.batch_request(view, asked_items, batch.cols.order_digest, encoded, traceparents,
                                             windows)
                req.traceparent = parent
                # Fed the cluster as it is now: rows changed since the view are taken again here
                # where read (the batch's change log), whatever the shards answer for them.
                with lock:
                    calls = self._send(self.score_streams, self.score_feeds, req, snapshot_fn(), ShardStream.send)
                responses = self._gather(calls)
                t5 = time.perf_counter()
                clock["score_rpc"] += t5 - t4
                batching.score_answers(batch, asked_items, windows, responses)
                batching.share_answers(batch, items, first, scores=True)
                clock["merge"] += time.perf_counter() - t5
            batch.seal(items, first, lock)
        except PluginError as e:
            batching.log.warning("batch of %d pods not evaluated on the shards (%s); asking pod by pod",
                                 len(items), e)
            batch.close()
            return None
        except BaseException:
            batch.close()  # its change logs stop being kept (the loop asks pod by pod)
            raise
        return batch

    def use_batch(self, batch: Optional[batching.ShardBatch]) -> None:
        """The cycles that follow, until `end_batch`, take their answers from `batch`."""
        self.end_batch()
        self._batch = batch

    def _here(self, pod) -> bool:
        """Whether the run being decided left `pod` to this process (batching.asked_and_alone)."""
        return self._batch is not None and self._batch.here(pod)

    def end_batch(self) -> None:
        if self._batch is not None:
            self.batch_local_rows += self._batch.local_rows
            self._batch.close()
            self._batch = None

    def filter(self, algo, fw: Framework, state: CycleState, pod, snapshot, ordered: np.ndarray, to_find: int,
               diagnosis: Diagnosis, nominator: Optional[Nominator]) -> np.ndarray:
        if self._batch is not None:
            got = self._batch.filter(algo, fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)
            if got is not None:
                return got
        # (the shards hold what node-local pods read)
        if not self.filter_stubs or not node_local(fw, pod) or self._here(pod):
            return super().filter(algo, fw, state, pod, snapshot, ordered, to_find, diagnosis, nominator)
        cols = snapshot.cols
        evaluate_all = to_find >= len(ordered)
        # `ordered` is the narrowed global order rolled by the start index; shards rebuild it.
        start = 0 if evaluate_all else algo.next_start_node_index % len(ordered)
        req = spb.FilterRequest(pod=convert.pod_to_proto(pod), scheduler_name=fw.name, view=self.view_fn(),
                                max_feasible=0 if evaluate_all else to_find, evaluate_all=evaluate_all,
                                start_index=start, order_digest=cols.order_digest)
        md = inject_grpc_metadata()  # each shard's span joins this attempt's trace
        # (in the cycle: locked)
        calls = self._send(self.filter_stubs, self.filter_feeds, req, snapshot, self._unary("Filter", md))
        position = np.full(cols.n, -1, np.int64)  # row -> position in this cycle's node order
        position[ordered] = np.arange(len(ordered))

        def positions(names) -> np.ndarray:
            """Each named node's position in this cycle's order; -1 for a node unknown here or
            outside the order: a shard's word on it was not examined here."""
            rows = cols.rows_of(names)
            return np.where(rows >= 0, position[rows], -1)

        feasible_pos: list[np.ndarray] = []
        failures: list[tuple[Status, np.ndarray, list[str]]] = []
        status_of: dict[tuple, Status] = {}
        for resp in self._gather(calls):
            if resp.HasField("prefilter_rejection"):
                # The queue-manager ran PreFilter itself first; a shard disagreeing means it is behind.
                raise PluginError(Status(Code.ERROR, (f"shard {resp.shard} rejected the pod at PreFilter: "
                                                      f"{', '.join(resp.prefilter_rejection.reasons)}",)))
            pos = positions(resp.feasible)
            feasible_pos.append(pos[pos >= 0])
            for g in resp.failures:
                key = (g.code, g.plugin, tuple(g.reasons))
                st = status_of.get(key)
                if st is None:
                    st = status_of[key] = Status(Code(g.code), key[2], g.plugin)
                pos = positions(g.nodes)
                known = pos >= 0  # (-1 would pass the cutoff below)
                failures.append((st, pos[known], [n for n, k in zip(g.nodes, known.tolist()) if k]))
        all_pos = np.sort(np.concatenate(feasible_pos)) if feasible_pos else np.empty(0, np.int64)
        taken = all_pos[:to_find]
        # kube cancels the search at the (to_find+1)-th feasible node: failures after it were
        # never examined (every shard returns up to to_find+1 of its own, so that node is here).
        cutoff = int(all_pos[to_find]) if len(all_pos) > to_find and not evaluate_all else len(ordered)
        used: set[int] = set()
        for st, pos, nodes in failures:
            keep = pos < cutoff
            if not keep.any():
                continue
            if id(st) not in used:
                used.add(id(st))
                diagnosis.add_plugin_status(st)
            diagnosis.node_to_status.update((n, st) for n, k in zip(nodes, keep.tolist()) if k)
        return ordered[taken]

    def raw_scores(self, fw: Framework, state: CycleState, pod, snapshot, rows: np.ndarray) -> dict[str, np.ndarray]:
        if self._batch is not None:
            got = self._batch.raw_scores(fw, state, pod, snapshot, rows)
            if got is not None:
                return got
        # (answers kept for replicas only where this process filtered)
        if not self.score_stubs or not node_local(fw, pod) or self._here(pod):
            return super().raw_scores(fw, state, pod, snapshot, rows)
        cols = snapshot.cols
        req = spb.ScoreRequest(pod=convert.pod_to_proto(pod), scheduler_name=fw.name, view=self.view_fn(),
                               feasible=[cols.names[r] for r in rows.tolist()])
        md = inject_grpc_metadata()
        calls = self._send(self.score_stubs, self.score_feeds, req, snapshot, self._unary("Score", md))
        out: dict[str, np.ndarray] = {}
        for resp in self._gather(calls):
            idx = np.asarray(resp.positions, np.int64)
            for ps in resp.scores:
                arr = out.setdefault(ps.plugin, np.zeros(len(rows), np.int64))
                if len(idx):
                    arr[idx] = np.asarray(ps.raw, np.int64)
        return out


def _once(memo: dict, key: str, obj, encode, limit: int) -> bytes:
    """encode(obj), remembered while `obj` is the object under `key`."""
    got = memo.get(key)
    if got is not None and got[0] is obj:
        return got[1]
    if len(memo) >= limit:
        memo.clear()
    data = memo[key] = (obj, encode(obj))
    return data[1]
