"""The kubelet-eviction agent: many simulated nodes in one process (like KWOK).

It registers its nodes (NodeRecord on schedmesh.nodes), heartbeats them on schedmesh.leases
(its own topic, so a heartbeat never invalidates node caches), and follows schedmesh.pods:

* a pod bound to one of its nodes is started after a short simulated delay: published with
  phase Running, startTime and Ready conditions, plus an Event "Started"; the span
  `start_pod` is a child of the trace context in the bound record's headers;
* a pod of its nodes with metadata.deletionTimestamp gets an Event "Killing" and, after
  min(terminationGracePeriodSeconds, max_grace) seconds, a tombstone (PodRecord deleted=true);
* the kubelet owns pod status: if someone re-publishes a running pod with another phase
  (e.g. a binding re-sent after a broker restart), the agent asserts Running again;
* on a broker restart it re-registers its nodes and re-publishes its pods, as kubelets do.

State lives in one `SimNode` per node (its Node, its pods and their resource totals as a
NodeInfo from the cache library); time-driven work (starting, killing, evicting) happens in a
periodic reconcile loop. Node-pressure and NoExecute-taint eviction plug in as `Evictor`s:
each reconcile asks every evictor which pods of a node to evict.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import heapq
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Protocol, Sequence

from opentelemetry import trace
from opentelemetry.context import Context

from schedmesh.api import convert
from schedmesh.api.types import Node, ObjectMeta, Pod, PodCondition
from schedmesh.bus import EventConsumer, EventProducer, Record
from schedmesh.cache.node_info import NodeInfo
from schedmesh.mesh.binder import event_message, event_record
from schedmesh.mesh.cluster_cache import TOPIC_EVENTS, TOPIC_NODES, TOPIC_PODS, is_terminal
from schedmesh.mesh.nodepool import PoolError, load_pool_file, ready_condition
from schedmesh.mesh.records import (apply_node_update, apply_update, event_batch_record, expand, node_record, pod_batch_record,
                                    pod_record, status_update)
from schedmesh.mesh.runtime import ServiceProcess
from schedmesh.telemetry.propagation import extract_kafka_headers
from schedmesh.v1 import events_pb2

log = logging.getLogger("schedmesh.agent")
tracer = trace.get_tracer("schedmesh.agent")

from schedmesh.bus.topics import LEASES as TOPIC_LEASES  # noqa: E402 (re-exported)
AGENT_TOPICS = (TOPIC_NODES, TOPIC_PODS, TOPIC_EVENTS, TOPIC_LEASES)

STARTING, RUNNING, TERMINATING = "Starting", "Running", "Terminating"
_SEND_BATCH = 256  # concurrent sends when publishing many records (registration, heartbeats)


def lease_record(node_names: Sequence[str], now: float, source: str = "") -> tuple[str, str, bytes]:
    """Heartbeats of many nodes in one record: NodeRecords carrying only a node's name and Ready
    condition (one record per agent per period, not one per node)."""
    ready = convert.node_to_proto(Node(meta=ObjectMeta(name=""), conditions=[ready_condition(now)]))
    batch = events_pb2.NodeRecord(source=source)
    for name in node_names:
        item = batch.batch.add(node=ready, source=source)
        item.node.metadata.name = name
    return TOPIC_LEASES, source, batch.SerializeToString()


def running_pod(pod: Pod, now: float) -> Pod:
    """The pod as a kubelet reports it once its containers run."""
    keep = [c for c in pod.conditions if c.type not in ("Initialized", "ContainersReady", "Ready", "PodScheduled")]
    conditions = [PodCondition("PodScheduled", "True"), PodCondition("Initialized", "True"),
                  PodCondition("ContainersReady", "True"), PodCondition("Ready", "True"), *keep]
    return dataclasses.replace(pod, phase="Running", start_time=pod.start_time or now, conditions=conditions)


def _containers(pod: Pod) -> str:
    return ", ".join(c.name for c in pod.containers) or pod.name


@dataclass(eq=False, slots=True)
class SimPod:
    pod: Pod
    state: str  # Starting | Running | Terminating
    context: Context = field(default_factory=Context)  # trace context of what caused the next transition
    start_at: float = 0.0
    kill_at: float = 0.0


class SimNode:
    """One simulated node: its Node object, its pods, and their resource totals."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.pods: dict[str, SimPod] = {}
        self.info = NodeInfo(node)  # requested vs allocatable, used ports: what eviction will look at

    @property
    def name(self) -> str:
        return self.node.name

    def set_node(self, node: Node) -> None:
        self.node = node
        self.info.set_node(node)

    def add(self, sp: SimPod) -> None:
        self.pods[sp.pod.uid] = sp
        self.info.add_pod(sp.pod)

    def remove(self, uid: str) -> Optional[SimPod]:
        sp = self.pods.pop(uid, None)
        if sp is not None:
            self.info.remove_pod(sp.pod)
        return sp

    def update(self, sp: SimPod, pod: Pod) -> None:
        self.info.remove_pod(sp.pod)
        sp.pod = pod
        self.info.add_pod(pod)

    def running(self) -> list[SimPod]:
        return [sp for sp in self.pods.values() if sp.state == RUNNING]

    def __repr__(self) -> str:
        return f"SimNode({self.name}, pods={len(self.pods)})"


