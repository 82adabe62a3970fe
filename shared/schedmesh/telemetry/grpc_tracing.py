"""Tracing interceptors for ``grpc.aio``: a CLIENT span per call whose W3C context is
sent in the call metadata, and a SERVER span per handled call, child of that context.

Client side::

    channel = grpc.aio.insecure_channel(target, interceptors=client_interceptors())

(grpc.aio files each interceptor under one call type only, so there is one class per
type; :func:`client_interceptors` returns all four.)

Server side::

    server = grpc.aio.server(interceptors=[TracingServerInterceptor()])

or, without the interceptor, inside a servicer method::

    with server_span(context, "schedmesh.v1.Binder/Bind"):
        ...

Span names follow the OpenTelemetry RPC conventions (``package.Service/Method``) with
``rpc.system``, ``rpc.service``, ``rpc.method`` and ``rpc.grpc.status_code``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from schedmesh.telemetry.propagation import extract_grpc_metadata, inject_grpc_metadata

_TRACER_NAME = "schedmesh.telemetry.grpc"

# Codes that make a *server* span an error (OpenTelemetry RPC semantic conventions);
# on the client every non-OK code is an error.
_SERVER_ERROR_CODES = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def _method_name(method: str | bytes) -> str:
    return method.decode() if isinstance(method, bytes) else method


def _rpc_attributes(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


def _set_status(span: Span, code: grpc.StatusCode | None, details: str | None, *, server: bool) -> None:
    code = code or grpc.StatusCode.OK
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    failed = code in _SERVER_ERROR_CODES if server else code is not grpc.StatusCode.OK
    if failed:
        span.set_status(Status(StatusCode.ERROR, f"{code.name}: {details or ''}".rstrip(": ")))


# --------------------------------------------------------------------------- client
class _ClientTracing:
    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)
        self._pending: set[asyncio.Task[None]] = set()

    def _start(self, details: grpc.aio.ClientCallDetails) -> tuple[Span, grpc.aio.ClientCallDetails]:
        method = _method_name(details.method)
        span = self._tracer.start_span(
            method.lstrip("/"), kind=SpanKind.CLIENT, attributes=_rpc_attributes(method)
        )
        pairs = inject_grpc_metadata(details.metadata or (), context=trace.set_span_in_context(span))
        new_details = grpc.aio.ClientCallDetails(
            method=details.method,
            timeout=details.timeout,
            metadata=grpc.aio.Metadata(*pairs),
            credentials=details.credentials,
            wait_for_ready=details.wait_for_ready,
        )
        return span, new_details

    @staticmethod
    def _fail(span: Span, exc: BaseException) -> None:
        if isinstance(exc, asyncio.CancelledError):
            _set_status(span, grpc.StatusCode.CANCELLED, "cancelled", server=False)
        else:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, repr(exc)))
        span.end()

    def _end_when_done(self, span: Span, call: Any) -> None:
        """End ``span`` when a streaming ``call`` finishes (its status is async to read)."""

        async def finish(done_call: Any) -> None:
            try:
                code = await done_call.code()
                details = await done_call.details()
            except Exception:  # noqa: BLE001 - the call is gone; report what we can
                code, details = grpc.StatusCode.UNKNOWN, "status unavailable"
            _set_status(span, code, details, server=False)
            span.end()

        def on_done(done_call: Any) -> None:
            task = asyncio.get_running_loop().create_task(finish(done_call))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

        call.add_done_callback(on_done)

    async def _streaming(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        span, details = self._start(details)
        try:
            call = await continuation(details, request)
        except BaseException as exc:
            self._fail(span, exc)
            raise
        self._end_when_done(span, call)
        return call


class TracingUnaryUnaryClientInterceptor(_ClientTracing, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        span, details = self._start(client_call_details)
        try:
            call = await continuation(details, request)
            try:
                await call
            except grpc.aio.AioRpcError as err:
                _set_status(span, err.code(), err.details(), server=False)
            else:
                _set_status(span, await call.code(), None, server=False)
        except BaseException as exc:
            self._fail(span, exc)
            raise
        span.end()
        return call


class TracingUnaryStreamClientInterceptor(_ClientTracing, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await self._streaming(continuation, client_call_details, request)


class TracingStreamUnaryClientInterceptor(_ClientTracing, grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await self._streaming(continuation, client_call_details, request_iterator)


class TracingStreamStreamClientInterceptor(_ClientTracing, grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await self._streaming(continuation, client_call_details, request_iterator)


def client_interceptors(tracer_provider: TracerProvider | None = None) -> list[grpc.aio.ClientInterceptor]:
    """One tracing interceptor per call type, for ``grpc.aio.*_channel(interceptors=...)``."""
    return [
        TracingUnaryUnaryClientInterceptor(tracer_provider),
        TracingUnaryStreamClientInterceptor(tracer_provider),
        TracingStreamUnaryClientInterceptor(tracer_provider),
        TracingStreamStreamClientInterceptor(tracer_provider),
    ]


# --------------------------------------------------------------------------- server
@contextlib.contextmanager
def _server_span_for(
    tracer: trace.Tracer, method: str, parent: Context, servicer_context: Any
) -> Iterator[Span]:
    with tracer.start_as_current_span(
        method.lstrip("/"),
        context=parent,
        kind=SpanKind.SERVER,
        attributes=_rpc_attributes(method),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except asyncio.CancelledError:
            _set_status(span, grpc.StatusCode.CANCELLED, "cancelled", server=True)
            raise
        except Exception as exc:
            code = _context_code(servicer_context)
            if code is None or code is grpc.StatusCode.OK:
                # an unhandled exception: grpc answers UNKNOWN
                span.record_exception(exc)
                _set_status(span, grpc.StatusCode.UNKNOWN, repr(exc), server=True)
            else:  # context.abort(code, details)
                _set_status(span, code, _context_details(servicer_context), server=True)
            raise
        _set_status(span, _context_code(servicer_context), _context_details(servicer_context), server=True)


def _context_code(servicer_context: Any) -> grpc.StatusCode | None:
    try:
        code = servicer_context.code()
    except Exception:  # noqa: BLE001 - older/other contexts
        return None
    return code if isinstance(code, grpc.StatusCode) else None


def _context_details(servicer_context: Any) -> str | None:
    try:
        details = servicer_context.details()
    except Exception:  # noqa: BLE001
        return None
    return _method_name(details) if details else None


@contextlib.contextmanager
def server_span(
    servicer_context: Any, name: str, *, tracer_provider: TracerProvider | None = None
) -> Iterator[Span]:
    """A SERVER span named ``name`` (e.g. ``"/pkg.Svc/Method"``), child of the caller's
    trace context from the call metadata; current for the duration of the block."""
    tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)
    parent = extract_grpc_metadata(servicer_context.invocation_metadata())
    with _server_span_for(tracer, name, parent, servicer_context) as span:
        yield span


def _wrap_behavior(behavior: Callable[..., Any], open_span: Callable[[Any], Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behavior):

        async def agen(request: Any, context: Any) -> Any:
            with open_span(context):
                async for item in behavior(request, context):
                    yield item

        return agen
    if inspect.iscoroutinefunction(behavior):

        async def coro(request: Any, context: Any) -> Any:
            with open_span(context):
                return await behavior(request, context)

        return coro
    if inspect.isgeneratorfunction(behavior):

        def gen(request: Any, context: Any) -> Any:
            with open_span(context):
                yield from behavior(request, context)

        return gen

    def plain(request: Any, context: Any) -> Any:
        with open_span(context):
            return behavior(request, context)

    return plain


class TracingServerInterceptor(grpc.aio.ServerInterceptor):
    """Starts a SERVER span around every handled call, child of the caller's context."""

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = _method_name(handler_call_details.method)
        parent = extract_grpc_metadata(handler_call_details.invocation_metadata)
        tracer = self._tracer

        def open_span(context: Any) -> Any:
            return _server_span_for(tracer, method, parent, context)

        codecs = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_behavior(handler.unary_unary, open_span), **codecs
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_behavior(handler.unary_stream, open_span), **codecs
            )
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_behavior(handler.stream_unary, open_span), **codecs
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _wrap_behavior(handler.stream_stream, open_span), **codecs
            )
        return handler
