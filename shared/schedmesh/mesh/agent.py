"""The kubelet-eviction agent: many simulated nodes in one process (like KWOK).

It registers its nodes (NodeRecord on schedmesh.nodes), heartbeats them on schedmesh.leases
(its own topic, so a heartbeat never invalidates node caches), and follows schedmesh.pods:

* admission: a pod bound to one of its nodes (by the binder, or by the user's spec.nodeName)
  is admitted as the kubelet admits it (schedmesh.eviction.admission: under node pressure the
  eviction manager's Admit, then the resources, node affinity, node name, host ports and
  NoExecute taints). A refused pod ends in phase Failed with the kubelet's reason (OutOfcpu,
  OutOfmemory, OutOfpods, Evicted, ...) and message ("Pod was rejected: ..."), with a Warning
  event;
* an admitted pod is started after a short simulated delay: published with phase Running,
  startTime and Ready conditions, plus an Event "Started"; the span `start_pod` is a child of
  the trace context in the bound record's headers;
* graceful termination: a pod of its nodes with metadata.deletionTimestamp (a whole record or a
  `records.deletion_update` delta) gets an Event "Killing"; its simulated containers stop at
  once, unless the pod asks for a simulated shutdown time with the annotation
  `schedmesh.io/simulated-shutdown-seconds: "5"`, which is capped by the grace period
  (terminationGracePeriodSeconds, or an eviction's). Then a tombstone (PodRecord deleted=true);
* node-pressure eviction: each node has a usage model (the node's own `systemUsage` and images
  from its pool, plus each running pod's `schedmesh.io/simulated-usage` annotation, which
  re-publishing the pod changes) and the kubelet's eviction manager
  (schedmesh.eviction.node_pressure) configured from the pool's `kubeletConfiguration`. An
  evicted pod gets a Warning event "Evicted" with the kubelet's message, its containers stop
  (as above, with the eviction's grace period), and it ends in phase Failed with status reason
  Evicted, the message and a DisruptionTarget condition: it stays listed, as in kube, until
  deleted (a deletion request for an ended pod is honoured at once);
* node conditions MemoryPressure, DiskPressure and PIDPressure are published as node deltas
  (records.node_update) when they change and at registration; the node-lifecycle controller,
  not the agent, turns them into taints;
* the kubelet owns pod status: if someone re-publishes a running pod with another phase (e.g.
  a binding re-sent after a broker restart), the agent asserts Running (and its node) again;
* on a broker restart it re-registers its nodes and re-publishes its pods, as kubelets do.

State lives in one `SimNode` per node; time-driven work (starting, killing, eviction checks)
happens in a periodic reconcile loop driven by timer heaps, not scans of every node. Eviction
plugs in as `Evictor`s, asked about a node when its pods or usage change and when they ask to be
asked again.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import heapq
import logging
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence, Union

from opentelemetry import trace
from opentelemetry.context import Context

from schedmesh.api import convert
from schedmesh.api.evolve import evolve
from schedmesh.api.quantity import QuantityError, parse_quantity
from schedmesh.api.types import Node, Pod, PodCondition
from schedmesh.bus import EventConsumer, EventProducer, Record, watcher_options
from schedmesh.cache.node_info import NodeInfo, PodInfo, same_accounting
from schedmesh.eviction import admission
from schedmesh.eviction.node_pressure import (POD_CLEANUP_TIMEOUT, EvictionConfig, EvictionManager, NodeCapacity,
                                              NodeUsage, SystemUsage, pressure_conditions)
from schedmesh.eviction.usage import NO_USAGE, PodUsage, SimulatedUsageError, pod_usage
from schedmesh.mesh.binder import event_message
from schedmesh.mesh.cluster_cache import TOPIC_EVENTS, TOPIC_NODES, TOPIC_PODS, is_terminal
from schedmesh.mesh.nodepool import KubeletModel, PoolError, SimulatedNode, load_pool_file_simulated, ready_condition
from schedmesh.mesh.records import (apply_node_update, apply_update, event_batch_record, event_batch_records,
                                    expand, node_batch_records, node_update, pod_batch_record, pod_batch_records,
                                    pod_message, pod_record, status_update)
from schedmesh.mesh.runtime import HeapFreezer, ServiceProcess
from schedmesh.telemetry import k8s_attributes, metrics, records_under
from schedmesh.telemetry.propagation import context_from_traceparent
from schedmesh.v1 import events_pb2

log = logging.getLogger("schedmesh.agent")
tracer = trace.get_tracer("schedmesh.agent")

from schedmesh.bus.topics import LEASES as TOPIC_LEASES  # noqa: E402 (re-exported)
AGENT_TOPICS = (TOPIC_NODES, TOPIC_PODS, TOPIC_EVENTS, TOPIC_LEASES)

STARTING, RUNNING, TERMINATING = "Starting", "Running", "Terminating"
_SEND_BATCH = 256  # concurrent sends when publishing many records (registration, heartbeats)

SHUTDOWN_ANNOTATION = "schedmesh.io/simulated-shutdown-seconds"
DEFAULT_EVICTION_INTERVAL = 10.0  # the kubelet's evictionMonitoringPeriod
RECONCILE_AT_LEAST = 1.0  # seconds between reconcile passes when no timer is due (a safety net)
INVALID_ANNOTATION = "InvalidAnnotation"  # reason of the Warning for a simulation annotation that does not parse


#: Nodes per heartbeat record: a name is at most 253 bytes, so a record stays under 520 KB (one
#: record for all of 15,000 nodes, a message each, was 1.5 MB, which aiokafka refuses).
LEASES_PER_RECORD = 2000


def lease_records(node_names: Sequence[str], now: float, source: str = "") -> list[tuple[str, str, bytes]]:
    """Heartbeats of many nodes in few records: NodeLeases, the nodes' names and the Ready
    condition they all post (one record per agent per period and LEASES_PER_RECORD nodes, not one
    per node), keyed by the agent and the chunk, so a compacted topic keeps every chunk's last
    heartbeat."""
    ready = convert.condition_to_proto(ready_condition(now), events_pb2.NodeLeases().ready)
    out = []
    for chunk, start in enumerate(range(0, len(node_names), LEASES_PER_RECORD)):
        record = events_pb2.NodeRecord(source=source)
        record.leases.ready.CopyFrom(ready)
        record.leases.names.extend(node_names[start:start + LEASES_PER_RECORD])
        out.append((TOPIC_LEASES, source if chunk == 0 else f"{source}/{chunk}", record.SerializeToString()))
    return out


def running_pod(pod: Pod, now: float) -> Pod:
    """The pod as a kubelet reports it once its containers run."""
    keep = [c for c in pod.conditions if c.type not in ("Initialized", "ContainersReady", "Ready", "PodScheduled")]
    conditions = [PodCondition("PodScheduled", "True"), PodCondition("Initialized", "True"),
                  PodCondition("ContainersReady", "True"), PodCondition("Ready", "True"), *keep]
    return evolve(pod, phase="Running", start_time=pod.start_time or now, conditions=conditions)


def failed_pod(pod: Pod, reason: str, message: str, extra: Sequence[PodCondition] = ()) -> Pod:
    """The pod as the kubelet reports it once it has ended in phase Failed: not ready, with the
    reason and message (Evicted, OutOfcpu, ...) and any extra condition (DisruptionTarget)."""
    replaced = {"Ready", "ContainersReady", *(c.type for c in extra)}
    conditions = [c for c in pod.conditions if c.type not in replaced]
    if pod.start_time:  # it ran: its containers are no longer ready
        conditions += [PodCondition("ContainersReady", "False", "PodFailed"), PodCondition("Ready", "False", "PodFailed")]
    return dataclasses.replace(pod, phase="Failed", status_reason=reason, status_message=message,
                               conditions=[*conditions, *extra])


def shutdown_seconds(pod: Pod) -> float:
    """The pod's simulated shutdown time (the annotation; 0 without it). ValueError names the
    pod, the annotation and what is wrong."""
    raw = pod.meta.annotations.get(SHUTDOWN_ANNOTATION)
    if raw is None:
        return 0.0
    try:
        seconds = parse_quantity(raw)
    except (QuantityError, ValueError, TypeError):
        seconds = None
    if seconds is None or seconds < 0:
        raise ValueError(f"pod {pod.key}: annotation {SHUTDOWN_ANNOTATION}: {raw!r} is not a non-negative number "
                         f"of seconds")
    return float(seconds)


def annotation_problem(pod: Pod) -> Optional[str]:
    """Why the pod's simulation annotations do not parse, or None."""
    try:
        pod_usage(pod)
        shutdown_seconds(pod)
    except (SimulatedUsageError, ValueError) as e:
        return str(e)
    return None


