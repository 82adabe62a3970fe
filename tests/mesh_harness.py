"""Starting mesh processes for tests: the embedded broker (or Kafka via testcontainers when
SCHEDMESH_TEST_KAFKA=testcontainers and a Docker engine exists) and service processes.

`schedmesh up` in the tests (`up_kafka_args`): with SCHEDMESH_TEST_KAFKA=testcontainers each test
mesh runs on an Apache Kafka of its own, given with `up --kafka`; with SCHEDMESH_TEST_KAFKA=tansu on
an embedded Tansu the test starts and gives with `--kafka` (the --kafka path without Docker);
otherwise `up` starts its embedded broker. Tests that kill the mesh's embedded broker skip with
`EXTERNAL_KAFKA` set."""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator, Optional

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedmesh.ports import PORT_RANGE_ENV, free_port

__all__ = ["EXTERNAL_KAFKA", "ServiceProc", "free_port", "kafka", "mesh_stop_note", "plain_env",
           "up_kafka_args"]  # free_port: the tests pick ports as the mesh does

ROOT = Path(__file__).resolve().parents[1]

#: The broker `schedmesh up` in the tests is given with --kafka ("" : up starts its embedded one).
EXTERNAL_KAFKA = os.environ.get("SCHEDMESH_TEST_KAFKA", "") if os.environ.get("SCHEDMESH_TEST_KAFKA") in (
    "testcontainers", "tansu") else ""
SKIP_EMBEDDED_BROKER_KILL = f"kills the mesh's embedded broker; SCHEDMESH_TEST_KAFKA={EXTERNAL_KAFKA} runs the " \
                            "mesh on a broker given with --kafka"


def plain_env() -> dict[str, str]:
    """This environment without the OTEL_* and SCHEDMESH_* variables (a test's processes take
    their settings from the test), but with this pytest worker's port range (conftest.py): a mesh
    started without it chose ports in another worker's range, and met that worker's mesh."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCHEDMESH_")) or k == PORT_RANGE_ENV}


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


_mesh_brokers: dict[Path, tuple[str, ExitStack]] = {}  # mesh directory -> its broker


def up_kafka_args(base: Path) -> list[str]:
    """Arguments for `schedmesh up` of a test mesh in `base`: none (`up` starts its embedded broker)
    or, with EXTERNAL_KAFKA, `--kafka` and a broker of the mesh's own (the topic names are fixed: one
    mesh per broker). It is started at the first `up` in `base` and kept for the next ones (a down
    then up there finds its topics); once no mesh runs in a directory, its broker is stopped when
    another mesh wants one, or at the end of the session."""
    if not EXTERNAL_KAFKA:
        return []
    base = Path(base).resolve()
    for other in [b for b in _mesh_brokers if b != base and not (b / ".schedmesh" / "mesh.json").exists()]:
        _mesh_brokers.pop(other)[1].close()
    if base not in _mesh_brokers:
        stack = ExitStack()
        bootstrap = stack.enter_context(kafka())  # testcontainers: skips the test without a Docker engine
        _mesh_brokers[base] = (bootstrap, stack)
    return ["--kafka", _mesh_brokers[base][0]]


@atexit.register
def _stop_mesh_brokers() -> None:
    while _mesh_brokers:
        _mesh_brokers.popitem()[1][1].close()


def mesh_stop_note(state: dict) -> str:
    """What `up` and `down` of the mesh described by `state` (mesh.json) say is kept and lost."""
    from schedmesh.local.supervisor import EMBEDDED_BROKER_LOSES, external_broker_keeps
    return external_broker_keeps(state["bootstrap"]) if state.get("external_kafka") else EMBEDDED_BROKER_LOSES


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


def alive(pid: int) -> bool:
    """A live process (a zombie is dead: it only waits to be reaped). Linux: reads /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[-1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return out


def poll(fn, timeout: float = 30.0, interval: float = 0.1):
    """fn()'s first truthy value, or its last value once `timeout` seconds have passed."""
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() > deadline:
            return v
        time.sleep(interval)
