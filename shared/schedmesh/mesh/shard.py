"""The shard side of the Filter/Score fan-out: one partition of the nodes.

A shard evaluates its own nodes on what its caller feeds it with each request
(mesh/shard_feed.py): every node in the caller's order, the pods on its own nodes and, of other
nodes' pods, those with affinity terms. That is all a node-local pod's Filter and Score read, and
node-local pods are the only ones a shard is asked about (`_only_node_local`): pods with
spreading or inter-pod affinity of their own need cluster-wide counts and are evaluated by the
queue-manager.
"""
from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from typing import Optional

import numpy as np
from opentelemetry import trace

from schedmesh.api import convert
from schedmesh.cache.node_info import PodInfo
from schedmesh.framework.interface import CycleState, PluginError
from schedmesh.framework.runtime import Framework, Nominator
from schedmesh.mesh.answers import node_local
from schedmesh.mesh.batch import bitmap_bytes, encode_raw, rows_bytes
from schedmesh.mesh.partition import shard_of
from schedmesh.mesh.runtime import HeapFreezer
from schedmesh.mesh.shard_feed import FedCluster, FeedRefused, NotCaughtUp
from schedmesh.scheduling.cycle import Diagnosis, SchedulingAlgorithm, rotated
from schedmesh.telemetry import k8s_attributes
from schedmesh.telemetry.propagation import context_from_traceparent
from schedmesh.v1 import scheduling_pb2 as spb

log = logging.getLogger("schedmesh.shard")
tracer = trace.get_tracer("schedmesh.shard")


class RequestNominator(Nominator):
    """Nominated pods as the queue-manager sent them with the request."""

    def __init__(self, assignments) -> None:
        self._by_node: dict[str, list[PodInfo]] = {}
        for a in assignments:
            self._by_node.setdefault(a.node_name, []).append(PodInfo(convert.pod_from_proto(a.pod)))

    def nominated_pods_for_node(self, node_name: str) -> list[PodInfo]:
        return self._by_node.get(node_name, [])

    def nominated_node_names(self) -> list[str]:
        return list(self._by_node)