def _containers(pod: Pod) -> str:
    return ", ".join(c.name for c in pod.containers) or pod.name


@dataclass(frozen=True, slots=True)
class PodEnd:
    """How the kubelet ends a pod it evicts itself: phase Failed with this status, not deleted."""

    reason: str
    message: str
    conditions: tuple[PodCondition, ...] = ()


@dataclass(eq=False, slots=True)
class SimPod:
    pod: Pod
    state: str  # Starting | Running | Terminating
    context: Context = field(default_factory=Context)  # trace context of what caused the next transition
    start_at: float = 0.0
    order: int = 0  # its place in the record it was learned from (see KubeletAgent._learned)
    kill_at: float = 0.0
    usage: PodUsage = NO_USAGE  # what it uses while running (the simulated-usage annotation)
    end: Optional[PodEnd] = None  # set when evicted: Failed status instead of a tombstone
    admitted: bool = True  # False only while the agent replays the topics at start
    info: Optional[PodInfo] = None  # its entry in its node's NodeInfo (SimNode.add)


class SimNode:
    """One simulated node: its Node object, its pods and their resource totals, its usage model
    and its kubelet's eviction manager, and the pods that ended on it."""

    def __init__(self, node: Node, kubelet: Optional[KubeletModel] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.kubelet = kubelet or KubeletModel(EvictionConfig.from_kubelet_configuration(),
                                               NodeCapacity.from_node(node), SystemUsage())
        self.eviction = EvictionManager(self.kubelet.eviction, self.kubelet.capacity, clock)
        self.pods: dict[str, SimPod] = {}
        self.info = NodeInfo(node)  # requested vs allocatable of the admitted pods, used ports
        self.ended: dict[str, Pod] = {}  # uid -> pods that ended here (Failed), kept until deleted
        self.published_pressure: Optional[tuple[str, ...]] = None  # the pressure conditions last published
        self.awaiting_cleanup: Optional[tuple[str, float]] = None  # (uid, deadline) of a pod being evicted
        self.check_at: Optional[float] = None  # when the evictors are asked about this node next
        # A node applied as an object and served as KWOK serves API-created nodes: its pods run
        # and terminate, but there is no kubelet admission (recorded clusters bind pods the
        # scheduler placed or the user named) and no heartbeat, so the node controllers leave it
        # as applied (no lifecycle conditions or taints, no taint-based eviction).
        self.applied = False

    @property
    def name(self) -> str:
        return self.node.name

    def set_node(self, node: Node) -> None:
        self.node = node
        self.info.set_node(node)

    def add(self, sp: SimPod) -> None:
        self.pods[sp.pod.uid] = sp
        sp.info = self.info.add_pod(sp.pod)

    def remove(self, uid: str) -> Optional[SimPod]:
        sp = self.pods.pop(uid, None)
        if sp is not None:
            self.info.remove_pod(sp.pod)
        return sp

    def update(self, sp: SimPod, pod: Pod) -> None:
        old = sp.info
        if old is not None and same_accounting(old.pod, pod):  # a status change: totals stay as they are
            sp.info = old.with_pod(pod)
            self.info.replace_pod(old, sp.info)
        else:
            self.info.remove_pod(sp.pod)
            sp.info = self.info.add_pod(pod)
        sp.pod = pod

    def running(self) -> list[SimPod]:
        return [sp for sp in self.pods.values() if sp.state == RUNNING]

    def usage(self) -> NodeUsage:
        """The node's usage now: its own, plus every pod whose containers run (terminating
        ones until they have stopped)."""
        return NodeUsage(self.kubelet.system, {sp.pod.key: sp.usage for sp in self.pods.values()
                                               if sp.state != STARTING and sp.usage is not NO_USAGE})

    def __repr__(self) -> str:
        return f"SimNode({self.name}, pods={len(self.pods)})"


@dataclass(frozen=True, slots=True)
class Eviction:
    """An evictor's verdict: terminate this pod of the node, with this Warning event, and end it
    in phase Failed with `end` (the kubelet does not delete the pods it evicts)."""

    uid: str
    reason: str  # Event reason, e.g. "Evicted"
    message: str
    grace_seconds: Optional[int]  # None: the pod's terminationGracePeriodSeconds
    end: PodEnd


class Evictor(Protocol):
    """Something that evicts pods of a node (node pressure). Asked about a node when its pods or
    their usage change, and at the time it last asked for."""

    def check(self, node: SimNode, now: float) -> tuple[list[Eviction], Optional[float]]:
        """Pods to evict now, and when to be asked again (None: only when the node changes)."""
        ...


class NodePressureEvictor:
    """The kubelet's eviction manager loop over the node's usage model: synchronize (one pod per
    pass), then wait for the evicted pod to be cleaned up (at most 30 s, as the kubelet does)
    before synchronizing again; every `interval` seconds while thresholds are met, pressure is
    reported or soft grace periods run; otherwise only when the node's usage changes."""

    def __init__(self, interval: float = DEFAULT_EVICTION_INTERVAL) -> None:
        self.interval = interval

    def check(self, sn: SimNode, now: float) -> tuple[list[Eviction], Optional[float]]:
        if sn.awaiting_cleanup is not None:
            uid, deadline = sn.awaiting_cleanup
            if uid in sn.pods and now < deadline:
                return [], deadline
            sn.awaiting_cleanup = None
        candidates = [sp.pod for sp in sn.running()]
        result = sn.eviction.synchronize(now, sn.usage(), candidates)
        if result.reclaiming:
            log.debug("node %s: eviction threshold met, attempting to reclaim %s", sn.name, result.reclaiming)
        out = []
        for e in result.evictions:
            conditions = (e.condition,) if e.condition is not None else ()
            out.append(Eviction(e.pod.uid, e.reason, e.message, e.effective_grace_period_seconds,
                                PodEnd(e.reason, e.message, conditions)))
        if out:
            sn.awaiting_cleanup = (out[0].uid, now + POD_CLEANUP_TIMEOUT)
            return out, now + POD_CLEANUP_TIMEOUT
        return [], (None if sn.eviction.settled else now + self.interval)


class Timers:
    """When each pod's next transition is due: a heap of (time, uid); stale entries (the pod
    moved on meanwhile) are dropped by the caller's check. `on_push` is called on every push."""

    def __init__(self, on_push: Callable[[], None] = lambda: None) -> None:
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self._on_push = on_push

    def push(self, when: float, uid: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when, self._seq, uid))
        self._on_push()

    def next_due(self) -> Optional[float]:
        """When the earliest entry is due (None: no entry)."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[str]:
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap)[2])
        return out


NodeSpec = Union[Node, SimulatedNode]


class KubeletAgent:
    def __init__(self, name: str, nodes: Sequence[NodeSpec], bootstrap: str, *, start_delay: float = 0.5,
                 max_grace: Optional[float] = None, heartbeat: float = 10.0, tick: float = 0.1,
                 evictors: Optional[Sequence[Evictor]] = None, eviction_interval: float = DEFAULT_EVICTION_INTERVAL,
                 clock: Callable[[], float] = time.time, serve_applied_nodes: Sequence[str] = ()) -> None:
        self.name = name
        # Sources (e.g. "queue-manager") whose Node records this agent serves as its own nodes, as
        # KWOK manages nodes created through the API: otherwise no kubelet would run, start or
        # end their pods. Pods bound to such a node before its record arrives wait for it.
        self.serve_applied_nodes = frozenset(serve_applied_nodes)
        # pods bound to an applied node not served yet: (pod, trace context, when its record was read)
        self._waiting_for_node: dict[str, dict[str, tuple[Pod, Context, tuple[float, int]]]] = {}
        self.clock = clock
        self.nodes: dict[str, SimNode] = {}
        for spec in nodes:
            sn = (SimNode(spec.node, spec.kubelet, clock) if isinstance(spec, SimulatedNode)
                  else SimNode(spec, None, clock))
            self.nodes[sn.name] = sn
        self.start_delay, self.max_grace, self.heartbeat, self.tick = start_delay, max_grace, heartbeat, tick
        self.evictors: list[Evictor] = (list(evictors) if evictors is not None
                                        else [NodePressureEvictor(eviction_interval)])
        self._where: dict[str, SimNode] = {}  # pod uid -> its node (running, terminating or ended there)
        # uid -> pods not bound yet, as Pod protos (decoded once bound here) or Pods (seen here before)
        self._unbound: dict[str, object] = {}
        self._timer_pushed = asyncio.Event()  # wakes reconcile_loop
        self._timers = Timers(self._timer_pushed.set)  # pod transitions
        self._record_clock: Optional[float] = None  # when the record being handled was read
        self._record_ordinal = 0  # pods of that record learned so far (see _learned)
        self._checks = Timers(self._timer_pushed.set)  # evictor checks, by node name
        self._replaying = False
        self._to_register: list[SimNode] = []  # applied nodes served while reading a fetch
        self._restarts_handled = 0
        self._restart_lock = asyncio.Lock()
        self.producer = EventProducer(bootstrap, topics=AGENT_TOPICS, client_id=name, on_restart=self._bus_restarted)
        self.consumer = EventConsumer(bootstrap, [TOPIC_NODES, TOPIC_PODS], client_id=name,
                                      on_restart=self._bus_restarted, **watcher_options())
        # every pod this agent knows and every node it runs: frozen as they grow (HeapFreezer)
        self.heap = HeapFreezer(lambda: len(self._where) + len(self._unbound) + len(self.nodes))

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self, timeout: float = 60.0) -> None:
        """Catch up on the topics (adopting pods already on its nodes), admit the bound pods
        not yet started, then register."""
        await self.producer.start(timeout)
        await self.consumer.start(timeout)
        self._replaying = True
        try:
            for r in await self.consumer.catch_up(timeout):
                await self.handle(r)
        finally:
            self._replaying = False
        self.heap.after_apply()
        await self._after_replay()
        await self.register()
        now = self.clock()
        for sn in self.nodes.values():
            self._wake(sn, now)
        log.info("%s registered %d node(s)", self.name, len(self.nodes))

    async def stop(self) -> None:
        await self.consumer.stop()
        await self.producer.stop()

    async def follow(self) -> None:
        while True:
            records = await self.consumer.getmany(timeout=0.5)
            for r in records:
                await self.handle(r)
            if records:
                self.heap.after_apply()
            await self._register_served()

    async def _register_served(self) -> None:
        """Register the applied nodes served while reading the last fetch, together."""
        if self._to_register:
            nodes, self._to_register = self._to_register, []
            await self.register(nodes)

    async def heartbeat_loop(self) -> None:
        """A lease for every node with a kubelet, at once (the node-lifecycle controller watches a
        node from its first heartbeat) and then every `heartbeat` seconds."""
        while True:
            try:
                now = self.clock()
                await self._send_all(lease_records([n for n, sn in self.nodes.items() if not sn.applied], now,
                                                   self.name))
            except Exception:  # noqa: BLE001 - a missed heartbeat is retried next period
                log.exception("heartbeat failed")
            await asyncio.sleep(self.heartbeat)

    async def reconcile_loop(self) -> None:
        """reconcile() at most every `tick` while timers are due; in between it sleeps until the
        earliest is due or one is pushed (ten passes a second over nothing were a fifth of an idle
        agent's wake-ups), and runs at least every RECONCILE_AT_LEAST seconds."""
        while True:
            await asyncio.sleep(self.tick)
            await self._until_a_timer_is_due()
            try:
                await self.reconcile()
            except Exception:  # noqa: BLE001
                log.exception("reconcile failed")

    async def _until_a_timer_is_due(self) -> None:
        at_least = time.monotonic() + RECONCILE_AT_LEAST
        while True:
            dues = [t for t in (self._timers.next_due(), self._checks.next_due()) if t is not None]
            wait = min(min(dues, default=float("inf")) - self.clock(), at_least - time.monotonic())
            if wait <= 0:
                return
            self._timer_pushed.clear()  # a timer pushed meanwhile may be due sooner: look again
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._timer_pushed.wait(), wait)

    # ---- publishing ------------------------------------------------------------------------
    async def _send(self, rec: tuple[str, str, bytes]) -> None:
        topic, key, value = rec
        await self.producer.send(topic, value, key=key)

    async def _send_all(self, records: list[tuple[str, str, bytes]]) -> None:
        for i in range(0, len(records), _SEND_BATCH):
            await asyncio.gather(*(self._send(r) for r in records[i:i + _SEND_BATCH]))

    async def register(self, nodes: Optional[Sequence[SimNode]] = None) -> None:
        """Publish every node (or these; Ready, heartbeat now, its pressure conditions), as a
        kubelet registers at start."""
        now = self.clock()
        registered = []
        for sn in self.nodes.values() if nodes is None else nodes:
            pressure = sn.eviction.pressure
            mine = {"Ready"} | {c.type for c in pressure_conditions(())}
            conditions = ([c for c in sn.node.conditions if c.type not in mine] + [ready_condition(now)]
                          + pressure_conditions(pressure))
            meta = sn.node.meta
            if meta.creation_timestamp is None:  # first registration: the node's age starts now
                meta = dataclasses.replace(meta, creation_timestamp=now)
            sn.set_node(dataclasses.replace(sn.node, meta=meta, conditions=conditions))
            sn.published_pressure = pressure
            registered.append(sn.node)
        await self._send_all(node_batch_records(registered, source=self.name))

    async def _bus_restarted(self) -> None:
        """Producer and consumer both report a restart; the first report re-publishes."""
        async with self._restart_lock:
            seen = max(self.producer.restart_count, self.consumer.restart_count)
            if seen <= self._restarts_handled:
                return
            self._restarts_handled = seen
            pods = [sp.pod for sn in self.nodes.values() for sp in sn.pods.values()]
            pods += [p for sn in self.nodes.values() for p in sn.ended.values()]
            log.info("broker restarted: re-registering %d node(s), re-publishing %d pod(s)", len(self.nodes), len(pods))
            await self.register()
            await self._send_all(pod_batch_records((pod_message(p, source=self.name) for p in pods), self.name))

    async def _publish_pressure(self, sn: SimNode) -> None:
        """The node's pressure conditions as a delta, when they changed since last published."""
        pressure = sn.eviction.pressure
        if pressure == sn.published_pressure:
            return
        conditions = pressure_conditions(pressure)
        await self._send(node_update(sn.name, conditions=conditions, source=self.name))
        merged = {c.type: c for c in sn.node.conditions}
        merged.update({c.type: c for c in conditions})
        sn.set_node(dataclasses.replace(sn.node, conditions=list(merged.values())))
        log.info("node %s: %s", sn.name, ", ".join(f"{c.type}={c.status}" for c in conditions))
        sn.published_pressure = pressure

    # ---- following the topics ----------------------------------------------------------
    async def handle(self, r: Record) -> None:
        if r.value is None:
            return
        # The pods of one record (an Apply, a BindBatch) are learned at one moment: their starts
        # fall due together, in one status record, in the record's order. Timed per pod, they
        # straddled reconcile passes, and a reader (the preemption service) could see some
        # started and some not, which made its start-time tie-break depend on timing.
        self._record_clock, self._record_ordinal = self.clock(), 0
        try:
            if r.topic == TOPIC_PODS:
                for rec in expand(events_pb2.PodRecord.FromString(r.value)):
                    await self._on_pod_record(r, rec)
            elif r.topic == TOPIC_NODES:
                for rec in expand(events_pb2.NodeRecord.FromString(r.value)):
                    if not await self._serve_applied_node(rec):
                        self._on_node(rec)
        except Exception:  # noqa: BLE001 - one bad record must not stop the agent
            log.exception("cannot handle %s/%d@%d", r.topic, r.partition, r.offset)
        finally:
            self._record_clock = None

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
        if u.HasField("pod_scheduled"):
            return  # a failed attempt's status: moot for a bound pod, and an unbound one is not ours
        sn = self._where.get(u.uid)
        if sn is not None and rec.source == self.name and self._own_report_read_back(sn, u):
            return
        if sn is not None:
            sp = sn.pods.get(u.uid)
            base = sp.pod if sp is not None else sn.ended[u.uid]
        elif (waiting := self._waiting_entry(u.uid)) is not None:
            # bound to an applied node not served yet: the delta (a deletion request, say) applies
            # to the waiting pod; dropped, the pod would be started as if nobody had deleted it
            base = waiting[0]
        else:
            msg = self._unbound.get(u.uid)
            if msg is None:
                return
            if u.node_name and u.node_name not in self.nodes and not self.serve_applied_nodes:
                self._unbound.pop(u.uid, None)  # bound elsewhere
                return
            # (bound to a node this agent may serve once its applied record is read, the nodes
            # topic being behind the pods topic: the pod waits for it, as a whole bound record does)
            base = msg if isinstance(msg, Pod) else convert.pod_from_proto(msg)
        if u.node_name:
            self._unbound.pop(u.uid, None)
        await self._on_pod(self._context(r, rec), apply_update(base, u), False, rec.source)

    @staticmethod
    def _own_report_read_back(sn: SimNode, u: events_pb2.PodUpdate) -> bool:
        """Whether `u`, a delta this agent published, is its Running report about a pod it runs
        as reported: then reading it back changes nothing (_on_pod returns at once for it), and
        it is skipped before the pod is copied with it (a sixth of the agent's work per pod)."""
        sp = sn.pods.get(u.uid)
        return (sp is not None and sp.state == RUNNING and u.uid not in sn.ended and u.phase == "Running"
                and not u.node_name and not u.deletion_timestamp
                and sp.pod.node_name == sn.name and sp.pod.meta.deletion_timestamp is None)

    def _waiting_entry(self, uid: str) -> Optional[tuple[Pod, Context, tuple[float, int]]]:
        """A pod waiting for its applied node's record (see serve_applied_nodes)."""
        for pods in self._waiting_for_node.values():
            entry = pods.get(uid)
            if entry is not None:
                return entry
        return None

    @staticmethod
    def _context(r: Record, rec: events_pb2.PodRecord) -> Context:
        """The pod's own trace when the record names it, else the Kafka record's."""
        if rec.traceparent:
            return context_from_traceparent(rec.traceparent)
        return r.context

    async def _serve_applied_node(self, rec: events_pb2.NodeRecord) -> bool:
        """A node applied by a source this agent serves (see serve_applied_nodes): registered as
        ours, then the pods already bound to it are admitted."""
        if (rec.source not in self.serve_applied_nodes or rec.deleted or rec.HasField("update")
                or rec.node.metadata.name in self.nodes):
            return False
        sn = SimNode(convert.node_from_proto(rec.node), None, self.clock)
        sn.applied = True
        self.nodes[sn.name] = sn
        log.info("%s serves node %s (applied by %s)", self.name, sn.name, rec.source)
        if not self._replaying:  # (a replay ends with every node registered)
            self._to_register.append(sn)
        for pod, context, learned in self._waiting_for_node.pop(sn.name, {}).values():
            await self._adopt(sn, pod, context, learned)
        self._wake(sn, self.clock())
        return True

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
        if sn is not None and uid in sn.ended:
            if not await self._on_ended_pod(sn, pod, deleted, source):
                return
            sn = None  # the same uid again as a new pod (re-created after it ended)
        if deleted:
            self._waiting_for_node.get(pod.node_name, {}).pop(uid, None)
            if sn is not None:
                sp = sn.remove(uid)
                del self._where[uid]
                if sp is not None and sp.usage is not NO_USAGE:
                    self._wake(sn, self.clock())
            return
        now = self.clock()
        if sn is None:
            target = self.nodes.get(pod.node_name)
            if target is None:
                if not pod.node_name:  # re-created after it ended here, not bound yet: wait for its binding
                    self._unbound[uid] = pod
                elif self.serve_applied_nodes:  # maybe a node applied but not seen yet
                    waiting = self._waiting_for_node.setdefault(pod.node_name, {})
                    learned = waiting[uid][2] if uid in waiting else self._learned(now)  # (a delta: as first learned)
                    waiting[uid] = (pod, context, learned)
                return
            if is_terminal(pod):  # ended before we saw it (replay): remember it for its deletion
                target.ended[uid] = pod
                self._where[uid] = target
                return
            await self._adopt(target, pod, context)
            return
        sp = sn.pods[uid]
        if is_terminal(pod) or (pod.node_name and pod.node_name != sn.name):
            sn.remove(uid)
            if is_terminal(pod) and pod.node_name in (sn.name, ""):
                sn.ended[uid] = pod  # e.g. our own Failed report replayed at start
            else:
                log.warning("pod %s on %s was bound again, to %s (by %s): its containers here stop", pod.key,
                            sn.name, pod.node_name, source or "?")
                del self._where[uid]
            self._wake(sn, now)
            return
        if source == self.name:  # our own record coming back (or replayed after our restart)
            if pod.meta.deletion_timestamp and sp.state != TERMINATING:  # an eviction we began before a restart
                await self._begin_termination(sn, sp, pod, context)
            elif sp.state == STARTING and pod.phase == "Running":
                sp.state = RUNNING
                sn.update(sp, pod)
            return
        if pod.meta.annotations != sp.pod.meta.annotations:
            await self._take_annotations(sn, sp, pod)
        if pod.meta.deletion_timestamp:
            if sp.state != TERMINATING:
                # keep the status we own, take the deletion request
                meta = dataclasses.replace(sp.pod.meta, deletion_timestamp=pod.meta.deletion_timestamp)
                doomed = dataclasses.replace(sp.pod, meta=meta,
                                             termination_grace_period_seconds=pod.termination_grace_period_seconds)
                await self._begin_termination(sn, sp, doomed, context)
            elif sp.end is not None and sp.pod.meta.deletion_timestamp is None:
                # deleted while being evicted: it goes away instead of staying Failed
                sp.pod = dataclasses.replace(sp.pod, meta=dataclasses.replace(
                    sp.pod.meta, deletion_timestamp=pod.meta.deletion_timestamp))
            return
        if sp.state == RUNNING and (pod.phase != "Running" or pod.node_name != sn.name) and not self._replaying:
            log.info("pod %s re-published as %s on %r by %s; asserting Running on %s", pod.key,
                     pod.phase or "Pending", pod.node_name, source or "?", sn.name)
            report = status_update(sp.pod, self.name)
            report.update.node_name = sn.name
            await self._send(pod_batch_record([report], self.name))

    async def _on_ended_pod(self, sn: SimNode, pod: Pod, deleted: bool, source: str) -> bool:
        """A record about a pod that ended on `sn`. True when it is a new pod with the same uid."""
        uid = pod.uid
        if deleted:
            del sn.ended[uid]
            del self._where[uid]
            return False
        if pod.meta.deletion_timestamp:
            if self._replaying:  # its tombstone may come later in the replay; else it is sent after
                sn.ended[uid] = pod
                return False
            # The kubelet deletes a terminal pod at once: its containers are already gone.
            del sn.ended[uid]
            del self._where[uid]
            await self._send(pod_record(pod, deleted=True, source=self.name))
            log.info("deleted ended pod %s from %s", pod.key, sn.name)
            return False
        if is_terminal(pod) or source == self.name:
            sn.ended[uid] = pod
            return False
        del sn.ended[uid]
        del self._where[uid]
        return True

    async def _adopt(self, sn: SimNode, pod: Pod, context: Context,
                     learned: Optional[tuple[float, int]] = None) -> None:
        """A pod newly bound to one of our nodes (or found there at start): admit it, then start
        it after the simulated delay; a pod already Running (our restart) is taken as it is."""
        now = self.clock()
        running = pod.phase == "Running"
        if learned is None:
            learned = self._learned(now)
        sp = SimPod(pod, RUNNING if running else STARTING, context, start_at=learned[0] + self.start_delay,
                    order=learned[1])
        if not running and not pod.meta.deletion_timestamp:
            if self._replaying:
                sp.admitted = False  # admitted once the replay is over, against the pods found
            elif not await self._admit(sn, pod):
                return
        problem = annotation_problem(pod)
        if problem is None:
            sp.usage = pod_usage(pod)
        elif running:
            log.warning("%s", problem)
        sn.add(sp)
        self._where[pod.uid] = sn
        if sp.state == STARTING:
            self._timers.push(sp.start_at, pod.uid)
        elif sp.usage is not NO_USAGE:
            self._wake(sn, now)
        if pod.meta.deletion_timestamp:
            await self._begin_termination(sn, sp, pod, context)

    def _learned(self, now: float) -> tuple[float, int]:
        """When a pod was learned and its place in that record: its record's clock (see handle)
        and the number of pods before it there, else (now, 0). The pods of one record fall due
        together (one pass, one status record) and their start times follow from these, a
        microsecond apart in the record's order, even for pods that wait for their node's record
        (read later: a fetch cut at a hole, see bus.consumer) and start in a later pass."""
        if self._record_clock is None:
            return now, 0
        self._record_ordinal += 1
        return self._record_clock, self._record_ordinal - 1

    async def _admit(self, sn: SimNode, pod: Pod) -> bool:
        """The kubelet's admission; a refused pod ends Failed with a Warning event."""
        if sn.applied:
            return True
        problem = annotation_problem(pod)
        if problem is not None:
            verdict = admission.AdmitResult(False, INVALID_ANNOTATION, problem)
        else:
            verdict = admission.admit(pod, sn.info, sn.eviction)
        if verdict.admit:
            return True
        ended = failed_pod(pod, verdict.reason, admission.rejection_message(verdict))
        sn.ended[pod.uid] = ended
        self._where[pod.uid] = sn
        with tracer.start_as_current_span("reject_pod", attributes={
                **k8s_attributes(pod, sn.name), "schedmesh.reason": verdict.reason}):
            await self._send(pod_batch_record([status_update(ended, self.name)], self.name))
            await self._send(event_batch_record([event_message(pod, verdict.reason, verdict.message, self.name,
                                                               "Warning")]))
        log.info("rejected %s on %s: %s: %s", pod.key, sn.name, verdict.reason, verdict.message)
        return False

    async def _after_replay(self) -> None:
        """Delete the ended pods whose deletion was asked while the agent was away, then admit,
        in creation order, the pods bound to our nodes meanwhile."""
        for sn in self.nodes.values():
            for uid, pod in list(sn.ended.items()):
                if pod.meta.deletion_timestamp:
                    await self._on_ended_pod(sn, pod, False, "")
        for sn in self.nodes.values():
            waiting = sorted((sp for sp in sn.pods.values() if not sp.admitted and sp.state == STARTING),
                             key=lambda sp: (sp.pod.meta.creation_timestamp or 0.0, sp.pod.uid))
            for sp in waiting:  # none counts until admitted
                sn.remove(sp.pod.uid)
            for sp in waiting:
                if await self._admit(sn, sp.pod):
                    sp.admitted = True
                    sn.add(sp)
                else:
                    self._where[sp.pod.uid] = sn  # now among the ended pods

    async def _take_annotations(self, sn: SimNode, sp: SimPod, pod: Pod) -> None:
        """The pod was re-published with other annotations (e.g. a new simulated usage)."""
        problem = annotation_problem(pod)
        if problem is not None:
            log.warning("%s; keeping the previous annotations", problem)
            if self._replaying:
                return
            await self._send(event_batch_record([event_message(pod, INVALID_ANNOTATION, problem, self.name,
                                                               "Warning")]))
            return
        meta = dataclasses.replace(sp.pod.meta, annotations=dict(pod.meta.annotations), labels=dict(pod.meta.labels))
        sn.update(sp, dataclasses.replace(sp.pod, meta=meta))
        usage = pod_usage(pod)
        if usage != sp.usage:
            sp.usage = usage
            log.info("pod %s on %s now uses %s", pod.key, sn.name, usage)
            self._wake(sn, self.clock())

    # ---- transitions ---------------------------------------------------------------------
    def grace_for(self, pod: Pod, override: Optional[float] = None) -> float:
        grace = float(pod.termination_grace_period_seconds if override is None else override)
        if self.max_grace is not None:
            grace = min(grace, self.max_grace)
        return max(grace, 0.0)

    def shutdown_for(self, pod: Pod, grace: float) -> float:
        """How long the simulated containers take to stop: the pod's simulated shutdown time,
        at most the grace period (0 when the annotation does not parse)."""
        try:
            return min(shutdown_seconds(pod), grace)
        except ValueError as e:
            log.warning("%s; stopping at once", e)
            return 0.0

    async def _begin_termination(self, sn: SimNode, sp: SimPod, pod: Pod, ctx: Context,
                                 grace: Optional[float] = None,
                                 first: Sequence[events_pb2.Event] = ()) -> None:
        g = self.grace_for(pod, grace)
        wait = self.shutdown_for(pod, g)
        sp.state, sp.context, sp.kill_at = TERMINATING, ctx, self.clock() + wait
        sn.update(sp, pod)
        self._timers.push(sp.kill_at, pod.uid)
        reason = first[0].reason if first else "Killing"
        if self._replaying:  # a termination begun before our restart: its events were sent then
            return
        with tracer.start_as_current_span("kill_pod", context=ctx, attributes={
                **k8s_attributes(pod, sn.name), "schedmesh.grace_seconds": g,
                "schedmesh.shutdown_seconds": wait, "schedmesh.reason": reason}):
            killing = event_message(pod, "Killing", f"Stopping container {_containers(pod)}", self.name)
            await self._send(event_batch_record([*first, killing]))
        log.info("terminating %s on %s: containers stop in %.1fs (grace %.0fs, %s)", pod.key, sn.name, wait, g, reason)

    async def _start_all(self, due: list[tuple[SimNode, SimPod]]) -> None:
        """Start the pods due now: one record of status reports and one of Started events."""
        now = self.clock()
        updates, events = [], []
        for sn, sp in due:
            # Started when due (learned + start delay: see _learned), not when this pass runs:
            # start times increase in the order the pods were learned (preemption prefers the
            # node whose most important victims started last), whatever pass starts them.
            pod = running_pod(sp.pod, min(sp.start_at, now) + sp.order * 1e-6)
            sp.state = RUNNING
            sn.update(sp, pod)
            if sp.usage is not NO_USAGE:
                self._wake(sn, now)
            updates.append(status_update(pod, self.name))
            started = f"Started container {_containers(pod)}"
            # A span nobody records (no exporter, or an unsampled trace) cost about a seventh of
            # the agent's CPU per pod; without it the event still names the pod's trace.
            if records_under(tracer, sp.context):
                with tracer.start_as_current_span("start_pod", context=sp.context,
                                                  attributes=k8s_attributes(pod, sn.name)):
                    events.append(event_message(pod, "Started", started, self.name))
            else:
                events.append(event_message(pod, "Started", started, self.name, context=sp.context))
        try:
            await self._send_all([*pod_batch_records(updates, self.name), *event_batch_records(events)])
        except Exception:
            for sn, sp in due:  # try again on a later reconcile
                if sp.state == RUNNING and sn.pods.get(sp.pod.uid) is sp:
                    sp.state, sp.start_at = STARTING, self.clock() + 1.0
                    self._timers.push(sp.start_at, sp.pod.uid)
            raise
        log.info("started %d pod(s)", len(due))

    async def _finish(self, sn: SimNode, sp: SimPod) -> None:
        """The pod's containers have stopped: it is deleted (tombstone), or, when the kubelet
        evicted it, it ends Failed and stays listed."""
        uid = sp.pod.uid
        sn.remove(uid)
        ended = None
        if sp.end is not None and sp.pod.meta.deletion_timestamp is None:
            ended = failed_pod(sp.pod, sp.end.reason, sp.end.message, sp.end.conditions)
            sn.ended[uid] = ended
        else:
            self._where.pop(uid, None)
        try:
            with tracer.start_as_current_span("terminate_pod", context=sp.context,
                                              attributes=k8s_attributes(sp.pod, sn.name)):
                if ended is not None:
                    await self._send(pod_batch_record([status_update(ended, self.name)], self.name))
                else:
                    await self._send(pod_record(sp.pod, deleted=True, source=self.name))
        except Exception:
            if uid not in sn.pods:  # try again on a later reconcile
                sn.ended.pop(uid, None)
                sp.kill_at = self.clock() + 1.0
                sn.add(sp)
                self._where[uid] = sn
                self._timers.push(sp.kill_at, uid)
            raise
        if sp.usage is not NO_USAGE or sn.awaiting_cleanup is not None:
            self._wake(sn, self.clock())
        log.info("%s %s on %s", "ended (Failed)" if ended is not None else "deleted", sp.pod.key, sn.name)

    async def evict(self, sn: SimNode, ev: Eviction) -> None:
        """Terminate a pod of `sn` on the kubelet's own initiative: a Warning event with the
        evictor's reason, its containers stopped, then phase Failed (ev.end)."""
        sp = sn.pods.get(ev.uid)
        if sp is None or sp.state == TERMINATING:
            return
        sp.end = ev.end
        metrics.observe_eviction("NodePressure")
        with tracer.start_as_current_span("evict_pod", attributes={**k8s_attributes(sp.pod, sn.name),
                                                                   "schedmesh.reason": ev.reason}):
            warning = event_message(sp.pod, ev.reason, ev.message, self.name, "Warning")
            await self._begin_termination(sn, sp, sp.pod, Context(), ev.grace_seconds, first=[warning])

    def _wake(self, sn: SimNode, when: float) -> None:
        """Ask the evictors about `sn` at `when` (or sooner, if already asked for)."""
        if not self.evictors or (sn.check_at is not None and sn.check_at <= when):
            return
        sn.check_at = when
        self._checks.push(when, sn.name)

    async def reconcile(self) -> None:
        """Time-driven work: the evictor checks that fell due, then the starts and terminations
        that fell due (timer heaps, not scans of every node)."""
        now = self.clock()
        for name in self._checks.pop_due(now):
            sn = self.nodes.get(name)
            if sn is None or sn.check_at is None or sn.check_at > now:
                continue  # superseded by an earlier wake-up already handled, or a later one
            sn.check_at = None
            again: Optional[float] = None
            for evictor in self.evictors:
                evictions, when = evictor.check(sn, now)
                for ev in evictions:
                    await self._guard(self.evict(sn, ev))
                if when is not None:
                    again = when if again is None else min(again, when)
            await self._guard(self._publish_pressure(sn))
            if again is not None:
                self._wake(sn, again)
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


