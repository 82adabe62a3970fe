"""Tests of schedmesh.telemetry against a real in-process OTLP/gRPC receiver."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from schedmesh.telemetry import (
    client_interceptors,
    extract_grpc_metadata,
    extract_kafka_headers,
    inject_grpc_metadata,
    inject_kafka_headers,
    make_tracer_provider,
    server_interceptor,
    setup_tracing,
    tracing_configured,
)
from schedmesh.telemetry.testing import OtlpTraceReceiver, ReceivedSpan

pytestmark = pytest.mark.timeout(60)

_OTEL_VARS = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
)


@pytest.fixture
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def receiver():
    with OtlpTraceReceiver() as rcv:
        yield rcv


def _hex_ids(span: trace.Span) -> tuple[str, str]:
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


# ---------------------------------------------------------------- propagation helpers
def test_kafka_headers_roundtrip() -> None:
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("root") as root:
        headers = inject_kafka_headers([("traceparent", b"stale"), ("x-app", b"1")])
    names = [k for k, _ in headers]
    assert names.count("traceparent") == 1 and "x-app" in names
    assert all(isinstance(v, bytes) for _, v in headers)
    remote = trace.get_current_span(extract_kafka_headers(headers)).get_span_context()
    assert remote.is_remote
    assert (remote.trace_id, remote.span_id) == (
        root.get_span_context().trace_id,
        root.get_span_context().span_id,
    )


def test_traceparent_of_is_what_the_propagator_injects() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    from schedmesh.telemetry.propagation import traceparent_of
    for provider in (TracerProvider(), TracerProvider(sampler=ALWAYS_OFF)):  # sampled flag 01, then 00
        span = provider.get_tracer("t").start_span("root")
        injected = dict(inject_kafka_headers([], context=trace.set_span_in_context(span)))["traceparent"].decode()
        assert traceparent_of(span) == injected
    assert traceparent_of(trace.INVALID_SPAN) == ""


@pytest.mark.parametrize("traceparent", [
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
    " 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 ",
    "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future",  # a later version may add fields
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # version 00 may not
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",
    "garbage", "",
])
def test_context_from_traceparent_is_what_extraction_gives(traceparent: str) -> None:
    from schedmesh.telemetry import context_from_traceparent
    direct = trace.get_current_span(context_from_traceparent(traceparent)).get_span_context()
    extracted = trace.get_current_span(extract_kafka_headers([("traceparent", traceparent.encode())])).get_span_context()
    assert (direct.is_valid, direct.trace_id, direct.span_id, direct.trace_flags, direct.is_remote) == \
        (extracted.is_valid, extracted.trace_id, extracted.span_id, extracted.trace_flags, extracted.is_remote)


def test_extract_without_headers_is_empty_context() -> None:
    for carrier in (None, [], [("x-app", b"1")], [("traceparent", b"garbage")]):
        ctx = extract_kafka_headers(carrier)
        assert not trace.get_current_span(ctx).get_span_context().is_valid


def test_grpc_metadata_roundtrip_case_insensitive() -> None:
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("root") as root:
        metadata = inject_grpc_metadata([("x-request-id", "42")])
    assert ("x-request-id", "42") in metadata
    assert all(k == k.lower() for k, _ in metadata)
    shouted = [(k.upper(), v) for k, v in metadata]
    remote = trace.get_current_span(extract_grpc_metadata(shouted)).get_span_context()
    assert remote.trace_id == root.get_span_context().trace_id


# ---------------------------------------------------------------- setup_tracing
def test_setup_tracing_without_configuration_traces_but_exports_nothing(clean_otel_env: None) -> None:
    assert not tracing_configured()
    provider = setup_tracing("svc", set_global=False)
    assert provider is not None  # spans (and trace ids) exist, nothing is exported
    with provider.get_tracer("t").start_as_current_span("s") as span:
        assert span.get_span_context().is_valid


def test_setup_tracing_none_exporter_and_disabled(
    clean_otel_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    assert tracing_configured()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert not tracing_configured()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert setup_tracing("svc", set_global=False) is None


def test_service_name_from_env_overrides_argument(
    clean_otel_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert make_tracer_provider("arg-name", []).resource.attributes["service.name"] == "arg-name"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "env-name")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    attrs = make_tracer_provider("arg-name", []).resource.attributes
    assert attrs["service.name"] == "env-name"
    assert attrs["deployment.environment"] == "test"


def test_setup_tracing_exports_over_otlp_from_env(receiver: OtlpTraceReceiver) -> None:
    """A separate process configured only by OTEL_* variables exports to the receiver;
    shutdown_tracing flushes the batch processor."""
    code = textwrap.dedent(
        """
        from opentelemetry import trace
        from schedmesh.telemetry import setup_tracing, shutdown_tracing
        assert setup_tracing("env-test-svc") is not None
        assert setup_tracing("again") is trace.get_tracer_provider()  # idempotent
        tracer = trace.get_tracer("test")
        with tracer.start_as_current_span("outer"):
            with tracer.start_as_current_span("inner"):
                pass
        shutdown_tracing()
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in _OTEL_VARS}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    env["OTEL_RESOURCE_ATTRIBUTES"] = "service.namespace=schedmesh"
    env["OTEL_BSP_SCHEDULE_DELAY"] = "60000"  # only the flush in shutdown_tracing sends
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    spans = receiver.wait_for(names=["outer", "inner"], timeout=5)
    outer = next(s for s in spans if s.name == "outer")
    inner = next(s for s in spans if s.name == "inner")
    assert outer.service_name == "env-test-svc"
    assert outer.resource["service.namespace"] == "schedmesh"
    assert inner.trace_id == outer.trace_id
    assert inner.parent_span_id == outer.span_id
    assert outer.parent_span_id is None


