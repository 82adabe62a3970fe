"""W3C trace-context propagation over Kafka record headers and gRPC metadata.

Both carriers are lists of ``(key, value)`` pairs. Injection uses the globally
configured propagator (``OTEL_PROPAGATORS``; by default W3C ``traceparent`` /
``tracestate`` plus ``baggage``) and replaces any header of the same name, so a record
that is re-published does not carry two ``traceparent`` headers. Extraction matches
keys case-insensitively and returns a fresh :class:`~opentelemetry.context.Context`
(not derived from the caller's current context) holding the remote span, ready for
``tracer.start_as_current_span(..., context=ctx)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter

KafkaHeader = tuple[str, bytes]
MetadataPair = tuple[str, str | bytes]


def _as_text(value: str | bytes | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


class _PairGetter(Getter[Sequence[tuple[str, str | bytes | None]]]):
    """Reads a propagation field from a list of (key, value) pairs."""

    def get(self, carrier: Sequence[tuple[str, str | bytes | None]], key: str) -> list[str] | None:
        wanted = key.lower()
        found = [
            text
            for k, v in carrier
            if k.lower() == wanted and (text := _as_text(v)) is not None
        ]
        return found or None

    def keys(self, carrier: Sequence[tuple[str, str | bytes | None]]) -> list[str]:
        return [k for k, _ in carrier]


class _KafkaSetter(Setter[list[KafkaHeader]]):
    def set(self, carrier: list[KafkaHeader], key: str, value: str) -> None:
        carrier[:] = [(k, v) for k, v in carrier if k.lower() != key.lower()]
        carrier.append((key, value.encode("utf-8")))


class _MetadataSetter(Setter[list[MetadataPair]]):
    def set(self, carrier: list[MetadataPair], key: str, value: str) -> None:
        key = key.lower()  # gRPC metadata keys are lower case
        carrier[:] = [(k, v) for k, v in carrier if k.lower() != key]
        carrier.append((key, value))


_GETTER = _PairGetter()
_KAFKA_SETTER = _KafkaSetter()
_METADATA_SETTER = _MetadataSetter()


def inject_kafka_headers(
    headers: Iterable[KafkaHeader] | None = None, *, context: Context | None = None
) -> list[KafkaHeader]:
    """Return ``headers`` plus the trace context of ``context`` (default: current)."""
    carrier: list[KafkaHeader] = list(headers or ())
    propagate.inject(carrier, context=context, setter=_KAFKA_SETTER)
    return carrier


def extract_kafka_headers(
    headers: Iterable[tuple[str, bytes | None]] | None, *, context: Context | None = None
) -> Context:
    """The trace context carried by Kafka record ``headers`` (on top of ``context``)."""
    return propagate.extract(list(headers or ()), context=context or Context(), getter=_GETTER)


def context_from_traceparent(traceparent: str) -> Context:
    """The context of the remote span a W3C ``traceparent`` field names (BindRequest.traceparent,
    PodRecord.traceparent: always W3C, whatever ``OTEL_PROPAGATORS`` says), parsed directly: the
    propagators' extraction, per pod in the binder and the kubelet agent, was a tenth of their
    CPU. An empty or malformed value gives an empty context, as extraction would."""
    span = _remote_span(traceparent)
    return trace.set_span_in_context(span, Context()) if span is not None else Context()


# the W3C format as OpenTelemetry's TraceContextTextMapPropagator reads it
_TRACEPARENT = re.compile(r"^\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*$")


def _remote_span(traceparent: str) -> trace.NonRecordingSpan | None:
    match = _TRACEPARENT.match(traceparent)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    context = trace.SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                                trace_flags=trace.TraceFlags(int(flags, 16)))
    return trace.NonRecordingSpan(context) if context.is_valid else None


def inject_grpc_metadata(
    metadata: Iterable[MetadataPair] | None = None, *, context: Context | None = None
) -> list[MetadataPair]:
    """Return gRPC ``metadata`` plus the trace context of ``context`` (default: current)."""
    carrier: list[MetadataPair] = list(metadata or ())
    propagate.inject(carrier, context=context, setter=_METADATA_SETTER)
    return carrier


def extract_grpc_metadata(
    metadata: Iterable[tuple[str, str | bytes]] | None, *, context: Context | None = None
) -> Context:
    """The trace context carried by gRPC invocation ``metadata``."""
    return propagate.extract(list(metadata or ()), context=context or Context(), getter=_GETTER)


def traceparent_of(span) -> str:
    """The W3C traceparent naming ``span`` ("" for an invalid span), for the fields that carry
    one (BindRequest.traceparent, PodRecord.traceparent): formatted directly, not through the
    propagator and a carrier (a tenth of the queue-manager's work outside the cycle per pod)."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
