"""kube's scheduleOne: pop a pod, run the scheduling cycle (Filter and Score in this process or
fanned out to the node shards), assume it on the chosen node, Reserve and Permit, then hand it
to the binding cycle (schedmesh.mesh.scheduler.binding_cycle), at once or, when Permit holds it,
once its waiting plugins allowed it."""
from __future__ import annotations

import logging
import time
from typing import Any, Optional

import grpc
from opentelemetry import trace

from schedmesh.queue.backoff_queue import backoff_duration_ns
from schedmesh.api.types import Pod, PodCondition
from schedmesh.framework.interface import Code, CycleState, PluginError, Status
from schedmesh.mesh import records
from schedmesh.mesh.answers import batchable
from schedmesh.mesh.fanout import FanOutEvaluator
from schedmesh.mesh.preemption_service import preempt_request
from schedmesh.queue.nominator import NominatingInfo, NominatingMode
from schedmesh.queue.queued_pod_info import QueuedPodInfo
from schedmesh.queue.scheduling_queue import QueueError
from schedmesh.scheduling.cycle import Diagnosis, FitError, NoNodesAvailableError, run_post_filter
from schedmesh.plugins.default_preemption.plugin import NAME as DEFAULT_PREEMPTION
from schedmesh.telemetry import inject_grpc_metadata, metrics
from schedmesh.telemetry import child_span, in_pod_context, k8s_attributes, pod_context, set_error, set_node, v
from schedmesh.telemetry.propagation import traceparent_of
from schedmesh.mesh.scheduler.state import AssumedPod, PodNotes, trace_id_of

log = logging.getLogger("schedmesh.queue_manager")
tracer = trace.get_tracer("schedmesh.queue_manager")

def trace_method(obj: Any, method: str, span_name: str) -> None:
    """Wrap one framework phase of this instance in a span."""
    inner = getattr(obj, method)

    def traced(*a, **kw):
        with child_span(tracer, span_name):
            return inner(*a, **kw)
    setattr(obj, method, traced)


