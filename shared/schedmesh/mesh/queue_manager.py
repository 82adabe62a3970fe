"""The queue-manager: the Scheduler API, the priority queue and kube's scheduleOne loop, with
Filter/Score fanned out to the node shards (schedmesh.mesh.fanout) and binding delegated to
the binder service.

Threads and locks:
  * the asyncio loop runs the gRPC API, the Kafka producer and consumers; records are applied
    to the ClusterCache on a worker thread (so a long cycle holding `cache.lock` never stalls
    the loop);
  * the scheduling loop (`_schedule_loop`) is one thread, like kube's scheduleOne goroutine:
    pop, cycle under `cache.lock`, assume, Reserve/Permit, hand off to the binding pool;
  * the binding cycle is one more thread: it sends the bindings decided meanwhile to the
    binder in one batch (BindBatch) and never blocks the next pod.
Lock order: cache.lock before the queue's lock (the cache listener calls the queue under
cache.lock); nothing takes cache.lock while holding the queue's lock.
"""
from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

import grpc
from opentelemetry import trace

from schedmesh.api import convert
from schedmesh.api.load import ManifestError, admit_all, load_text
from schedmesh.api.types import Node, Pod, PodCondition
from schedmesh.bus import EventConsumer, EventProducer, Record
from schedmesh.framework.events import (EVENT_ASSIGNED_POD_DELETE, EVENT_NODE_ADD, ActionType, ClusterEvent,
                                        EventResource)
from schedmesh.framework.interface import CycleState, PluginError
from schedmesh.framework.runtime import Framework, build_frameworks
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import TOPIC_EVENTS, ClusterCache
from schedmesh.mesh.fanout import ShardedEvaluator
from schedmesh.mesh.runtime import CacheFollower, ServiceProcess
from schedmesh.queue.hints import EVENT_ASSIGNED_POD_ADD, pod_scheduling_properties_change
from schedmesh.queue.queued_pod_info import QueuedPodInfo
from schedmesh.queue.scheduling_queue import PriorityQueue, QueueError
from schedmesh.scheduling.cycle import FitError, NoNodesAvailableError, SchedulingAlgorithm, run_post_filter
from schedmesh.telemetry import inject_grpc_metadata, metrics
from schedmesh.v1 import binder_pb2, binder_pb2_grpc, events_pb2, queue_pb2, queue_pb2_grpc
from schedmesh.v1 import scheduling_pb2 as spb

log = logging.getLogger("schedmesh.queue_manager")
tracer = trace.get_tracer("schedmesh.queue_manager")

IN_FLIGHT = "in-flight"
BOUND = "bound"
MAX_EVENTS_PER_POD = 100


@dataclass
class QueueManagerConfig:
    filter_workers: Sequence[str]
    score_workers: Sequence[str]
    binder: str
    client_id: str = "queue-manager"
    profiles: Optional[list] = None  # schedmesh.framework.profile.Profile list; default profile when None
    percentage_of_nodes_to_score: Optional[int] = None
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    shard_timeout: float = 10.0
    bind_timeout: float = 10.0
    max_bind_batch: int = 512
    tie_break: str = "random"


def _trace_id(span) -> str:
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def _spec_changed(old: Pod, new: Pod) -> bool:
    """kube's isPodUpdated: a change other than status / resourceVersion."""
    def strip(p: Pod) -> bytes:
        m = convert.pod_to_proto(p)
        m.phase, m.nominated_node_name, m.start_time = "", "", 0
        del m.conditions[:]
        m.metadata.resource_version = ""
        return m.SerializeToString(deterministic=True)
    return strip(old) != strip(new)


def _node_events(old: Node, new: Node) -> list[ClusterEvent]:
    """kube's nodeSchedulingPropertiesChange."""
    acts = []
    if old.unschedulable != new.unschedulable:
        acts.append(ActionType.UPDATE_NODE_TAINT)
    if old.allocatable != new.allocatable:
        acts.append(ActionType.UPDATE_NODE_ALLOCATABLE)
    if old.meta.labels != new.meta.labels:
        acts.append(ActionType.UPDATE_NODE_LABEL)
    if old.taints != new.taints and ActionType.UPDATE_NODE_TAINT not in acts:
        acts.append(ActionType.UPDATE_NODE_TAINT)
    if [(c.type, c.status) for c in old.conditions] != [(c.type, c.status) for c in new.conditions]:
        acts.append(ActionType.UPDATE_NODE_CONDITION)
    if old.meta.annotations != new.meta.annotations:
        acts.append(ActionType.UPDATE_NODE_ANNOTATION)
    return [ClusterEvent(EventResource.NODE, a) for a in acts]


