"""The binder: the authoritative per-node ledger of committed pods (docs/mesh.md, step 5).

Every queue-manager schedules against its own snapshot and assumes its choices; the binder is
where two of them meet. Its ledger is a ClusterCache (fed by CacheFollower from the state
topics) plus the bindings it has committed but not yet seen come back through Kafka (overlaid
on the cache's snapshot as that client's assumed pods). A bind commits only if the node exists
and the pod still fits given everything committed, checked by the plugin library's
NodeResourcesFit and NodePorts (PreFilter + Filter through a Framework: the same code the
filter shards run, no second copy of a formula). Binds are serialized by one asyncio.Lock, so
concurrent callers can never over-commit a node. Bindings are idempotent per pod uid.

`python -m services.binder` wires this to gRPC (schedmesh.v1.Binder) and Kafka.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Optional

import grpc
from opentelemetry import trace

from schedmesh.api import convert
from schedmesh.api.evolve import evolve
from schedmesh.framework.profile import DEFAULT_SCHEDULER_NAME
from schedmesh.api.types import Pod, PodCondition
from schedmesh.bus import EventProducer
from schedmesh.bus.consumer import binder_fetch_interval_ms
from schedmesh.framework.interface import CycleState
from schedmesh.framework.profile import PluginRef, PluginSet, Profile
from schedmesh.framework.runtime import Framework
from schedmesh.mesh.cluster_cache import (REMEMBERED_DELETIONS, STATE_TOPICS, TOPIC_EVENTS, ClusterCache,
                                          is_terminal)
from schedmesh.mesh.records import (binding_update, event_batch_records, pod_batch_records, pod_message,
                                    publish)
from schedmesh.mesh.runtime import CacheFollower, ServiceProcess
from schedmesh.telemetry import k8s_attributes, metrics, records_under, set_error
from schedmesh.telemetry.logs import pod_key
from schedmesh.telemetry.propagation import context_from_traceparent, traceparent_of
from schedmesh.v1 import binder_pb2, binder_pb2_grpc, events_pb2

log = logging.getLogger("schedmesh.binder")
tracer = trace.get_tracer("schedmesh.binder")

LEDGER_CLIENT = "binder-ledger"  # the cache's assumed-pods slot holding committed, unseen bindings
FIT_PLUGINS = ("NodeResourcesFit", "NodePorts")
LEDGER_CATCH_UP_SECONDS = 2.0  # how long a batch waits for the ledger to reach the caller's offsets


def event_message(pod: Pod, reason: str, message: str, source: str, type_: str = "Normal",
                  context=None) -> events_pb2.Event:
    """A Kubernetes-style Event about `pod`, stamped with the trace id of the current span (or of
    the span in `context`)."""
    ctx = trace.get_current_span(context).get_span_context()
    return events_pb2.Event(pod_uid=pod.uid, pod=pod.key, type=type_, reason=reason, message=message,
                            source=source, timestamp=time.time(),
                            trace_id=format(ctx.trace_id, "032x") if ctx.is_valid else "")


def binder_profile(fit_args: Optional[dict] = None) -> Profile:
    """A profile with only the fit checks; PrioritySort and DefaultBinder are there because
    kube requires a queueSort and a bind plugin in every profile."""
    fit = [PluginRef(n) for n in FIT_PLUGINS]
    return Profile(
        scheduler_name="schedmesh-binder",
        plugins={"queueSort": PluginSet([PluginRef("PrioritySort")]), "preFilter": PluginSet(list(fit)),
                 "filter": PluginSet(list(fit)), "bind": PluginSet([PluginRef("DefaultBinder")])},
        plugin_config={"NodeResourcesFit": dict(fit_args)} if fit_args else {})


def bound_pod(pod: Pod, node_name: str) -> Pod:
    """The pod as the binding stores it: spec.nodeName set, PodScheduled=True."""
    conditions = [c for c in pod.conditions if c.type != "PodScheduled"]
    conditions.insert(0, PodCondition("PodScheduled", "True"))
    return evolve(pod, node_name=node_name, conditions=conditions)


# The reason of a binding whose record the broker did not acknowledge: it may still be in the log,
# so a caller sends it again rather than taking it as refused.
PUBLISH_FAILED = "publishing the binding failed"


@dataclass(frozen=True, slots=True)
class Decision:
    bound: bool
    reason: str = ""
    publish: Optional[Pod] = None  # the bound pod to publish (a new commitment), else None
    # Refused because the pod is already bound there: the caller had not seen that binding (lost
    # with a restarted broker's topics, say), so it is announced again.
    bound_elsewhere: str = ""


class BindLedger:
    """What is committed on each node, and the bind decision. Not async: the caller serializes."""

    def __init__(self, cache: ClusterCache, fit_args: Optional[dict] = None) -> None:
        self.cache = cache
        # an admission check, not a scheduler: kept out of the scheduler_* metrics
        self.framework = Framework(binder_profile(fit_args), snapshot_fn=lambda: cache.snapshot, record_metrics=False)
        self._committed: dict[str, tuple[Pod, str]] = {}  # uid -> (bound pod, node): not yet seen back
        # a binding for a pod deleted meanwhile is refused (a pod created again under its uid is not)
        cache.remember_deletions = max(cache.remember_deletions, REMEMBERED_DELETIONS)
        cache.pod_record_hooks.append(self._on_pod_record)

    # ---- fed by the cache, each pod record once applied --------------------------------------
    def _on_pod_record(self, item: events_pb2.PodRecord) -> None:
        uid = item.update.uid if item.HasField("update") else item.pod.metadata.uid
        if uid in self._committed:  # seen come back (or deleted): the cache holds it now
            current = self.cache.pods.get(uid)
            if item.deleted or (current is not None and current.node_name):
                del self._committed[uid]

    # ---- deciding --------------------------------------------------------------------------
    def _bound_node(self, uid: str) -> str:
        c = self._committed.get(uid)
        if c is not None:
            return c[1]
        p = self.cache.pods.get(uid)
        return p.node_name if p is not None else ""

    def decide(self, pod: Pod, node_name: str) -> Decision:
        """Commit `pod` to `node_name` if it may go there; the caller publishes `publish`."""
        uid = pod.uid
        if not uid:
            return Decision(False, "pod has no uid")
        if not node_name:
            return Decision(False, "no node name")
        with self.cache.lock:
            if self.cache.was_deleted(uid):
                return Decision(False, f"pod {pod.key} has been deleted")
            current = self.cache.pods.get(uid)
            if pod.meta.deletion_timestamp or (current is not None and current.meta.deletion_timestamp):
                return Decision(False, f"pod {pod.key} is being deleted")
            already = self._bound_node(uid)
            if already:
                if already == node_name:
                    return Decision(True)
                return Decision(False, f"pod {pod.key} is already bound to {already}", bound_elsewhere=already)
            snapshot = self.cache.snapshot
            ni = snapshot.get(node_name)
            if ni is None:
                return Decision(False, f'node "{node_name}" not found')
            state = CycleState()
            _result, st, _ = self.framework.run_pre_filter(state, pod, snapshot)
            if st is None or st.is_success():
                st = self.framework.run_filter(state, pod, ni)
            if st is not None and not st.is_success():
                return Decision(False, st.message() or str(st))
            bound = bound_pod(pod, node_name)
            self._committed[uid] = (bound, node_name)
            self.cache.assume(LEDGER_CLIENT, bound, node_name)
            return Decision(True, "", bound)

    def rollback(self, uid: str) -> None:
        """Undo a commitment whose publication failed."""
        with self.cache.lock:
            if self._committed.pop(uid, None) is not None:
                self.cache.forget(LEDGER_CLIENT, uid)

    def pending(self) -> list[Pod]:
        """Committed bindings not yet seen back through Kafka."""
        with self.cache.lock:
            return [p for p, _n in self._committed.values()]


class BinderServicer(binder_pb2_grpc.BinderServicer):
    def __init__(self, ledger: BindLedger, producer: EventProducer, name: str) -> None:
        self.ledger, self.producer, self.name = ledger, producer, name
        # A batch's decisions and the publication of its bindings hold this lock (the ledger is
        # not re-entrant, and a decision stands only once published); the bindings of a batch
        # are one record, acknowledged once per batch, and its Scheduled events follow off the lock.
        self.lock = asyncio.Lock()
        self._event_tasks: set[asyncio.Task] = set()

    def _publish_events(self, recs: list[tuple[str, str, bytes]]) -> None:
        async def send() -> None:
            try:
                await publish(self.producer, recs)
            except Exception as e:  # noqa: BLE001 - events are reports; the bindings stand
                log.warning("publishing %d Scheduled event record(s) failed: %r", len(recs), e)
        task = asyncio.get_running_loop().create_task(send())
        self._event_tasks.add(task)
        task.add_done_callback(self._event_tasks.discard)

    async def drain_events(self) -> None:
        """Wait for the Scheduled events still being published (before the producer stops)."""
        while self._event_tasks:
            await asyncio.gather(*list(self._event_tasks), return_exceptions=True)

    def _bound_records(self, pod: Pod, node: str, traceparent: str,
                       read_from_log: bool) -> tuple[events_pb2.PodRecord, events_pb2.Event]:
        """The binding delta and the Scheduled event of one pod, inside the binder's span of that
        pod's trace; the delta carries this span on to the kubelet agent."""
        ctx = context_from_traceparent(traceparent) if traceparent else None
        if records_under(tracer, ctx):
            with tracer.start_as_current_span("bind", context=ctx, attributes=k8s_attributes(pod, node)) as span:
                return self._bound_records_in(pod, node, traceparent_of(span), read_from_log)
        # not recorded: the trace goes on from the caller's span (or, without one, this request's)
        return self._bound_records_in(pod, node, traceparent_of(trace.get_current_span(ctx)), read_from_log)

    def _bound_records_in(self, pod: Pod, node: str, here: str,
                          read_from_log: bool) -> tuple[events_pb2.PodRecord, events_pb2.Event]:
        # A delta when readers know the pod: this ledger holds it, or the caller scheduled it from
        # its own cache of the pods topic (a BindBatch with offsets), so the pod's record precedes
        # this binding in the topic's one partition even when this ledger has not read it yet.
        if read_from_log or pod.uid in self.ledger.cache.pods:
            update = binding_update(pod, node, self.name, here)
        else:  # readers cannot know this pod yet: publish it whole
            update = pod_message(bound_pod(pod, node), source=self.name)
            update.traceparent = here
        return (update,
                event_message(pod, "Scheduled", f"Successfully assigned {pod.key} to {node}",
                              pod.scheduler_name or DEFAULT_SCHEDULER_NAME))

    def _request_pod(self, msg, read_from_log: bool) -> Pod:
        """The pod a binding names: the ledger's own copy when it holds this very version (a
        resource version names one applied pod: its queue-manager's id, start and counter), else
        decoded from the request. Decoding each pod again was an eighth of the binder's CPU.
        A pod the caller read from the pods topic before this ledger did is handed to the cache
        for when its record arrives (ClusterCache.expect), so it is decoded once, not twice."""
        rv = msg.metadata.resource_version
        known = self.ledger.cache.pods.get(msg.metadata.uid) if rv else None
        if known is not None and known.meta.resource_version == rv:
            return known
        pod = convert.pod_from_proto(msg)
        if read_from_log and rv and known is None and not pod.node_name:
            self.ledger.cache.expect([pod])
        return pod

    async def _commit(self, binds, client_id: str, read_from_log: bool = False) -> list[binder_pb2.BindResponse]:
        """Decide every binding in order against the ledger, then publish the new ones: a record
        of binding deltas and one of Scheduled events per batch (more for a batch too large for one).
        `read_from_log`: the caller's pods come from its cache of the pods topic."""
        async with self.lock:
            pods = [self._request_pod(b.pod, read_from_log) for b in binds]
            decisions = [self.ledger.decide(pod, b.node_name) for pod, b in zip(pods, binds)]
            out = [binder_pb2.BindResponse(bound=d.bound, reason=d.reason) for d in decisions]
            new = [i for i, d in enumerate(decisions) if d.publish is not None]
            if new:
                updates, events = zip(*(self._bound_records(pods[i], binds[i].node_name, binds[i].traceparent,
                                                            read_from_log) for i in new))
                try:
                    await publish(self.producer, pod_batch_records(updates, self.name))
                except Exception as e:  # noqa: BLE001 - nothing is committed unless it is published
                    log.warning("publishing %d binding(s) failed: %r", len(new), e)
                    for i in new:
                        self.ledger.rollback(pods[i].uid)
                        out[i] = binder_pb2.BindResponse(bound=False, reason=f"{PUBLISH_FAILED}: {e}")
                else:
                    # The Scheduled events follow their bindings without holding up the answer (a
                    # second wait for the broker per batch, under the lock, was a third of a bind).
                    self._publish_events(event_batch_records(events))
            known = [binding_update(pods[i], d.bound_elsewhere, self.name)
                     for i, d in enumerate(decisions) if d.bound_elsewhere and pods[i].uid in self.ledger.cache.pods]
            if known:
                try:
                    await publish(self.producer, pod_batch_records(known, self.name))
                except Exception as e:  # noqa: BLE001 - the next refusal announces it again
                    log.warning("announcing %d known binding(s) failed: %r", len(known), e)
        log.debug("committed %d of %d binding(s) from %s", len(new), len(out), client_id)
        return out

    @staticmethod
    def _report_refusals(binds, results: list[binder_pb2.BindResponse], client_id: str) -> None:
        """Each refused binding (as finally answered): counted, logged, and a `bind` span with
        status ERROR in its pod's trace, so the trace shows why the attempt did not end bound."""
        for b, r in zip(binds, results):
            if r.bound:
                continue
            metrics.observe_binder_conflict(r.reason)
            ctx = context_from_traceparent(b.traceparent) if b.traceparent else None
            with tracer.start_as_current_span("bind", context=ctx, attributes={
                    **k8s_attributes(b.pod, b.node_name), "schedmesh.client": client_id}) as span:
                set_error(span, r.reason)
                log.info("refused %s -> %s (client %s): %s", pod_key(b.pod), b.node_name, client_id, r.reason,
                         extra={"pod": b.pod})

    async def Bind(self, request: binder_pb2.BindRequest, context) -> binder_pb2.BindResponse:
        span = trace.get_current_span()  # the server span of the tracing interceptor
        span.set_attribute("schedmesh.client", request.client_id)
        (resp,) = await self._commit([request], request.client_id)
        self._report_refusals([request], [resp], request.client_id)
        if not resp.bound and resp.reason.startswith(PUBLISH_FAILED):
            await context.abort(grpc.StatusCode.UNAVAILABLE, resp.reason)
        span.set_attribute("schedmesh.bound", resp.bound)
        return resp

    async def BindBatch(self, request: binder_pb2.BindBatchRequest, context) -> binder_pb2.BindBatchResponse:
        trace.get_current_span().set_attribute("schedmesh.batch_size", len(request.binds))
        offsets = dict(request.offsets)
        read_from_log = bool(offsets)  # the caller follows the pods topic: its pods are on it
        results = await self._commit(request.binds, request.client_id, read_from_log)
        refused = [i for i, r in enumerate(results) if not r.bound and not r.reason.startswith(PUBLISH_FAILED)]
        if refused and offsets and not self.ledger.cache.has_read(offsets):
            # The caller may have seen room freed that this ledger has not read yet (a deletion):
            # refused bindings are decided again on at least what the caller had read. Only
            # then: waiting for every batch would add a fetch to every binding.
            if not await asyncio.to_thread(self.ledger.cache.wait_for, offsets, LEDGER_CATCH_UP_SECONDS):
                log.warning("ledger behind the caller's view after %.0f s (wants %s, has %s); deciding anyway",
                            LEDGER_CATCH_UP_SECONDS, offsets, self.ledger.cache.offsets)
            again = await self._commit([request.binds[i] for i in refused], request.client_id, read_from_log)
            for i, r in zip(refused, again):
                results[i] = r
        self._report_refusals(request.binds, results, request.client_id)
        return binder_pb2.BindBatchResponse(results=results)

    async def republish_pending(self) -> None:
        """After a broker restart: every binding this binder knows, committed but never seen back
        or seen back (a binding the kubelet agent had not read before the broker went is lost
        otherwise); re-publishing one the agent also re-publishes is harmless (same pod, node)."""
        async with self.lock:
            with self.ledger.cache.lock:
                pending = self.ledger.pending()
                seen = {p.uid for p in pending}
                pods = pending + [p for p in self.ledger.cache.pods.values()
                                  if p.node_name and p.uid not in seen and not is_terminal(p)]
            if pods:
                log.info("broker restarted: re-publishing %d binding(s) (%d unconfirmed)", len(pods), len(pending))
                await publish(self.producer, pod_batch_records((pod_message(p, source=self.name) for p in pods),
                                                               self.name))


