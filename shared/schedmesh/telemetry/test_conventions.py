"""Span attribute conventions and the service resource."""
from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.telemetry import child_span, k8s_attributes, records_under, service_resource, set_error, set_node, set_pod


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("t"), exporter


def test_pod_and_node_attributes(spans) -> None:
    tracer, exporter = spans
    pod = Pod(meta=ObjectMeta(name="web-1", namespace="default", uid="u-1"))
    with tracer.start_as_current_span("schedule_pod") as span:
        set_pod(span, pod)
        set_node(span, "node-3")
        set_node(span, "")  # an unknown node leaves the attribute alone
    [done] = exporter.get_finished_spans()
    assert dict(done.attributes) == {"k8s.pod.name": "web-1", "k8s.namespace.name": "default",
                                     "k8s.pod.uid": "u-1", "k8s.node.name": "node-3"}
    assert k8s_attributes("ns/p") == {"k8s.pod.name": "p", "k8s.namespace.name": "ns"}
    assert k8s_attributes({"metadata": {"name": "p"}}, node="n") == {"k8s.pod.name": "p", "k8s.node.name": "n"}


def test_errors_become_span_status(spans) -> None:
    tracer, exporter = spans
    with tracer.start_as_current_span("bind") as span:
        set_error(span, ValueError("node full"))
    with tracer.start_as_current_span("filter") as span:
        set_error(span, "shard 2 timed out")
    failed, timed_out = exporter.get_finished_spans()
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: node full"
    assert [e.name for e in failed.events] == ["exception"]
    assert timed_out.status.description == "shard 2 timed out" and not timed_out.events


def test_service_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "SCHEDMESH_INSTANCE_ID"):
        monkeypatch.delenv(name, raising=False)
    attrs = service_resource("filter-worker-1").attributes
    assert attrs["service.name"] == "filter-worker-1"
    assert attrs["service.namespace"] == "schedmesh"
    assert attrs["service.instance.id"].startswith("filter-worker-1@")
    monkeypatch.setenv("SCHEDMESH_INSTANCE_ID", "fw-1")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "filter-worker")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=other")
    attrs = service_resource("filter-worker-1").attributes
    assert (attrs["service.name"], attrs["service.namespace"], attrs["service.instance.id"]) == (
        "filter-worker", "other", "fw-1")


def test_child_span_only_under_a_recorded_span(spans) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    tracer, exporter = spans
    with tracer.start_as_current_span("root"):
        with child_span(tracer, "child", attributes={"a": 1}) as child:
            assert child.is_recording()
    assert [s.name for s in exporter.get_finished_spans()] == ["child", "root"]
    off = TracerProvider(sampler=ALWAYS_OFF).get_tracer("off")
    with off.start_as_current_span("root") as root:
        assert root.get_span_context().trace_id  # an id all the same
        with child_span(off, "child"):
            assert trace.get_current_span() is root  # no span made


@pytest.mark.parametrize("sampler, flags, recorded", [
    ("parentbased_always_on", "01", True),
    ("parentbased_always_on", "00", False),
    ("always_off", "01", False),
    ("always_on", "00", True),
])
def test_records_under_a_remote_parent(sampler, flags, recorded) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, DEFAULT_ON
    from schedmesh.telemetry import extract_kafka_headers
    provider = TracerProvider(sampler={"parentbased_always_on": DEFAULT_ON, "always_off": ALWAYS_OFF,
                                       "always_on": ALWAYS_ON}[sampler])
    parent = extract_kafka_headers([("traceparent", f"00-{'a' * 32}-{'b' * 16}-{flags}".encode())])
    tracer = provider.get_tracer("t")
    assert records_under(tracer, parent) is recorded
    with tracer.start_as_current_span("s", context=parent) as span:
        assert span.is_recording() is recorded  # what the SDK itself decides
    assert records_under(trace.NoOpTracer(), parent) is False


def test_records_under_no_parent_leaves_it_to_the_sampler() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    assert records_under(TracerProvider().get_tracer("t"), None) is True
    assert records_under(TracerProvider(sampler=ALWAYS_OFF).get_tracer("t"), None) is False
