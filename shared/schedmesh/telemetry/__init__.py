"""OpenTelemetry for schedmesh: tracer set-up and W3C context propagation.

* :func:`setup_tracing` / :func:`shutdown_tracing` - provider from ``OTEL_*`` variables
  (OTLP/gRPC or console exporter, BatchSpanProcessor); a no-op when nothing is set.
* Kafka headers: :func:`inject_kafka_headers`, :func:`extract_kafka_headers`.
* gRPC metadata: :func:`inject_grpc_metadata`, :func:`extract_grpc_metadata`,
  :func:`client_interceptors` (grpc.aio channel) and :func:`server_interceptor` (grpc.aio
  server), from the maintained opentelemetry-instrumentation-grpc.
* Span conventions: :func:`child_span` (a child only of a recorded span), :func:`k8s_attributes`, :func:`set_pod`, :func:`set_node`,
  :func:`set_error` (``k8s.pod.name``, ``k8s.namespace.name``, ``k8s.node.name``; errors
  as span status).
* Logs: :func:`setup_logging` - klog-style text or JSON lines, with the current span's
  trace_id/span_id and the pod passed in ``extra={"pod": ...}`` or set for a whole attempt
  by :func:`pod_context`; :func:`v` is kube's V-level (:mod:`.logs`).
* :mod:`schedmesh.telemetry.metrics` - Prometheus metrics (kube-scheduler's and the
  mesh's), one recording function per event, and the /metrics server. Imported on its
  own: ``from schedmesh.telemetry import metrics``.
* :mod:`schedmesh.telemetry.testing` - an in-process OTLP receiver for tests.
"""

from schedmesh.telemetry.conventions import child_span, k8s_attributes, records_under, set_error, set_node, set_pod
from schedmesh.telemetry.grpc_tracing import client_interceptors, server_interceptor
from schedmesh.telemetry.logs import TraceContextFilter, in_pod_context, pod_context, setup_logging, v
from schedmesh.telemetry.propagation import (
    context_from_traceparent,
    extract_grpc_metadata,
    extract_kafka_headers,
    inject_grpc_metadata,
    inject_kafka_headers,
)
from schedmesh.telemetry.setup import (
    make_tracer_provider,
    service_resource,
    setup_tracing,
    shutdown_tracing,
    tracing_configured,
)

__all__ = [
    "TraceContextFilter",
    "child_span",
    "client_interceptors",
    "context_from_traceparent",
    "extract_grpc_metadata",
    "extract_kafka_headers",
    "in_pod_context",
    "inject_grpc_metadata",
    "inject_kafka_headers",
    "k8s_attributes",
    "make_tracer_provider",
    "pod_context",
    "records_under",
    "server_interceptor",
    "service_resource",
    "set_error",
    "set_node",
    "set_pod",
    "setup_logging",
    "setup_tracing",
    "shutdown_tracing",
    "tracing_configured",
    "v",
]
