"""The filter / score worker process: a ClusterCache replica serving one node shard."""
from __future__ import annotations

import argparse
import asyncio
import os

import grpc

from schedmesh.bus.consumer import shard_fetch_interval_ms
from schedmesh.framework.runtime import build_frameworks
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.runtime import CacheFollower, ServiceProcess
from schedmesh.mesh.shard import NodeShard
from schedmesh.telemetry import metrics
from schedmesh.v1 import scheduling_pb2_grpc as sgrpc


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
                return await asyncio.to_thread(fn, request)
        except TimeoutError as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
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


async def serve(kind: str, shard: int, shards: int, port: int, bootstrap: str, config: str | None) -> None:
    name = f"{kind}-worker-{shard}"
    proc = ServiceProcess(name, port)
    cache = ClusterCache(status_reports=False)  # a shard filters and scores: no plugin reads a pod's status
    frameworks = build_frameworks(load_profiles(config))
    for fw in frameworks.values():
        fw.set_snapshot_source(lambda: cache.snapshot)
    evaluator = NodeShard(cache, frameworks, shard, shards, name)
    servicer = _Servicer(evaluator)
    if kind == "filter":
        sgrpc.add_FilterWorkerServicer_to_server(servicer, proc.server)
    else:
        sgrpc.add_ScoreWorkerServicer_to_server(servicer, proc.server)
    await proc.start()
    # Paced like the watchers: a request whose view this replica has not read yet ends the pause
    # (ClusterCache.wait_for), so only the fetches between requests are spared (a fifth of the
    # broker's CPU with 2 + 2 shards).
    follower = CacheFollower(bootstrap, cache, client_id=name, fetch_interval_ms=shard_fetch_interval_ms())
    await follower.start()
    proc.spawn(follower.follow(), "follow")
    await proc.set_serving(True)
    await proc.wait_and_stop(follower.stop)


def main(kind: str) -> None:
    p = argparse.ArgumentParser(prog=f"{kind}-worker", description=f"schedmesh {kind} worker: one node shard")
    p.add_argument("--shard", type=int, default=int(os.environ.get("SCHEDMESH_SHARD", "0")))
    p.add_argument("--shards", type=int, default=int(os.environ.get("SCHEDMESH_SHARDS", "1")))
    p.add_argument("--port", type=int, default=int(os.environ.get("SCHEDMESH_PORT", "0")))
    p.add_argument("--bootstrap", default=os.environ.get("SCHEDMESH_KAFKA", "127.0.0.1:9092"))
    p.add_argument("--config", default=os.environ.get("SCHEDMESH_CONFIG"))
    a = p.parse_args()
    if not 0 <= a.shard < a.shards:
        p.error(f"--shard must be in [0, {a.shards})")
    asyncio.run(serve(kind, a.shard, a.shards, a.port, a.bootstrap, a.config))
