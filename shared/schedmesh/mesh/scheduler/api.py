"""The Scheduler API (protos/schedmesh/v1/queue.proto): apply, delete, get and describe, served by
the queue-manager, which plays the API server's part for the objects users apply."""
from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import math
import operator
import os
import time
from dataclasses import dataclass, field, replace
from typing import Optional

import grpc

from schedmesh.api import convert
from schedmesh.api.admission import AdmissionObjects, admit_created_pod
from schedmesh.api.evolve import evolve
from schedmesh.api.limit_range import keep_admitted_defaults
from schedmesh.api.load import AdmissionError, ManifestError, Manifests, object_uid
from schedmesh.api.runtime_class import admit_runtime_class
from schedmesh.api.types import DaemonSet, LimitRange, Node, Pod, WorkloadSelector
from schedmesh.api.update import as_applied, merged_pod, pod_changed, pod_update_error
from schedmesh.bus import EventProducer
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.runtime import MAX_MESSAGE_BYTES
from schedmesh.v1 import queue_pb2, queue_pb2_grpc
from schedmesh.mesh.scheduler.scheduler import QueueManager
from schedmesh.mesh.scheduler.state import IN_FLIGHT
from schedmesh.workloads.replicas import controlled_by

log = logging.getLogger("schedmesh.queue_manager")

# Read-your-writes: an Apply or a Delete returns once this queue-manager's cache has read what it
# published, as the API server answers once the object is stored: the caller's next Get or Describe
# sees it (an Apply's pods were NotFound for 2-7 ms after it returned, 3 times in 15), and no attempt
# after an Apply is made on a view without its namespaces, classes, budgets and nodes (a preemptor
# decided without the PDBs applied beside its victims), which are read before its pods are sent.
APPLY_READ_TIMEOUT = 5.0


async def _publish_concurrently(producer: EventProducer, recs: list, window: int = 256) -> dict[str, int]:
    """Publish `recs`; returns the offsets to have read to see them all ("topic/partition" -> next offset)."""
    upto: dict[str, int] = {}
    for i in range(0, len(recs), window):
        for sent in await asyncio.gather(*(producer.send(t, v, key=k) for t, k, v in recs[i:i + window])):
            if sent is None:  # a producer that does not say where (tests' stand-ins)
                continue
            key = f"{sent.topic}/{sent.partition}"
            upto[key] = max(upto.get(key, 0), sent.offset + 1)
    return upto


async def _publish_and_read(qm, recs: list, what: str, window: int = 256) -> None:
    """Publish `recs` (concurrently within `window`; 1: in their order), then wait until this
    queue-manager's cache has read them (APPLY_READ_TIMEOUT at most, then a warning)."""
    upto = await _publish_concurrently(qm.producer, recs, window)
    if upto and not await asyncio.to_thread(qm.cache.wait_for, upto, APPLY_READ_TIMEOUT):
        log.warning("%s: the cache has not read the records just published within %.0f s", what, APPLY_READ_TIMEOUT)


def _comparable(obj):
    """An object as its record would carry it (a cache may hold equal values in other types)."""
    if isinstance(obj, Node):
        return convert.node_to_proto(obj).SerializeToString(deterministic=True)
    if isinstance(obj, DaemonSet):
        return convert.daemon_set_to_proto(obj).SerializeToString(deterministic=True)
    if isinstance(obj, LimitRange):
        return convert.limit_range_to_proto(obj).SerializeToString(deterministic=True)
    if isinstance(obj, WorkloadSelector):
        return convert.workload_to_proto(obj).SerializeToString(deterministic=True)
    return obj


# kubectl's resource names of the workload kinds (a Deployment's record is its ReplicaSet's):
# (singular for lines, plural for NotFound), and the Delete kinds naming them.
_WORKLOAD_RESOURCES = {"Deployment": ("deployment.apps", "deployments.apps"),
                       "ReplicaSet": ("replicaset.apps", "replicasets.apps"),
                       "StatefulSet": ("statefulset.apps", "statefulsets.apps"),
                       "ReplicationController": ("replicationcontroller", "replicationcontrollers"),
                       "Job": ("job.batch", "jobs.batch")}
