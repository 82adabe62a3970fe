"""kube's binding cycle: PreBind, Bind (through the binder service, in batches: one BindBatch RPC
for the bindings decided while the binder answered the previous one), PostBind; a refused
binding is forgotten and its pod requeued. A binding whose outcome is unknown (the binder down,
or its record unacknowledged by a dying broker) is sent again to the same node rather than
forgotten: forgetting it would let the pod be scheduled, and re-published unbound, while the
binding may already be in the log."""
from __future__ import annotations

import logging
import queue
import time

import grpc
from opentelemetry import trace

from schedmesh.api import convert
from schedmesh.mesh.binder import PUBLISH_FAILED
from schedmesh.telemetry import metrics
from schedmesh.v1 import binder_pb2
from schedmesh.mesh.scheduler.state import AssumedPod, PodNotes

log = logging.getLogger("schedmesh.queue_manager")
tracer = trace.get_tracer("schedmesh.queue_manager")


# Answers after which a binding may or may not have been made.
_OUTCOME_UNKNOWN = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class BindingCycle:
    """Methods of QueueManager (kube: schedule_one.go's binding cycle)."""

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

    def _bind_batch(self, batch: list[AssumedPod]) -> None:
        ready: list[AssumedPod] = []
        for a in batch:
            st = a.fw.run_pre_bind(a.state, a.pod, a.node)
            if st is not None and not st.is_success():
                self._binding_failed(a, f"PreBind: {st.message()}")
            else:
                ready.append(a)
        if not ready:
            return
        metrics.observe_batch("bind", len(ready))
        deadline = time.monotonic() + self.cfg.bind_retry_seconds
        delay = 0.2
        while ready:
            unknown = self._send_bindings(ready, retry=time.monotonic() < deadline and not self._stop.is_set())
            if not unknown:
                return
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            ready = self._still_assumed(unknown)

    def _send_bindings(self, ready: list[AssumedPod], retry: bool) -> list[AssumedPod]:
        """One BindBatch; returns the bindings whose outcome is unknown (to send again, same
        node: the binder answers a binding it already made with success)."""
        req = binder_pb2.BindBatchRequest(client_id=self.cfg.client_id)
        for a in ready:
            req.binds.add(pod=convert.pod_to_proto(a.pod), node_name=a.node, client_id=self.cfg.client_id,
                          traceparent=a.traceparent)
        try:
            results = self.binder.BindBatch(req, timeout=self.cfg.bind_timeout).results
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

    def _bound(self, a: AssumedPod) -> None:
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

    def _binding_failed(self, a: AssumedPod, reason: str) -> None:
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
            n = self.notes.setdefault(pod.uid, PodNotes())
            n.message, n.trace_id = msg, a.trace_id
        try:
            self._publish_sync([self._event_record(pod, "Warning", "FailedScheduling", msg, a.trace_id)])
        except Exception:
            log.exception("cannot publish binding failure for %s", pod.key)

