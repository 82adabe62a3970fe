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
