"""The binder decides on at least what its caller had read: a binding into room the caller saw
freed (a deletion its cache applied) waits for the ledger to read that deletion too, instead of
being refused by a ledger a few records behind."""
from __future__ import annotations

import asyncio
import dataclasses
import threading

from schedmesh.api import convert
from schedmesh.eviction.testkit import node, pod
from schedmesh.mesh.binder import BinderServicer, BindLedger
from schedmesh.mesh.controllers.testkit import FedCache
from schedmesh.mesh.records import node_record, pod_record
from schedmesh.v1 import binder_pb2


class Sent:
    """What the servicer publishes (the pods and events topics), kept in order."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes]] = []

    async def send(self, topic, value, key=None):
        self.records.append((topic, value))


def setup():
    fed = FedCache()
    old = dataclasses.replace(pod("old", requests={"cpu": "1"}), node_name="n1")
    fed.apply([node_record(node("n1", capacity={"cpu": "1", "memory": "1Gi", "pods": "10"})), pod_record(old)])
    return fed, old, BinderServicer(BindLedger(fed.cache), Sent(), "binder")


def request(fed: FedCache, offsets: dict) -> binder_pb2.BindBatchRequest:
    new = pod("new", requests={"cpu": "1"}, phase="Pending")
    req = binder_pb2.BindBatchRequest(client_id="qm", offsets=offsets)
    req.binds.add(pod=convert.pod_to_proto(new), node_name="n1", client_id="qm")
    return req


def test_a_binding_into_room_the_caller_saw_freed_waits_for_the_ledger():
    fed, old, servicer = setup()
    caller_read = {"schedmesh.pods/0": fed.offset + 1}  # the caller has read old's deletion, next
    late = threading.Timer(0.3, fed.apply, ([pod_record(old, deleted=True)],))
    late.start()
    try:
        resp = asyncio.run(servicer.BindBatch(request(fed, caller_read), None))
    finally:
        late.cancel()
    assert [r.bound for r in resp.results] == [True]


def test_without_the_callers_offsets_the_ledger_decides_on_what_it_has():
    fed, old, servicer = setup()
    resp = asyncio.run(servicer.BindBatch(request(fed, {}), None))
    assert [r.bound for r in resp.results] == [False] and "Insufficient cpu" in resp.results[0].reason