_WORKLOAD_DELETE_KINDS = {
    **{k: "Deployment" for k in ("deployment", "deployments", "deploy")},
    **{k: "ReplicaSet" for k in ("replicaset", "replicasets", "rs")},
    **{k: "StatefulSet" for k in ("statefulset", "statefulsets", "sts")},
    **{k: "ReplicationController" for k in ("replicationcontroller", "replicationcontrollers", "rc")},
    **{k: "Job" for k in ("job", "jobs")}}


def uid_for_created(pod: Pod, cache: ClusterCache) -> Pod:
    """The pod with the uid it is created under. An applied pod that names no uid gets one from
    its name (load.object_uid: the same at every apply, so re-applying finds it unchanged); created
    again after a pod of that uid was deleted, it gets the next uid of its name not taken, as kube's
    API server gives every object it creates a new uid. Re-created under the deleted pod's uid, it
    was refused by the binder ("has been deleted") for good, and `describe` mixed the two pods'
    events."""
    if not cache.was_deleted(pod.meta.uid) or pod.meta.uid != object_uid("Pod", pod.namespace, pod.name):
        return pod  # (a uid the manifest names is kept: recorded scenarios name real ones)
    incarnation = 1
    while True:  # ("#" is in no object name: these never meet the uid of another name)
        uid = object_uid("Pod", pod.namespace, f"{pod.name}#{incarnation}")
        if not cache.was_deleted(uid) and uid not in cache.pods:
            return evolve(pod, meta=evolve(pod.meta, uid=uid))
        incarnation += 1


def _controller_key(pod: Pod) -> Optional[tuple[str, str, str]]:
    """The (kind, namespace, name) of the pod's controller, as workload records are keyed."""
    ref = next((r for r in pod.meta.owner_references if r.controller), None)
    return None if ref is None else (ref.kind, pod.namespace, ref.name)


@dataclass
class ApplyPlan:
    """One Apply's outcome: the objects to publish, kubectl's lines, the refusals."""
    publish: Manifests = field(default_factory=Manifests)
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stored_pods: list = field(default_factory=list)  # the published pods as applied (no binding, no status)
    updated_pods: set = field(default_factory=set)  # uids of the published pods that exist (spec updates)

    def add(self, kind: str, name: str, obj, live, publish_to: list) -> None:
        if live is None:
            publish_to.append(obj)
            self.lines.append(f"{kind}/{name} created")
        elif _comparable(obj) != _comparable(live):
            publish_to.append(obj)
            self.lines.append(f"{kind}/{name} configured")
        else:
            self.lines.append(f"{kind}/{name} unchanged")


def _a_write(handler):
    """An RPC that publishes what the API owns: it waits while a broker-restart re-publication
    runs, which waits for it (WriteGate)."""
    @functools.wraps(handler)
    async def gated(self, request, context):
        async with self.qm.writes.write():
            return await handler(self, request, context)
    return gated


_KEY = operator.itemgetter(0)


def _page(keyed: list, limit: int) -> tuple[list, bool]:
    """The first `limit` of (key, item) pairs by key (all when `limit` is 0), and whether more follow."""
    if 0 < limit < len(keyed):
        return heapq.nsmallest(limit, keyed, key=_KEY), True
    keyed.sort(key=_KEY)
    return keyed, False


def _pod_after(token: str) -> Optional[tuple[str, str]]:
    """The pod a page of pods ended with, from its continue_token NAMESPACE/NAME; None when the
    token names none."""
    namespace, sep, name = token.partition("/")
    return (namespace, name) if sep and namespace and name else None


_POD_TOKEN = "a pod's NAMESPACE/NAME (the continue_token of a page of pods)"


def _events_keyed(by_pod: list, namespace: str, after: Optional[tuple]) -> list:
    """(key, event) pairs of the events of `namespace` ("" all) after the key `after` (None: all),
    from (pod uid, its events) pairs. The key, (timestamp, pod uid, ordinal), orders events
    totally, so pages neither skip nor repeat events of the same time: the ordinal is an event's
    place among its pod's events of the same timestamp (a pod's events keep their order)."""
    since = after[0] if after is not None else -math.inf
    keyed = []
    for uid, events in by_pod:
        ordinals: dict[float, int] = {}
        for e in events:
            if e.timestamp < since:
                continue  # before the page; an ordinal counts only events of its own timestamp
            ordinal = ordinals[e.timestamp] = ordinals.get(e.timestamp, -1) + 1
            key = (e.timestamp, uid, ordinal)
            if (after is None or key > after) and (not namespace or e.pod.partition("/")[0] == namespace):
                keyed.append((key, e))
    return keyed


