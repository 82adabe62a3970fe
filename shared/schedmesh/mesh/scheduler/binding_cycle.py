"""kube's binding cycle: the answer to a pod Permit held, PreBind, Bind (an interested extender's
bind verb first, then always through the binder service, in batches: one BindBatch RPC for the
bindings decided while the binder answered the previous one), PostBind; a refused binding is
forgotten and its pod requeued. A binding whose outcome is unknown (the binder down,
or its record unacknowledged by a dying broker) is sent again to the same node rather than
forgotten: forgetting it would let the pod be scheduled, and re-published unbound, while the
binding may already be in the log.

Each pod's part runs inside its attempt's log context (schedmesh.telemetry.pod_context, its root
span re-entered): every line carries the pod and the attempt's trace id, as in the scheduling
cycle."""
from __future__ import annotations

import collections
import functools
import logging
import queue
import threading
import time
from dataclasses import replace
from typing import Callable, Optional

import grpc
from opentelemetry import trace

from schedmesh.api import convert
from schedmesh.framework.events import EVENT_ASSIGNED_POD_DELETE
from schedmesh.framework.interface import Code, Status
from schedmesh.plugins.default_binder.plugin import NAME as DEFAULT_BINDER
from schedmesh.mesh.binder import PUBLISH_FAILED
from schedmesh.scheduling.cycle import Diagnosis, FitError
from schedmesh.telemetry import k8s_attributes, metrics, pod_context, set_error, v
from schedmesh.v1 import binder_pb2, objects_pb2
from schedmesh.mesh.scheduler.state import AssumedPod, PodNotes

log = logging.getLogger("schedmesh.queue_manager")
tracer = trace.get_tracer("schedmesh.queue_manager")


# Answers after which a binding may or may not have been made.
_OUTCOME_UNKNOWN = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def _attempt_context(a: AssumedPod):
    """The pod's attempt in this thread: lines carry the pod, its root span is current again."""
    return pod_context(a.pod, a.span)


def _per_pod(method):
    """A method about one assumed pod (its first argument) runs in that pod's attempt context."""
    @functools.wraps(method)
    def run(self, a: AssumedPod, *args, **kwargs):
        with _attempt_context(a):
            return method(self, a, *args, **kwargs)
    return run


class BindingQueue:
    """The assumed pods on their way to the binding cycle, its one consumer (None: stop).

    Not a plain queue: the binding cycle, gathering a batch, was woken by every pod put, about two
    thread switches and interpreter-lock hand-offs per pod, each costing the queue-manager's
    threads tens of microseconds of CPU on a VM. Here a waiting gatherer is woken only when what
    it waits for holds: the pods it wants are queued, or its `done` predicate (checked at each put
    and at each `recheck()` by whoever changed what it reads)."""

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._wake: Optional[Callable[[], bool]] = None  # the waiting gatherer's predicate

    def put(self, item: Optional[AssumedPod]) -> None:
        with self._cond:
            self._items.append(item)
            if self._wake is not None and (item is None or self._wake()):
                self._cond.notify()

    def recheck(self) -> None:
        """Something a waiting gatherer's `done` reads has changed: wake it if that now holds."""
        with self._cond:
            if self._wake is not None and self._wake():
                self._cond.notify()

    def _wait(self, predicate: Callable[[], bool], timeout: Optional[float]) -> None:
        # a None queued (stop) always ends the wait
        self._wake = lambda: predicate() or (bool(self._items) and self._items[-1] is None)
        try:
            self._cond.wait_for(self._wake, timeout)
        finally:
            self._wake = None

    def get(self, timeout: Optional[float] = None) -> Optional[AssumedPod]:
        """The next item, waiting up to `timeout` for one (queue.Empty after)."""
        with self._cond:
            if not self._items:
                self._wait(lambda: bool(self._items), timeout)
            if not self._items:
                raise queue.Empty
            return self._items.popleft()

    def get_nowait(self) -> Optional[AssumedPod]:
        with self._cond:
            if not self._items:
                raise queue.Empty
            return self._items.popleft()

    def take(self, most: int) -> list[Optional[AssumedPod]]:
        """Up to `most` queued items, without waiting."""
        with self._cond:
            return [self._items.popleft() for _ in range(min(most, len(self._items)))]

    def wait(self, count: int, timeout: float, done: Callable[[], bool]) -> None:
        """Until `count` items are queued or `done()` holds, at most `timeout` seconds."""
        with self._cond:
            self._wait(lambda: len(self._items) >= count or done(), timeout)

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items


