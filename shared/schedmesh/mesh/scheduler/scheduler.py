"""The queue-manager (kube-scheduler's Scheduler): the Scheduler API, the priority queue and kube's scheduleOne loop, with
Filter/Score fanned out to the node shards (schedmesh.mesh.fanout) and binding delegated to
the binder service.

Threads and locks:
  * the asyncio loop runs the gRPC API, the Kafka producer and consumers; records are applied
    to the ClusterCache on a worker thread (so a long cycle holding `cache.lock` never stalls
    the loop);
  * the scheduling loop (`_schedule_loop`) is one thread, like kube's scheduleOne goroutine:
    pop, cycle under `cache.lock`, assume, Reserve/Permit, hand off to the binding pool;
  * a pod Permit holds (Wait) stays assumed in the waiting-pods map, out of both threads, until
    its plugins allow it (then it joins the binding queue) or it is rejected or times out;
  * the binding cycle is one more thread: it sends the bindings decided meanwhile to the
    binder in one batch (BindBatch) and never blocks the next pod;
  * a large applied manifest is read and admitted in a worker process (admission.py), so
    reading it does not take the interpreter lock from the loop.
Lock order: cache.lock before the queue's lock (the cache listener calls the queue under
cache.lock); nothing takes cache.lock while holding the queue's lock."""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import time
from typing import Optional

from opentelemetry import trace

from schedmesh.api import convert
from schedmesh.api.types import Node, Pod, same_but_status
from schedmesh.bus import EventConsumer, EventProducer, watcher_options
from schedmesh.bus.consumer import watcher_fetch_interval_ms
from schedmesh.framework.runtime import Framework, build_frameworks
from schedmesh.framework.profile import DEFAULT_SCHEDULER_NAME
from schedmesh.framework.waiting_pods import WaitingPodsMap
from schedmesh.plugins.pod_topology_spread import SELECTOR_SOURCES_SERVICE, WorkloadSelectorSources
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import (KEPT_ENCODED_PODS, REMEMBERED_DELETIONS, TOPIC_EVENTS, TOPIC_NAMESPACES,
                                          TOPIC_NODES, TOPIC_PDBS, TOPIC_PODS, TOPIC_PRIORITY_CLASSES, ClusterCache)
from schedmesh.mesh.applied_store import AppliedStore
from schedmesh.mesh.runtime import CacheFollower, peer_channel
from schedmesh.queue.scheduling_queue import PriorityQueue
from schedmesh.scheduling.cycle import SchedulingAlgorithm
from schedmesh.telemetry import metrics
from schedmesh.mesh.preemption_service import PreemptionsInFlight
from schedmesh.preemption.executor import SERVICE_KEY as PREEMPTION_EXECUTOR
from schedmesh.v1 import binder_pb2_grpc, events_pb2, preemption_pb2_grpc, queue_pb2
from schedmesh.v1 import scheduling_pb2 as spb
from schedmesh.mesh.scheduler.admission import Admission
from schedmesh.mesh.scheduler.binding_cycle import BindingCycle, BindingQueue
from schedmesh.mesh.scheduler.eventhandlers import EventHandlers
from schedmesh.mesh.scheduler.schedule_one import ScheduleOne, TracedEvaluator, trace_method
from schedmesh.mesh.scheduler.state import BOUND, IN_FLIGHT, AssumedPod, PodNotes, QueueManagerConfig, WriteGate

log = logging.getLogger("schedmesh.queue_manager")
tracer = trace.get_tracer("schedmesh.queue_manager")

NOTES_PRUNE_SECONDS = 60.0  # how often notes about pods gone are looked for (EventHandlers._prune_notes)


