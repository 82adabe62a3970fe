"""The queue-manager process: the Scheduler API and the scheduling loop on one gRPC server."""
from __future__ import annotations

import asyncio
import logging


from schedmesh.mesh.controllers.forwarding import PolicyForwarder
from schedmesh.mesh.runtime import ServiceProcess
from schedmesh.v1 import policy_pb2_grpc, queue_pb2_grpc
from schedmesh.mesh.scheduler.api import SchedulerServicer
from schedmesh.mesh.scheduler.scheduler import QueueManager
from schedmesh.mesh.scheduler.state import QueueManagerConfig

log = logging.getLogger("schedmesh.queue_manager")


async def serve(cfg: QueueManagerConfig, bootstrap: str, port: int) -> None:
    proc = ServiceProcess(cfg.client_id, port)
    qm = QueueManager(cfg, bootstrap)
    servicer = SchedulerServicer(qm)
    queue_pb2_grpc.add_SchedulerServicer_to_server(servicer, proc.server)
    # evict, cordon, taint: served by the controller-manager, reachable here
    forwarder = PolicyForwarder(offsets=qm.cache.view_offsets)
    policy_pb2_grpc.add_PolicyServicer_to_server(forwarder, proc.server)
    await proc.start()
    if proc.metrics_port:  # for `schedmesh get services` (0.0.0.0: the client substitutes the host it reached)
        servicer.metrics_url = f"http://{proc.host}:{proc.metrics_port}/metrics"
    await qm.start()
    proc.spawn(qm.follow(), "follow")
    proc.spawn(qm.follow_events(), "follow-events")
    await asyncio.to_thread(qm.loop_running.wait, 10)
    await proc.set_serving(True)
    log.info("queue-manager serving: %d filter shard(s), %d score shard(s), binder %s",
             len(cfg.filter_workers), len(cfg.score_workers), cfg.binder)

    async def cleanup() -> None:
        await qm.stop()
        await forwarder.close()

    await proc.wait_and_stop(cleanup)
