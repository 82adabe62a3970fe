"""Encoding objects as event records (protos/schedmesh/v1/events.proto) and publishing them."""
from __future__ import annotations

from typing import Iterable

from schedmesh.api import convert
from schedmesh.api.load import Manifests
from schedmesh.api.types import Namespace, Node, Pod, PodDisruptionBudget, PriorityClass
from schedmesh.mesh.cluster_cache import (TOPIC_NAMESPACES, TOPIC_NODES, TOPIC_PDBS, TOPIC_PODS,
                                          TOPIC_PRIORITY_CLASSES)
from schedmesh.v1 import events_pb2


def node_record(node: Node, deleted: bool = False, source: str = "") -> tuple[str, str, bytes]:
    return TOPIC_NODES, node.name, events_pb2.NodeRecord(node=convert.node_to_proto(node), deleted=deleted,
                                                         source=source).SerializeToString()


def pod_record(pod: Pod, deleted: bool = False, source: str = "") -> tuple[str, str, bytes]:
    return TOPIC_PODS, pod.uid, events_pb2.PodRecord(pod=convert.pod_to_proto(pod), deleted=deleted,
                                                     source=source).SerializeToString()


def priority_class_record(pc: PriorityClass, deleted: bool = False) -> tuple[str, str, bytes]:
    return TOPIC_PRIORITY_CLASSES, pc.name, events_pb2.PriorityClassRecord(
        priority_class=convert.priority_class_to_proto(pc), deleted=deleted).SerializeToString()


def pdb_record(pdb: PodDisruptionBudget, deleted: bool = False) -> tuple[str, str, bytes]:
    return TOPIC_PDBS, f"{pdb.namespace}/{pdb.name}", events_pb2.PodDisruptionBudgetRecord(
        pdb=convert.pdb_to_proto(pdb), deleted=deleted).SerializeToString()


def namespace_record(ns: Namespace, deleted: bool = False) -> tuple[str, str, bytes]:
    return TOPIC_NAMESPACES, ns.name, events_pb2.NamespaceRecord(
        namespace=convert.namespace_to_proto(ns), deleted=deleted).SerializeToString()


def manifest_records(m: Manifests, source: str = "") -> list[tuple[str, str, bytes]]:
    """Records for everything in a manifest set, cluster-scoped objects first."""
    out = [namespace_record(n) for n in m.namespaces]
    out += [priority_class_record(c) for c in m.priority_classes]
    out += [pdb_record(p) for p in m.pdbs]
    out += [node_record(n, source=source) for n in m.nodes]
    out += [pod_record(p, source=source) for p in m.pods]
    return out


async def publish(producer, records: Iterable[tuple[str, str, bytes]]) -> None:
    for topic, key, value in records:
        await producer.send(topic, value, key=key)