def _event_token(key: tuple[float, str, int]) -> str:
    """An events page's continue_token: its last key as TIMESTAMP/POD_UID/ORDINAL (repr: the
    timestamp read back is the same float)."""
    timestamp, uid, ordinal = key
    return f"{timestamp!r}/{uid}/{ordinal}"


def _event_after(token: str) -> Optional[tuple[float, str, int]]:
    """The key an events page ended with, from its continue_token (_event_token); None when the
    token names none. The uid is what lies between the first and last "/"."""
    timestamp, _, rest = token.partition("/")
    uid, sep, ordinal = rest.rpartition("/")
    try:
        key = float(timestamp), uid, int(ordinal)
    except ValueError:
        return None
    return key if sep and math.isfinite(key[0]) and key[2] >= 0 else None


_EVENT_TOKEN = "an event's TIMESTAMP/POD_UID/ORDINAL (the continue_token of a page of events)"


def _ask_for_pages(request_type: str) -> str:
    return f"ask for pages ({request_type}.limit and continue_token; schedmesh's own client does)"


async def _fits(out, what: str, context, instead: str = _ask_for_pages("GetRequest")):
    """`out`, or RESOURCE_EXHAUSTED when it is larger than a message may be (a list of everything
    asked at once), saying what to ask `instead`: a list is never sent cut short."""
    size = out.ByteSize()
    if size > MAX_MESSAGE_BYTES:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"all {what} make a {size:,}-byte answer, more than a message may carry "
                            f"({MAX_MESSAGE_BYTES:,}): {instead}")
    return out


