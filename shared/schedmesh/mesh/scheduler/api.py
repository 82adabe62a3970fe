"""The Scheduler API (protos/schedmesh/v1/queue.proto): apply, delete, get and describe, served by
the queue-manager, which plays the API server's part for the objects users apply."""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

import grpc

from schedmesh.api import convert
from schedmesh.api.load import ManifestError, admit_all, load_text
from schedmesh.bus import EventProducer
from schedmesh.mesh import records
from schedmesh.v1 import queue_pb2, queue_pb2_grpc
from schedmesh.mesh.scheduler.scheduler import QueueManager

log = logging.getLogger("schedmesh.queue_manager")


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
