"""Server interceptors: who may call what (the peer certificate's identity) and the Scheduler
API's bearer token. Refusals carry a message that says what was wrong."""
from __future__ import annotations

import hmac
import logging
from typing import Awaitable, Callable, Mapping, Optional

import grpc

from schedmesh.security.identity import ALLOWED_CALLERS, caller_allowed

log = logging.getLogger("schedmesh.security")

#: The user-facing APIs (served by the queue-manager) the token protects.
SCHEDULER_API = "schedmesh.v1.Scheduler"
POLICY_API = "schedmesh.v1.Policy"
USER_FACING_APIS = (SCHEDULER_API, POLICY_API)


def peer_identity(context) -> Optional[str]:
    """The common name of the caller's verified TLS certificate; None over plaintext."""
    ctx = context.auth_context() or {}
    names = ctx.get("x509_common_name") or []
    return names[0].decode() if names else None


def _service_of(method: str) -> str:
    return method.lstrip("/").split("/", 1)[0]


# a handler's kinds: the attribute holding its method, the factory, whether it answers with a stream
_HANDLER_KINDS = (("unary_unary", grpc.unary_unary_rpc_method_handler, False),
                  ("unary_stream", grpc.unary_stream_rpc_method_handler, True),
                  ("stream_unary", grpc.stream_unary_rpc_method_handler, False),
                  ("stream_stream", grpc.stream_stream_rpc_method_handler, True))


def _checked(inner, check: Callable[[object], Awaitable[None]], streams_answers: bool):
    if streams_answers:
        async def method(request, context):  # (`request`: a message, or the iterator of a stream's)
            await check(context)
            async for item in inner(request, context):
                yield item
        return method

    async def method(request, context):
        await check(context)
        return await inner(request, context)
    return method


def with_check(handler: grpc.RpcMethodHandler, check: Callable[[object], Awaitable[None]]) -> grpc.RpcMethodHandler:
    """The same handler, running `check(context)` (which aborts to refuse) before the method; for
    a streaming request, once, when the stream opens."""
    for kind, make_handler, streams_answers in _HANDLER_KINDS:
        inner = getattr(handler, kind)
        if inner is not None:
            return make_handler(_checked(inner, check, streams_answers), handler.request_deserializer,
                                handler.response_serializer)
    return handler


def _refuse(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def abort(request, context):
        await context.abort(code, message)
    return grpc.unary_unary_rpc_method_handler(abort, lambda b: b, lambda b: b)


class CallerIdentityInterceptor(grpc.aio.ServerInterceptor):
    """PERMISSION_DENIED for a method of a restricted service (identity.ALLOWED_CALLERS) whose
    caller's certificate names another identity. Over plaintext (`up --insecure`, loopback only)
    there is no identity: the check is skipped there, and `tls_required` makes it refuse instead."""

    def __init__(self, rules: Mapping[str, frozenset[str]] = ALLOWED_CALLERS, tls_required: bool = True) -> None:
        self.rules, self.tls_required = dict(rules), tls_required

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or _service_of(method) not in self.rules:
            return handler

        async def check(context) -> None:
            identity = peer_identity(context)
            if identity is None and not self.tls_required:
                return
            why = caller_allowed(method, identity, self.rules)
            if why is not None:
                log.warning("refused %s from %s: %s", method, context.peer(), why)
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        return with_check(handler, check)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for a call to `services` without `authorization: Bearer <token>`; the
    token is compared in constant time."""

    def __init__(self, token: str, services: tuple[str, ...] = USER_FACING_APIS) -> None:
        if not token:
            raise ValueError("BearerTokenInterceptor needs a non-empty token")
        self._expected = f"Bearer {token}".encode()
        self.services = services

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method
        if _service_of(method) not in self.services:
            return await continuation(handler_call_details)
        given = [v for k, v in (handler_call_details.invocation_metadata or ()) if k == "authorization"]
        if not given:
            return _refuse(grpc.StatusCode.UNAUTHENTICATED,
                           f"{method} needs an API token: send `authorization: Bearer <token>` "
                           "(schedmesh --token, or the token file of the mesh)")
        value = given[0].encode() if isinstance(given[0], str) else bytes(given[0])
        if len(given) > 1 or not hmac.compare_digest(value, self._expected):
            return _refuse(grpc.StatusCode.UNAUTHENTICATED, f"{method}: the API token is not valid")
        return await continuation(handler_call_details)


class TokenClientInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Adds the `authorization` metadata to every unary call of a (blocking) channel."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self.metadata = list(metadata)

    def intercept_unary_unary(self, continuation, client_call_details, request):
        md = [kv for kv in (client_call_details.metadata or ()) if kv[0] != "authorization"] + self.metadata
        return continuation(client_call_details._replace(metadata=md), request)
