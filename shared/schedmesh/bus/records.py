"""Typed records of the event bus (values are opaque bytes)."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.context import Context

from schedmesh.telemetry.propagation import extract_kafka_headers


@dataclass(frozen=True, slots=True)
class Record:
    """One consumed Kafka record.

    ``context`` is the OpenTelemetry context carried in the ``traceparent`` /
    ``tracestate`` headers (empty when there were none); start the handling span with
    ``tracer.start_as_current_span(name, context=record.context)``. ``epoch`` is the
    consumer's restart count when the record was read: records of a higher epoch
    come from a broker that was restarted (and lost everything before).
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int = 0
    epoch: int = 0

    @property
    def context(self) -> Context:
        # Made when asked, not for every record: most readers (the cache followers) never ask,
        # and extracting took 3 % of the binder's CPU.
        return extract_kafka_headers(self.headers)

    @property
    def key_str(self) -> str | None:
        return self.key.decode("utf-8") if self.key is not None else None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None

    def header(self, name: str) -> bytes | None:
        """The last value of header ``name`` (case-sensitive), or None."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found


@dataclass(frozen=True, slots=True)
class Sent:
    """Where a produced record was stored."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
