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
from schedmesh.mesh.cluster_cache import TOPIC_PODS
from schedmesh.mesh.records import expand, node_record, pod_record
from schedmesh.v1 import binder_pb2, events_pb2


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


def test_a_refusal_is_an_error_span_in_the_pods_trace(monkeypatch):
    """The binder's `bind` span of a refused binding joins the pod's trace (its traceparent) with
    kube's k8s.* attributes and status ERROR; a binding made has an OK one."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from schedmesh.mesh import binder as binder_module

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(binder_module, "tracer", provider.get_tracer("test"))
    attempt = provider.get_tracer("qm").start_span("schedule_pod")
    ctx = attempt.get_span_context()
    fed, old, servicer = setup()
    req = request(fed, {})
    req.binds[0].traceparent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"
    free = pod("free", requests={"cpu": "0"}, phase="Pending")
    req.binds.add(pod=convert.pod_to_proto(free), node_name="n1", client_id="qm")
    resp = asyncio.run(servicer.BindBatch(req, None))
    assert [r.bound for r in resp.results] == [False, True]
    spans = [s for s in exporter.get_finished_spans() if s.name == "bind"]
    refused = next(s for s in spans if s.attributes["k8s.pod.name"] == "new")
    assert refused.context.trace_id == ctx.trace_id and refused.parent.span_id == ctx.span_id
    assert refused.status.status_code is StatusCode.ERROR and "Insufficient cpu" in refused.status.description
    assert {k: refused.attributes[k] for k in ("k8s.namespace.name", "k8s.node.name", "k8s.pod.uid")} == {
        "k8s.namespace.name": "default", "k8s.node.name": "n1", "k8s.pod.uid": req.binds[0].pod.metadata.uid}
    made = next(s for s in spans if s.attributes["k8s.pod.name"] == "free")
    assert made.status.status_code is StatusCode.UNSET and made.attributes["k8s.node.name"] == "n1"


def test_a_binding_is_decided_on_the_version_it_names():
    """The ledger's copy of a pod stands in for the request's only at the same resource version:
    a request carrying another version of the pod (here one asking for more cpu than is left) is
    decided on that version."""
    fed = FedCache()
    fed.apply([node_record(node("n1", capacity={"cpu": "1", "memory": "1Gi", "pods": "10"}))])
    small = dataclasses.replace(pod("web", requests={"cpu": "500m"}, phase="Pending"))
    small.meta.resource_version = "qm-1-1"
    fed.apply([pod_record(small)])
    servicer = BinderServicer(BindLedger(fed.cache), Sent(), "binder")
    big = dataclasses.replace(small, meta=dataclasses.replace(small.meta, resource_version="qm-1-2"),
                              containers=pod("web", requests={"cpu": "2"}).containers)
    for version, bound in ((big, False), (small, True)):
        req = binder_pb2.BindBatchRequest(client_id="qm")
        req.binds.add(pod=convert.pod_to_proto(version), node_name="n1", client_id="qm")
        resp = asyncio.run(servicer.BindBatch(req, None))
        assert [r.bound for r in resp.results] == [bound], resp
    assert servicer._request_pod(convert.pod_to_proto(small), False) is fed.cache.pods[small.uid]


def _published_pods(sent: Sent) -> list[events_pb2.PodRecord]:
    return [item for topic, value in sent.records if topic == TOPIC_PODS
            for item in expand(events_pb2.PodRecord.FromString(value))]


def _unread_pod_request(offsets: dict):
    """A ledger that has read the node but not yet the pod's record, and a BindBatch for it."""
    fed = FedCache()
    fed.apply([node_record(node("n1", capacity={"cpu": "1", "memory": "1Gi", "pods": "10"}))])
    new = pod("new", requests={"cpu": "500m"}, phase="Pending")
    new.meta.resource_version = "qm-1-1"
    sent = Sent()
    servicer = BinderServicer(BindLedger(fed.cache), sent, "binder")
    req = binder_pb2.BindBatchRequest(client_id="qm", offsets=offsets)
    req.binds.add(pod=convert.pod_to_proto(new), node_name="n1", client_id="qm")
    return fed, new, sent, servicer, req


def test_a_pod_its_caller_read_from_the_topic_is_bound_by_a_delta_and_decoded_once(monkeypatch):
    """The caller scheduled the pod from its cache of the pods topic (its BindBatch carries its
    offsets): the pod's record precedes the binding in the one partition, so readers get a delta
    even though this ledger has not read the pod yet; and the pod decoded from the request is the
    one the cache takes when the record arrives."""
    fed, new, sent, servicer, req = _unread_pod_request({"schedmesh.pods/0": 5})
    resp = asyncio.run(servicer.BindBatch(req, None))
    assert [r.bound for r in resp.results] == [True]
    (binding,) = _published_pods(sent)
    assert binding.HasField("update") and binding.update.uid == new.uid and binding.update.node_name == "n1"
    decoded = []
    monkeypatch.setattr(convert, "pod_from_proto", lambda msg: decoded.append(msg) or None)
    fed.apply([pod_record(new)])  # the pod's record, then the binding's, as the topic holds them
    fed.apply([(TOPIC_PODS, "", binding.SerializeToString())])
    assert decoded == []
    assert fed.cache.pods[new.uid].node_name == "n1" and fed.cache.pods[new.uid].containers == new.containers
    assert servicer.ledger.pending() == []  # seen back: no longer an unconfirmed commitment


def test_a_pod_no_reader_may_know_is_published_whole():
    """Without offsets (a caller that is not following the pods topic) and unknown to the
    ledger, the binding is the whole bound pod: a delta would name a pod no reader has."""
    fed, new, sent, servicer, req = _unread_pod_request({})
    resp = asyncio.run(servicer.BindBatch(req, None))
    assert [r.bound for r in resp.results] == [True]
    (binding,) = _published_pods(sent)
    assert not binding.HasField("update")
    assert binding.pod.metadata.uid == new.uid and binding.pod.node_name == "n1"
    assert fed.cache._expected == {}


def test_a_pod_created_again_under_a_deleted_uid_is_bound_and_a_deleted_one_is_not():
    """The ledger refuses a binding for a pod deleted since it was decided; a whole record of the
    same uid after the tombstone (the pod applied again under it) is a pod again, bound as any."""
    fed = FedCache()
    fed.apply([node_record(node("n1", capacity={"cpu": "2", "memory": "1Gi", "pods": "10"}))])
    web = pod("web", requests={"cpu": "100m"}, phase="Pending")
    servicer = BinderServicer(BindLedger(fed.cache), Sent(), "binder")

    def bind() -> binder_pb2.BindResponse:
        req = binder_pb2.BindBatchRequest(client_id="qm")
        req.binds.add(pod=convert.pod_to_proto(web), node_name="n1", client_id="qm")
        return asyncio.run(servicer.BindBatch(req, None)).results[0]

    fed.apply([pod_record(web), pod_record(web, deleted=True)])
    refused = bind()
    assert not refused.bound and "has been deleted" in refused.reason
    fed.apply([pod_record(web)])
    assert bind().bound