class QueueManager(EventHandlers, ScheduleOne, BindingCycle):
    def __init__(self, cfg: QueueManagerConfig, bootstrap: str) -> None:
        self.cfg = cfg
        self.bootstrap = bootstrap
        # (deleted uids remembered: a pod applied again after its deletion gets a new uid, see api.py)
        self.cache = ClusterCache(remember_deletions=REMEMBERED_DELETIONS, keep_encoded=KEPT_ENCODED_PODS)
        if cfg.profiles is None:
            from schedmesh.framework.profile import default_profile
            cfg.profiles = [default_profile()]
        # The controllers applied here select their pods for PodTopologySpread's default constraints.
        self.frameworks: dict[str, Framework] = build_frameworks(
            cfg.profiles, services={SELECTOR_SOURCES_SERVICE: WorkloadSelectorSources(self.cache.workloads)})
        self.queue = PriorityQueue.from_frameworks(
            self.frameworks, pod_initial_backoff_seconds=cfg.pod_initial_backoff_seconds,
            pod_max_backoff_seconds=cfg.pod_max_backoff_seconds,
            namespace_labels=lambda ns: self.cache.snapshot.namespace_labels.get(ns, {}),
            on_incoming=lambda queue_name, event, _pod: metrics.observe_incoming_pod(queue_name, event))
        # Preemptors waiting for their victims to go (DefaultPreemption's PreEnqueue asks it).
        self.preemptions = PreemptionsInFlight(self.cache.pods)
        # Pods held by Permit, one map for every profile (kube's waitingPods).
        self.waiting_pods = WaitingPodsMap()
        for fw in self.frameworks.values():
            fw.set_snapshot_source(lambda: self.cache.snapshot)
            fw.services["nominator"] = self.queue
            fw.services[PREEMPTION_EXECUTOR] = self.preemptions
            fw.services["waiting_pods"] = self.waiting_pods
            # PostFilter computed here (for its message) asks the extenders too, as explain does.
            fw.services["extenders"] = list(cfg.extenders)
            trace_method(fw, "run_pre_filter", "prefilter")
        self.evaluator = TracedEvaluator(cfg.filter_workers, cfg.score_workers, self._shard_view,
                                         timeout=cfg.shard_timeout, encode=self._encode_for_shards)
        kw = {} if cfg.percentage_of_nodes_to_score is None else {"percentage_of_nodes_to_score": cfg.percentage_of_nodes_to_score}
        # Extenders filter and prioritize in this process, after the shards (as in explain).
        self.algo = SchedulingAlgorithm(tie_break=cfg.tie_break, evaluator=self.evaluator, extenders=cfg.extenders, **kw)
        # The extenders' bind calls of a batch run side by side, not one after the other.
        self._extender_bind_pool = (concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="extender-bind")
                                    if any(e.is_binder() for e in cfg.extenders) else None)
        # uid -> the pods decided and not yet seen bound, with what their binding cycle needs (kube's
        # assumed pod info); counting them on their nodes is the cache's (ClusterCache.assume/forget)
        self.assumed: dict[str, AssumedPod] = {}
        self._early_roots: dict = {}  # uid -> attempt span started with its shard batch
        # pod object id -> (pod, whether it may join a shard run): ScheduleOne._batchable
        self._batchable_seen: dict[int, tuple] = {}
        self._warmed: tuple = (None, -1)  # (snapshot, generation) the plugins last warmed at
        # Prepares the next run's shard batch while the scheduling thread decides the current one.
        self._batch_prep = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shard-batch")
        self._assumed_lock = threading.Lock()
        self._cycle_gate = threading.Lock()  # held by each attempt, and by a re-publication
        # After a broker restart: set once this producer's records are sent again; bindings wait
        # for it, so no binding lands before the pod it binds (see _resend_after_restart).
        self._resent = threading.Event()
        self._resent.set()
        # Pods left out of a re-publication while assumed: published once bound or forgotten.
        self._unpublished: set[str] = set()
        self.notes: dict[str, PodNotes] = {}
        self._deleted_notes: collections.deque[str] = collections.deque()  # uids of deleted pods with notes, oldest first
        self._notes_lock = threading.Lock()
        self.applied_nodes: dict[str, Node] = {}
        self.writes = WriteGate()  # Apply and Delete against the broker-restart re-publication
        # What was applied, kept on disk across down/up when the broker keeps nothing (local mesh).
        self.store: Optional[AppliedStore] = AppliedStore.from_env()
        if self.store is not None:
            self.cache.listeners.append(self._forget_deleted)
        self.cache.listeners.append(self._on_change)
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.producer: Optional[EventProducer] = None
        self.follower: Optional[CacheFollower] = None
        self.events_consumer: Optional[EventConsumer] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._bind_queue = BindingQueue()
        self._bind_thread: Optional[threading.Thread] = None
        # Mutual TLS with the queue-manager's certificate: the binder admits no other identity.
        self._binder_channel = peer_channel(cfg.binder)
        self.binder = binder_pb2_grpc.BinderStub(self._binder_channel)
        # PostFilter runs in the preemption service, one request at a time off the scheduling loop.
        self._preemption_channel = peer_channel(cfg.preemption) if cfg.preemption else None
        self.preemption = (preemption_pb2_grpc.PreemptionStub(self._preemption_channel)
                           if self._preemption_channel is not None else None)
        self._preemption_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="preemption")
        # Reads and admits applied manifests; large ones in a worker process, beside the loop.
        self.admission = Admission()
        self.loop_running = threading.Event()
        self.deciding = False  # the scheduling thread holds popped pods not yet decided
        self.attempts = 0
        self.cycle_seconds = 0.0
        self.batch_wait_seconds = 0.0  # the loop waiting for a run's shard answers (the log)
        self._resource_version = 0
        self._started_ns = time.time_ns()

    # ---- lifecycle ---------------------------------------------------------------------
    async def start(self, timeout: float = 60.0) -> None:
        self.loop = asyncio.get_running_loop()
        self.producer = EventProducer(self.bootstrap, client_id=f"{self.cfg.client_id}-producer",
                                      on_restart=self._republish, resend=self._resend_after_restart,
                                      resend_window=self._resend_window, read_back=self._read_back)
        await self.producer.start(timeout)
        self.admission.start()
        # Paced as the watchers are: what this process publishes (an Apply's pods, a deletion) and
        # whatever it waits for are fetched at once (bus.consumer.wake_readers, ClusterCache.wait_for);
        # other writers' records, bindings and kubelet reports above all, come in fewer, fuller
        # fetches. SchedulingBasic (5,000 pods, three alternated pairs, pausing 50 ms against not
        # at all): the mesh's CPU 3.25-3.80 -> 2.97-3.13 ms per pod, Tansu's 0.51-0.63 -> 0.31-0.33.
        self.follower = CacheFollower(self.bootstrap, self.cache, client_id=self.cfg.client_id,
                                      fetch_interval_ms=watcher_fetch_interval_ms())
        await self.follower.start(timeout)
        self.events_consumer = EventConsumer(self.bootstrap, [TOPIC_EVENTS], client_id=f"{self.cfg.client_id}-events",
                                             **watcher_options())
        await self.events_consumer.start(timeout)
        for r in await self.events_consumer.catch_up(timeout):
            self._on_event_record(r)
        await self._restore()
        self.queue.run()
        self._thread = threading.Thread(target=self._schedule_loop, name="schedule-one", daemon=True)
        self._thread.start()
        self._bind_thread = threading.Thread(target=self._binding_loop, name="binding-cycle", daemon=True)
        self._bind_thread.start()
        if self.evaluator.sharded:  # the shards get the cluster now, and changes while idle
            threading.Thread(target=self.evaluator.keep_fed, args=(self.cache.lock, lambda: self.cache.snapshot,
                                                                   self._stop), name="shard-feed", daemon=True).start()

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
        next_prune = time.monotonic() + NOTES_PRUNE_SECONDS
        while True:
            for r in await self.events_consumer.getmany(timeout=0.5):
                self._on_event_record(r)
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + NOTES_PRUNE_SECONDS
                await asyncio.to_thread(self._prune_notes, time.time())

    async def stop(self) -> None:
        self._stop.set()
        self._bind_queue.put(None)  # ends the binding loop's wait
        self.queue.close()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        if self._bind_thread is not None:
            await asyncio.to_thread(self._bind_thread.join, 10)
        self._batch_prep.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(self.admission.stop)
        self.evaluator.close()
        self._binder_channel.close()
        self._preemption_pool.shutdown(wait=False, cancel_futures=True)
        if self._extender_bind_pool is not None:
            self._extender_bind_pool.shutdown(wait=False, cancel_futures=True)
        if self._preemption_channel is not None:
            self._preemption_channel.close()
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
        # kube-scheduler's recorder reports as the pod's profile, its schedulerName
        ev = events_pb2.Event(pod_uid=pod.uid, pod=pod.key, type=type_, reason=reason, message=message,
                              source=pod.scheduler_name or DEFAULT_SCHEDULER_NAME, timestamp=time.time(),
                              trace_id=trace_id)
        return TOPIC_EVENTS, pod.uid, ev.SerializeToString()

    def _read_back(self, topic: str, partition: int, offset: int) -> bool:
        """A record this producer sent is safe from a broker restart once the cache holds it:
        _republish covers it from then on (an Apply's pods, a deletion, a pod's status). Not before
        the cache has noticed the restart the producer has: its offsets would be the lost broker's."""
        follower, producer = self.follower, self.producer
        return (follower is not None and producer is not None
                and follower.consumer.restart_count >= producer.restart_count
                and follower.has_read(topic, partition, offset))

    def _resend_window(self, open_: bool) -> None:
        (self._resent.clear if open_ else self._resent.set)()

    def _resend_after_restart(self, topic: str, value: bytes) -> Optional[bytes]:
        """A record this producer sent around a broker restart, about to be sent again: an applied
        pod that this cache has seen bound since is left out (the binding is newer; _republish
        sends the pod as it is now), so no stale unbound copy lands after its binding. A pod
        assumed now may be bound by the binder before this record lands: it is left out too and
        published once its binding is seen or forgotten (_publish_unpublished). Bindings not yet
        sent wait for the re-sent records (_resent)."""
        if topic != TOPIC_PODS:
            return value
        msg = events_pb2.PodRecord.FromString(value)
        items = records.expand(msg)
        keep = []
        with self.cache.lock, self._assumed_lock:
            for r in items:
                if self._unbound_pod(r) and r.pod.metadata.uid in self.assumed:
                    self._unpublished.add(r.pod.metadata.uid)
                elif not self._bound_since(r):
                    keep.append(r)
        if len(keep) == len(items):
            return value
        return records.pod_batch_record(keep, self.cfg.client_id)[2] if keep else None

    @staticmethod
    def _unbound_pod(rec: events_pb2.PodRecord) -> bool:
        return not (rec.HasField("update") or rec.deleted or rec.pod.node_name)

    def _publish_unpublished(self, uid: str) -> None:
        """A pod left out of a re-publication while assumed, now bound or forgotten: published as
        it is (from any thread; without waiting)."""
        with self._assumed_lock:
            if uid not in self._unpublished:
                return
            self._unpublished.discard(uid)
        with self.cache.lock:
            current = self.cache.pods.get(uid)
        if current is None or self.loop is None or self.producer is None:
            return
        rec = records.pod_batch_record([records.pod_message(current, source=self.cfg.client_id)], self.cfg.client_id)
        asyncio.run_coroutine_threadsafe(records.publish(self.producer, [rec]), self.loop)

    def _bound_since(self, rec: events_pb2.PodRecord) -> bool:
        if rec.HasField("update") or rec.deleted or rec.pod.node_name:
            return False
        current = self.cache.pods.get(rec.pod.metadata.uid)
        return current is not None and bool(current.node_name)

    async def _republish(self) -> None:
        """The broker came back empty: publish again what this queue-manager owns, as the API
        server would still hold it: applied objects and every pod of its profiles, bound ones with
        their binding and status (a binding the kubelet agent had not seen yet is otherwise lost;
        an unbound copy never unbinds a pod in any cache, see ClusterCache), except pods assumed
        and not yet seen bound (the binder re-publishes the bindings it made). The records are built
        off the event loop (thousands of pods take seconds to encode)."""
        def build() -> list:
            with self.cache.lock:
                recs = [records.namespace_record(ns) for ns in self.cache.namespaces()]
                recs += [records.priority_class_record(pc) for pc in self.cache.priority_classes.values()]
                recs += [records.runtime_class_record(rc) for rc in self.cache.runtime_classes.values()]
                recs += [records.pdb_record(p) for p in self.cache.pdbs.values()]
                recs += [records.workload_record(w) for w in self.cache.workloads.values()]
                recs += [records.daemon_set_record(d) for d in self.cache.daemon_sets.values()]
                recs += [records.limit_range_record(r) for r in self.cache.limit_ranges.values()]
                nodes = []
                for name, node in self.applied_nodes.items():  # (Apply and Delete wait: WriteGate)
                    ni = self.cache.snapshot.get(name)
                    nodes.append(ni.node if ni is not None and ni.node is not None else node)
                recs += records.node_batch_records(nodes, source=self.cfg.client_id)
                with self._assumed_lock:  # a binding on its way: published once seen or forgotten
                    in_flight = set(self.assumed)
                    self._unpublished |= in_flight
                pods = [p for p in self.cache.pods.values()
                        if p.scheduler_name in self.frameworks and p.uid not in in_flight]
            # pods in creation order, in batch records
            pods.sort(key=lambda p: (p.meta.creation_timestamp or 0.0, p.namespace, p.name))
            recs += records.pod_batch_records((records.pod_message(p, source=self.cfg.client_id) for p in pods),
                                              self.cfg.client_id)
            return recs
        # No attempt runs from the snapshot to its publication: a pod published unbound must not
        # be bound (and its binding published) in between, or the stale copy would land last. No
        # Apply or Delete either, for the same reason (WriteGate).
        async with self.writes.alone():
            await asyncio.to_thread(self._cycle_gate.acquire)
            try:
                await self._read_what_was_published()
                recs = await asyncio.to_thread(build)
                log.warning("broker restarted: re-publishing %d records", len(recs))
                await records.publish(self.producer, recs)
            finally:
                self._cycle_gate.release()

    async def _read_what_was_published(self, timeout: float = 10.0) -> None:
        """Before the re-publication's snapshot: the cache has noticed the restart and read the new
        broker up to its end, so it holds what this process already sent there (the producer's
        re-sent records, an attempt's FailedScheduling that waited out the outage). A snapshot
        older than those records, published after them, would undo them in every cache: a pending
        pod lost its PodScheduled=False condition that way (tests/test_crash_safety.py)."""
        assert self.follower is not None and self.producer is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        consumer = self.follower.consumer
        while consumer.restart_count < self.producer.restart_count and loop.time() < deadline:
            await asyncio.sleep(0.05)
        try:
            await self.producer.flush()
            ends = await consumer.end_offsets()
        except Exception as e:  # noqa: BLE001 - the broker went away again: publish what we have
            log.warning("broker restarted: cannot read its end offsets before re-publishing (%r)", e)
            return
        if not await asyncio.to_thread(self.cache.wait_for, ends, max(0.1, deadline - loop.time())):
            log.warning("broker restarted: the cache has not read %s before re-publishing", ends)

    async def _restore(self) -> None:
        """At start: publish again, from the local store, what was applied and the broker no longer
        has (a whole-mesh down/up, or a broker restart while this process was down)."""
        if self.store is None:
            return
        stored = await asyncio.to_thread(self.store.records)
        with self.cache.lock:
            known = {TOPIC_PODS: set(self.cache.pods),
                     TOPIC_PRIORITY_CLASSES: set(self.cache.priority_classes) | {
                         records.RUNTIME_CLASS_KEY_PREFIX + n for n in self.cache.runtime_classes},
                     TOPIC_PDBS: set(self.cache.pdbs) | {records.workload_key(w)
                                                         for w in self.cache.workloads.values()} | {
                         records.daemon_set_key(d) for d in self.cache.daemon_sets.values()} | {
                         records.limit_range_key(r) for r in self.cache.limit_ranges.values()},
                     TOPIC_NAMESPACES: set(self.cache.snapshot.namespace_labels),
                     TOPIC_NODES: {ni.node.name for ni in self.cache.snapshot.node_info_list if ni.node is not None}}
        missing = [(t, k, v) for t, k, v in stored if k not in known.get(t, ())]
        pods = [events_pb2.PodRecord.FromString(v) for t, _k, v in missing if t == TOPIC_PODS]
        recs = [r for r in missing if r[0] not in (TOPIC_PODS, TOPIC_NODES)]
        nodes = [convert.node_from_proto(events_pb2.NodeRecord.FromString(v).node)
                 for t, _k, v in missing if t == TOPIC_NODES]
        for node in nodes:
            self.applied_nodes[node.name] = node
        recs += records.node_batch_records(nodes, source=self.cfg.client_id)
        pods.sort(key=lambda r: (r.pod.metadata.creation_timestamp, r.pod.metadata.namespace, r.pod.metadata.name))
        recs += records.pod_batch_records(pods, self.cfg.client_id)
        if recs:
            log.warning("restoring %d applied object(s) (%d pods) from %s: the broker did not have them",
                        len(missing), len(pods), self.store.path)
            await records.publish(self.producer, recs)
        await asyncio.to_thread(self.store.compact)

    def _forget_deleted(self, kind: str, old, new) -> None:
        """A pod of ours deleted (or ended) by anyone leaves the store: it must not run again at `up`."""
        if kind == "pod" and new is None and old is not None and old.scheduler_name in self.frameworks:
            self.store.forget(TOPIC_PODS, [old.uid])

    # ---- the ClusterView sent to the shards and the preemption service ------------------
    def _shard_view(self) -> spb.ClusterView:
        """What the shards need besides their feeds (mesh/shard_feed.py): the nominated pods."""
        v = spb.ClusterView(client_id=self.cfg.client_id)
        self._add_nominated(v)
        return v

    def _encode_for_shards(self, pod: Pod) -> bytes:
        """A pod for the shards' feeds, whose plugins read no binding and no status: as a record
        of it encoded it when it was read from one, an assumed one's message (kept for its
        binding), else encoded here."""
        data = self.cache.encoded_spec(pod)
        if data is not None:
            return data
        with self._assumed_lock:
            a = self.assumed.get(pod.uid)
        if a is not None and (a.pod is pod or same_but_status(a.pod, pod)):  # (the assumed copy: bound)
            return self._pod_message(a).SerializeToString()
        return convert.pod_to_proto(pod).SerializeToString()

    def _add_nominated(self, v: spb.ClusterView) -> None:
        # Pods nominated by preemption count on their node in the shards' filters, as in
        # kube's RunFilterPluginsWithNominatedPods.
        for node in self.queue.nominated_node_names():
            for pi in self.queue.nominated_pods_for_node(node):
                v.nominated.add(pod=convert.pod_to_proto(pi.pod), node_name=node)

    def _view(self) -> spb.ClusterView:
        v = spb.ClusterView(client_id=self.cfg.client_id, offsets=self.cache.view_offsets())
        with self._assumed_lock:
            items = list(self.assumed.values())
        for a in items:
            v.assumed.add(pod=self._pod_message(a), node_name=a.node)
        self.waiting_pods.iterate(lambda wp: v.waiting_uids.append(wp.pod.uid))
        self._add_nominated(v)
        return v


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

