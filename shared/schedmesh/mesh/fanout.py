"""The queue-manager side of Filter/Score: fan a pod out to every node shard and merge.

Plugs into `SchedulingAlgorithm` as its evaluator, so the cycle (PreFilter, node ordering,
normalisation, weights, host selection) is the same code `schedmesh explain` runs.
A shard that fails makes the whole attempt fail with an error: the pod goes back to the
queue with backoff and is retried, never half-evaluated.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

import grpc
import numpy as np

from schedmesh.api import convert
from schedmesh.framework.interface import Code, CycleState, PluginError, Status
from schedmesh.framework.runtime import Framework, Nominator
from schedmesh.scheduling.cycle import Diagnosis
from schedmesh.telemetry import inject_grpc_metadata
from schedmesh.v1 import scheduling_pb2 as spb
from schedmesh.v1 import scheduling_pb2_grpc as sgrpc

ViewFn = Callable[[], spb.ClusterView]


class ShardUnavailableError(Exception):
    pass


class ShardedEvaluator:
    def __init__(self, filter_targets: Sequence[str], score_targets: Sequence[str], view_fn: ViewFn,
                 timeout: float = 10.0) -> None:
        self.view_fn = view_fn
        self.timeout = timeout
        self._channels = []
        self.filter_stubs = [sgrpc.FilterWorkerStub(self._channel(t)) for t in filter_targets]
        self.score_stubs = [sgrpc.ScoreWorkerStub(self._channel(t)) for t in score_targets]
        # Blocking calls on long-lived threads: grpc's `.future()` starts a channel spin
        # thread for a call when none is running, which cost milliseconds per fan-out.
        self._pool = ThreadPoolExecutor(max_workers=max(len(filter_targets), len(score_targets), 1),
                                        thread_name_prefix="fanout")

    def _channel(self, target: str) -> grpc.Channel:
        ch = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20),
                                                   ("grpc.max_send_message_length", 64 << 20)])
        self._channels.append(ch)
        return ch

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        for ch in self._channels:
            ch.close()

    def _gather(self, calls: list) -> list:
        out = []
        for shard, fut in calls:
            try:
                out.append(fut.result())
            except grpc.RpcError as e:
                raise PluginError(Status(Code.ERROR, (f"shard {shard} failed: {e.code().name}: {e.details()}",))) from e
        return out

    def filter(self, algo, fw: Framework, state: CycleState, pod, snapshot, ordered: np.ndarray, to_find: int,
               diagnosis: Diagnosis, nominator: Optional[Nominator]) -> np.ndarray:
        view = self.view_fn()
        evaluate_all = to_find >= len(ordered)
        quota = 0 if evaluate_all else math.ceil(to_find / len(self.filter_stubs))
        req = spb.FilterRequest(pod=convert.pod_to_proto(pod), scheduler_name=fw.name, view=view,
                                max_feasible=quota, evaluate_all=evaluate_all)
        md = inject_grpc_metadata()  # each shard's span joins this attempt's trace
        calls = [(i, self._pool.submit(stub.Filter, req, timeout=self.timeout, metadata=md))
                 for i, stub in enumerate(self.filter_stubs)]
        cols = snapshot.cols
        position = np.full(cols.n, -1, np.int64)  # row -> position in this cycle's node order
        position[ordered] = np.arange(len(ordered))
        feasible_pos: list[np.ndarray] = []
        status_of: dict[tuple, Status] = {}
        for resp in self._gather(calls):
            if resp.HasField("prefilter_rejection"):
                # The queue-manager ran PreFilter itself first; a shard disagreeing means it is behind.
                raise PluginError(Status(Code.ERROR, (f"shard {resp.shard} rejected the pod at PreFilter: "
                                                      f"{', '.join(resp.prefilter_rejection.reasons)}",)))
            rows = cols.rows_of(resp.feasible)
            pos = position[rows[rows >= 0]]
            feasible_pos.append(pos[pos >= 0])
            for g in resp.failures:
                key = (g.code, g.plugin, tuple(g.reasons))
                st = status_of.get(key)
                if st is None:
                    st = status_of[key] = Status(Code(g.code), key[2], g.plugin)
                    diagnosis.add_plugin_status(st)
                diagnosis.node_to_status.update((node, st) for node in g.nodes)
        all_pos = np.sort(np.concatenate(feasible_pos)) if feasible_pos else np.empty(0, np.int64)
        return ordered[all_pos[:to_find]]

    def raw_scores(self, fw: Framework, state: CycleState, pod, snapshot, rows: np.ndarray) -> dict[str, np.ndarray]:
        cols = snapshot.cols
        req = spb.ScoreRequest(pod=convert.pod_to_proto(pod), scheduler_name=fw.name, view=self.view_fn(),
                               feasible=[cols.names[r] for r in rows.tolist()])
        md = inject_grpc_metadata()
        calls = [(i, self._pool.submit(stub.Score, req, timeout=self.timeout, metadata=md))
                 for i, stub in enumerate(self.score_stubs)]
        out: dict[str, np.ndarray] = {}
        for resp in self._gather(calls):
            idx = np.asarray(resp.positions, np.int64)
            for ps in resp.scores:
                arr = out.setdefault(ps.plugin, np.zeros(len(rows), np.int64))
                if len(idx):
                    arr[idx] = np.asarray(ps.raw, np.int64)
        return out