class SchedulerServicer(queue_pb2_grpc.SchedulerServicer):
    def __init__(self, qm: QueueManager) -> None:
        self.qm = qm

    @_a_write
    async def Apply(self, request, context):
        """kubectl apply: each object is created, configured (changed) or unchanged. An existing
        pod keeps its binding and status; a change the API server forbids (most of a pod's spec)
        refuses the whole request, nothing applied. Names the API server would refuse are refused
        with --strict-names, else accepted with a warning (recorded scenarios use such names); so
        are pods naming a RuntimeClass that does not exist, with --strict-admission. A pod created
        is admitted as kube-apiserver admits it, its plugins in its order (LimitRanger, Priority,
        DefaultTolerationSeconds, RuntimeClass: schedmesh.api.admission); a LimitRange applied in
        the same request applies to all of its pods, wherever it is in the file."""
        qm = self.qm
        try:
            # Off this event loop: reading a large manifest (up to MAX_EXPANDED_NODES nodes, a
            # workload's replicas, its template's hash) takes long enough to stall every other RPC.
            m, warnings = await self._admit(request.manifest, request.source or "<manifest>")
        except ManifestError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        plan = await self._plan(m)  # RuntimeClass admission there: it needs the pods' live copies
        if plan.errors:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "\n".join(plan.errors) + "\n(nothing was applied)")
        warnings += plan.warnings
        now = time.time()
        created = 0
        for p in plan.publish.pods:
            if p.meta.creation_timestamp is None:
                # The API server creates an Apply's pods one after another: a microsecond apart,
                # in the manifest's order.
                p.meta.creation_timestamp = now + created * 1e-6
                created += 1
                if p.node_name and p.start_time is None:
                    # Created bound (a cluster replayed as manifests): started at its creation, as
                    # explain and the recordings take such a pod, not half a second later when
                    # the kubelet agent reports it. A preemptor applied in between would otherwise
                    # see its victims unstarted ("now" for kube: a tie on start times, which goes
                    # to the smallest node name), where the recording saw them started in order.
                    p.start_time = p.meta.creation_timestamp
            p.meta.resource_version = qm.next_resource_version()
        recs = await qm.admission.encode(plan.publish, qm.cfg.client_id, frozenset(plan.updated_pods))
        too_large = [records.describe(t, v) for t, _k, v in recs if len(v) > records.MAX_RECORD_BYTES]
        if too_large:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "\n".join(
                f"{what}: {size:,} bytes encoded; an object may have at most {records.MAX_RECORD_BYTES:,} "
                "(a Kafka record's default limit)" for what, size in too_large) + "\n(nothing was applied)")
        # Its own pods come back through Kafka; the cache then takes these objects as they are.
        qm.cache.expect(plan.publish.pods)
        pod_recs = [r for r in recs if r[0] == records.TOPIC_PODS]  # the pods' batch records, last
        # Cluster-scoped objects and nodes first, then the pods; within a group, concurrently.
        await _publish_and_read(qm, recs[:len(recs) - len(pod_recs)], "apply")
        with qm.cache.lock:
            # Write-through: a pod applied right after its PriorityClass or RuntimeClass (in the
            # next Apply) must find the class even before the record comes back from the broker.
            for pc in plan.publish.priority_classes:
                qm.cache.priority_classes[pc.name] = pc
            for rc in plan.publish.runtime_classes:
                qm.cache.runtime_classes[rc.name] = rc
            for lr in plan.publish.limit_ranges:  # likewise: a pod applied next is defaulted by it
                qm.cache.limit_ranges[lr.key] = lr
        await _publish_and_read(qm, pod_recs, "apply")
        for n in plan.publish.nodes:
            qm.applied_nodes[n.name] = n
        if qm.store is not None:  # durable local state: what was applied survives down/up
            if all(a is b for a, b in zip(plan.stored_pods, plan.publish.pods)):
                stored_recs = recs  # pods created as applied: the records just published (encoded once)
            else:
                stored_recs = records.manifest_records(replace(plan.publish, pods=plan.stored_pods),
                                                       source=qm.cfg.client_id)
            await asyncio.to_thread(qm.store.write, stored_recs)
        return queue_pb2.ApplyResponse(applied=plan.lines, warnings=warnings)

    async def _admit(self, manifest: str, source: str) -> tuple[Manifests, list[str]]:
        """Read a manifest and run the admission that needs no live pod (Priority,
        DefaultTolerationSeconds): the objects and the name warnings, or ManifestError. Off the
        event loop, in the admission worker process when the manifest is large (admission.py)."""
        qm = self.qm
        with qm.cache.lock:
            classes = list(qm.cache.priority_classes.values())
        return await qm.admission.admit(manifest, source, qm.cfg.strict_names, classes)

    async def _plan(self, m):
        """What to publish for an applied manifest and kubectl's line for each object."""
        qm = self.qm
        plan = ApplyPlan()
        with qm.cache.lock:
            live_ns = {n.name: n for n in qm.cache.namespaces()}
            live_pcs = dict(qm.cache.priority_classes)
            live_rcs = dict(qm.cache.runtime_classes)
            live_pdbs = dict(qm.cache.pdbs)
            live_workloads = dict(qm.cache.workloads)
            live_daemon_sets = dict(qm.cache.daemon_sets)
            live_limit_ranges = dict(qm.cache.limit_ranges)
            # only the manifest's own nodes and pods: copying all 5,000 nodes and every pod made
            # an Apply of 10 pods cost as much as scheduling them
            live_nodes = {}
            for n in m.nodes:
                ni = qm.cache.snapshot.get(n.name)
                if ni is not None and ni.node is not None:
                    live_nodes[n.name] = ni.node
            live_pods: dict[tuple[str, str], Pod] = {}
            for p in m.pods:
                live = qm.cache.get_pod(p.namespace, p.name)
                if live is not None:
                    live_pods[(p.namespace, p.name)] = live
        for ns in m.namespaces:
            plan.add("namespace", ns.name, ns, live_ns.get(ns.name), plan.publish.namespaces)
        for pc in m.priority_classes:
            live = live_pcs.get(pc.name)
            if live is not None and live.value != pc.value:
                plan.errors.append(f'PriorityClass.scheduling.k8s.io "{pc.name}" is invalid: value: Forbidden: '
                                   "may not be changed in an update.")
                continue
            plan.add("priorityclass", pc.name, pc, live, plan.publish.priority_classes)
        for rc in m.runtime_classes:
            live = live_rcs.get(rc.name)
            if live is not None and live.handler != rc.handler:
                plan.errors.append(f'RuntimeClass.node.k8s.io "{rc.name}" is invalid: handler: Invalid value: '
                                   f'"{rc.handler}": field is immutable')
                continue
            plan.add("runtimeclass.node.k8s.io", rc.name, rc, live, plan.publish.runtime_classes)
        runtime_classes = {**live_rcs, **{rc.name: rc for rc in m.runtime_classes}}
        for lr in m.limit_ranges:
            plan.add("limitrange", lr.key, lr, live_limit_ranges.get(lr.key), plan.publish.limit_ranges)
        admission_objects = AdmissionObjects(
            priority_classes={**live_pcs, **{pc.name: pc for pc in m.priority_classes}},
            runtime_classes=runtime_classes,
            limit_ranges=list({**live_limit_ranges, **{lr.key: lr for lr in m.limit_ranges}}.values()))
        for pdb in m.pdbs:
            live = live_pdbs.get(f"{pdb.meta.namespace}/{pdb.meta.name}")
            if live is not None:  # the disruption controller's status stays
                pdb = replace(live, meta=replace(live.meta, labels=pdb.meta.labels, annotations=pdb.meta.annotations),
                              selector=pdb.selector, min_available=pdb.min_available,
                              max_unavailable=pdb.max_unavailable)
            plan.add("poddisruptionbudget.policy", f"{pdb.meta.namespace}/{pdb.meta.name}", pdb, live,
                     plan.publish.pdbs)
        kept = self._plan_workloads(m.workloads, live_workloads, plan)
        for ds in m.daemon_sets:
            live = live_daemon_sets.get(ds.key)
            if live is not None:
                if live.selector != ds.selector:  # apps/v1 validation: spec.selector is immutable
                    plan.errors.append(f'DaemonSet.apps "{ds.name}" is invalid: spec.selector: Invalid value: '
                                       f'"{ds.selector}": field is immutable')
                    continue
                # The API server's templateGeneration: one more when the template changes, else kept.
                ds = replace(ds, meta=replace(ds.meta, creation_timestamp=live.meta.creation_timestamp),
                             template_generation=live.template_generation + (live.template_hash != ds.template_hash))
            elif ds.meta.creation_timestamp is None:
                ds = replace(ds, meta=replace(ds.meta, creation_timestamp=time.time()))
            plan.add("daemonset.apps", ds.key, ds, live, plan.publish.daemon_sets)
        for n in m.nodes:
            live = live_nodes.get(n.name)
            if live is not None:  # the kubelet's conditions and images stay
                n = replace(n, meta=replace(live.meta, labels=n.meta.labels, annotations=n.meta.annotations),
                            conditions=live.conditions, images=n.images or live.images)
            plan.add("node", n.name, n, live, plan.publish.nodes)
        for p in m.pods:
            live = live_pods.get((p.namespace, p.name))
            if live is None and _controller_key(p) in kept:
                continue  # its workload's controller keeps its count: it makes the missing pods
            if live is not None and not live.node_name:
                live = await self._settled(live)  # not while its binding is on its way
            try:
                if live is None:
                    # Priority and DefaultTolerationSeconds ran already, on every pod of the
                    # manifest (admission.py); Priority again here, in its place in kube's order,
                    # changes nothing, and DefaultTolerationSeconds is not run twice.
                    plan.warnings += admit_created_pod(p, admission_objects, default_tolerations=False,
                                                       refuse_unknown_runtime_class=qm.cfg.strict_admission)
                else:  # an update: kube admits no pod update again (LimitRanger, RuntimeClass: create only)
                    keep_admitted_defaults(p, live)
                    plan.warnings += admit_runtime_class(p, runtime_classes, live=live,
                                                         refuse_unknown=qm.cfg.strict_admission)
            except AdmissionError as e:
                plan.errors.append(f"{m.pod_source(p)}: {e.path}: {e.reason}" if e.path
                                   else f"{m.pod_source(p)}: {e.reason}")
                continue
            if live is None:
                p = uid_for_created(p, qm.cache)
                plan.publish.pods.append(p)
                plan.stored_pods.append(p)
                plan.lines.append(f"pod/{p.namespace}/{p.name} created")
                continue
            merged = merged_pod(p, live)
            error = pod_update_error(merged, live)
            if error:
                plan.errors.append(error)
            elif pod_changed(merged, live):
                plan.publish.pods.append(merged)
                plan.updated_pods.add(merged.uid)
                plan.stored_pods.append(as_applied(merged, p))
                plan.lines.append(f"pod/{p.namespace}/{p.name} configured")
            else:
                plan.lines.append(f"pod/{p.namespace}/{p.name} unchanged")
        # Kinds scheduling never reads (ConfigMaps, RBAC, ...): a line each, nothing published.
        plan.lines += [s.line() for s in m.skipped]
        return plan

    @staticmethod
    def _plan_workloads(workloads: list[WorkloadSelector], live_workloads, plan: ApplyPlan) -> set:
        """The Services' and the workloads' records to publish and their lines; returns the keys of
        the workloads that exist already. A new workload's pods are the manifest's (its record
        names them, for its controller to await); an existing one's are its controller's: this
        Apply makes none of them (re-applied with more replicas, the controller makes the new
        pods; with fewer, it deletes the extra ones), so no pod is made twice. A Deployment whose
        template changed gets a new ReplicaSet and its other ReplicaSets are scaled to 0 at once
        (no rolling update)."""
        kept: set[tuple[str, str, str]] = set()
        now = time.time()
        for w in workloads:
            live = live_workloads.get(w.key)
            if w.kind == "Service":
                plan.add("service", f"{w.namespace}/{w.name}", w, live, plan.publish.workloads)
                continue
            if live is not None:
                kept.add(w.key)
                if live.spec is not None:  # its creation stays what it was
                    w = replace(w, spec=replace(w.spec, created_pods=live.spec.created_pods,
                                                created_at=live.spec.created_at))
            else:
                w = replace(w, spec=replace(w.spec, created_at=now))
            changed = live is None or _comparable(live) != _comparable(w)
            if changed:
                plan.publish.workloads.append(w)
            state = "created" if live is None else "configured" if changed else "unchanged"
            if not w.spec.deployment:
                plan.lines.append(f"{_WORKLOAD_RESOURCES[w.kind][0]}/{w.namespace}/{w.name} {state}")
                continue
            for old in live_workloads.values():
                if (old.kind == "ReplicaSet" and old.namespace == w.namespace and old.key != w.key
                        and old.spec is not None and old.spec.deployment == w.spec.deployment):
                    state = "configured" if state == "created" else state
                    if old.spec.replicas:
                        plan.publish.workloads.append(replace(old, spec=replace(old.spec, replicas=0)))
                        state = "configured"
            plan.lines.append(f"deployment.apps/{w.namespace}/{w.spec.deployment} {state}")
        return kept

    async def _settled(self, pod: Pod, timeout: float = 15.0) -> Optional[Pod]:
        """The pod as the cache knows it once no binding of it is in flight: an update must not
        be decided against (and re-publish) the unbound copy of a pod the binder is binding."""
        qm = self.qm
        deadline = time.monotonic() + timeout
        while qm.queue_name(pod, {}) == IN_FLIGHT and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            pod = qm.cache.pods.get(pod.uid, pod)
        return qm.cache.pods.get(pod.uid)

    @_a_write
    async def Delete(self, request, context):
        qm = self.qm
        kind, ns, name = request.kind.lower(), request.namespace or "default", request.name
        if kind in ("pod", "pods"):
            pod = qm.cache.get_pod(ns, name)
            if pod is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f'pods "{name}" not found in namespace {ns}')
            await self._delete_pods([pod])
            return queue_pb2.DeleteResponse(result=f'pod "{name}" deleted')
        if kind in _WORKLOAD_DELETE_KINDS:
            return await self._delete_workload(context, _WORKLOAD_DELETE_KINDS[kind], ns, name)
        if kind in ("node", "nodes"):
            ni = qm.cache.snapshot.get(name)
            if ni is None or ni.node is None:
                await context.abort(grpc.StatusCode.NOT_FOUND, f'nodes "{name}" not found')
            qm.applied_nodes.pop(name, None)
            await _publish_and_read(qm, [records.node_record(ni.node, deleted=True, source=qm.cfg.client_id)], "delete")
            await self._unstore([records.node_record(ni.node, deleted=True, source=qm.cfg.client_id)])
            return queue_pb2.DeleteResponse(result=f'node "{name}" deleted')
        cache = qm.cache
        if kind in ("priorityclass", "priorityclasses", "pc"):
            return await self._delete_object(
                context, cache.priority_classes.get(name), records.priority_class_record,
                f'priorityclasses "{name}" not found', f'priorityclass "{name}" deleted')
        if kind in ("runtimeclass", "runtimeclasses"):
            # pods applied next must not find it, even before the record is back
            return await self._delete_object(
                context, cache.runtime_classes.get(name), records.runtime_class_record,
                f'runtimeclasses.node.k8s.io "{name}" not found', f'runtimeclass.node.k8s.io "{name}" deleted',
                forget=lambda rc: cache.runtime_classes.pop(rc.name, None))
        if kind in ("pdb", "pdbs", "poddisruptionbudget"):
            return await self._delete_object(
                context, cache.pdbs.get(f"{ns}/{name}"), records.pdb_record,
                f'poddisruptionbudgets "{name}" not found in namespace {ns}', f'poddisruptionbudget "{name}" deleted')
        if kind in ("service", "services", "svc"):
            # pods placed next must not be spread by it, even before the record is back
            return await self._delete_object(
                context, cache.workloads.get(("Service", ns, name)), records.workload_record,
                f'services "{name}" not found in namespace {ns}', f'service "{name}" deleted',
                forget=lambda svc: cache.workloads.pop(svc.key, None))
        if kind in ("daemonset", "daemonsets", "ds"):
            # The controller-manager's DaemonSet controller then deletes its pods (the garbage
            # collector's part); applied again next, it is created, even before the record is back.
            return await self._delete_object(
                context, cache.daemon_sets.get(f"{ns}/{name}"), records.daemon_set_record,
                f'daemonsets.apps "{name}" not found in namespace {ns}', f'daemonset.apps "{name}" deleted',
                forget=lambda ds: cache.daemon_sets.pop(ds.key, None))
        if kind in ("limitrange", "limitranges", "limits"):
            # pods applied next are no longer defaulted by it, even before the record is back
            return await self._delete_object(
                context, cache.limit_ranges.get(f"{ns}/{name}"), records.limit_range_record,
                f'limitranges "{name}" not found in namespace {ns}', f'limitrange "{name}" deleted',
                forget=lambda lr: cache.limit_ranges.pop(lr.key, None))
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"kind must be pod, node, priorityclass, runtimeclass, pdb, service, daemonset, "
                            f"limitrange, deployment, replicaset, statefulset, replicationcontroller or job, "
                            f"not {request.kind!r}")

    async def _delete_pods(self, pods: list[Pod]) -> None:
        """Delete pods as the API server does: a bound one gracefully (its kubelet agent ends it),
        an unbound one at once; and from the local store."""
        qm = self.qm
        now = time.time()
        # A bound pod's deletion request is a delta: this cache's copy may be older than its kubelet's
        # last status report, which a whole copy would undo in every reader.
        graceful = [records.deletion_update(p, now, source=qm.cfg.client_id) for p in pods if p.node_name]
        recs = [records.pod_record(p, deleted=True, source=qm.cfg.client_id) for p in pods if not p.node_name]
        if graceful:
            recs.append(records.pod_batch_record(graceful, qm.cfg.client_id))
        await _publish_and_read(qm, recs, "delete", window=1)
        await self._unstore([records.pod_record(p, deleted=True, source=qm.cfg.client_id) for p in pods])

    async def _delete_workload(self, context, kind: str, ns: str, name: str):
        """Delete a workload (a Deployment: its ReplicaSets): its records' tombstones published,
        journalled and forgotten here at once, then its pods deleted (the garbage collector's
        part; the controller-manager's workload controller collects any pod it made meanwhile,
        and stops replacing them once it reads the tombstones). kubectl's line."""
        qm = self.qm
        singular, plural = _WORKLOAD_RESOURCES[kind]
        with qm.cache.lock:
            if kind == "Deployment":
                targets = [w for w in qm.cache.workloads.values() if w.kind == "ReplicaSet" and w.namespace == ns
                           and w.spec is not None and w.spec.deployment == name]
            else:
                found = qm.cache.workloads.get((kind, ns, name))
                targets = [found] if found is not None and found.spec is not None else []
        if not targets:
            await context.abort(grpc.StatusCode.NOT_FOUND, f'{plural} "{name}" not found in namespace {ns}')
        tombstones = [records.workload_record(w, deleted=True) for w in targets]
        await _publish_and_read(qm, tombstones, "delete", window=1)
        await self._unstore(tombstones)
        with qm.cache.lock:
            for w in targets:
                qm.cache.workloads.pop(w.key, None)
            pods = [p for p in qm.cache.pods.values()
                    if p.meta.deletion_timestamp is None and any(controlled_by(w, p) for w in targets)]
        await self._delete_pods(pods)
        return queue_pb2.DeleteResponse(result=f'{singular} "{name}" deleted')

    async def _delete_object(self, context, obj, record, not_found: str, deleted: str, forget=None):
        """Delete a kept object: NOT_FOUND when absent, else its tombstone published and journalled,
        `forget(obj)` applied to this cache at once (read-your-writes), and kubectl's line."""
        qm = self.qm
        if obj is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, not_found)
        tombstone = record(obj, deleted=True)
        await _publish_and_read(qm, [tombstone], "delete")
        await self._unstore([tombstone])
        if forget is not None:
            with qm.cache.lock:
                forget(obj)
        return queue_pb2.DeleteResponse(result=deleted)

    async def _unstore(self, deletions: list) -> None:
        """A deleted object leaves the local store too (it must not come back at the next `up`)."""
        if self.qm.store is not None:
            await asyncio.to_thread(self.qm.store.write, deletions)

    async def GetPods(self, request, context):
        """The pods by namespace and name, all of them or a page (GetRequest.limit, continue_token)."""
        qm = self.qm
        after = await self._continue_after(request, context, _pod_after, _POD_TOKEN)
        pending = qm.pending_map()
        with qm.cache.lock:
            keyed = [((p.namespace, p.name), p) for p in qm.cache.pods.values()
                     if (not request.namespace or p.namespace == request.namespace)
                     and (after is None or (p.namespace, p.name) > after)]
        page, more = _page(keyed, request.limit)
        out = queue_pb2.PodList(pods=[qm.pod_view(p, pending) for _, p in page])
        if more:
            out.continue_token = "/".join(page[-1][0])
        return await _fits(out, "pods", context)

    async def GetNodes(self, request, context):
        """The nodes by name, all of them or a page (GetRequest.limit, continue_token): converted
        outside the cache lock (200,000 nodes took seconds under it)."""
        qm = self.qm
        after = await self._continue_after(request, context)
        with qm.cache.lock:
            keyed = [(ni.name, (ni.node, len(ni.pods), ni.requested.milli_cpu, ni.requested.memory))
                     for ni in qm.cache.snapshot.node_info_list
                     if ni.node is not None and (after is None or ni.name > after)]
        page, more = _page(keyed, request.limit)
        out = queue_pb2.NodeList()
        for _, (node, pods, milli_cpu, memory) in page:
            ready = not any(c.type == "Ready" and c.status != "True" for c in node.conditions)
            out.nodes.add(node=convert.node_to_proto(node), pods=pods, requested_milli_cpu=milli_cpu,
                          requested_memory=memory, ready=ready)
        if more:
            out.continue_token = page[-1][0]
        return await _fits(out, "nodes", context)

    @staticmethod
    async def _continue_after(request, context, key_of=str, token_is: str = ""):
        """The key the page starts after (None: from the first), read from the continue_token by
        `key_of` (None: the token is not `token_is`); INVALID_ARGUMENT for a bad request."""
        if request.limit < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"limit: must not be negative, not {request.limit}")
        token = request.continue_token
        if not token:
            return None
        after = key_of(token)
        if after is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"continue_token: {token!r} is not {token_is}")
        return after

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

    async def ListEvents(self, request, context):
        """`schedmesh get events`: the events kept, those of pods deleted since included (kept an
        hour, as kube's API server keeps events: an evicted or preempted pod's story is in them),
        oldest first, all of them or a page (EventsRequest.limit, continue_token). Only the lists
        are copied under the notes lock; keyed and paged outside it."""
        qm = self.qm
        after = await self._continue_after(request, context, _event_after, _EVENT_TOKEN)
        with qm._notes_lock:
            by_pod = [(uid, list(n.events)) for uid, n in qm.notes.items()]
        page, more = _page(_events_keyed(by_pod, request.namespace, after), request.limit)
        out = queue_pb2.EventList(events=[e for _, e in page])
        if more:
            out.continue_token = _event_token(page[-1][0])
        return await _fits(out, "events", context, _ask_for_pages("EventsRequest") +
                           " or one namespace's (EventsRequest.namespace; `get events -n NS`)")

    # This process's /metrics, set by service.serve once it listens ("" before, or without metrics).
    metrics_url: str = ""

    async def GetServices(self, request, context):
        """The services of this mesh, for `schedmesh get services` against a remote mesh: itself
        (address "": the one the client reached), its shards, binder, preemption,
        controller-manager and kubelet agents, each with the address and /metrics URL this
        scheduler is configured with (schedmesh.mesh.scheduler.services)."""
        from schedmesh.mesh.scheduler.services import mesh_services
        out = queue_pb2.ServiceList()
        for s in mesh_services(self.qm.cfg, self.metrics_url, os.environ):
            out.services.add(name=s.name, address=s.address, metrics_url=s.metrics_url)
        return out
