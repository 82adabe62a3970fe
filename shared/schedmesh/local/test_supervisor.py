"""The supervisor's restart backoff: RestartPolicy.backoff's delays, and a real child process that
crashes in a loop, restarted by Supervisor.supervise with growing delays; a child that then stays
healthy for the policy's reset period starts again from the first delay, one that crashes sooner
does not."""
from __future__ import annotations

import re
import signal
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedmesh.local.supervisor import RestartPolicy, Supervisor
from schedmesh.ports import free_port

pytestmark = pytest.mark.skipif(sys.platform.startswith("win"), reason="POSIX process groups")


def test_backoff_doubles_from_the_initial_delay_up_to_the_maximum() -> None:
    policy = RestartPolicy(initial_backoff=0.5, max_backoff=10.0)
    assert [policy.backoff(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert policy.backoff(0) == 0.5  # (never asked for: the first failure is 1)
    assert RestartPolicy().backoff(1) == RestartPolicy().initial_backoff


# A supervised child: serves gRPC health while its control file says "serve"; exits with code 3
# when it says "crash" (at once, or as soon as it reads it). Each start is appended to <control>.starts.
CHILD = '''
import os, sys, time
from pathlib import Path
control = Path(sys.argv[1])
port = int(sys.argv[sys.argv.index("--port") + 1])
with open(str(control) + ".starts", "a") as f:
    f.write(f"{time.time()}\\n")
if control.read_text().strip() == "crash":
    sys.exit(3)
from concurrent import futures
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
server = grpc.server(futures.ThreadPoolExecutor(2))
servicer = health.HealthServicer()
servicer.set("", health_pb2.HealthCheckResponse.SERVING)
health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
server.add_insecure_port(f"127.0.0.1:{port}")
server.start()
while control.read_text().strip() != "crash":
    time.sleep(0.02)
os._exit(3)
'''

RESTARTING = re.compile(r"restarting it on \S+ in ([0-9.]+)s")


def _wait(what: str, check, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=0.5).status == \
                health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError:
            return False


@pytest.mark.timeout(120)
def test_a_child_crashing_in_a_loop_is_restarted_with_growing_delays_reset_once_healthy(tmp_path: Path) -> None:
    (tmp_path / "flaky_child.py").write_text(CHILD)
    control = tmp_path / "control"
    starts = Path(f"{control}.starts")
    control.write_text("crash")
    policy = RestartPolicy(initial_backoff=0.1, max_backoff=0.4, reset_after=2.0, unhealthy_after=60.0,
                           start_timeout=60.0, check_interval=0.05, check_timeout=1.0)
    said: list[str] = []
    sup = Supervisor(tmp_path / "logs", env={"PYTHONPATH": str(tmp_path)}, policy=policy, say=said.append)

    def delays() -> list[float]:
        return [float(m.group(1)) for m in map(RESTARTING.search, list(said)) if m]

    def start_times() -> list[float]:
        return [float(x) for x in starts.read_text().split()] if starts.exists() else []

    port = free_port()
    info = sup.start("flaky", "flaky_child", [str(control)], port)
    supervising = threading.Thread(target=sup.supervise, name="supervise", daemon=True)
    supervising.start()
    try:
        # crashing at every start: 0.1, 0.2, 0.4 (the maximum), 0.4 s
        _wait("four restarts", lambda: info.restarts >= 4 and len(start_times()) >= 5)
        assert delays()[:4] == [0.1, 0.2, 0.4, 0.4], said
        times = start_times()
        gaps = [b - a for a, b in zip(times, times[1:])]
        for gap, delay in zip(gaps, delays()):  # each start waited out its delay
            assert gap >= delay, (gaps, delays())

        def seen_healthy() -> bool:  # by the supervisor's own health checks, not only by us
            return _serving(port) and sup._child(info).healthy_since is not None

        # healthy, but for less than the reset period: the next crash keeps the grown delay
        control.write_text("serve")
        _wait("the child seen healthy", seen_healthy)
        before = len(delays())
        control.write_text("crash")
        _wait("the crash seen", lambda: len(delays()) > before)
        assert delays()[before] == 0.4, said

        # healthy for longer than the reset period: the next crash starts from the first delay again
        control.write_text("serve")
        _wait("the child seen healthy again", seen_healthy)
        time.sleep(policy.reset_after + 0.5)
        assert seen_healthy()
        before = len(delays())
        control.write_text("crash")
        _wait("the crash seen", lambda: len(delays()) > before)
        assert delays()[before] == 0.1, said
        restarts = info.restarts
        _wait("the restart after it", lambda: info.restarts > restarts)
    finally:
        sup.stopping.set()
        supervising.join(10)
        sup.stop_all(grace=2)
    assert not supervising.is_alive()
    assert all("exited with code 3" in s for s in said if RESTARTING.search(s)), said


@pytest.mark.timeout(60)
def test_a_child_ready_long_before_supervising_began_is_not_taken_for_unhealthy(tmp_path: Path) -> None:
    """The mesh's launch waits for each service in turn: a service ready long before the last one
    (more than unhealthy_after: at 200,000 nodes the queue-manager took 23 s) was killed as
    unhealthy at the supervisor's first look, though no check of its had failed."""
    (tmp_path / "steady_child.py").write_text(CHILD)
    control = tmp_path / "control"
    control.write_text("serve")
    policy = RestartPolicy(unhealthy_after=1.0, check_interval=0.05, check_timeout=1.0)
    said: list[str] = []
    sup = Supervisor(tmp_path / "logs", env={"PYTHONPATH": str(tmp_path)}, policy=policy, say=said.append)
    port = free_port()
    info = sup.start("steady", "steady_child", [str(control)], port)
    sup.wait_ready(info, timeout=30)
    time.sleep(policy.unhealthy_after + 1.0)  # the rest of a long launch
    supervising = threading.Thread(target=sup.supervise, name="supervise", daemon=True)
    supervising.start()
    try:
        time.sleep(policy.unhealthy_after + 1.0)
        assert info.restarts == 0 and not said, said
        assert sup._child(info).healthy_since is not None  # checked, and healthy
    finally:
        sup.stopping.set()
        supervising.join(10)
        sup.stop_all(grace=2)


@pytest.mark.timeout(60)
def test_a_childs_exit_wakes_the_supervising_loop(tmp_path: Path) -> None:
    """The loop sleeps until something is due (here a minute: no checks, no idle wake-up); a child's
    exit (SIGCHLD, supervise() on the main thread) and a stop request wake it at once."""
    (tmp_path / "flaky_child.py").write_text(CHILD)
    control = tmp_path / "control"
    control.write_text("serve")
    policy = RestartPolicy(initial_backoff=0.1, check_interval=60.0, unhealthy_after=600.0, idle_wake=60.0)
    said: list[str] = []
    sup = Supervisor(tmp_path / "logs", env={"PYTHONPATH": str(tmp_path)}, policy=policy, say=said.append)
    info = sup.start("flaky", "flaky_child", [str(control)], free_port())
    sup.wait_ready(info, timeout=30)
    restarted_after: list[float] = []

    def crash_then_stop() -> None:
        time.sleep(1.0)  # the loop asleep by now
        crashed = time.monotonic()
        control.write_text("crash")
        _wait("the crash seen", lambda: any(RESTARTING.search(s) for s in said), timeout=20)
        restarted_after.append(time.monotonic() - crashed)
        control.write_text("serve")
        sup.request_stop()

    helper = threading.Thread(target=crash_then_stop, daemon=True)
    helper.start()
    previous = signal.getsignal(signal.SIGCHLD)
    sup.wake_on_child_exit()
    started = time.monotonic()
    try:
        sup.supervise()  # on this (the main) thread, as `up` runs it
    finally:
        signal.signal(signal.SIGCHLD, previous)
        sup.stop_all(grace=2)
    helper.join(5)
    assert restarted_after and restarted_after[0] < 20, (restarted_after, said)
    assert time.monotonic() - started < 40, "the stop request did not wake the loop"
