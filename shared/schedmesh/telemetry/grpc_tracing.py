"""gRPC tracing through the maintained OpenTelemetry instrumentation
(opentelemetry-instrumentation-grpc): a SERVER span per handled call, child of the caller's W3C
context read from the call metadata, and for ``grpc.aio`` channels a CLIENT span per call that
sends its context along. Health checks (probed every second by supervisors and kubelets) are
not traced.

Server side (every service's ServiceProcess does this)::

    server = grpc.aio.server(interceptors=[server_interceptor()])

Client side::

    channel = grpc.aio.insecure_channel(target, interceptors=client_interceptors())

Synchronous callers that run a scheduling cycle on a worker thread put the cycle's context in
the call metadata themselves (:func:`schedmesh.telemetry.inject_grpc_metadata`): the server span
is then a child of the cycle's span.

Spans are named after the full method (``/schedmesh.v1.Binder/Bind``) and carry rpc.system,
rpc.service, rpc.method and rpc.grpc.status_code.
"""

from __future__ import annotations

from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor
from opentelemetry.instrumentation.grpc.filters import any_of, full_method_name, negate, service_name
from opentelemetry.trace import TracerProvider

HEALTH_SERVICE = "grpc.health.v1.Health"
_NOT_HEALTH = negate(service_name(HEALTH_SERVICE))
#: Long-lived streams whose handlers trace each message in the caller's trace (a span per stream
#: would last as long as the stream: hours, one per queue-manager and shard).
TRACED_PER_MESSAGE = ("/schedmesh.v1.FilterWorker/FilterBatches", "/schedmesh.v1.ScoreWorker/ScoreBatches")
_TRACED_PER_CALL = negate(any_of(service_name(HEALTH_SERVICE), *map(full_method_name, TRACED_PER_MESSAGE)))


def server_interceptor(tracer_provider: TracerProvider | None = None):
    """The instrumentation's grpc.aio server interceptor, health checks and the streams traced
    per message left out."""
    return aio_server_interceptor(tracer_provider=tracer_provider, filter_=_TRACED_PER_CALL)


def client_interceptors(tracer_provider: TracerProvider | None = None) -> list:
    """The instrumentation's grpc.aio client interceptors (one per call type)."""
    return aio_client_interceptors(tracer_provider=tracer_provider, filter_=_NOT_HEALTH)
