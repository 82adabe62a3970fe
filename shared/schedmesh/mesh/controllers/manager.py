"""The controller-manager process: one ClusterCache replica (state topics plus the agents'
leases), the disruption, node-lifecycle, taint-eviction, pod-GC (orphaned pods), DaemonSet and
workload controllers run by one sync loop, and schedmesh.v1.Policy (the Eviction API, cordon, taint) on its gRPC server.

Controllers are level-triggered: every `sync_period` each compares the cluster with what it
wants and publishes the difference; a record it published is not sent again while it is on its
way back through the broker. The sync loop and the Policy calls share one asyncio lock, so an
eviction and a PDB status write never interleave.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

from schedmesh.bus import EventProducer, Record, watcher_options
from schedmesh.bus.topics import EVENTS, LEASES, STATE_TOPICS
from schedmesh.eviction.node_lifecycle import DEFAULT_NODE_MONITOR_GRACE_PERIOD, DEFAULT_NODE_STARTUP_GRACE_PERIOD
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.controllers.daemonset import DaemonSetController
from schedmesh.mesh.controllers.disruption import DisruptionController
from schedmesh.mesh.controllers.node_lifecycle import NodeLifecycleController
from schedmesh.mesh.controllers.policy import PolicyServicer
from schedmesh.mesh.controllers.pod_gc import PodGCController
from schedmesh.mesh.controllers.taint_eviction import TaintEvictionController
from schedmesh.mesh.controllers.workloads import WorkloadController
from schedmesh.mesh.records import publish
from schedmesh.mesh.runtime import CacheFollower, ServiceProcess
from schedmesh.v1 import policy_pb2_grpc

log = logging.getLogger("schedmesh.controller_manager")


@dataclass
class ControllerManagerConfig:
    name: str = "controller-manager"  # client id and the `source` of its records
    node_monitor_grace_period: float = DEFAULT_NODE_MONITOR_GRACE_PERIOD
    node_startup_grace_period: float = DEFAULT_NODE_STARTUP_GRACE_PERIOD
    sync_period: float = 0.5

    def check(self) -> None:
        for field_name in ("node_monitor_grace_period", "node_startup_grace_period", "sync_period"):
            value = getattr(self, field_name)
            if not value > 0:
                raise ValueError(f"--{field_name.replace('_', '-')} must be a positive number of seconds, not {value}")


class ControllerManager:
    def __init__(self, cfg: ControllerManagerConfig, bootstrap: str, clock: Callable[[], float] = time.time) -> None:
        cfg.check()
        self.cfg, self.clock = cfg, clock
        self.cache = ClusterCache()
        self.lock = asyncio.Lock()
        self.disruption = DisruptionController(self.cache)
        self.node_lifecycle = NodeLifecycleController(self.cache, cfg.node_monitor_grace_period,
                                                      cfg.node_startup_grace_period, cfg.name)
        self.taint_eviction = TaintEvictionController(self.cache, cfg.name, monitored=self.node_lifecycle.monitors)
        self.pod_gc = PodGCController(self.cache, cfg.name)
        self.daemon_sets = DaemonSetController(self.cache, cfg.name)
        self.workloads = WorkloadController(self.cache, cfg.name)
        self.producer = EventProducer(bootstrap, topics=(*STATE_TOPICS, LEASES, EVENTS), client_id=cfg.name)
        # idle_after=0: dozes again as soon as a fetch comes back empty, unless woken; the agents'
        # leases every 10 s otherwise kept it fetching for 2 s of every 10 on an idle mesh
        self.follower = CacheFollower(bootstrap, self.cache, client_id=cfg.name, topics=(*STATE_TOPICS, LEASES),
                                      on_record=self._on_record, **watcher_options(), idle_after=0.0)
        self.policy = PolicyServicer(self.cache, self.disruption, self.publish, self.lock, cfg.name, clock)

    def _on_record(self, r: Record) -> None:
        if r.topic == LEASES:
            self.node_lifecycle.on_lease(r, self.clock())

    async def publish(self, recs) -> None:
        await publish(self.producer, recs)

    async def sync_once(self) -> int:
        """One pass of every controller; returns the number of records published."""
        async with self.lock:
            now = self.clock()
            recs = self.disruption.sync(now)
            recs += self.node_lifecycle.sync(now)
            recs += self.taint_eviction.sync(now)
            recs += self.pod_gc.sync(now)
            recs += self.daemon_sets.sync(now)
            recs += self.workloads.sync(now)
            if recs:
                await self.publish(recs)
            return len(recs)

    async def run(self) -> None:
        while True:
            try:
                await self.sync_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a failed pass (broker away) is retried next period
                log.exception("controller sync failed")
            await asyncio.sleep(self.cfg.sync_period)

    async def start(self) -> None:
        await self.producer.start()
        await self.follower.start()

    async def stop(self) -> None:
        await self.follower.stop()
        await self.producer.stop()


async def serve(cfg: ControllerManagerConfig, bootstrap: str, port: int) -> None:
    proc = ServiceProcess(cfg.name, port)
    cm = ControllerManager(cfg, bootstrap)
    policy_pb2_grpc.add_PolicyServicer_to_server(cm.policy, proc.server)
    await proc.start()
    await cm.start()
    proc.spawn(cm.follower.follow(), "follow")
    proc.spawn(cm.run(), "controllers")
    await proc.set_serving(True)
    log.info("controller-manager serving: node-monitor-grace-period %.1fs, sync every %.1fs",
             cfg.node_monitor_grace_period, cfg.sync_period)
    await proc.wait_and_stop(cm.stop)