class BindingCycle:
    """Methods of QueueManager (kube: schedule_one.go's binding cycle)."""

    _extender_bind_pool = None  # a ThreadPoolExecutor when an extender has a bind verb
    _last_batch_at = float("-inf")  # time.monotonic() when the previous batch went to the binder

    def _binding_loop(self) -> None:
        """kube runs one binding goroutine per pod; here the bindings decided while the binder
        was answering the previous batch go to it together, one RPC per batch."""
        while not (self._stop.is_set() and self._bind_queue.empty()):
            try:
                # blocks (a 0.1 s poll was a tenth of an idle queue-manager's wake-ups); stop() puts None
                batch = [self._bind_queue.get(timeout=1.0)]
            except queue.Empty:
                continue
            self._gather(batch)
            self._last_batch_at = time.monotonic()
            batch = [a for a in batch if a is not None]
            if not batch:
                continue
            try:
                self._bind_batch(batch)
            except Exception:  # noqa: BLE001 - a failed batch must never lose its pods
                log.exception("binding batch of %d failed", len(batch))
                for a in batch:
                    self._binding_failed(a, "internal error in the binding cycle")  # in its pod's context

    def _gather(self, batch: list) -> None:
        """The bindings queued behind the first, and for up to bind_linger_seconds those of the
        pods still being decided or in activeQ (no waiting when there are none: a lone pod is
        bound at once), unless no batch went for as long: the first binding after a pause goes
        at once (a mesh's first pods were bound 30 ms later for it), while batches that follow
        one another keep their linger (counted from the previous batch instead, there were
        half as many batches again for the same pods, each a record every service reads).
        While it lingers this thread sleeps until the batch is full or nothing more is coming
        (BindingQueue), not woken by each pod."""
        now = time.monotonic()
        linger = self.cfg.bind_linger_seconds
        linger_until = now + linger if now - self._last_batch_at < linger else now

        def done() -> bool:  # no pod in the scheduling thread's hands or in activeQ to wait for
            return self._stop.is_set() or not (self.deciding or self.queue.has_active())
        while True:
            batch.extend(self._bind_queue.take(self.cfg.max_bind_batch - len(batch)))
            remaining = linger_until - time.monotonic()
            if len(batch) >= self.cfg.max_bind_batch or remaining <= 0 or done():
                return
            self._bind_queue.wait(self.cfg.max_bind_batch - len(batch), remaining, done)

    def _bind_batch(self, batch: list[AssumedPod]) -> None:
        ready: list[AssumedPod] = []
        for a in batch:
            with _attempt_context(a):
                if a.permit is not None and not self._permit_allowed(a):
                    continue
                st = a.fw.run_pre_bind(a.state, a.pod, a.node)
                if st is not None and not st.is_success():
                    self._binding_failed(a, f"PreBind: {st.message()}")
                else:
                    ready.append(a)
        ready = self._bind_plugins(self._extenders_binding(ready))
        if not ready:
            return
        metrics.observe_batch("bind", len(ready))
        if not self._resent.wait(self.cfg.bind_retry_seconds):  # a broker restart's re-sent pods first
            log.warning("records re-sent after a broker restart still unacknowledged; binding anyway")
        deadline = time.monotonic() + self.cfg.bind_retry_seconds
        delay = 0.2
        while ready:
            unknown = self._send_bindings(ready, retry=time.monotonic() < deadline and not self._stop.is_set())
            if not unknown:
                return
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            ready = self._still_assumed(unknown)

    # ---- Permit's wait ----------------------------------------------------------------------
    @_per_pod
    def _permit_allowed(self, a: AssumedPod) -> bool:
        """The answer to a pod Permit held (kube's WaitOnPermit in bindingCycle): allowed, it
        goes on to PreBind; rejected (by a plugin, a timeout or its deletion), it is
        unschedulable on that node; anything else is an error."""
        st = a.permit
        result = (metrics.SCHEDULED if st.is_success() else
                  metrics.UNSCHEDULABLE if st.is_rejected() else metrics.ERROR)
        metrics.observe_attempt(result, a.pod.scheduler_name, max(0.0, time.perf_counter() - a.started))
        if st.is_success():
            return True
        if st.is_rejected():
            d = Diagnosis()
            d.node_to_status.set(a.node, st)
            d.unschedulable_plugins = {st.plugin}  # as kube, even "" (RejectWaitingPod)
            self._binding_cycle_error(a, fit=FitError(a.pod, 1, d))
        else:
            self._binding_cycle_error(a, f"waiting on permit for pod: {st.message()}")
        return False

    # ---- extenders' bind verb ----------------------------------------------------------------
    def _extenders_binding(self, ready: list[AssumedPod]) -> list[AssumedPod]:
        """kube's extendersBinding: a pod that an extender with a bind verb is interested in is
        bound by the first such extender instead of the bind plugins (an ignorable one that fails
        is skipped). The binder stays the mesh's binding subresource, so after the extender
        succeeded the binding is still committed through it; an extender's error fails the
        binding. Returns the pods to send to the binder."""
        binders = [e for e in self.cfg.extenders if e.is_binder()]
        if not binders or not ready:
            return ready
        calls = [(a, [e for e in binders if e.is_interested(a.pod)]) for a in ready]
        calls = [(a, exts) for a, exts in calls if exts]
        if not calls:
            return ready
        if self._extender_bind_pool is not None and len(calls) > 1:
            errors = list(self._extender_bind_pool.map(lambda c: self._extender_bind(*c), calls))
        else:
            errors = [self._extender_bind(a, exts) for a, exts in calls]
        failed = {a.pod.uid: err for (a, _), err in zip(calls, errors) if err is not None}
        out = []
        for a in ready:
            err = failed.get(a.pod.uid)
            if err is None:
                out.append(a)
                continue
            with _attempt_context(a):
                log.warning("extender bind of %s to %s failed: %s", a.pod.key, a.node, err)
                self._binding_cycle_error(a, err)
        return out

    @_per_pod
    def _extender_bind(self, a: AssumedPod, extenders: list) -> Optional[str]:
        """The first interested extender binds; returns its error (None: bound, or every one
        failed and was ignorable, leaving the binding to the binder as to kube's bind plugins)."""
        ctx = trace.set_span_in_context(a.span) if a.span is not None else None
        for ext in extenders:
            with tracer.start_as_current_span("extender_bind", context=ctx, attributes={
                    "schedmesh.extender": ext.name, **k8s_attributes(a.pod, a.node)}) as span:
                try:
                    ext.bind(a.pod, a.node)
                except Exception as e:  # noqa: BLE001 - transport, HTTP status or the extender's Error
                    set_error(span, str(e))
                    if ext.is_ignorable():
                        log.info("skipping extender %s in bind of %s: it failed (%s) and is ignorable",
                                 ext.name, a.pod.key, e)
                        continue
                    return str(e)
            a.bound_by = ext.name
            return None
        return None

    # ---- Bind plugins --------------------------------------------------------------------------
    def _bind_plugins(self, ready: list[AssumedPod]) -> list[AssumedPod]:
        """kube's RunBindPlugins for the pods no extender bound: each Bind plugin in the profile's
        order until one does not Skip. DefaultBinder is the binder service (the batch after
        this); a plugin before it that binds the pod leaves the commit to the binder, as an
        extender does; one that fails, or all skipping, fails the binding."""
        out = []
        for a in ready:
            with _attempt_context(a):
                if not a.bound_by:
                    a.bind_started = time.perf_counter()
                st = None if a.bound_by else self._run_bind_plugins(a)
                if st is None or st.is_success():
                    out.append(a)
                else:
                    self._observe_bind(a, st.code)
                    log.warning("Bind plugins did not bind %s to %s: %s", a.pod.key, a.node, st.message())
                    self._binding_cycle_error(a, f"Binding rejected: {st.message()}")
        return out

    @staticmethod
    def _run_bind_plugins(a: AssumedPod):
        """None when the binder service is to bind (DefaultBinder's turn), else the chain's status."""
        for p in a.fw.points["bind"]:
            if p.name == DEFAULT_BINDER:
                return None
            try:
                st = (a.fw.time_plugin("Bind", p, p.bind, a.state, a.pod, a.node)
                      if a.state is not None and a.state.record_plugin_metrics else p.bind(a.state, a.pod, a.node))
            except Exception as e:  # noqa: BLE001 - a plugin's failure is a bind error
                st = Status.as_error(e)
            if st is not None and st.is_skip():
                continue
            if st is None or st.is_success():
                a.bound_by = p.name
                return Status()
            return Status(st.code, (f"running Bind plugin {p.name!r}: {st.message()}",)).with_plugin(p.name)
        return Status(Code.SKIP, ("every Bind plugin skipped the pod",))

    def _pod_message(self, a: AssumedPod):
        """The assumed pod's Pod message (its binding; with shards, their views too), made once:
        parsed from its record's bytes when the pod is the copy read from it, else encoded."""
        if a.proto is None:
            data = self.cache.encoded_pod(a.pod)
            a.proto = objects_pb2.Pod.FromString(data) if data is not None else convert.pod_to_proto(a.pod)
        return a.proto

    def _send_bindings(self, ready: list[AssumedPod], retry: bool) -> list[AssumedPod]:
        """One BindBatch; returns the bindings whose outcome is unknown (to send again, same
        node: the binder answers a binding it already made with success)."""
        req = binder_pb2.BindBatchRequest(client_id=self.cfg.client_id, offsets=self.cache.view_offsets())
        for a in ready:
            req.binds.add(pod=self._pod_message(a), node_name=a.node,
                          client_id=self.cfg.client_id, traceparent=a.traceparent)
        try:
            results = self.binder.BindBatch(req, timeout=self.cfg.bind_timeout).results
            # The bindings the binder published: read at the follower's pace (the assumed pods
            # stand for them meanwhile), but never left to a dozing follower's next poll.
            self.cache.expect_records(now=False)
        except grpc.RpcError as e:
            if retry and e.code() in _OUTCOME_UNKNOWN:
                log.info("binder unavailable (%s): sending %d binding(s) again", e.code().name, len(ready))
                return ready
            for a in ready:
                self._binding_failed(a, f"binder unavailable: {e.code().name}: {e.details()}")
            return []
        unknown = []
        for a, r in zip(ready, results):
            if not r.bound and retry and r.reason.startswith(PUBLISH_FAILED):
                unknown.append(a)
            elif not r.bound:
                self._binding_failed(a, r.reason)
            else:
                self._bound(a)
        return unknown

    def _still_assumed(self, bindings: list[AssumedPod]) -> list[AssumedPod]:
        """Those still waiting for their binding; one seen bound meanwhile was made, one deleted
        is dropped."""
        with self._assumed_lock:
            waiting = [a for a in bindings if a.pod.uid in self.assumed]
        for a in bindings:
            if a not in waiting:
                current = self.cache.pods.get(a.pod.uid)
                if current is not None and current.node_name == a.node:
                    self._bound(a)
                elif a.span is not None:
                    a.span.end()
        return waiting

    @staticmethod
    def _observe_bind(a: AssumedPod, code: Code) -> None:
        """kube's Bind extension point metric (RunBindPlugins, DefaultBinder's API call included):
        here from the start of the pod's Bind plugins to the binder's answer, once per pod whose
        Bind plugins ran (not one an extender bound, as in kube). In a sampled cycle the binder's
        part is DefaultBinder's plugin duration."""
        if not a.bind_started:
            return
        seconds = time.perf_counter() - a.bind_started
        a.bind_started = 0.0
        metrics.observe_extension_point("Bind", code, a.pod.scheduler_name, seconds)  # the pod's profile
        if a.state is not None and a.state.record_plugin_metrics and not a.bound_by:
            metrics.observe_plugin(DEFAULT_BINDER, "Bind", code, seconds)

    @_per_pod
    def _bound(self, a: AssumedPod) -> None:
        self._observe_bind(a, Code.SUCCESS)
        log.log(v(2), "Successfully bound pod to node", extra={"pod": a.pod, "kv": {
            "node": a.node, "evaluatedNodes": a.evaluated_nodes, "feasibleNodes": a.feasible_nodes}})
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

    @_per_pod
    def _binding_failed(self, a: AssumedPod, reason: str) -> None:
        self._observe_bind(a, Code.ERROR)
        log.warning("binding %s to %s refused: %s", a.pod.key, a.node, reason)
        self._binding_cycle_error(a, f"Binding rejected: {reason}")

    @_per_pod
    def _binding_cycle_error(self, a: AssumedPod, message: str = "", fit: Optional[FitError] = None) -> None:
        """kube's handleBindingCycleError: Unreserve, forget the assumed pod (an assigned pod's
        deletion for the queue), then the pod back to the queue: unschedulable with the FitError's
        message when `fit` (Permit rejected it), otherwise with backoff and `message`."""
        pod, node = a.pod, a.node
        span = a.span if a.span is not None else trace.INVALID_SPAN
        set_error(span, fit.message() if fit is not None else message)
        with self.cache.lock:
            try:
                a.fw.run_unreserve(a.state, pod, node)
            except Exception:
                log.exception("Unreserve failed for %s", pod.key)
        self._forget(a)
        freed = replace(pod, node_name=node)
        try:
            if fit is not None:
                self._unschedulable(a.qpi, a.cycle, fit, a.trace_id, span)
                # After the requeue, and not for the pod itself: it stays unschedulable.
                with self.cache.lock:
                    self.queue.move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_DELETE, freed, None,
                                                                   lambda p: p.uid != pod.uid)
                return
            with self.cache.lock:
                self.queue.move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_DELETE, freed, None)
            self._requeue_error(a.qpi, a.cycle)
            with self._notes_lock:
                n = self.notes.setdefault(pod.uid, PodNotes())
                n.message, n.trace_id = message, a.trace_id
            try:
                self._publish_sync([self._event_record(pod, "Warning", "FailedScheduling", message, a.trace_id)])
            except Exception:
                log.exception("cannot publish binding failure for %s", pod.key)
        finally:
            span.end()
