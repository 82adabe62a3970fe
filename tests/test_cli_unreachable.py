"""What the CLI says and does when the local mesh's queue-manager does not answer, against a
stand-in mesh (a state file, a process playing the supervisor, a gRPC server playing the
queue-manager): while the supervisor lives it is restarting the queue-manager, so a call that is
safe to repeat waits for it and otherwise the user is told to retry; with the supervisor gone,
`schedmesh down` then `schedmesh up --restore` (a plain `up` starts empty), or `up --kafka` for a
mesh on an external broker."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from schedmesh.local.client import Client, local_target
from schedmesh.local.supervisor import MeshError, MeshState, ProcInfo, process_start_ticks, state_path
from schedmesh.ports import free_port
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to tell live processes")

LAST_RESTART = "2025-01-01 00:00:00: pid 4242 was killed by SIGKILL"


@pytest.fixture
def supervisor() -> Iterator[int]:
    """A live process whose command line names schedmesh, as the supervisor's does."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "schedmesh-test-supervisor"])
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait(10)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(10)
    return p.pid


def write_state(base: Path, port: int, supervisor_pid: int, **extra) -> MeshState:
    qm = ProcInfo(name="queue-manager", module="services.queue_manager", port=port, pid=dead_pid(), restarts=1,
                  last_restart=LAST_RESTART, log=str(base / "queue-manager.log"))
    state = MeshState(scheduler=f"127.0.0.1:{port}", tls=False, status="running", supervisor_pid=supervisor_pid,
                      supervisor_started=process_start_ticks(supervisor_pid) if supervisor_pid else 0, procs=[qm],
                      **extra)
    state.save(state_path(base))
    return state


def client(base: Path, restart_wait: float = Client.RESTART_WAIT) -> Client:
    return Client(target=local_target(base), timeout=5, restart_wait=restart_wait)


class Scheduler(queue_pb2_grpc.SchedulerServicer):
    def GetPods(self, request, context):
        return queue_pb2.PodList()


def serve_later(port: int, delay: float) -> tuple[threading.Timer, list]:
    """A Scheduler API on `port` from `delay` seconds on (the queue-manager coming back)."""
    servers: list = []

    def start() -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        queue_pb2_grpc.add_SchedulerServicer_to_server(Scheduler(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        servers.append(server)

    timer = threading.Timer(delay, start)
    timer.start()
    return timer, servers


def test_supervisor_gone_says_down_then_up_restore(tmp_path: Path) -> None:
    write_state(tmp_path, free_port(), dead_pid())
    c = client(tmp_path)
    t0 = time.monotonic()
    with pytest.raises(MeshError) as e:
        c.call("GetPods", queue_pb2.GetRequest())
    said = str(e.value)
    assert time.monotonic() - t0 < 5, "nothing is restarting it: no waiting"
    assert "is not running and the mesh supervisor" in said and "is gone" in said
    assert "`schedmesh down`" in said and "`schedmesh up --restore`" in said and "a plain `up` starts empty" in said
    assert "then `schedmesh up`" not in said


def test_supervisor_gone_on_an_external_broker_says_up_kafka(tmp_path: Path) -> None:
    write_state(tmp_path, free_port(), dead_pid(), bootstrap="kafka.example:9092", external_kafka=True)
    with pytest.raises(MeshError) as e:
        client(tmp_path).call("GetPods", queue_pb2.GetRequest())
    assert "`schedmesh up --kafka kafka.example:9092`" in str(e.value) and "--restore" not in str(e.value)


def test_while_the_supervisor_restarts_it_a_read_waits_for_it(tmp_path: Path, supervisor: int, capsys) -> None:
    port = free_port()
    write_state(tmp_path, port, supervisor)
    timer, servers = serve_later(port, 2.0)
    try:
        c = client(tmp_path)
        assert list(c.call("GetPods", queue_pb2.GetRequest()).pods) == []
        c.close()
    finally:
        timer.cancel()
        for s in servers:
            s.stop(0)
    err = capsys.readouterr().err
    assert f"the mesh supervisor (pid {supervisor}) is restarting the queue-manager (restart 1: {LAST_RESTART})" in err
    assert f"waiting up to {Client.RESTART_WAIT:.0f}s" in err


def test_while_the_supervisor_restarts_it_the_user_is_told_to_retry(tmp_path: Path, supervisor: int,
                                                                     capsys) -> None:
    write_state(tmp_path, free_port(), supervisor)
    c = client(tmp_path, restart_wait=1.5)
    t0 = time.monotonic()
    with pytest.raises(MeshError) as e:
        c.call("GetPods", queue_pb2.GetRequest())
    assert 1.5 <= time.monotonic() - t0 < 10
    said = str(e.value)
    assert f"the mesh supervisor (pid {supervisor}) is restarting the queue-manager" in said
    assert "retry in a few seconds" in said and str(tmp_path / "queue-manager.log") in said
    assert "schedmesh down" not in said and "schedmesh up" not in said
    assert "waiting up to 2s" in capsys.readouterr().err

    # a Delete is not sent twice (it may have been done): the user is told at once
    t0 = time.monotonic()
    with pytest.raises(MeshError, match="retry in a few seconds"):
        c.call("Delete", queue_pb2.DeleteRequest(kind="pod", namespace="default", name="p"))
    assert time.monotonic() - t0 < 1.5
    assert "waiting" not in capsys.readouterr().err


def test_a_mesh_stopped_meanwhile_says_up_restore(tmp_path: Path) -> None:
    write_state(tmp_path, free_port(), dead_pid())
    c = client(tmp_path)
    state_path(tmp_path).unlink()
    with pytest.raises(MeshError) as e:
        c.call("GetPods", queue_pb2.GetRequest())
    assert "the mesh was stopped" in str(e.value) and "`schedmesh up --restore`" in str(e.value)


def test_a_client_made_from_a_state_judges_by_it(tmp_path: Path, supervisor: int, monkeypatch) -> None:
    """Client(state), as `demo` and tests make it, from another directory: no state file to read
    again, so the state it was given decides (its supervisor alive: wait; gone: the advice)."""
    port = free_port()
    state = write_state(tmp_path, port, supervisor)
    monkeypatch.chdir(tmp_path.parent)
    timer, servers = serve_later(port, 1.5)
    try:
        assert list(Client(state, timeout=5).call("GetPods", queue_pb2.GetRequest()).pods) == []
    finally:
        timer.cancel()
        for s in servers:
            s.stop(0)
    gone = write_state(tmp_path, free_port(), dead_pid())
    with pytest.raises(MeshError, match="is gone, so nothing restarts it.*`schedmesh up --restore`"):
        Client(gone, timeout=5).call("GetPods", queue_pb2.GetRequest())
