"""ServingGate: a service's calls are refused with UNAVAILABLE until it serves (its caches read),
and again once it stops serving; health checks always pass through. A real gRPC server on
loopback and a real client."""
from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedmesh.mesh.runtime import ServiceProcess

ECHO = "/schedmesh.test.Echo/Say"


@pytest.fixture(autouse=True)
def _plaintext_loopback(monkeypatch):
    for k in ("SCHEDMESH_TLS_CA", "SCHEDMESH_TLS_CERT", "SCHEDMESH_TLS_KEY", "SCHEDMESH_API_TOKEN",
              "SCHEDMESH_API_TOKEN_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SCHEDMESH_METRICS_PORT", "-1")


async def _echo(request: bytes, context) -> bytes:
    return request


def test_calls_wait_for_serving_and_health_checks_do_not() -> None:
    async def run() -> None:
        proc = ServiceProcess("echo-service", 0, host="127.0.0.1")
        proc.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "schedmesh.test.Echo", {"Say": grpc.unary_unary_rpc_method_handler(_echo, lambda b: b, lambda b: b)}),))
        await proc.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{proc.port}") as ch:
                say = ch.unary_unary(ECHO, request_serializer=lambda b: b, response_deserializer=lambda b: b)
                health = health_pb2_grpc.HealthStub(ch)

                async def refused() -> str:
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await say(b"hi", timeout=5)
                    assert e.value.code() is grpc.StatusCode.UNAVAILABLE
                    return e.value.details()

                # started, caches not read yet: refused, and the health check says so
                assert "echo-service is not serving: starting" in await refused()
                status = (await health.Check(health_pb2.HealthCheckRequest(), timeout=5)).status
                assert status == health_pb2.HealthCheckResponse.NOT_SERVING
                await proc.set_serving(True)
                assert await say(b"hi", timeout=5) == b"hi"
                # a sub-service's status leaves the process's calls alone
                await proc.set_serving(False, service="schedmesh.test.Echo")
                assert await say(b"still", timeout=5) == b"still"
                await proc.set_serving(False)  # stopping
                await refused()
                assert (await health.Check(health_pb2.HealthCheckRequest(), timeout=5)).status == \
                    health_pb2.HealthCheckResponse.NOT_SERVING
        finally:
            await proc.server.stop(0)

    asyncio.run(run())


async def _echo_stream(requests, context):
    async for request in requests:
        yield request


def _with_echo_stream(server) -> None:
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("schedmesh.test.Echo", {
        "Chat": grpc.stream_stream_rpc_method_handler(_echo_stream, lambda b: b, lambda b: b)}),))


async def _chat(port: int, messages: list[bytes]) -> list[bytes]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        chat = ch.stream_stream("/schedmesh.test.Echo/Chat", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
        # (milliseconds on an idle host; under the suite's load a 5 s deadline ran out once)
        return [answer async for answer in chat(iter(messages), timeout=30)]


def test_streams_are_gated_as_calls_are() -> None:
    async def run() -> None:
        proc = ServiceProcess("echo-service", 0, host="127.0.0.1")
        _with_echo_stream(proc.server)
        await proc.start()
        try:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await _chat(proc.port, [b"hi"])
            assert e.value.code() is grpc.StatusCode.UNAVAILABLE and "not serving" in e.value.details()
            await proc.set_serving(True)
            assert await _chat(proc.port, [b"one", b"two"]) == [b"one", b"two"]
        finally:
            await proc.server.stop(0)

    asyncio.run(run())


def test_a_stream_of_a_restricted_service_needs_the_allowed_identity() -> None:
    from schedmesh.security.interceptors import CallerIdentityInterceptor

    async def run() -> None:
        server = grpc.aio.server(interceptors=[CallerIdentityInterceptor(
            {"schedmesh.test.Echo": frozenset({"queue-manager"})}, tls_required=True)])
        _with_echo_stream(server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await _chat(port, [b"hi"])  # plaintext: no certificate, no identity
            assert e.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert "without a client certificate may not call /schedmesh.test.Echo/Chat" in e.value.details()
        finally:
            await server.stop(0)

    asyncio.run(run())