class TracedEvaluator(FanOutEvaluator):
    """The fan-out with `filter` / `score` spans around each phase, and a `shard_batch` trace
    for each run of pods asked of the shards at once (each pod's `filter` span names it)."""

    filter_seconds = 0.0
    score_seconds = 0.0
    batch_seconds = 0.0
    batches = 0
    batched_pods = 0

    def prepare_batch(self, algo, items, *a, **kw):
        t0 = time.perf_counter()
        # Its own trace: the run serves many pods' attempts, each of which is a trace of its own.
        with tracer.start_as_current_span("shard_batch", context=trace.set_span_in_context(trace.INVALID_SPAN),
                                          attributes={"schedmesh.batch.pods": len(items)}) as span:
            batch = super().prepare_batch(algo, items, *a, **kw)
        self.batch_seconds += time.perf_counter() - t0
        if batch is not None:
            batch.trace_id = trace_id_of(span)
        if batch is not None and batch.changes is not None:  # (not a run that asked the shards nothing)
            self.batches += 1
            self.batched_pods += len(items) - batch.evaluated_here
        return batch

    def filter(self, *a, **kw):
        t0 = time.perf_counter()
        attrs = {"schedmesh.batch_trace_id": self._batch.trace_id} if self._batch is not None else None
        try:
            with child_span(tracer, "filter", attributes=attrs):
                return super().filter(*a, **kw)
        finally:
            self.filter_seconds += time.perf_counter() - t0

    def raw_scores(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            with child_span(tracer, "score"):
                return super().raw_scores(*a, **kw)
        finally:
            self.score_seconds += time.perf_counter() - t0



def _node_fit_error(pod: Pod, node: str, st: Status) -> FitError:
    """kube's FitError for a rejection by Reserve or Permit on the chosen node: one node, its status."""
    d = Diagnosis()
    d.node_to_status.set(node, st)
    d.add_plugin_status(st)
    return FitError(pod, 1, d)


class ScheduleOne:
    """Methods of QueueManager (kube: schedule_one.go's scheduling cycle)."""

    def _refresh_pending_gauge(self, every: float = 0.5) -> None:
        """scheduler_pending_pods, at most every `every` seconds (counting the gated pods walks
        the unschedulable ones, too much to do per attempt)."""
        now = time.monotonic()
        if now - getattr(self, "_pending_gauge_at", 0.0) >= every:
            self._pending_gauge_at = now
            metrics.set_pending_pods(**self.queue.pending_counts())

    def _schedule_loop(self) -> None:
        self.loop_running.set()
        self._ahead = None  # with shards: the next run, its batch prepared while this one is decided
        while not self._stop.is_set():
            self._refresh_pending_gauge()
            # A broker-restart re-publication takes the gate: it waits for the attempt in flight
            # and holds the next one, so no pod it publishes unbound is bound meanwhile.
            with self._cycle_gate:
                if self._ahead is None:
                    run = self._pop_run()
                    prepared = self._prepare_run(run, self.algo.next_start_node_index) if run else None
                else:
                    (run, prepared), self._ahead = self._ahead, None
                if run:
                    self.deciding = True  # the binding cycle's batching waits for these pods' bindings
                    batch = self._prepared_batch(prepared)
                    next_start = None  # where this run leaves the node search: the next run starts there
                    # Not after a pod that is not node-local: assuming it (inter-pod affinity
                    # terms) would end a batch prepared meanwhile.
                    if self.evaluator.filter_stubs and all(self._batchable(q) for q, _ in run):
                        next_start = batch.next_start if batch is not None and batch.next_start is not None \
                            else self.algo.next_start_node_index
                        self._look_ahead(next_start, 1)
                    try:
                        self._attempt_run(run, batch, next_start)
                    finally:
                        self.deciding = False
                        self._bind_queue.recheck()  # a binding batch waiting for these pods may go
                    continue
            if self.queue.closed:
                return
            self._warm()
            # until a pod can be popped (stop() closes the queue); the pending gauge's period at most
            self.queue.wait(0.5)

    def _warm(self) -> None:
        """Nothing to pop: the plugins build ahead what their next cycle would (Plugin.warm),
        once per change to the cluster."""
        snapshot = self.cache.snapshot
        if (snapshot, snapshot.generation) == self._warmed:
            return
        try:
            with self.cache.lock:
                snapshot = self.cache.snapshot
                for fw in self.frameworks.values():
                    fw.warm(snapshot)
                self._warmed = (snapshot, snapshot.generation)
        except Exception:  # a cycle builds the same on demand: never a reason to stop the loop
            log.exception("warming the plugins' indexes failed")

    def _look_ahead(self, start: int, at_least: int) -> None:
        """Pop the next run and have the shards evaluate it (from node index `start`, where the run
        being decided leaves it) while that run is decided here, once activeQ holds `at_least`
        pods and no next run is being prepared yet."""
        if self._ahead is None and self.queue.active_count() >= at_least:
            following = self._pop_run()
            if following:
                self._ahead = (following, self._prepare_run(following, start))

    def _prepare_run(self, run: list[tuple[QueuedPodInfo, int]], start: int):
        """Start asking the shards about the run's node-local pods (a future of its ShardBatch,
        or None when the run has too few). Each such pod's attempt trace starts here, so the
        shards' spans for it join that trace."""
        if len(run) < 2:
            return None
        items = [(self.frameworks[q.pod.scheduler_name], q.pod) for q, _ in run if self._batchable(q)]
        if len(items) < 2:
            return None
        parents = {}
        for _, pod in items:
            root = self._early_roots.get(pod.uid)
            if root is None:
                root = self._early_roots[pod.uid] = self._root_span(pod)
            parents[pod.uid] = traceparent_of(root)
        return self._batch_prep.submit(self.evaluator.prepare_batch, self.algo, items, self.cache.lock,
                                       lambda: self.cache.snapshot, self.queue, parents, start)

    def _prepared_batch(self, prepared):
        if prepared is None:
            return None
        t0 = time.perf_counter()
        try:
            return prepared.result()
        except Exception:
            log.exception("preparing a shard batch failed; its pods ask the shards one by one")
            return None
        finally:
            self.batch_wait_seconds += time.perf_counter() - t0  # the loop idle, waiting for the shards

    def _batchable(self, qpi: QueuedPodInfo) -> bool:
        """Whether the pod may join a run (asked at its pop, its run's preparation and before the
        next run is popped: remembered per pod object, since PodTopologySpread's answer costs a
        default-selector lookup each time). Only runs are made from it: a Service or controller
        applied meanwhile may change it, and the batch asks again before it answers a pod."""
        pod = qpi.pod
        got = self._batchable_seen.get(id(pod))
        if got is not None and got[0] is pod:
            return got[1]
        fw = self.frameworks.get(pod.scheduler_name)
        ok = fw is not None and not self.cfg.extenders and batchable(fw, pod)
        if len(self._batchable_seen) >= 4096:
            self._batchable_seen.clear()
        self._batchable_seen[id(pod)] = (pod, ok)
        return ok

    def _pop_run(self) -> list[tuple[QueuedPodInfo, int]]:
        """The next pod, and with shards the node-local pods queued behind it (up to the batch
        size): one run, asked of the shards at once (schedmesh.mesh.batch). A pod that is not
        node-local ends the run and is attempted last, on its own. Each pod keeps the scheduling
        cycle of its pop, as kube's does."""
        qpi = self.queue.try_pop()
        if qpi is None:
            return []
        run = [(qpi, self.queue.scheduling_cycle())]
        if not self.evaluator.filter_stubs:
            return run
        while len(run) < self.cfg.shard_batch_size and self._batchable(run[-1][0]):
            nxt = self.queue.try_pop()
            if nxt is None:
                break
            run.append((nxt, self.queue.scheduling_cycle()))
        return run

    def _attempt_run(self, run: list[tuple[QueuedPodInfo, int]], batch=None,
                     next_start: Optional[int] = None) -> None:
        """The run's attempts, in order. `next_start` (with shards: where this run leaves the node
        search): between them, the next run's batch starts once a quarter of a run has arrived
        (pods come in bursts, an Apply's at a time: the next run would otherwise wait until this
        one is decided, then for the shards)."""
        self.evaluator.use_batch(batch)
        enough = max(2, self.cfg.shard_batch_size // 4)
        try:
            for qpi, cycle in run:
                self._attempt(qpi, cycle)
                if next_start is not None:
                    self._look_ahead(next_start, enough)
        finally:
            self.evaluator.end_batch()
            for qpi, _ in run:  # pods skipped (deleted or bound meanwhile) end their early trace
                root = self._early_roots.pop(qpi.pod.uid, None)
                if root is not None:
                    root.end()

    @staticmethod
    def _root_span(pod: Pod):
        return tracer.start_span("schedule_pod", attributes=k8s_attributes(pod))

    def _attempt(self, qpi: QueuedPodInfo, cycle: Optional[int] = None) -> None:
        t0 = time.perf_counter()
        try:
            result = self.schedule_one(qpi, cycle)
            took = time.perf_counter() - t0
            self.cycle_seconds += took
            if result:
                metrics.observe_attempt(result, qpi.pod.scheduler_name, took)
            if self.attempts % 100 == 0:
                ev = self.evaluator
                log.info("%d attempts, mean attempt %.1f ms (filter %.1f ms, score %.1f ms; shard batches %.1f ms "
                         "per pod, waited for %.1f ms in all, %d batches of %.1f pods); %s",
                         self.attempts, 1000 * self.cycle_seconds / self.attempts,
                         1000 * ev.filter_seconds / self.attempts, 1000 * ev.score_seconds / self.attempts,
                         1000 * ev.batch_seconds / self.attempts, 1000 * self.batch_wait_seconds, ev.batches,
                         ev.batched_pods / max(ev.batches, 1), self.queue.pending_pods_summary())
                if ev.replicas.templates:
                    pods, rows = ev.replicas.answered
                    log.info("replica answers: %d templates, %d pods answered from them, %d rows evaluated again",
                             ev.replicas.templates, pods, rows)
                if ev.batches:
                    log.info("shard batches, ms per batch: %s; rows filtered or scored again here: %.1f per pod",
                             ", ".join(f"{k} {1000 * t / ev.batches:.1f}" for k, t in ev.batch_phases.items()),
                             ev.batch_local_rows / max(ev.batched_pods, 1))
        except Exception:
            with pod_context(qpi.pod):
                log.exception("scheduling %s failed unexpectedly", qpi.key)
            metrics.observe_attempt(metrics.ERROR, qpi.pod.scheduler_name, time.perf_counter() - t0)
            self._requeue_error(qpi, self.queue.scheduling_cycle() if cycle is None else cycle)

    def schedule_one(self, qpi: QueuedPodInfo, cycle: Optional[int] = None) -> str:
        """One attempt; returns its result as kube's metrics label it ("" when skipped, or when
        Permit holds the pod: the binding cycle counts it when the wait ends). `cycle`: the
        queue's scheduling cycle when the pod was popped (default: now)."""
        started = time.perf_counter()
        pod = qpi.pod
        self.attempts += 1
        if cycle is None:
            cycle = self.queue.scheduling_cycle()
        fw = self.frameworks.get(pod.scheduler_name)
        with self.cache.lock:
            current = self.cache.pods.get(pod.uid)
        if fw is None or current is None or current.node_name or current.meta.deletion_timestamp is not None:
            self.queue.done(pod.uid)  # deleted, bound elsewhere, or being deleted: skip
            return ""
        if current.nominated_node_name != pod.nominated_node_name:
            qpi.update(current)  # a nomination (preemption) the queue's copy has not caught up with
            pod = qpi.pod
        root = self._early_roots.pop(pod.uid, None) or self._root_span(pod)
        root.set_attribute("schedmesh.attempt", qpi.attempts)
        trace_id = trace_id_of(root)
        ctx = trace.set_span_in_context(root)
        handed_off = False
        try:
            with pod_context(pod, root):  # every line of the attempt carries its pod and trace
                start_ns = int(qpi.timestamp * 1e9) if qpi.timestamp else None
                if root.is_recording():
                    tracer.start_span("queue_wait", context=ctx, start_time=start_ns).end()
                state = CycleState()
                fit_err: Optional[FitError] = None
                preempt_req = None
                refused: Optional[Status] = None  # by Reserve or Permit
                waiting = False
                with self.cache.lock:
                    try:
                        with child_span(tracer, "cycle"):
                            res = self.algo.schedule_pod(fw, state, pod, self.cache.snapshot, nominator=self.queue)
                    except FitError as e:
                        fit_err = e
                        if (self.preemption is not None and fw.has_post_filter_plugins()
                                and self._may_preempt(fw, pod, e)):
                            # PostFilter in the preemption service, on this cycle's view of the cluster.
                            preempt_req = preempt_request(pod, fw.name, self._view(), e.diagnosis)
                        else:
                            self._post_filter_locally(fw, state, pod, e)
                    if fit_err is None:
                        host = res.suggested_host
                        if root.is_recording():
                            tracer.start_span("select", attributes=k8s_attributes(node=host)).end()
                        # Assume (kube's assume also drops the pod's nomination).
                        self.cache.assume(self.cfg.client_id, pod, host)
                        self.queue.delete_nominated_pod_if_exists(pod)
                        a = AssumedPod(pod, host, fw, state, qpi, cycle, root, trace_id, started=started)
                        a.evaluated_nodes, a.feasible_nodes = res.evaluated_nodes, res.feasible_nodes
                        with self._assumed_lock:
                            self.assumed[pod.uid] = a
                        st = fw.run_reserve(state, pod, host)
                        if st is None or st.is_success():
                            st = fw.run_permit(state, pod, host)
                            waiting = st is not None and st.is_wait()
                        if st is not None and not st.is_success() and not waiting:
                            fw.run_unreserve(state, pod, host)
                            self._forget(a)
                            root.set_attribute("error", st.message())
                            refused = st
                if refused is not None:
                    if refused.is_rejected():
                        # kube: a FitError on the chosen node, handled as any unschedulable pod.
                        self._unschedulable(qpi, cycle, _node_fit_error(pod, host, refused), trace_id, root)
                        return metrics.UNSCHEDULABLE
                    qpi.unschedulable_plugins = set()
                    self._requeue(qpi, cycle)
                    return metrics.ERROR
                if fit_err is not None:
                    if preempt_req is not None:
                        # The loop goes on; the answer requeues the pod (it stays in flight meanwhile).
                        self._start_preemption(qpi, cycle, fw, state, fit_err, preempt_req, trace_id, ctx)
                    else:
                        self._unschedulable(qpi, cycle, fit_err, trace_id, root)
                    return metrics.UNSCHEDULABLE
                set_node(root, host)
                a.traceparent = traceparent_of(root)
                handed_off = True
                if waiting:
                    # Held aside, still assumed: the binding cycle gets it once answered, and its
                    # attempt is counted then (kube waits in the pod's own binding goroutine).
                    root.set_attribute("permit_wait", True)
                    self._hold_waiting(a)
                    return ""
                self._bind_queue.put(a)
                return metrics.SCHEDULED
        except (PluginError, NoNodesAvailableError) as e:
            msg = str(e)
            with pod_context(pod, root):  # outside the attempt's `with`: enter it again
                set_error(root, e, record=False)  # recorded as it left the attempt's `with`
                if isinstance(e, NoNodesAvailableError):  # kube's handleSchedulingFailure, same levels
                    log.log(v(2), "Unable to schedule pod; no nodes are registered to the cluster; waiting")
                else:
                    log.error("Error scheduling pod; retrying", extra={"kv": {"err": msg}})
                with self._notes_lock:
                    self.notes.setdefault(pod.uid, PodNotes()).trace_id = trace_id
                self._requeue_error(qpi, cycle)
                if isinstance(e, NoNodesAvailableError):
                    self._publish_failed(pod, f"0/0 nodes are available: {msg}.", trace_id)
            return metrics.ERROR
        finally:
            if not handed_off:
                root.end()

    def _hold_waiting(self, a: AssumedPod) -> None:
        """A pod Permit holds: once it is allowed, rejected or timed out (from whichever thread
        answers: a plugin's, a timer's, a deletion's), it leaves the waiting pods and goes to
        the binding cycle with its answer."""
        wp = self.waiting_pods.get(a.pod.uid)
        if wp is None:  # cannot happen: run_permit added it under this same cycle
            a.permit = Status(Code.ERROR, ("the pod waiting on permit is gone",))
            self._bind_queue.put(a)
            return

        def answered(st: Status) -> None:
            self.waiting_pods.remove(a.pod.uid)
            a.permit = st
            self._bind_queue.put(a)
        wp.when_done(answered)

    def _forget(self, a: AssumedPod) -> None:
        with self.cache.lock:
            with self._assumed_lock:
                self.assumed.pop(a.pod.uid, None)
            self.cache.forget(self.cfg.client_id, a.pod.uid)
        self._publish_unpublished(a.pod.uid)

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
        # kube parks an errored pod among the unschedulable ones when no event came during its
        # attempt, until the next event or the 5-minute flush. Here an error is a mesh fault (a
        # shard being restarted): retry once its backoff is over, as the log says, events or not.
        delay = backoff_duration_ns(int(self.cfg.pod_initial_backoff_seconds * 1e9),
                                    int(self.cfg.pod_max_backoff_seconds * 1e9),
                                    max(qpi.consecutive_errors_count, 1)) / 1e9
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.call_later, delay, self.queue.activate, [qpi.pod])

    def _publish_failed(self, pod: Pod, message: str, trace_id: str,
                        nominating: Optional[NominatingInfo] = None) -> None:
        """FailedScheduling and PodScheduled=False; with `nominating` (PostFilter's result), also
        status.nominatedNodeName, as kube's updatePod writes both."""
        with self._notes_lock:
            n = self.notes.setdefault(pod.uid, PodNotes())
            n.message, n.trace_id = message, trace_id
        recs = [self._event_record(pod, "Warning", "FailedScheduling", message, trace_id)]
        with self.cache.lock:
            cur = self.cache.pods.get(pod.uid)
        if cur is not None and not cur.node_name:
            # A status patch, never the whole pod: this copy may be older than a deletion, an
            # Apply's update or a binding that lands before the record (records.apply_update).
            failed = PodCondition("PodScheduled", "False", "Unschedulable", message)
            old = next((c for c in cur.conditions if c.type == failed.type), None)
            # kube's nnnNeedsUpdate: only an override that changes it
            nominated = (nominating.nominated_node_name
                         if NominatingInfo.mode_of(nominating) == NominatingMode.OVERRIDE
                         and nominating.nominated_node_name != cur.nominated_node_name else None)
            if old != failed or nominated is not None:
                recs.append(records.pod_batch_record(
                    [records.scheduling_failure_update(cur, failed, nominated, source=self.cfg.client_id)],
                    self.cfg.client_id))
        try:
            self._publish_sync(recs)
        except Exception:
            log.exception("cannot publish FailedScheduling for %s", pod.key)

    def _unschedulable(self, qpi: QueuedPodInfo, cycle: int, err: FitError, trace_id: str, span,
                       nominating: Optional[NominatingInfo] = None) -> None:
        msg = err.message()
        log.log(v(2), "Unable to schedule pod; no fit; waiting", extra={"pod": qpi.pod, "kv": {"err": msg}})
        span.set_attribute("unschedulable", msg)
        qpi.unschedulable_plugins = set(err.diagnosis.unschedulable_plugins)
        qpi.pending_plugins = set(err.diagnosis.pending_plugins)
        self._requeue(qpi, cycle)
        if nominating is not None:
            # kube's handleSchedulingFailure: in the queue's nominator at once, not when the
            # update comes back, so the next cycles already count the pod on that node.
            self.queue.add_nominated_pod(qpi.pod, nominating)
        self._publish_failed(qpi.pod, msg, trace_id, nominating)

    # ---- PostFilter ------------------------------------------------------------------------
    @staticmethod
    def _may_preempt(fw, pod: Pod, err: FitError) -> bool:
        """PodEligibleToPreemptOthers on this cycle's snapshot, as kube checks it: the service's
        replica may already have seen the victims of an earlier preemption go, and must not take
        that for room to preempt again. Ineligible pods get their message from this process."""
        for pl in fw.points["postFilter"]:
            policy = getattr(pl, "policy", None)
            check = getattr(policy, "pod_eligible_to_preempt_others", None)
            if check is not None:
                ok, _ = check(pod, err.diagnosis.node_to_status.get(pod.nominated_node_name))
                return ok
        return True

    def _post_filter_locally(self, fw, state: CycleState, pod: Pod, err: FitError) -> None:
        """PostFilter in this process, for its message only (no preemption service, or it did
        not answer): nothing is acted on."""
        with tracer.start_as_current_span("post_filter"):
            with self.cache.lock:
                fw.services["pdbs"] = self.cache.pdb_list()
                try:
                    run_post_filter(fw, state, pod, err)
                except Exception:
                    log.exception("PostFilter failed for %s", pod.key)

    def _start_preemption(self, qpi: QueuedPodInfo, cycle: int, fw, state: CycleState, err: FitError,
                          req, trace_id: str, ctx) -> None:
        """Send the preemption request off the scheduling loop (kube's async preemption): the pod
        stays in flight until the answer, so events meanwhile are replayed on its requeue, and
        DefaultPreemption's PreEnqueue holds it back until its victims are going."""
        self.preemptions.started(qpi.pod.uid)
        span = tracer.start_span("preempt", context=ctx, attributes=k8s_attributes(qpi.pod))
        md = inject_grpc_metadata(context=trace.set_span_in_context(span))
        req.traceparent = dict(md).get("traceparent", "")
        try:
            # the pool's thread logs with the pod and the preempt span's trace
            self._preemption_pool.submit(in_pod_context(qpi.pod, span, self._preempt),
                                         qpi, cycle, fw, state, err, req, trace_id, span, md)
        except RuntimeError:  # shutting down
            self.preemptions.answered(qpi.pod.uid, ())
            self._unschedulable(qpi, cycle, err, trace_id, span)
            span.end()  # after _unschedulable's attribute: an ended span drops it

    def _preempt(self, qpi: QueuedPodInfo, cycle: int, fw, state: CycleState, err: FitError, req, trace_id: str,
                 span, md) -> None:
        pod = qpi.pod
        try:
            try:
                # The request may have waited in the pool behind others: across a broker restart its
                # offsets are the lost broker's, which the new one reaches late or never, and the
                # service waited its whole timeout for each queued request (32 pods, 5 s each). The
                # cache's offsets now are at least the cycle's in one broker's lifetime.
                req.view.ClearField("offsets")
                req.view.offsets.update(self.cache.view_offsets())
                resp = self.preemption.Preempt(req, timeout=self.cfg.preemption_timeout, metadata=md)
                self.cache.expect_records()  # the victims' deletions and nominations it published
            except grpc.RpcError as e:
                # A dead service never stalls scheduling: the message as this process computes it,
                # and the pod retried with backoff (preemption with it).
                why = f"{e.code().name}: {e.details()}"
                log.warning("preemption service failed for %s (%s); retrying with backoff", pod.key, why)
                set_error(span, why)
                self.preemptions.answered(pod.uid, ())
                self._post_filter_locally(fw, state, pod, err)
                span.set_attribute("unschedulable", err.message())
                self._requeue_error(qpi, cycle)
                self._publish_failed(pod, err.message(), trace_id)
                return
            err.diagnosis.post_filter_msg = resp.message
            for uid in resp.reject_waiting_uids:  # kube's prepareCandidate: a waiting victim is rejected
                wp = self.waiting_pods.get(uid)
                if wp is not None:
                    wp.reject(DEFAULT_PREEMPTION, "preempted")
            self.preemptions.answered(pod.uid, resp.deleting_uids if resp.code == int(Code.SUCCESS) else ())
            nominating = NominatingInfo(resp.nominated_node_name) if resp.has_result else None
            if resp.nominated_node_name:
                set_node(span, resp.nominated_node_name)
                span.set_attribute("victims", len(resp.victims))
            self._unschedulable(qpi, cycle, err, trace_id, span, nominating)
        except Exception:
            log.exception("preemption for %s failed unexpectedly", pod.key)
            self.preemptions.answered(pod.uid, ())
            self._requeue_error(qpi, cycle)
        finally:
            span.end()