def fit_args_from_config(path: Optional[str]) -> Optional[dict]:
    """NodeResourcesFit's args of the first profile that configures them, so the binder ignores
    the same resources the scheduler ignores."""
    if not path:
        return None
    from schedmesh.framework.config import load_scheduler_config
    for prof in load_scheduler_config(path).profiles:
        args = prof.plugin_config.get("NodeResourcesFit")
        if args:
            return args
    return None


async def serve(port: int, bootstrap: str, name: str = "binder-0", config: Optional[str] = None) -> None:
    proc = ServiceProcess(name, port)
    cache = ClusterCache()
    ledger = BindLedger(cache, fit_args_from_config(config))
    producer = EventProducer(bootstrap, topics=(*STATE_TOPICS, TOPIC_EVENTS), client_id=name)
    servicer = BinderServicer(ledger, producer, name)
    # Paced: a refused binding waits for the ledger to reach the caller's offsets (a hurried
    # fetch), nothing else does. Its own bindings are read back at that pace too, the ledger
    # holding them meanwhile: hurried by each, it fetched once per BindBatch.
    follower = CacheFollower(bootstrap, cache, client_id=name, on_restart=servicer.republish_pending,
                             fetch_interval_ms=binder_fetch_interval_ms(), hurried_by_own_writes=False)
    binder_pb2_grpc.add_BinderServicer_to_server(servicer, proc.server)
    await proc.start()
    await producer.start()
    await follower.start()
    proc.spawn(follower.follow(), "follow")
    await proc.set_serving(True)

    async def cleanup() -> None:
        await follower.stop()
        await servicer.drain_events()
        await producer.stop()

    await proc.wait_and_stop(cleanup)


def main() -> None:
    p = argparse.ArgumentParser(prog="binder", description="schedmesh binder: the authoritative per-node ledger")
    p.add_argument("--port", type=int, default=int(os.environ.get("SCHEDMESH_PORT", "0")))
    p.add_argument("--bootstrap", default=os.environ.get("SCHEDMESH_KAFKA", "127.0.0.1:9092"))
    p.add_argument("--name", default=os.environ.get("SCHEDMESH_NAME", "binder-0"),
                   help="client id and the `source` of the records it writes")
    p.add_argument("--config", default=os.environ.get("SCHEDMESH_CONFIG"),
                   help="KubeSchedulerConfiguration: NodeResourcesFit args (ignoredResources...)")
    a = p.parse_args()
    asyncio.run(serve(a.port, a.bootstrap, a.name, a.config))
