"""The filter / score worker process: one node shard, on the snapshot its callers feed it."""
from __future__ import annotations

import argparse
import asyncio
import os

import grpc
from opentelemetry import trace

from schedmesh.framework.runtime import build_frameworks
from schedmesh.mesh.runtime import ServiceProcess
from schedmesh.mesh.shard import NodeShard
from schedmesh.mesh.shard_feed import FedCluster, FeedNotReady, FeedRefused, NotCaughtUp
from schedmesh.telemetry import metrics
from schedmesh.telemetry.propagation import context_from_traceparent
from schedmesh.v1 import scheduling_pb2_grpc as sgrpc

tracer = trace.get_tracer("schedmesh.shard")


def load_profiles(config: str | None):
    if not config:
        from schedmesh.framework.profile import default_profile
        return [default_profile()]
    from schedmesh.framework.config import load_scheduler_config
    return load_scheduler_config(config).profiles


class _Servicer(sgrpc.FilterWorkerServicer, sgrpc.ScoreWorkerServicer):
    def __init__(self, evaluator: NodeShard) -> None:
        self.evaluator = evaluator

    async def _call(self, fn, request, context):
        try:
            with metrics.time_shard_request(self.evaluator.name, fn.__name__):
                try:
                    # Changes that follow what this shard has: answered here, on the event loop
                    # (handing a request to a thread and back cost about 0.1 ms of the 0.8-2 it
                    # takes). One that waits for another request's feed, or brings the whole
                    # cluster, goes to a thread: the loop stays free to receive that feed.
                    return fn(request, wait=False)
                except FeedNotReady:
                    return await asyncio.to_thread(fn, request)
        except FeedRefused as e:  # the caller sends the whole cluster next
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except (TimeoutError, NotCaughtUp) as e:  # a feed waited for too long; nodes not in order yet
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        except ValueError as e:  # a pod this shard's feed does not cover (not node-local)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except KeyError as e:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(e))

    async def Filter(self, request, context):
        return await self._call(self.evaluator.filter, request, context)

    async def Score(self, request, context):
        return await self._call(self.evaluator.score, request, context)

    async def FilterBatch(self, request, context):
        return await self._call(self.evaluator.filter_batch, request, context)

    async def ScoreBatch(self, request, context):
        return await self._call(self.evaluator.score_batch, request, context)

    async def _stream(self, fn, method: str, requests, context):
        """Each request of a caller's stream answered in turn; an error ends the stream with the
        status a unary call would get (the caller opens another)."""
        async for request in requests:
            # The stream's own server span would last as long as the stream (tracing leaves these
            # methods out): each request gets its own, a child of the caller's span, ended before
            # the answer is sent (not when the next request comes).
            with tracer.start_as_current_span(method, context=context_from_traceparent(request.traceparent),
                                              kind=trace.SpanKind.SERVER,
                                              attributes={"schedmesh.pods": len(request.pods)}):
                answer = await self._call(fn, request, context)
            yield answer

    # (grpc.aio serves a streaming method through its async generator function)
    async def FilterBatches(self, requests, context):
        async for answer in self._stream(self.evaluator.filter_batch, "FilterBatches", requests, context):
            yield answer

    async def ScoreBatches(self, requests, context):
        async for answer in self._stream(self.evaluator.score_batch, "ScoreBatches", requests, context):
            yield answer


async def serve(kind: str, shard: int, shards: int, port: int, config: str | None) -> None:
    name = f"{kind}-worker-{shard}"
    proc = ServiceProcess(name, port)
    cluster = FedCluster()
    frameworks = build_frameworks(load_profiles(config))
    for fw in frameworks.values():
        fw.set_snapshot_source(lambda: cluster.snapshot)
    evaluator = NodeShard(cluster, frameworks, shard, shards, name)
    servicer = _Servicer(evaluator)
    if kind == "filter":
        sgrpc.add_FilterWorkerServicer_to_server(servicer, proc.server)
    else:
        sgrpc.add_ScoreWorkerServicer_to_server(servicer, proc.server)
    await proc.start()
    await proc.set_serving(True)  # ready at once: each caller's first request brings the cluster
    await proc.wait_and_stop()


def main(kind: str) -> None:
    p = argparse.ArgumentParser(prog=f"{kind}-worker", description=f"schedmesh {kind} worker: one node shard")
    p.add_argument("--shard", type=int, default=int(os.environ.get("SCHEDMESH_SHARD", "0")))
    p.add_argument("--shards", type=int, default=int(os.environ.get("SCHEDMESH_SHARDS", "1")))
    p.add_argument("--port", type=int, default=int(os.environ.get("SCHEDMESH_PORT", "0")))
    p.add_argument("--config", default=os.environ.get("SCHEDMESH_CONFIG"))
    a = p.parse_args()
    if not 0 <= a.shard < a.shards:
        p.error(f"--shard must be in [0, {a.shards})")
    asyncio.run(serve(kind, a.shard, a.shards, a.port, a.config))