# ---------------------------------------------------------------- gRPC interceptors
# (opentelemetry-instrumentation-grpc, as every service's server and aio channels use it)
_SERVICE = "test.v1.Echo"


def _echo_handlers(provider: TracerProvider) -> grpc.GenericRpcHandler:
    tracer = provider.get_tracer("test")

    async def say(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        with tracer.start_as_current_span("say.work"):
            return b"echo:" + request

    async def fail(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "binder away")
        raise AssertionError("unreachable")

    async def crash(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise RuntimeError("boom")

    async def count(request: bytes, context: grpc.aio.ServicerContext):
        for i in range(int(request)):
            with tracer.start_as_current_span("count.item"):
                yield str(i).encode()

    return grpc.method_handlers_generic_handler(
        _SERVICE,
        {
            "Say": grpc.unary_unary_rpc_method_handler(say),
            "Fail": grpc.unary_unary_rpc_method_handler(fail),
            "Crash": grpc.unary_unary_rpc_method_handler(crash),
            "Count": grpc.unary_stream_rpc_method_handler(count),
        },
    )


async def test_grpc_spans_arrive_with_parent_links(
    receiver: OtlpTraceReceiver, clean_otel_env: None
) -> None:
    client_provider = make_tracer_provider(
        "test-client", [OTLPSpanExporter(endpoint=receiver.endpoint)]
    )
    server_provider = make_tracer_provider(
        "test-server", [OTLPSpanExporter(endpoint=receiver.endpoint)]
    )
    server = grpc.aio.server(interceptors=[server_interceptor(server_provider)])
    server.add_generic_rpc_handlers((_echo_handlers(server_provider),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        channel = grpc.aio.insecure_channel(
            f"127.0.0.1:{port}", interceptors=client_interceptors(client_provider)
        )
        async with channel:
            tracer = client_provider.get_tracer("test")
            with tracer.start_as_current_span("cycle") as root:
                assert await channel.unary_unary(f"/{_SERVICE}/Say")(b"hi") == b"echo:hi"
                with pytest.raises(grpc.aio.AioRpcError) as away:
                    await channel.unary_unary(f"/{_SERVICE}/Fail")(b"x")
                assert away.value.code() is grpc.StatusCode.UNAVAILABLE
                with pytest.raises(grpc.aio.AioRpcError) as crashed:
                    await channel.unary_unary(f"/{_SERVICE}/Crash")(b"x")
                assert crashed.value.code() is grpc.StatusCode.UNKNOWN
                items = [m async for m in channel.unary_stream(f"/{_SERVICE}/Count")(b"3")]
                assert items == [b"0", b"1", b"2"]
                await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        trace_id, root_id = _hex_ids(root)
    finally:
        await server.stop(None)
    client_provider.force_flush()
    server_provider.force_flush()

    methods = ("Say", "Fail", "Crash", "Count")

    def complete(spans: list[ReceivedSpan]) -> bool:
        kinds = {(s.name, s.kind) for s in spans}
        return all(
            (f"/{_SERVICE}/{m}", kind) in kinds for m in methods for kind in (SpanKind.CLIENT, SpanKind.SERVER)
        ) and {"say.work", "count.item", "cycle"} <= {s.name for s in spans}

    spans = receiver.wait_for(complete, timeout=10)
    assert {s.trace_id for s in spans} == {trace_id}, "one trace across client and server"
    assert not [s for s in spans if "Health" in s.name], "health checks are not traced"

    def one(name: str, kind: SpanKind) -> ReceivedSpan:
        [span] = [s for s in spans if s.name == name and s.kind == kind]
        return span

    for method in methods:
        client = one(f"/{_SERVICE}/{method}", SpanKind.CLIENT)
        server_side = one(f"/{_SERVICE}/{method}", SpanKind.SERVER)
        assert client.parent_span_id == root_id
        assert client.service_name == "test-client"
        assert server_side.parent_span_id == client.span_id, method
        assert server_side.service_name == "test-server"
        for side in (client, server_side):
            assert side.attributes["rpc.system"] == "grpc"
            assert side.attributes["rpc.service"] == _SERVICE
            assert side.attributes["rpc.method"] == method

    say_server = one(f"/{_SERVICE}/Say", SpanKind.SERVER)
    [work] = [s for s in spans if s.name == "say.work"]
    assert work.parent_span_id == say_server.span_id
    count_server = one(f"/{_SERVICE}/Count", SpanKind.SERVER)
    assert {s.parent_span_id for s in spans if s.name == "count.item"} == {count_server.span_id}

    # status codes: errors as span status on both sides
    assert one(f"/{_SERVICE}/Say", SpanKind.CLIENT).status_code == "UNSET"
    assert one(f"/{_SERVICE}/Say", SpanKind.SERVER).attributes["rpc.grpc.status_code"] == 0
    for side in (SpanKind.CLIENT, SpanKind.SERVER):
        failed = one(f"/{_SERVICE}/Fail", side)
        assert failed.status_code == "ERROR", side
        assert failed.attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNAVAILABLE.value[0]
    # an uncaught exception: UNKNOWN to the caller (the instrumentation's server span records the
    # exception as an event; the mesh's servicers abort with a code instead of raising)
    crash_client = one(f"/{_SERVICE}/Crash", SpanKind.CLIENT)
    assert crash_client.status_code == "ERROR"
    assert crash_client.attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNKNOWN.value[0]

    client_provider.shutdown()
    server_provider.shutdown()