@dataclass(frozen=True, slots=True)
class Eviction:
    """An evictor's verdict: terminate this pod of the node, with this Event."""

    uid: str
    reason: str  # Event reason, e.g. "Evicted" or "TaintManagerEviction"
    message: str
    grace_seconds: Optional[int] = None  # None: the pod's terminationGracePeriodSeconds


class Evictor(Protocol):
    """Node-pressure or NoExecute-taint eviction: asked on every reconcile, per node."""

    def check(self, node: SimNode, now: float) -> Iterable[Eviction]: ...


class Timers:
    """When each pod's next transition is due: a heap of (time, uid); stale entries (the pod
    moved on meanwhile) are dropped by the caller's check."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0

    def push(self, when: float, uid: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, uid))

    def pop_due(self, now: float) -> list[str]:
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[2])
        return out


class KubeletAgent:
    def __init__(self, name: str, nodes: Sequence[Node], bootstrap: str, *, start_delay: float = 0.5,
                 max_grace: Optional[float] = None, heartbeat: float = 10.0, tick: float = 0.1,
                 evictors: Sequence[Evictor] = (), clock: Callable[[], float] = time.time) -> None:
        self.name = name
        self.nodes: dict[str, SimNode] = {n.name: SimNode(n) for n in nodes}
        self.start_delay, self.max_grace, self.heartbeat, self.tick = start_delay, max_grace, heartbeat, tick
        self.evictors: list[Evictor] = list(evictors)
        self.clock = clock
        self._where: dict[str, SimNode] = {}  # pod uid -> its node
        self._unbound: dict[str, object] = {}  # uid -> Pod proto of pods not bound yet (decoded once bound here)
        self._timers = Timers()
        self._restarts_handled = 0
        self._restart_lock = asyncio.Lock()
        self.producer = EventProducer(bootstrap, topics=AGENT_TOPICS, client_id=name, on_restart=self._bus_restarted)
        self.consumer = EventConsumer(bootstrap, [TOPIC_NODES, TOPIC_PODS], client_id=name,
                                      on_restart=self._bus_restarted)

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self, timeout: float = 60.0) -> None:
        """Catch up on the topics (adopting pods already on its nodes), then register."""
        await self.producer.start(timeout)
        await self.consumer.start(timeout)
        for r in await self.consumer.catch_up(timeout):
            await self.handle(r)
        await self.register()
        log.info("%s registered %d node(s)", self.name, len(self.nodes))

    async def stop(self) -> None:
        await self.consumer.stop()
        await self.producer.stop()

    async def follow(self) -> None:
        while True:
            for r in await self.consumer.getmany(timeout=0.5):
                await self.handle(r)

    async def heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                now = self.clock()
                await self._send(lease_record(list(self.nodes), now, self.name))
            except Exception:  # noqa: BLE001 - a missed heartbeat is retried next period
                log.exception("heartbeat failed")

    async def reconcile_loop(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            try:
                await self.reconcile()
            except Exception:  # noqa: BLE001
                log.exception("reconcile failed")

    # ---- publishing ------------------------------------------------------------------------
    async def _send(self, rec: tuple[str, str, bytes]) -> None:
        topic, key, value = rec
        await self.producer.send(topic, value, key=key)

    async def _send_all(self, records: list[tuple[str, str, bytes]]) -> None:
        for i in range(0, len(records), _SEND_BATCH):
            await asyncio.gather(*(self._send(r) for r in records[i:i + _SEND_BATCH]))

    async def register(self) -> None:
        """Publish every node (Ready, heartbeat now), as a kubelet registers at start."""
        now = self.clock()
        records = []
        for sn in self.nodes.values():
            conditions = [c for c in sn.node.conditions if c.type != "Ready"] + [ready_condition(now)]
            meta = sn.node.meta
            if meta.creation_timestamp is None:  # first registration: the node's age starts now
                meta = dataclasses.replace(meta, creation_timestamp=now)
            sn.set_node(dataclasses.replace(sn.node, meta=meta, conditions=conditions))
            records.append(node_record(sn.node, source=self.name))
        await self._send_all(records)

    async def _bus_restarted(self) -> None:
        """Producer and consumer both report a restart; the first report re-publishes."""
        async with self._restart_lock:
            seen = max(self.producer.restart_count, self.consumer.restart_count)
            if seen <= self._restarts_handled:
                return
            self._restarts_handled = seen
            pods = [sp.pod for sn in self.nodes.values() for sp in sn.pods.values()]
            log.info("broker restarted: re-registering %d node(s), re-publishing %d pod(s)", len(self.nodes), len(pods))
            await self.register()
            await self._send_all([pod_record(p, source=self.name) for p in pods])

    # ---- following the topics ----------------------------------------------------------
    async def handle(self, r: Record) -> None:
        if r.value is None:
            return
        try:
            if r.topic == TOPIC_PODS:
                for rec in expand(events_pb2.PodRecord.FromString(r.value)):
                    await self._on_pod_record(r, rec)
            elif r.topic == TOPIC_NODES:
                for rec in expand(events_pb2.NodeRecord.FromString(r.value)):
                    self._on_node(rec)
        except Exception:  # noqa: BLE001 - one bad record must not stop the agent
            log.exception("cannot handle %s/%d@%d", r.topic, r.partition, r.offset)

    async def _on_pod_record(self, r: Record, rec: events_pb2.PodRecord) -> None:
        if not rec.HasField("update"):
            uid = rec.pod.metadata.uid
            if not rec.deleted and not rec.pod.node_name and uid not in self._where:
                # Not ours (yet): keep it undecoded until a binding to one of our nodes.
                self._unbound[uid] = rec.pod
                return
            self._unbound.pop(uid, None)
            await self._on_pod(self._context(r, rec), convert.pod_from_proto(rec.pod), rec.deleted, rec.source)
            return
        u = rec.update
        sn = self._where.get(u.uid)
        if sn is not None:
            base = sn.pods[u.uid].pod
        else:
            msg = self._unbound.get(u.uid)
            if msg is None or (u.node_name and u.node_name not in self.nodes):
                if u.node_name:
                    self._unbound.pop(u.uid, None)  # bound elsewhere
                return
            base = convert.pod_from_proto(msg)
        if u.node_name:
            self._unbound.pop(u.uid, None)
        await self._on_pod(self._context(r, rec), apply_update(base, u), False, rec.source)

    @staticmethod
    def _context(r: Record, rec: events_pb2.PodRecord) -> Context:
        """The pod's own trace when the record names it, else the Kafka record's."""
        if rec.traceparent:
            return extract_kafka_headers([("traceparent", rec.traceparent.encode())])
        return r.context

    def _on_node(self, rec: events_pb2.NodeRecord) -> None:
        """Someone else changed one of our nodes (taint, cordon): keep that, as a kubelet does."""
        sn = self.nodes.get(rec.update.name if rec.HasField("update") else rec.node.metadata.name)
        if sn is None or rec.source == self.name or rec.deleted:
            return
        other = (apply_node_update(sn.node, rec.update) if rec.HasField("update")
                 else convert.node_from_proto(rec.node))
        if other.taints != sn.node.taints or other.unschedulable != sn.node.unschedulable:
            sn.set_node(dataclasses.replace(sn.node, taints=list(other.taints), unschedulable=other.unschedulable))
            log.info("node %s changed by %s: taints=%s unschedulable=%s", sn.name, rec.source or "?",
                     [str(t) for t in other.taints], other.unschedulable)

    async def _on_pod(self, context: Context, pod: Pod, deleted: bool, source: str) -> None:
        uid = pod.uid
        sn = self._where.get(uid)
        if deleted:
            if sn is not None:
                sn.remove(uid)
                del self._where[uid]
            return
        now = self.clock()
        if sn is None:
            target = self.nodes.get(pod.node_name)
            if target is None or is_terminal(pod):
                return
            state = RUNNING if pod.phase == "Running" else STARTING
            sp = SimPod(pod, state, context, start_at=now + self.start_delay)
            target.add(sp)
            self._where[uid] = target
            if state == STARTING:
                self._timers.push(sp.start_at, uid)
            if pod.meta.deletion_timestamp:
                await self._begin_termination(target, sp, pod, context)
            return
        sp = sn.pods[uid]
        if is_terminal(pod) or (pod.node_name and pod.node_name != sn.name):
            sn.remove(uid)
            del self._where[uid]
            return
        if source == self.name:  # our own record coming back (or replayed after our restart)
            if pod.meta.deletion_timestamp and sp.state != TERMINATING:  # an eviction we began before a restart
                await self._begin_termination(sn, sp, pod, context)
            elif sp.state == STARTING and pod.phase == "Running":
                sp.state = RUNNING
                sn.update(sp, pod)
            return
        if pod.meta.deletion_timestamp:
            if sp.state != TERMINATING:
                # keep the status we own, take the deletion request
                meta = dataclasses.replace(sp.pod.meta, deletion_timestamp=pod.meta.deletion_timestamp)
                doomed = dataclasses.replace(sp.pod, meta=meta,
                                             termination_grace_period_seconds=pod.termination_grace_period_seconds)
                await self._begin_termination(sn, sp, doomed, context)
            return
        if sp.state == RUNNING and pod.phase != "Running":
            log.info("pod %s re-published as %s by %s; asserting Running", pod.key, pod.phase or "Pending",
                     source or "?")
            await self._send(pod_batch_record([status_update(sp.pod, self.name)], self.name))

    # ---- transitions ---------------------------------------------------------------------
    def grace_for(self, pod: Pod, override: Optional[float] = None) -> float:
        grace = float(pod.termination_grace_period_seconds if override is None else override)
        if self.max_grace is not None:
            grace = min(grace, self.max_grace)
        return max(grace, 0.0)

    async def _begin_termination(self, sn: SimNode, sp: SimPod, pod: Pod, ctx: Context, reason: str = "Killing",
                                 message: Optional[str] = None, grace: Optional[float] = None) -> None:
        g = self.grace_for(pod, grace)
        sp.state, sp.context, sp.kill_at = TERMINATING, ctx, self.clock() + g
        sn.update(sp, pod)
        self._timers.push(sp.kill_at, pod.uid)
        with tracer.start_as_current_span("kill_pod", context=ctx, attributes={
                "schedmesh.pod": pod.key, "schedmesh.node": sn.name, "schedmesh.grace_seconds": g,
                "schedmesh.reason": reason}):
            msg = message or f"Stopping container {_containers(pod)}"
            await self._send(event_record(pod, reason, msg, self.name))
        log.info("terminating %s on %s in %.1fs (%s)", pod.key, sn.name, g, reason)

    async def _start_all(self, due: list[tuple[SimNode, SimPod]]) -> None:
        """Start the pods due now: one record of status reports and one of Started events."""
        now = self.clock()
        updates, events = [], []
        for sn, sp in due:
            pod = running_pod(sp.pod, now)
            sp.state = RUNNING
            sn.update(sp, pod)
            with tracer.start_as_current_span("start_pod", context=sp.context, attributes={
                    "k8s.pod.name": pod.name, "k8s.namespace.name": pod.namespace, "k8s.node.name": sn.name}):
                updates.append(status_update(pod, self.name))
                events.append(event_message(pod, "Started", f"Started container {_containers(pod)}", self.name))
        try:
            await self._send(pod_batch_record(updates, self.name))
            await self._send(event_batch_record(events))
        except Exception:
            for sn, sp in due:  # try again on a later reconcile
                if sp.state == RUNNING and sn.pods.get(sp.pod.uid) is sp:
                    sp.state, sp.start_at = STARTING, self.clock() + 1.0
                    self._timers.push(sp.start_at, sp.pod.uid)
            raise
        log.info("started %d pod(s)", len(due))

    async def _finish(self, sn: SimNode, sp: SimPod) -> None:
        uid = sp.pod.uid
        sn.remove(uid)
        self._where.pop(uid, None)
        try:
            with tracer.start_as_current_span("terminate_pod", context=sp.context, attributes={
                    "schedmesh.pod": sp.pod.key, "schedmesh.node": sn.name}):
                await self._send(pod_record(sp.pod, deleted=True, source=self.name))
        except Exception:
            if uid not in self._where:  # try again on a later reconcile
                sp.kill_at = self.clock() + 1.0
                sn.add(sp)
                self._where[uid] = sn
                self._timers.push(sp.kill_at, uid)
            raise
        log.info("deleted %s from %s", sp.pod.key, sn.name)

    async def evict(self, sn: SimNode, ev: Eviction) -> None:
        """Terminate a pod of `sn` on the agent's own initiative (pressure, NoExecute taint)."""
        sp = sn.pods.get(ev.uid)
        if sp is None or sp.state == TERMINATING:
            return
        meta = dataclasses.replace(sp.pod.meta, deletion_timestamp=self.clock())
        doomed = dataclasses.replace(sp.pod, meta=meta)
        with tracer.start_as_current_span("evict_pod", attributes={"schedmesh.pod": doomed.key,
                                                                   "schedmesh.reason": ev.reason}):
            await self._send(pod_record(doomed, source=self.name))  # everyone sees it terminating
        await self._begin_termination(sn, sp, doomed, Context(), ev.reason, ev.message, ev.grace_seconds)

    async def reconcile(self) -> None:
        """Time-driven work: evictions (every node, only when evictors are configured), then
        the starts and terminations that fell due (a timer heap, not a scan of every node)."""
        now = self.clock()
        if self.evictors:
            for sn in list(self.nodes.values()):
                for evictor in self.evictors:
                    for ev in list(evictor.check(sn, now)):
                        await self.evict(sn, ev)
        starts, kills = [], []
        for uid in self._timers.pop_due(now):
            sn = self._where.get(uid)
            sp = sn.pods.get(uid) if sn is not None else None
            if sp is None:
                continue
            if sp.state == STARTING and sp.start_at <= now:
                starts.append((sn, sp))
            elif sp.state == TERMINATING and sp.kill_at <= now:
                kills.append((sn, sp))
        if starts:
            await self._guard(self._start_all(starts))
        for sn, sp in kills:
            await self._guard(self._finish(sn, sp))

    @staticmethod
    async def _guard(coro) -> None:
        try:
            await coro
        except Exception as e:  # noqa: BLE001 - retried on a later reconcile
            log.warning("publishing failed, will retry: %r", e)