class NodeShard:
    """This shard's Filter and raw Score over its own nodes, on the caller's snapshot as its
    feeds keep it (the server side of FanOutEvaluator)."""

    def __init__(self, cluster: FedCluster, frameworks: dict[str, Framework], shard_index: int,
                 shard_count: int, name: str = "") -> None:
        self.cluster, self.frameworks = cluster, frameworks
        self.shard_index, self.shard_count = shard_index, shard_count
        self.name = name or f"shard-{shard_index}-of-{shard_count}"
        self.algorithm = SchedulingAlgorithm()  # the filter walk; the start index is the caller's
        self._rows_for: Optional[tuple[object, np.ndarray]] = None
        # Where request time goes, logged every 100 requests (every 10 batches): waiting for and
        # applying the request's feed, evaluating.
        self._timing = {"requests": 0, "pods": 0, "feed": 0.0, "eval": 0.0}
        # the nodes and pods its feeds keep: frozen as they grow (HeapFreezer)
        self.heap = HeapFreezer(lambda: cluster.snapshot.num_nodes() + cluster.snapshot.pod_count)

    def _account(self, feed: float, evaluate: float, pods: int = 1) -> None:
        t = self._timing
        t["requests"] += 1
        t["pods"] += pods
        t["feed"] += feed
        t["eval"] += evaluate
        if t["requests"] % 100 == 0 or (pods > 1 and t["requests"] % 10 == 0):
            n = t["requests"]
            log.info("%s: %d requests (%d pods), mean feed %.1f ms, evaluate %.1f ms",
                     self.name, n, t["pods"], 1000 * t["feed"] / n, 1000 * t["eval"] / n)
            t.update(requests=0, pods=0, feed=0.0, eval=0.0)

    def _my_mask(self, snap) -> np.ndarray:
        """Per snapshot row: does this shard own the node? Recomputed when the node set changes."""
        cols = snap.cols
        if self._rows_for is None or self._rows_for[0] is not cols:
            mask = np.fromiter((shard_of(n, self.shard_count) == self.shard_index for n in cols.names), bool, cols.n)
            self._rows_for = (cols, mask)
        return self._rows_for[1]

    def _framework(self, scheduler_name: str) -> Framework:
        fw = self.frameworks.get(scheduler_name)
        if fw is None:
            raise KeyError(f"no profile with schedulerName {scheduler_name!r}")
        return fw

    def _evaluate(self, view: spb.ClusterView, evaluate, pods: int = 1, wait: bool = True):
        """`evaluate(snapshot)` on the caller's snapshot as `view`'s feed gives it; `wait` False:
        FeedNotReady unless the feed applies at once (FedCluster.at)."""
        feed = view.shard_feed
        if feed.shard_count and (feed.shard_count, feed.shard_index) != (self.shard_count, self.shard_index):
            raise FeedRefused(f"{self.name} is shard {self.shard_index} of {self.shard_count}, but was fed "
                              f"as shard {feed.shard_index} of {feed.shard_count} (the caller lists its "
                              "shards in another order than their --shard indices)")
        t0 = time.perf_counter()
        with self.cluster.at(view.shard_feed, view.earlier_shard_feeds, wait) as snap:
            t1 = time.perf_counter()
            try:
                return evaluate(snap)
            finally:
                self._account(t1 - t0, time.perf_counter() - t1, pods)
                self.heap.after_apply()

    def _only_node_local(self, view: spb.ClusterView, fw: Framework, pod) -> None:
        if view.shard_feed.shard_count and not node_local(fw, pod):
            raise ValueError(f"{self.name} holds other shards' nodes' pods with affinity terms only: "
                             f"pod {pod.meta.namespace}/{pod.meta.name} is not node-local, its caller evaluates it")

    def filter(self, req: spb.FilterRequest, wait: bool = True) -> spb.FilterResponse:
        fw = self._framework(req.scheduler_name)
        pod = convert.pod_from_proto(req.pod)
        self._only_node_local(req.view, fw, pod)
        return self._evaluate(req.view, lambda snap: self._filter(fw, req, pod, snap), wait=wait)

    def _filter(self, fw: Framework, req: spb.FilterRequest, pod, snap) -> spb.FilterResponse:
        resp = spb.FilterResponse(shard=self.name, reads_earlier_feeds=True)
        state = CycleState()
        pre_res, st, narrowing = fw.run_pre_filter(state, pod, snap)
        resp.prefilter_narrowing_plugins.extend(sorted(narrowing))
        if st is not None and not st.is_success():
            resp.prefilter_rejection.CopyFrom(spb.NodeFailure(code=int(st.code), plugin=st.plugin, reasons=st.reasons))
            return resp
        cols = snap.cols
        if not req.evaluate_all and req.order_digest:
            self._check_order(req.order_digest, snap)
        mine = self._my_mask(snap)
        resp.shard_nodes = int(mine.sum())
        # The global order (PreFilter-narrowed), rolled by the caller's start index, as
        # one process would walk it; this shard examines only its own nodes of it.
        rows = snap.all_indices()
        if pre_res is not None and not pre_res.all_nodes():
            keep = [cols.index_of(n) for n in pre_res.node_names]
            rows = np.array(sorted(i for i in keep if i >= 0), np.int64)
        if len(rows) == 0:
            return resp
        start = 0 if req.evaluate_all else req.start_index % len(rows)
        ordered = rotated(rows, start)
        ordered = ordered[mine[ordered]]
        if len(ordered) == 0:
            return resp
        # One more than the caller keeps: the merge needs the node where kube's search cancels.
        to_find = (len(ordered) if req.evaluate_all or req.max_feasible <= 0
                   else min(req.max_feasible + 1, len(ordered)))
        diagnosis = Diagnosis()
        feasible = self.algorithm.filter_in_order(fw, state, pod, snap, ordered, to_find, diagnosis,
                                                  RequestNominator(req.view.nominated))
        names = snap.cols.names
        resp.feasible.extend([names[r] for r in feasible.tolist()])
        groups: dict[int, tuple] = {}  # statuses are shared objects: group nodes by status
        for node, s in diagnosis.node_to_status.items():
            g = groups.get(id(s))
            if g is None:
                g = groups[id(s)] = (s, [])
            g[1].append(node)
        for s, nodes in groups.values():
            resp.failures.add(code=int(s.code), plugin=s.plugin, reasons=s.reasons, nodes=nodes)
        return resp

    def score(self, req: spb.ScoreRequest, wait: bool = True) -> spb.ScoreResponse:
        fw = self._framework(req.scheduler_name)
        pod = convert.pod_from_proto(req.pod)
        self._only_node_local(req.view, fw, pod)
        return self._evaluate(req.view, lambda snap: self._score(fw, req, pod, snap), wait=wait)

    def _score(self, fw: Framework, req: spb.ScoreRequest, pod, snap) -> spb.ScoreResponse:
        cols = snap.cols
        state = CycleState()
        fw.run_pre_filter(state, pod, snap)  # some PreScore steps read PreFilter state
        all_rows = cols.rows_of(req.feasible)
        known = all_rows >= 0
        fw.run_pre_score(state, pod, snap, all_rows[known])
        mine_pos = np.flatnonzero(known & self._my_mask(snap)[np.where(known, all_rows, 0)])
        raw = fw.run_raw_score(state, pod, snap, all_rows[mine_pos])
        resp = spb.ScoreResponse(shard=self.name, positions=mine_pos.tolist(), reads_earlier_feeds=True)
        for plugin, arr in raw.items():
            resp.scores.add(plugin=plugin, raw=arr.tolist())
        return resp

    # ---- batches (schedmesh.mesh.batch) ---------------------------------------------------
    def _check_order(self, digest: str, snap) -> None:
        """NotCaughtUp unless this shard orders the nodes as the caller does (`digest`)."""
        if digest != snap.cols.order_digest:
            raise NotCaughtUp(f"{self.name} orders the nodes differently from the caller "
                              f"(digest {snap.cols.order_digest} != {digest}); not caught up")

    def filter_batch(self, req: spb.BatchRequest, wait: bool = True) -> spb.FilterBatchResponse:
        """Filter every pod of the batch on every node of this shard (no quota: the caller walks
        kube's node order over all shards' answers), each pod on the same cluster."""
        def evaluate(snap) -> spb.FilterBatchResponse:
            self._check_order(req.order_digest, snap)
            resp = spb.FilterBatchResponse(shard=self.name, reads_earlier_feeds=True)
            mine = self._my_mask(snap)
            nominator = RequestNominator(req.view.nominated)
            for bp in req.pods:
                with _pod_span("filter", bp):
                    fw, pod = self._framework(bp.scheduler_name), convert.pod_from_proto(bp.pod)
                    self._only_node_local(req.view, fw, pod)
                    self._filter_one(resp.results.add(), fw, pod, snap, mine, nominator)
            return resp
        return self._evaluate(req.view, evaluate, len(req.pods), wait)

    def _filter_one(self, out: spb.PodFilterResult, fw: Framework, pod, snap, mine: np.ndarray,
                    nominator: Nominator) -> None:
        state = CycleState()
        try:
            pre_res, st, _ = fw.run_pre_filter(state, pod, snap)
            if st is not None and not st.is_success():
                if not st.is_rejected():
                    out.error = st.message()
                    return
                out.prefilter_rejection.CopyFrom(spb.NodeFailure(code=int(st.code), plugin=st.plugin,
                                                                 reasons=st.reasons))
                return
            rows = np.flatnonzero(mine)
            if pre_res is not None and not pre_res.all_nodes():
                cols = snap.cols
                narrowed = np.array(sorted(i for i in (cols.index_of(n) for n in pre_res.node_names) if i >= 0),
                                    np.int64)
                rows = narrowed[mine[narrowed]]
            _, rejected, statuses = self.algorithm.filter_rows(fw, state, pod, snap, rows, nominator)
        except PluginError as e:
            out.error = str(e)
            return
        out.evaluated = bitmap_bytes(rows, snap.cols.n)
        groups: dict[int, tuple] = {}  # statuses are shared objects: group rows by status
        for r, st in zip(rejected.tolist(), statuses):
            g = groups.get(id(st))
            if g is None:
                g = groups[id(st)] = (st, [])
            g[1].append(r)
        for st, rs in groups.values():
            out.failures.add(code=int(st.code), plugin=st.plugin, reasons=st.reasons, rows=rows_bytes(rs))

    def score_batch(self, req: spb.BatchRequest, wait: bool = True) -> spb.ScoreBatchResponse:
        """Raw Score of every pod of the batch on the requested rows this shard owns."""
        def evaluate(snap) -> spb.ScoreBatchResponse:
            self._check_order(req.order_digest, snap)
            resp = spb.ScoreBatchResponse(shard=self.name, reads_earlier_feeds=True)
            mine = self._my_mask(snap)
            for bp in req.pods:
                with _pod_span("score", bp):
                    fw, pod = self._framework(bp.scheduler_name), convert.pod_from_proto(bp.pod)
                    self._only_node_local(req.view, fw, pod)
                    self._score_one(resp.results.add(), fw, pod, snap, mine,
                                    np.frombuffer(bp.rows, "<i4").astype(np.int64))
            return resp
        return self._evaluate(req.view, evaluate, len(req.pods), wait)

    @staticmethod
    def _score_one(out: spb.PodScoreResult, fw: Framework, pod, snap, mine: np.ndarray, rows: np.ndarray) -> None:
        state = CycleState()
        try:
            fw.run_pre_filter(state, pod, snap)  # some PreScore steps read PreFilter state
            fw.run_pre_score(state, pod, snap, rows)
            own = rows[mine[rows]]
            raw = fw.run_raw_score(state, pod, snap, own)
        except PluginError as e:
            out.error = str(e)
            return
        out.rows = rows_bytes(own)
        for plugin, arr in raw.items():
            encode_raw(out.scores, plugin, arr)


def _pod_span(name: str, bp: spb.BatchPod):
    """A span for one pod of a batch, in that pod's attempt trace (one trace per attempt)."""
    if not bp.traceparent:
        return nullcontext()
    # (parsed directly: the propagator's extraction was a twentieth of a shard's CPU in a run)
    return tracer.start_as_current_span(name, context=context_from_traceparent(bp.traceparent),
                                        attributes=k8s_attributes(bp.pod))
