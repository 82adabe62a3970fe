"""Starting mesh processes for tests: the embedded broker (or Kafka via testcontainers when
SCHEDMESH_TEST_KAFKA=testcontainers and a Docker engine exists) and service processes."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedmesh.ports import free_port

__all__ = ["ServiceProc", "free_port", "kafka"]  # free_port: the tests pick ports as the mesh does

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def kafka() -> Iterator[str]:
    """Bootstrap servers of a real Kafka-protocol broker for the test."""
    if os.environ.get("SCHEDMESH_TEST_KAFKA") == "testcontainers":
        import pytest
        try:
            try:
                from testcontainers.community.kafka import KafkaContainer
            except ImportError:  # older testcontainers
                from testcontainers.kafka import KafkaContainer
            container = KafkaContainer().with_kraft()
            container.start()
        except Exception as e:  # no Docker engine here
            pytest.skip(f"testcontainers Kafka unavailable: {e}")
        try:
            yield container.get_bootstrap_server()
        finally:
            container.stop()
        return
    from schedmesh.broker.embedded import EmbeddedBroker
    with EmbeddedBroker() as broker:
        yield broker.bootstrap_servers


class ServiceProc:
    def __init__(self, module: str, args: list[str], port: int, env: Optional[dict] = None,
                 log_dir: Optional[Path] = None) -> None:
        self.module, self.args, self.port = module, args, port
        self.env = {**os.environ, **(env or {})}
        self.log = open((log_dir or Path("/tmp")) / f"{module.replace('.', '_')}-{port}.log", "ab")
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "ServiceProc":
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *self.args, "--port", str(self.port)],
                                     cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_serving(self, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        with grpc.insecure_channel(self.target) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.module} exited with {self.proc.returncode}; log {self.log.name}")
                try:
                    if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.2)
        raise TimeoutError(f"{self.module} on {self.target} not serving after {timeout}s; log {self.log.name}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def poll(fn, timeout: float = 30.0, interval: float = 0.1):
    """fn()'s first truthy value, or its last value once `timeout` seconds have passed."""
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > deadline:
            return v
        time.sleep(interval)
