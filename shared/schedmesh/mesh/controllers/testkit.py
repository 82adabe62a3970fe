"""A ClusterCache fed the way the controller-manager's is: records through ClusterCache.apply,
and what a controller publishes applied back (as the broker would return it)."""
from __future__ import annotations

import dataclasses
from typing import Iterable

from schedmesh.api.types import NodeCondition, Pod
from schedmesh.bus import Record
from schedmesh.bus.topics import LEASES
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.records import node_record, pdb_record, pod_record
from schedmesh.v1 import events_pb2


class FedCache:
    def __init__(self) -> None:
        self.cache = ClusterCache()
        self.offset = 0
        self.events: list[events_pb2.Event] = []

    def apply(self, recs: Iterable[tuple[str, str, bytes]]) -> None:
        for topic, _key, value in recs:
            if topic == "schedmesh.events":
                msg = events_pb2.Event.FromString(value)
                self.events.extend(msg.batch if len(msg.batch) else [msg])
            else:
                self.cache.apply(topic, value, self.offset)
            self.offset += 1

    def add(self, *objs) -> None:
        from schedmesh.api.types import Node, PodDisruptionBudget
        recs = []
        for o in objs:
            if isinstance(o, Node):
                recs.append(node_record(o))
            elif isinstance(o, PodDisruptionBudget):
                recs.append(pdb_record(o))
            else:
                recs.append(pod_record(o))
        self.apply(recs)


def pod_changes(fed: FedCache, recs) -> tuple[list[events_pb2.PodRecord], list[str], list[str]]:
    """Apply a pod controller's records back; returns (the pods created, as records; names of the
    pods deleted at once; names of the pods marked for deletion)."""
    names = {p.uid: p.name for p in fed.cache.pods.values()}
    created, deleted, marked = [], [], []
    for topic, _key, value in recs:
        assert topic == "schedmesh.pods"
        msg = events_pb2.PodRecord.FromString(value)
        for r in (msg.batch if len(msg.batch) else [msg]):
            if r.HasField("update"):
                assert r.update.deletion_timestamp
                marked.append(names[r.update.uid])
            elif r.deleted:
                deleted.append(r.pod.metadata.name)
            else:
                created.append(r)
    fed.apply(recs)
    return created, deleted, marked


def bound(pod: Pod, node: str) -> Pod:
    return dataclasses.replace(pod, node_name=node)


def lease(node_names: list[str], renew: float, offset: int = 0) -> Record:
    """An agent's heartbeat batch (agent.lease_records' shape)."""
    from schedmesh.mesh.agent import lease_records
    from schedmesh.v1 import events_pb2
    recs = lease_records(node_names, renew, "agent-test") or [  # (none for no node: an empty batch)
        (LEASES, "agent-test", events_pb2.NodeRecord(source="agent-test").SerializeToString())]
    (topic, key, value), = recs
    assert topic == LEASES
    return Record(topic=topic, partition=0, offset=offset, key=key.encode(), value=value)


def ready(status: str = "True", at: float = 0.0) -> NodeCondition:
    return NodeCondition("Ready", status, last_heartbeat_time=at or None)