async def serve(port: int, bootstrap: str, nodes: Sequence[Node], name: str = "agent-0", *,
                start_delay: float = 0.5, max_grace: Optional[float] = None, heartbeat: float = 10.0) -> None:
    proc = ServiceProcess(name, port)
    agent = KubeletAgent(name, nodes, bootstrap, start_delay=start_delay, max_grace=max_grace, heartbeat=heartbeat)
    await proc.start()
    await agent.start()
    proc.spawn(agent.follow(), "follow")
    proc.spawn(agent.heartbeat_loop(), "heartbeat")
    proc.spawn(agent.reconcile_loop(), "reconcile")
    await proc.set_serving(True)
    await proc.wait_and_stop(agent.stop)


def main() -> None:
    p = argparse.ArgumentParser(prog="kubelet-agent",
                                description="schedmesh kubelet-eviction agent: simulated nodes from a node-pool file")
    p.add_argument("--port", type=int, default=int(os.environ.get("SCHEDMESH_PORT", "0")))
    p.add_argument("--bootstrap", default=os.environ.get("SCHEDMESH_KAFKA", "127.0.0.1:9092"))
    p.add_argument("--pool", default=os.environ.get("SCHEDMESH_POOL"), required="SCHEDMESH_POOL" not in os.environ,
                   help="node-pool YAML file (see deploy/nodepools/demo.yaml)")
    p.add_argument("--name", default=os.environ.get("SCHEDMESH_NAME", "agent-0"),
                   help="client id and the `source` of the records it writes")
    p.add_argument("--start-delay", type=float, default=0.5, help="seconds from binding to Running")
    p.add_argument("--max-grace", type=float, default=None,
                   help="cap on terminationGracePeriodSeconds, for demos (default: no cap)")
    p.add_argument("--heartbeat", type=float, default=10.0, help="seconds between heartbeats (schedmesh.leases)")
    a = p.parse_args()
    try:
        nodes = load_pool_file(a.pool, agent=a.name)
    except (OSError, PoolError) as e:
        p.error(str(e))
    asyncio.run(serve(a.port, a.bootstrap, nodes, a.name, start_delay=a.start_delay, max_grace=a.max_grace,
                      heartbeat=a.heartbeat))