async def serve(port: int, bootstrap: str, nodes: Sequence[NodeSpec], name: str = "agent-0", *,
                start_delay: float = 0.5, max_grace: Optional[float] = None, heartbeat: float = 10.0,
                eviction_interval: float = DEFAULT_EVICTION_INTERVAL, serve_applied_nodes: Sequence[str] = ()) -> None:
    proc = ServiceProcess(name, port)
    agent = KubeletAgent(name, nodes, bootstrap, start_delay=start_delay, max_grace=max_grace, heartbeat=heartbeat,
                         eviction_interval=eviction_interval, serve_applied_nodes=serve_applied_nodes)
    await proc.start()
    await agent.start()
    proc.spawn(agent.follow(), "follow")
    proc.spawn(agent.heartbeat_loop(), "heartbeat")
    proc.spawn(agent.reconcile_loop(), "reconcile")
    await proc.set_serving(True)
    await proc.wait_and_stop(agent.stop)


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


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
    p.add_argument("--heartbeat", type=_positive_seconds, default=10.0, help="seconds between heartbeats (schedmesh.leases)")
    p.add_argument("--eviction-interval", type=_positive_seconds, default=DEFAULT_EVICTION_INTERVAL,
                   help="seconds between eviction-manager passes while a node is near or over a threshold "
                        "(the kubelet's 10 s; a change in a node's usage is acted on at once)")
    p.add_argument("--serve-applied-nodes", default=os.environ.get("SCHEDMESH_SERVE_APPLIED_NODES", ""),
                   metavar="SOURCE,...", help="also serve the nodes these writers publish (e.g. queue-manager: nodes "
                   "users apply), as KWOK does (give it to one agent of a mesh only)")
    a = p.parse_args()
    try:
        nodes = load_pool_file_simulated(a.pool, agent=a.name)
    except (OSError, PoolError) as e:
        p.error(str(e))
    asyncio.run(serve(a.port, a.bootstrap, nodes, a.name, start_delay=a.start_delay, max_grace=a.max_grace,
                      heartbeat=a.heartbeat, eviction_interval=a.eviction_interval,
                      serve_applied_nodes=[s.strip() for s in a.serve_applied_nodes.split(",") if s.strip()]))