def _trace_method(obj: Any, method: str, span_name: str) -> None:
    """Wrap one framework phase of this instance in a span."""
    inner = getattr(obj, method)

    def traced(*a, **kw):
        with tracer.start_as_current_span(span_name):
            return inner(*a, **kw)
    setattr(obj, method, traced)


class _TracedEvaluator(ShardedEvaluator):
    """The fan-out with `filter` / `score` spans around each phase."""

    filter_seconds = 0.0
    score_seconds = 0.0

    def filter(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            with tracer.start_as_current_span("filter"):
                return super().filter(*a, **kw)
        finally:
            self.filter_seconds += time.perf_counter() - t0

    def raw_scores(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            with tracer.start_as_current_span("score"):
                return super().raw_scores(*a, **kw)
        finally:
            self.score_seconds += time.perf_counter() - t0


@dataclass
class _Assumed:
    pod: Pod
    node: str
    fw: Framework
    state: CycleState
    qpi: QueuedPodInfo
    cycle: int
    span: Any = None
    trace_id: str = ""
    traceparent: str = ""


@dataclass
class _PodNotes:
    message: str = ""  # last FailedScheduling message
    trace_id: str = ""
    events: list = field(default_factory=list)  # events_pb2.Event


class QueueManager:
    def __init__(self, cfg: QueueManagerConfig, bootstrap: str) -> None:
        self.cfg = cfg
        self.bootstrap = bootstrap
        self.cache = ClusterCache()
        if cfg.profiles is None:
            from schedmesh.framework.profile import default_profile
            cfg.profiles = [default_profile()]
        self.frameworks: dict[str, Framework] = build_frameworks(cfg.profiles)
        self.queue = PriorityQueue.from_frameworks(
            self.frameworks, pod_initial_backoff_seconds=cfg.pod_initial_backoff_seconds,
            pod_max_backoff_seconds=cfg.pod_max_backoff_seconds,
            namespace_labels=lambda ns: self.cache.snapshot.namespace_labels.get(ns, {}))
        for fw in self.frameworks.values():
            fw.set_snapshot_source(lambda: self.cache.snapshot)
            fw.services["nominator"] = self.queue
            _trace_method(fw, "run_pre_filter", "prefilter")
        self.evaluator = _TracedEvaluator(cfg.filter_workers, cfg.score_workers, self._view, timeout=cfg.shard_timeout)
        kw = {} if cfg.percentage_of_nodes_to_score is None else {"percentage_of_nodes_to_score": cfg.percentage_of_nodes_to_score}
        self.algo = SchedulingAlgorithm(tie_break=cfg.tie_break, evaluator=self.evaluator, **kw)
        self.assumed: dict[str, _Assumed] = {}  # uid -> pods assumed, not yet seen bound
        self._assumed_lock = threading.Lock()
        self.notes: dict[str, _PodNotes] = {}
        self._notes_lock = threading.Lock()
        self.applied_nodes: dict[str, Node] = {}
        self.cache.listeners.append(self._on_change)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.producer: Optional[EventProducer] = None
        self.follower: Optional[CacheFollower] = None
        self.events_consumer: Optional[EventConsumer] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._bind_queue: queue.SimpleQueue[_Assumed] = queue.SimpleQueue()
        self._bind_thread: Optional[threading.Thread] = None
        self._binder_channel = grpc.insecure_channel(cfg.binder)
        self.binder = binder_pb2_grpc.BinderStub(self._binder_channel)
        self.loop_running = threading.Event()
        self.attempts = 0
        self.cycle_seconds = 0.0
        self._resource_version = 0
        self._started_ns = time.time_ns()

    # ---- lifecycle ---------------------------------------------------------------------
    async def start(self, timeout: float = 60.0) -> None:
        self.loop = asyncio.get_running_loop()
        self.producer = EventProducer(self.bootstrap, client_id=f"{self.cfg.client_id}-producer",
                                      on_restart=self._republish)
        await self.producer.start(timeout)
        self.follower = CacheFollower(self.bootstrap, self.cache, client_id=self.cfg.client_id)
        await self.follower.start(timeout)
        self.events_consumer = EventConsumer(self.bootstrap, [TOPIC_EVENTS], client_id=f"{self.cfg.client_id}-events")
        await self.events_consumer.start(timeout)
        for r in await self.events_consumer.catch_up(timeout):
            self._on_event_record(r)
        self.queue.run()
        self._thread = threading.Thread(target=self._schedule_loop, name="schedule-one", daemon=True)
        self._thread.start()
        self._bind_thread = threading.Thread(target=self._binding_loop, name="binding-cycle", daemon=True)
        self._bind_thread.start()

    async def follow(self) -> None:
        """Apply state records on a worker thread (the cycle may hold cache.lock for a while)."""
        assert self.follower is not None
        while True:
            recs = await self.follower.consumer.getmany(timeout=0.5)
            if recs:
                await asyncio.to_thread(self.follower.apply_records, recs)
            await self.follower.sample_lag()

    async def follow_events(self) -> None:
        assert self.events_consumer is not None
        while True:
            for r in await self.events_consumer.getmany(timeout=0.5):
                self._on_event_record(r)

    async def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        if self._bind_thread is not None:
            await asyncio.to_thread(self._bind_thread.join, 10)
        self.evaluator.close()
        self._binder_channel.close()
        for c in (self.follower, self.events_consumer):
            if c is not None:
                await c.stop()
        if self.producer is not None:
            await self.producer.flush()
            await self.producer.stop()

    def next_resource_version(self) -> str:
        with self._notes_lock:
            self._resource_version += 1
            return f"{self.cfg.client_id}-{self._started_ns}-{self._resource_version}"

    # ---- publishing (from any thread) --------------------------------------------------
    def _publish_sync(self, recs: list, timeout: float = 15.0) -> None:
        assert self.loop is not None and self.producer is not None
        fut = asyncio.run_coroutine_threadsafe(records.publish(self.producer, recs), self.loop)
        fut.result(timeout)

    def _event_record(self, pod: Pod, type_: str, reason: str, message: str, trace_id: str = ""):
        ev = events_pb2.Event(pod_uid=pod.uid, pod=pod.key, type=type_, reason=reason, message=message,
                              source=self.cfg.client_id, timestamp=time.time(), trace_id=trace_id)
        return TOPIC_EVENTS, pod.uid, ev.SerializeToString()

    async def _republish(self) -> None:
        """The broker came back empty: publish again what this queue-manager owns."""
        with self.cache.lock:
            recs = [records.namespace_record(ns) for ns in self.cache.namespaces()]
            recs += [records.priority_class_record(pc) for pc in self.cache.priority_classes.values()]
            recs += [records.pdb_record(p) for p in self.cache.pdbs.values()]
            for name, node in self.applied_nodes.items():
                ni = self.cache.snapshot.get(name)
                recs.append(records.node_record(ni.node if ni is not None and ni.node is not None else node,
                                                source=self.cfg.client_id))
            recs += [records.pod_record(p, source=self.cfg.client_id) for p in self.cache.pending_pods()
                     if p.scheduler_name in self.frameworks]
        log.warning("broker restarted: re-publishing %d records", len(recs))
        await records.publish(self.producer, recs)

    # ---- cluster events -> queue (called under cache.lock) -----------------------------
    def _mine(self, pod: Optional[Pod]) -> bool:
        return pod is not None and pod.scheduler_name in self.frameworks

    def _on_change(self, kind: str, old: Any, new: Any) -> None:
        try:
            if kind == "pod":
                self._on_pod(old, new)
            elif kind == "node":
                self._on_node(old, new)
        except QueueError as e:
            log.debug("queue: %s", e)
        except Exception:
            log.exception("cluster event handler failed")

    def _on_pod(self, old: Optional[Pod], new: Optional[Pod]) -> None:
        old_bound = old is not None and bool(old.node_name)
        new_bound = new is not None and bool(new.node_name)
        if new is not None and new_bound:
            with self._assumed_lock:
                self.assumed.pop(new.uid, None)
        if new is None:  # deleted
            if old is None:
                return
            with self._assumed_lock:
                a = self.assumed.pop(old.uid, None)
            if a is not None and not old_bound:
                self.cache.snapshot.remove_pod(a.pod)
            if old_bound:
                self.queue.move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_DELETE, old, None)
            elif self._mine(old):
                self.queue.delete(old)
            return
        if new_bound:
            if old is None or not old_bound:
                if old is not None and self._mine(old):
                    self.queue.delete(old)  # bound by someone: no longer ours to schedule
                self.queue.move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_ADD, None, new)
            else:
                for ev in pod_scheduling_properties_change(new, old):
                    self.queue.move_all_to_active_or_backoff_queue(ev, old, new)
            return
        if not self._mine(new):
            return
        if new.meta.deletion_timestamp is not None:
            self.queue.delete(new)
            return
        if old is None:
            self.queue.add(new)
        elif _spec_changed(old, new):
            with self._assumed_lock:
                if new.uid in self.assumed:
                    return
            self.queue.update(old, new)

    def _on_node(self, old: Optional[Node], new: Optional[Node]) -> None:
        if new is None:
            return  # kube: a node deletion makes no pod schedulable
        if old is None:
            self.queue.move_all_to_active_or_backoff_queue(EVENT_NODE_ADD, None, new)
            return
        for ev in _node_events(old, new):
            self.queue.move_all_to_active_or_backoff_queue(ev, old, new)

    def _on_event_record(self, r: Record) -> None:
        if r.value is None:
            return
        try:
            batch = records.expand(events_pb2.Event.FromString(r.value))
        except Exception:
            return
        with self._notes_lock:
            for ev in batch:
                n = self.notes.setdefault(ev.pod_uid, _PodNotes())
                n.events.append(ev)
                del n.events[:-MAX_EVENTS_PER_POD]
                if ev.reason == "FailedScheduling":
                    n.message = ev.message
                if ev.trace_id:
                    n.trace_id = ev.trace_id

    # ---- the ClusterView sent to the shards --------------------------------------------
    def _view(self) -> spb.ClusterView:
        v = spb.ClusterView(client_id=self.cfg.client_id, offsets=self.cache.view_offsets())
        with self._assumed_lock:
            items = [(a.pod, a.node) for a in self.assumed.values()]
        for pod, node in items:
            v.assumed.add(pod=convert.pod_to_proto(pod), node_name=node)
        # Pods nominated by preemption count on their node in the shards' filters, as in
        # kube's RunFilterPluginsWithNominatedPods.
        for node in self.queue.nominated_node_names():
            for pi in self.queue.nominated_pods_for_node(node):
                v.nominated.add(pod=convert.pod_to_proto(pi.pod), node_name=node)
        return v

    # ---- scheduleOne -------------------------------------------------------------------
    def _schedule_loop(self) -> None:
        self.loop_running.set()
        while not self._stop.is_set():
            qpi = self.queue.try_pop()
            if qpi is None:
                if self.queue.closed:
                    return
                self._stop.wait(0.02)
                continue
            t0 = time.perf_counter()
            try:
                result = self.schedule_one(qpi)
                took = time.perf_counter() - t0
                self.cycle_seconds += took
                if result:
                    metrics.observe_attempt(result, qpi.pod.scheduler_name, took)
                if self.attempts % 100 == 0:
                    metrics.set_pending_pods(**self.queue.pending_counts())
                    log.info("%d attempts, mean attempt %.1f ms (filter fan-out %.1f ms, score fan-out %.1f ms); %s",
                             self.attempts, 1000 * self.cycle_seconds / self.attempts,
                             1000 * self.evaluator.filter_seconds / self.attempts,
                             1000 * self.evaluator.score_seconds / self.attempts, self.queue.pending_pods_summary())
            except Exception:
                log.exception("scheduling %s failed unexpectedly", qpi.key)
                metrics.observe_attempt(metrics.ERROR, qpi.pod.scheduler_name, time.perf_counter() - t0)
                self._requeue_error(qpi, self.queue.scheduling_cycle())

    def schedule_one(self, qpi: QueuedPodInfo) -> str:
        """One attempt; returns its result as kube's metrics label it ("" when skipped)."""
        pod = qpi.pod
        self.attempts += 1
        cycle = self.queue.scheduling_cycle()
        fw = self.frameworks.get(pod.scheduler_name)
        with self.cache.lock:
            current = self.cache.pods.get(pod.uid)
        if fw is None or current is None or current.node_name or current.meta.deletion_timestamp is not None:
            self.queue.done(pod.uid)  # deleted, bound elsewhere, or being deleted: skip
            return ""
        root = tracer.start_span("schedule_pod", attributes={"pod": pod.key, "attempt": qpi.attempts})
        trace_id = _trace_id(root)
        ctx = trace.set_span_in_context(root)
        handed_off = False
        try:
            with trace.use_span(root, end_on_exit=False):
                start_ns = int(qpi.timestamp * 1e9) if qpi.timestamp else None
                tracer.start_span("queue_wait", context=ctx, start_time=start_ns).end()
                state = CycleState()
                fit_err: Optional[FitError] = None
                with self.cache.lock:
                    try:
                        with tracer.start_as_current_span("cycle"):
                            res = self.algo.schedule_pod(fw, state, pod, self.cache.snapshot, nominator=self.queue)
                    except FitError as e:
                        fit_err = e
                        with tracer.start_as_current_span("post_filter"):
                            fw.services["pdbs"] = self.cache.pdb_list()
                            try:
                                run_post_filter(fw, state, pod, e)  # computes only: no preemption service yet
                            except Exception:
                                log.exception("PostFilter failed for %s", pod.key)
                    if fit_err is None:
                        host = res.suggested_host
                        with tracer.start_as_current_span("select", attributes={"node": host}):
                            pass
                        # Assume.
                        self.cache.snapshot.add_pod(pod, host)
                        a = _Assumed(pod, host, fw, state, qpi, cycle, root, trace_id)
                        with self._assumed_lock:
                            self.assumed[pod.uid] = a
                        st = fw.run_reserve(state, pod, host)
                        if st is None or st.is_success():
                            st, _wait = fw.run_permit(state, pod, host)
                            if st is not None and st.is_wait():
                                st = None  # no waiting-pods machinery here: treat as allowed
                        if st is not None and not st.is_success():
                            fw.run_unreserve(state, pod, host)
                            self._forget(a)
                            root.set_attribute("error", st.message())
                            qpi.unschedulable_plugins = {st.plugin} if st.is_rejected() and st.plugin else set()
                            self._requeue(qpi, cycle)
                            return metrics.UNSCHEDULABLE if st.is_rejected() else metrics.ERROR
                if fit_err is not None:
                    self._unschedulable(qpi, cycle, fit_err, trace_id, root)
                    return metrics.UNSCHEDULABLE
                root.set_attribute("node", host)
                a.traceparent = dict(inject_grpc_metadata(context=ctx)).get("traceparent", "")
                self._bind_queue.put(a)
                handed_off = True
                return metrics.SCHEDULED
        except (PluginError, NoNodesAvailableError) as e:
            msg = str(e)
            log.warning("attempt for %s failed: %s; retrying with backoff", pod.key, msg)
            root.set_status(trace.Status(trace.StatusCode.ERROR, msg))
            with self._notes_lock:
                self.notes.setdefault(pod.uid, _PodNotes()).trace_id = trace_id
            self._requeue_error(qpi, cycle)
            if isinstance(e, NoNodesAvailableError):
                self._publish_failed(pod, f"0/0 nodes are available: {msg}.", trace_id)
            return metrics.ERROR
        finally:
            if not handed_off:
                root.end()

    def _forget(self, a: _Assumed) -> None:
        with self.cache.lock:
            with self._assumed_lock:
                self.assumed.pop(a.pod.uid, None)
            cur = self.cache.pods.get(a.pod.uid)
            if cur is None or not cur.node_name:
                self.cache.snapshot.remove_pod(a.pod)

    def _requeue(self, qpi: QueuedPodInfo, cycle: int) -> None:
        with self.cache.lock:
            cur = self.cache.pods.get(qpi.pod.uid)
            if cur is None or cur.node_name or cur.meta.deletion_timestamp is not None:
                self.queue.done(qpi.pod.uid)
                return
            qpi.update(cur)
            try:
                self.queue.add_unschedulable_if_not_present(qpi, cycle)
            except QueueError as e:
                log.debug("requeue %s: %s", qpi.key, e)

    def _requeue_error(self, qpi: QueuedPodInfo, cycle: int) -> None:
        qpi.unschedulable_plugins = set()
        qpi.pending_plugins = set()
        self._requeue(qpi, cycle)

    def _publish_failed(self, pod: Pod, message: str, trace_id: str) -> None:
        with self._notes_lock:
            n = self.notes.setdefault(pod.uid, _PodNotes())
            n.message, n.trace_id = message, trace_id
        recs = [self._event_record(pod, "Warning", "FailedScheduling", message, trace_id)]
        with self.cache.lock:
            cur = self.cache.pods.get(pod.uid)
        if cur is not None and not cur.node_name:
            cond = [c for c in cur.conditions if c.type != "PodScheduled"]
            cond.append(PodCondition("PodScheduled", "False", "Unschedulable", message))
            old = next((c for c in cur.conditions if c.type == "PodScheduled"), None)
            if old is None or old.message != message or old.reason != "Unschedulable":
                updated = replace(cur, conditions=cond)
                recs.append(records.pod_record(updated, source=self.cfg.client_id))
        try:
            self._publish_sync(recs)
        except Exception:
            log.exception("cannot publish FailedScheduling for %s", pod.key)

    def _unschedulable(self, qpi: QueuedPodInfo, cycle: int, err: FitError, trace_id: str, root) -> None:
        msg = err.message()
        root.set_attribute("unschedulable", msg)
        qpi.unschedulable_plugins = set(err.diagnosis.unschedulable_plugins)
        qpi.pending_plugins = set(err.diagnosis.pending_plugins)
        self._requeue(qpi, cycle)
        self._publish_failed(qpi.pod, msg, trace_id)

    # ---- the binding cycle (its own thread, in batches) ---------------------------------
    def _binding_loop(self) -> None:
        """kube runs one binding goroutine per pod; here the bindings decided while the binder
        was answering the previous batch go to it together, one RPC per batch."""
        while not (self._stop.is_set() and self._bind_queue.empty()):
            try:
                batch = [self._bind_queue.get(timeout=0.1)]
            except queue.Empty:
                continue
            while len(batch) < self.cfg.max_bind_batch:
                try:
                    batch.append(self._bind_queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._bind_batch(batch)
            except Exception:  # noqa: BLE001 - a failed batch must never lose its pods
                log.exception("binding batch of %d failed", len(batch))
                for a in batch:
                    self._binding_failed(a, "internal error in the binding cycle")

    def _bind_batch(self, batch: list[_Assumed]) -> None:
        ready: list[_Assumed] = []
        for a in batch:
            st = a.fw.run_pre_bind(a.state, a.pod, a.node)
            if st is not None and not st.is_success():
                self._binding_failed(a, f"PreBind: {st.message()}")
            else:
                ready.append(a)
        if not ready:
            return
        metrics.observe_batch("bind", len(ready))
        req = binder_pb2.BindBatchRequest(client_id=self.cfg.client_id)
        for a in ready:
            req.binds.add(pod=convert.pod_to_proto(a.pod), node_name=a.node, client_id=self.cfg.client_id,
                          traceparent=a.traceparent)
        try:
            results = self.binder.BindBatch(req, timeout=self.cfg.bind_timeout).results
        except grpc.RpcError as e:
            for a in ready:
                self._binding_failed(a, f"binder unavailable: {e.code().name}: {e.details()}")
            return
        for a, r in zip(ready, results):
            if not r.bound:
                self._binding_failed(a, r.reason)
                continue
            try:
                a.fw.run_post_bind(a.state, a.pod, a.node)
            except Exception:
                log.exception("PostBind failed for %s", a.pod.key)
            self.queue.done(a.pod.uid)
            if a.qpi.initial_attempt_timestamp:
                metrics.observe_pod_scheduled(a.qpi.attempts, max(0.0, time.time() - a.qpi.initial_attempt_timestamp))
            # The binder published the Scheduled event (with this trace's id) as it committed.
            if a.span is not None:
                a.span.set_attribute("bound", True)
                a.span.end()

    def _binding_failed(self, a: _Assumed, reason: str) -> None:
        pod, node = a.pod, a.node
        log.warning("binding %s to %s refused: %s", pod.key, node, reason)
        if a.span is not None:
            a.span.set_status(trace.Status(trace.StatusCode.ERROR, reason))
            a.span.end()
        with self.cache.lock:
            try:
                a.fw.run_unreserve(a.state, pod, node)
            except Exception:
                log.exception("Unreserve failed for %s", pod.key)
        self._forget(a)
        self._requeue_error(a.qpi, a.cycle)
        msg = f"Binding rejected: {reason}"
        with self._notes_lock:
            n = self.notes.setdefault(pod.uid, _PodNotes())
            n.message, n.trace_id = msg, a.trace_id
        try:
            self._publish_sync([self._event_record(pod, "Warning", "FailedScheduling", msg, a.trace_id)])
        except Exception:
            log.exception("cannot publish binding failure for %s", pod.key)

    # ---- API helpers -------------------------------------------------------------------
    def queue_name(self, pod: Pod, pending: dict[str, str]) -> str:
        if pod.node_name:
            return BOUND
        q = pending.get(pod.uid)
        if q:
            return q
        with self._assumed_lock:
            if pod.uid in self.assumed:
                return IN_FLIGHT
        if any(p.uid == pod.uid for p in self.queue.in_flight_pods()):
            return IN_FLIGHT
        return ""

    def pod_view(self, pod: Pod, pending: dict[str, str]) -> queue_pb2.PodView:
        with self._notes_lock:
            n = self.notes.get(pod.uid)
            msg, tid = (n.message, n.trace_id) if n else ("", "")
        return queue_pb2.PodView(pod=convert.pod_to_proto(pod), queue=self.queue_name(pod, pending),
                                 message=msg if not pod.node_name else "", trace_id=tid)

    def pending_map(self) -> dict[str, str]:
        return {pp.pod.uid: pp.queue for pp in self.queue.pending_pods()}


async def _publish_concurrently(producer: EventProducer, recs: list, window: int = 256) -> None:
    for i in range(0, len(recs), window):
        await asyncio.gather(*(producer.send(t, v, key=k) for t, k, v in recs[i:i + window]))


class SchedulerServicer(queue_pb2_grpc.SchedulerServicer):
    def __init__(self, qm: QueueManager) -> None:
        self.qm = qm

    async def Apply(self, request, context):
        qm = self.qm
        try:
            m = load_text(request.manifest, request.source or "<manifest>")
            with qm.cache.lock:
                classes = list(qm.cache.priority_classes.values())
            admit_all(m, classes)
        except ManifestError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        now = time.time()
        for p in m.pods:
            if p.meta.creation_timestamp is None:
                p.meta.creation_timestamp = now
            p.meta.resource_version = qm.next_resource_version()
        # Its own pods come back through Kafka; the cache then takes these objects as they are.
        qm.cache.expect(m.pods)
        recs = records.manifest_records(m, source=qm.cfg.client_id)
        # Cluster-scoped objects and nodes first, then the pods; within a group, concurrently.
        n_pods = len(m.pods)
        await _publish_concurrently(qm.producer, recs[:len(recs) - n_pods])
        with qm.cache.lock:
            # Write-through: a pod applied right after its PriorityClass (in the next Apply)
            # must find the class even before the record comes back from the broker.
            for pc in m.priority_classes:
                qm.cache.priority_classes[pc.name] = pc
        await _publish_concurrently(qm.producer, recs[len(recs) - n_pods:])
        for n in m.nodes:
            qm.applied_nodes[n.name] = n
        out = [f"namespace/{n.name} created" for n in m.namespaces]
        out += [f"priorityclass/{c.name} created" for c in m.priority_classes]
        out += [f"pdb/{p.meta.namespace}/{p.meta.name} created" for p in m.pdbs]
        out += [f"node/{n.name} created" for n in m.nodes]
        out += [f"pod/{p.namespace}/{p.name} created" for p in m.pods]
        return queue_pb2.ApplyResponse(applied=out)

    async def Delete(self, request, context):
        qm = self.qm
        kind, ns, name = request.kind.lower(), request.namespace or "default", request.name
        if kind in ("pod", "pods"):
            pod = qm.cache.get_pod(ns, name)
            if pod is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f'pods "{name}" not found in namespace {ns}')
            if pod.node_name:
                meta = replace(pod.meta, deletion_timestamp=time.time())
                await records.publish(qm.producer, [records.pod_record(replace(pod, meta=meta), source=qm.cfg.client_id)])
            else:
                await records.publish(qm.producer, [records.pod_record(pod, deleted=True, source=qm.cfg.client_id)])
            return queue_pb2.DeleteResponse(result=f'pod "{name}" deleted')
        if kind in ("node", "nodes"):
            ni = qm.cache.snapshot.get(name)
            if ni is None or ni.node is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f'nodes "{name}" not found')
            qm.applied_nodes.pop(name, None)
            await records.publish(qm.producer, [records.node_record(ni.node, deleted=True, source=qm.cfg.client_id)])
            return queue_pb2.DeleteResponse(result=f'node "{name}" deleted')
        if kind in ("priorityclass", "priorityclasses", "pc"):
            pc = qm.cache.priority_classes.get(name)
            if pc is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f'priorityclasses "{name}" not found')
            await records.publish(qm.producer, [records.priority_class_record(pc, deleted=True)])
            return queue_pb2.DeleteResponse(result=f'priorityclass "{name}" deleted')
        if kind in ("pdb", "pdbs", "poddisruptionbudget"):
            pdb = qm.cache.pdbs.get(f"{ns}/{name}")
            if pdb is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f'poddisruptionbudgets "{name}" not found in namespace {ns}')
            await records.publish(qm.producer, [records.pdb_record(pdb, deleted=True)])
            return queue_pb2.DeleteResponse(result=f'poddisruptionbudget "{name}" deleted')
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"kind must be pod, node, priorityclass or pdb, not {request.kind!r}")

    async def GetPods(self, request, context):
        qm = self.qm
        pending = qm.pending_map()
        with qm.cache.lock:
            pods = [p for p in qm.cache.pods.values() if not request.namespace or p.namespace == request.namespace]
        pods.sort(key=lambda p: (p.namespace, p.name))
        return queue_pb2.PodList(pods=[qm.pod_view(p, pending) for p in pods])

    async def GetNodes(self, request, context):
        qm = self.qm
        out = queue_pb2.NodeList()
        with qm.cache.lock:
            for ni in sorted(qm.cache.snapshot.node_info_list, key=lambda n: n.name):
                if ni.node is None:
                    continue
                ready = not any(c.type == "Ready" and c.status != "True" for c in ni.node.conditions)
                out.nodes.add(node=convert.node_to_proto(ni.node), pods=len(ni.pods),
                              requested_milli_cpu=ni.requested.milli_cpu, requested_memory=ni.requested.memory,
                              ready=ready)
        return out

    async def DescribePod(self, request, context):
        qm = self.qm
        ns = request.namespace or "default"
        pod = qm.cache.get_pod(ns, request.name)
        if pod is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f'pods "{request.name}" not found in namespace {ns}')
        view = qm.pod_view(pod, qm.pending_map())
        with qm._notes_lock:
            n = qm.notes.get(pod.uid)
            events = list(n.events) if n else []
        return queue_pb2.PodDescription(pod=view, events=events)


async def serve(cfg: QueueManagerConfig, bootstrap: str, port: int) -> None:
    proc = ServiceProcess(cfg.client_id, port)
    qm = QueueManager(cfg, bootstrap)
    queue_pb2_grpc.add_SchedulerServicer_to_server(SchedulerServicer(qm), proc.server)
    await proc.start()
    await qm.start()
    proc.spawn(qm.follow(), "follow")
    proc.spawn(qm.follow_events(), "follow-events")
    await asyncio.to_thread(qm.loop_running.wait, 10)
    await proc.set_serving(True)
    log.info("queue-manager serving: %d filter shard(s), %d score shard(s), binder %s",
             len(cfg.filter_workers), len(cfg.score_workers), cfg.binder)
    await proc.wait_and_stop(qm.stop)
