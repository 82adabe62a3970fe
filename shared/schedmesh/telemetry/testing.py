"""An in-process OTLP/gRPC trace receiver for tests.

:class:`OtlpTraceReceiver` is a real gRPC server implementing
``opentelemetry.proto.collector.trace.v1.TraceService``: point any OTLP/gRPC exporter
(``OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint``, also from other processes) at it and
assert on the spans that arrive::

    with OtlpTraceReceiver() as receiver:
        ...  # run code exporting to receiver.endpoint
        spans = receiver.wait_for(names=["/schedmesh.v1.Binder/Bind"])
        assert spans[0].parent_span_id == client_span.span_id

It runs on its own threads (a synchronous ``grpc.server``), so it keeps receiving
while the test blocks (``subprocess.run``) or runs an event loop. ``await_spans`` is the
non-blocking variant for async tests. ``python -m schedmesh.telemetry.testing --port
4317`` runs it standalone and prints one line per span.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Self

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.trace import SpanKind

_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def _any_value(value: common_pb2.AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which)


def _attributes(pairs: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in pairs}


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One span as decoded from an OTLP export request (ids as lower-case hex)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKind
    service_name: str | None
    scope_name: str
    status_code: str  # "UNSET" | "OK" | "ERROR"
    status_message: str
    start_time_ns: int
    end_time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)


def _decode(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    out: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        # proto: 0 unspecified, 1 internal, 2 server ...; API enum: INTERNAL=0
                        kind=SpanKind(max(span.kind - 1, 0)),
                        service_name=resource.get("service.name"),
                        scope_name=scope_spans.scope.name,
                        status_code=_STATUS.get(span.status.code, str(span.status.code)),
                        status_message=span.status.message,
                        start_time_ns=span.start_time_unix_nano,
                        end_time_ns=span.end_time_unix_nano,
                        attributes=_attributes(span.attributes),
                        resource=resource,
                    )
                )
    return out


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: Callable[[list[ReceivedSpan]], None]) -> None:
        self._sink = sink

    def Export(  # noqa: N802 - gRPC method name
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self._sink(_decode(request))
        return trace_service_pb2.ExportTraceServiceResponse()


class OtlpTraceReceiver:
    """Collects spans exported over OTLP/gRPC to ``endpoint`` (plaintext)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, max_workers: int = 4) -> None:
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._spans: list[ReceivedSpan] = []
        self._requests = 0
        self._cond = threading.Condition()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Self:
        if self._server is not None:
            return self
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._max_workers))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self._add), server)
        self._port = server.add_insecure_port(f"{self._host}:{self._requested_port}")
        if not self._port:
            raise RuntimeError(f"cannot bind OTLP receiver on {self._host}:{self._requested_port}")
        server.start()
        self._server = server
        return self

    def stop(self, grace: float | None = None) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- addresses
    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("receiver not started")
        return self._port

    @property
    def address(self) -> str:
        """``host:port``."""
        return f"{self._host}:{self.port}"

    @property
    def endpoint(self) -> str:
        """``http://host:port``: the value for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
        return f"http://{self.address}"

    # ---------------------------------------------------------------- spans
    def _add(self, spans: list[ReceivedSpan]) -> None:
        with self._cond:
            self._requests += 1
            self._spans.extend(spans)
            self._cond.notify_all()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._cond:
            return list(self._spans)

    @property
    def export_requests(self) -> int:
        with self._cond:
            return self._requests

    def clear(self) -> None:
        with self._cond:
            self._spans.clear()

    def by_name(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    def in_trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]

    @staticmethod
    def _satisfied(
        spans: list[ReceivedSpan],
        predicate: Callable[[list[ReceivedSpan]], bool] | None,
        count: int | None,
        names: Iterable[str],
    ) -> bool:
        if count is not None and len(spans) < count:
            return False
        present = {s.name for s in spans}
        if any(name not in present for name in names):
            return False
        return predicate(spans) if predicate is not None else True

    def wait_for(
        self,
        predicate: Callable[[list[ReceivedSpan]], bool] | None = None,
        *,
        count: int | None = None,
        names: Iterable[str] = (),
        timeout: float = 10.0,
    ) -> list[ReceivedSpan]:
        """Block until the spans received so far satisfy every condition; return them."""
        wanted = list(names)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._satisfied(self._spans, predicate, count, wanted):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(self._timeout_message(count, wanted))
                self._cond.wait(remaining)
            return list(self._spans)

    async def await_spans(
        self,
        predicate: Callable[[list[ReceivedSpan]], bool] | None = None,
        *,
        count: int | None = None,
        names: Iterable[str] = (),
        timeout: float = 10.0,
    ) -> list[ReceivedSpan]:
        """:meth:`wait_for` for async tests: polls without blocking the event loop."""
        wanted = list(names)
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans
            if self._satisfied(spans, predicate, count, wanted):
                return spans
            if time.monotonic() > deadline:
                raise TimeoutError(self._timeout_message(count, wanted))
            await asyncio.sleep(0.02)

    def _timeout_message(self, count: int | None, names: list[str]) -> str:
        got = sorted({s.name for s in self._spans})
        return f"spans not received (count={count}, names={names}); have {len(self._spans)}: {got}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m schedmesh.telemetry.testing")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4317)
    args = parser.parse_args(argv)
    printed = 0
    with OtlpTraceReceiver(args.host, args.port) as receiver:
        print(f"OTLP/gRPC receiver on {receiver.endpoint}", flush=True)
        try:
            while True:
                spans = receiver.wait_for(count=printed + 1, timeout=3600)
                for span in spans[printed:]:
                    parent = span.parent_span_id or "-"
                    print(
                        f"{span.service_name} {span.trace_id} {span.span_id} <- {parent} "
                        f"{span.kind.name} {span.name} {span.status_code}",
                        flush=True,
                    )
                printed = len(spans)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
