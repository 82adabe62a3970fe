"""schedmesh.v1.Policy in the controller-manager: the Eviction API (kube-apiserver's
pods/eviction subresource; the decision is schedmesh.eviction.eviction_api.evict), cordon and
taint. Evictions are decided under the controller-manager's lock, against the disruption
controller's own view of each budget, so two concurrent evictions never spend one disruption
twice.

An allowed eviction of a pod on a node is a graceful deletion (DisruptionTarget condition
EvictionByEvictionAPI and deletionTimestamp in one delta; the pod's agent ends it); a pod on no
node is deleted at once (a tombstone), as kube deletes a pod no kubelet runs. Either way an
Event says why.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Callable

import grpc

from schedmesh.api.load import label_value_errors, qualified_name_errors
from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, PodCondition, Taint
from schedmesh.eviction.eviction_api import (DISRUPTION_TARGET, MESSAGE_EVICTION_BY_EVICTION_API,
                                             REASON_EVICTION_BY_EVICTION_API, evict, matching_pdbs)
from schedmesh.mesh.controllers.disruption import DisruptionController
from schedmesh.mesh.controllers.taint_eviction import event
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.records import (deletion_update, edit_taints, event_batch_record, node_update, pod_batch_record,
                                    pod_message)
from schedmesh.telemetry import metrics
from schedmesh.v1 import policy_pb2, policy_pb2_grpc

log = logging.getLogger("schedmesh.controllers.policy")

TAINT_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
HTTP_STATUS_KEY = "schedmesh-http-status"  # trailing metadata: the API server's HTTP status of a refusal
CAUSE_KEY = "schedmesh-cause"

# The gRPC code of each HTTP status the Eviction API answers with.
GRPC_CODE = {429: grpc.StatusCode.RESOURCE_EXHAUSTED, 500: grpc.StatusCode.INTERNAL,
             403: grpc.StatusCode.PERMISSION_DENIED, 404: grpc.StatusCode.NOT_FOUND}
EVICTION_METRIC_REASON = "EvictionAPI"
# How long a call waits for this cache to read as far as its caller had (request.offsets).
CATCH_UP_SECONDS = 5.0


def taint_errors(t: Taint, removing: bool = False) -> list[str]:
    """What is wrong with a taint to add (or, `removing`, to remove: no value, effect optional)."""
    errs = [f"key {t.key!r}: {e}" for e in qualified_name_errors(t.key)]
    errs += [f"value {t.value!r}: {e}" for e in label_value_errors(t.value)]
    if t.effect and t.effect not in TAINT_EFFECTS or (not t.effect and not removing):
        errs.append(f"effect {t.effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
    return errs


class PolicyServicer(policy_pb2_grpc.PolicyServicer):
    def __init__(self, cache: ClusterCache, disruption: DisruptionController, publish: Callable,
                 lock: asyncio.Lock, source: str, clock: Callable[[], float] = time.time) -> None:
        self.cache, self.disruption, self.publish, self.lock = cache, disruption, publish, lock
        self.source, self.clock = source, clock
        # pods this servicer marked for deletion, until the cache shows it: evicting one again
        # must see it terminating (kube's deletion is synchronous), not spend a budget twice
        self.marked: dict[str, float] = {}

    async def _caught_up(self, offsets) -> None:
        """Wait (bounded) until this cache has read what the caller had read: a pod or node the
        caller knows is then known here. Past CATCH_UP_SECONDS the call is answered all the same."""
        if offsets and not self.cache.has_read(dict(offsets)):
            if not await asyncio.to_thread(self.cache.wait_for, dict(offsets), CATCH_UP_SECONDS):
                log.warning("answering from a view behind the caller's after %.0f s", CATCH_UP_SECONDS)

    # ---- Evict -----------------------------------------------------------------------
    async def Evict(self, request, context):
        ns, name = request.namespace or "default", request.name
        if not name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a pod name is required")
        await self._caught_up(request.offsets)
        async with self.lock:
            now = self.clock()
            pod = self.cache.get_pod(ns, name)
            if pod is None:
                await self._refuse(context, 404, f'pods "{name}" not found')
            self._forget_seen_deletions()
            if pod.uid in self.marked and pod.meta.deletion_timestamp is None:
                pod = dataclasses.replace(pod, meta=dataclasses.replace(pod.meta,
                                                                        deletion_timestamp=self.marked[pod.uid]))
            with self.cache.lock:
                pdbs = [p for p in self.cache.pdbs.values() if p.namespace == ns]
                found = matching_pdbs(pod, pdbs)
                statuses = {p.name: self.disruption.status_of(p, now) for p in found}
            result = evict(pod, pdbs, now, statuses=statuses, dry_run=request.dry_run)
            if not result.allowed:
                log.info("eviction of %s refused (%d): %s %s", pod.key, result.code, result.message,
                         "; ".join(result.causes))
                await self._refuse(context, result.code, result.message, result.causes)
            if request.dry_run:
                return policy_pb2.EvictResponse(code=result.code, pdb=result.pdb_name)
            recs = []
            allowed_after = 0
            if result.pdb_status is not None:
                pdb = next(p for p in found if p.name == result.pdb_name)
                recs.append(self.disruption.spend(pdb, result.pdb_status, now))
                allowed_after = result.pdb_status.disruptions_allowed
            elif result.pdb_name:
                allowed_after = statuses[result.pdb_name].disruptions_allowed
            if pod.node_name:
                target = PodCondition(DISRUPTION_TARGET, "True", REASON_EVICTION_BY_EVICTION_API,
                                      MESSAGE_EVICTION_BY_EVICTION_API)
                recs.append(pod_batch_record([deletion_update(pod, now, self.source, target)], self.source))
            else:  # no kubelet runs it: deleted at once
                recs.append(pod_batch_record([pod_message(pod, deleted=True, source=self.source)], self.source))
            recs.append(event_batch_record([event(pod, REASON_EVICTION_BY_EVICTION_API, MESSAGE_EVICTION_BY_EVICTION_API,
                                                  self.source, now)]))
            await self.publish(recs)
            self.marked.setdefault(pod.uid, now)
            metrics.observe_eviction(EVICTION_METRIC_REASON)
            log.info("evicted %s%s", pod.key, f" (pdb {result.pdb_name}: disruptionsAllowed now {allowed_after})"
                     if result.pdb_name else "")
            return policy_pb2.EvictResponse(code=result.code, pdb=result.pdb_name, disruptions_allowed=allowed_after)

    def _forget_seen_deletions(self) -> None:
        with self.cache.lock:
            for uid in list(self.marked):
                pod = self.cache.pods.get(uid)
                if pod is None or pod.meta.deletion_timestamp is not None:
                    del self.marked[uid]

    @staticmethod
    async def _refuse(context, code: int, message: str, causes=()) -> None:
        md = [(HTTP_STATUS_KEY, str(code))] + [(CAUSE_KEY, c) for c in causes]
        await context.abort(GRPC_CODE.get(code, grpc.StatusCode.UNKNOWN), message, trailing_metadata=tuple(md))

    # ---- nodes -----------------------------------------------------------------------
    async def _node(self, name: str, context):
        ni = self.cache.snapshot.get(name) if name else None
        if ni is None or ni.node is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f'nodes "{name}" not found')
        return ni.node

    async def Cordon(self, request, context):
        await self._caught_up(request.offsets)
        async with self.lock:
            node = await self._node(request.node, context)
            if node.unschedulable == request.unschedulable:
                return policy_pb2.CordonResponse(changed=False)
            await self.publish([node_update(node.name, unschedulable=request.unschedulable, source=self.source)])
            log.info("node %s: unschedulable=%s", node.name, request.unschedulable)
            return policy_pb2.CordonResponse(changed=True)

    async def Taint(self, request, context):
        add = [Taint(t.key, t.effect, t.value) for t in request.add]
        remove = [Taint(t.key, t.effect) for t in request.remove]
        errs = [f"taint {t}: {e}" for t in add for e in taint_errors(t)]
        errs += [f"taint {t.key}{':' + t.effect if t.effect else ''}-: {e}" for t in remove
                 for e in taint_errors(t, removing=True)]
        if not add and not remove:
            errs.append("at least one taint to add or remove is required")
        if errs:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "; ".join(errs))
        await self._caught_up(request.offsets)
        async with self.lock:
            node = await self._node(request.node, context)
            for r in remove:  # kubectl: removing a taint the node does not have is an error
                if not any(t.key == r.key and (not r.effect or t.effect == r.effect) for t in node.taints):
                    await context.abort(grpc.StatusCode.NOT_FOUND,
                                        f'taint "{r.key}{":" + r.effect if r.effect else ""}" not found')
            if not request.overwrite:
                clash = [a for a in add if any((t.key, t.effect) == (a.key, a.effect) for t in node.taints)]
                if clash:
                    await context.abort(grpc.StatusCode.ALREADY_EXISTS,
                                        f"node {node.name} already has {', '.join(a.key for a in clash)} taint(s) "
                                        "with same effect(s) and --overwrite is false")
            now = self.clock()
            # kube stamps timeAdded on NoExecute taints (the taint manager's clock starts then)
            add = [Taint(a.key, a.effect, a.value, now if a.effect == NO_EXECUTE else None) for a in add]
            await self.publish([node_update(node.name, add_taints=add, remove_taints=remove, source=self.source)])
            after = edit_taints(node.taints, add, remove)
            log.info("node %s: taints +%s -%s", node.name, [str(t) for t in add], [str(t) for t in remove])
            resp = policy_pb2.TaintResponse()
            for t in after:
                resp.taints.add(key=t.key, value=t.value, effect=t.effect, time_added=t.time_added or 0.0)
            return resp
