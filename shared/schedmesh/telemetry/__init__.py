"""OpenTelemetry for schedmesh: tracer set-up and W3C context propagation.

* :func:`setup_tracing` / :func:`shutdown_tracing` - provider from ``OTEL_*`` variables
  (OTLP/gRPC or console exporter, BatchSpanProcessor); a no-op when nothing is set.
* Kafka headers: :func:`inject_kafka_headers`, :func:`extract_kafka_headers`.
* gRPC metadata: :func:`inject_grpc_metadata`, :func:`extract_grpc_metadata`,
  :func:`client_interceptors` (grpc.aio channel), :class:`TracingServerInterceptor`
  (grpc.aio server) and :func:`server_span` (inside a servicer method).
* :mod:`schedmesh.telemetry.testing` - an in-process OTLP receiver for tests.
"""

from schedmesh.telemetry.grpc_tracing import (
    TracingServerInterceptor,
    TracingStreamStreamClientInterceptor,
    TracingStreamUnaryClientInterceptor,
    TracingUnaryStreamClientInterceptor,
    TracingUnaryUnaryClientInterceptor,
    client_interceptors,
    server_span,
)
from schedmesh.telemetry.propagation import (
    extract_grpc_metadata,
    extract_kafka_headers,
    inject_grpc_metadata,
    inject_kafka_headers,
)
from schedmesh.telemetry.setup import (
    make_tracer_provider,
    setup_tracing,
    shutdown_tracing,
    tracing_configured,
)

__all__ = [
    "TracingServerInterceptor",
    "TracingStreamStreamClientInterceptor",
    "TracingStreamUnaryClientInterceptor",
    "TracingUnaryStreamClientInterceptor",
    "TracingUnaryUnaryClientInterceptor",
    "client_interceptors",
    "extract_grpc_metadata",
    "extract_kafka_headers",
    "inject_grpc_metadata",
    "inject_kafka_headers",
    "make_tracer_provider",
    "server_span",
    "setup_tracing",
    "shutdown_tracing",
    "tracing_configured",
]
