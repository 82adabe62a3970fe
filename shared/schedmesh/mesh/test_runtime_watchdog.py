"""The event-loop watchdog of every service (ServiceProcess, schedmesh.mesh.watchdog), in real child
processes: a service whose loop blocks exits with WATCHDOG_EXIT_CODE and logs the stall with the
blocking stack (so Compose's `restart: unless-stopped`, Kubernetes and `schedmesh up` restart it); a
healthy one keeps serving (also across a pause of the whole process, as `docker pause`) and stops
cleanly on SIGTERM, the watchdog quiet through its shutdown."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedmesh.mesh.watchdog import ENV, WATCHDOG_EXIT_CODE, LoopWatchdog, seconds_from_env
from schedmesh.ports import PORT_RANGE_ENV

LIMIT = 2  # SCHEDMESH_WATCHDOG_SECONDS for the child

# A file, not `python -c`: the logged stacks then show the source lines.
CHILD = '''
import asyncio, sys, time

from schedmesh.mesh.runtime import ServiceProcess


def block_the_event_loop():
    time.sleep(60)  # a blocking call on the event loop


async def main(mode):
    proc = ServiceProcess("watchdog-test", 0, host="127.0.0.1")
    await proc.start()
    await proc.set_serving(True)
    print(f"serving on port {proc.port}", flush=True)
    if mode == "hang":
        await asyncio.sleep(0.5)
        print("blocking the event loop", flush=True)
        block_the_event_loop()
    await proc.wait_and_stop(grace=0)


asyncio.run(main(sys.argv[1]))
# The loop is closed and ticks no more; a slow exit after it (atexit work, threads joined) is no stall.
time.sleep(%(after)s)
print("stopped cleanly", flush=True)
''' % {"after": LIMIT + 1.5}


class Child:
    """The child service with its output (stdout and stderr) read as it comes, each line timed."""

    def __init__(self, script: Path, mode: str) -> None:
        # (this pytest worker's port range kept: conftest.py)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDMESH_", "OTEL_")) or k == PORT_RANGE_ENV}
        env.update({ENV: str(LIMIT), "SCHEDMESH_METRICS_PORT": "-1", "OTEL_SDK_DISABLED": "true",
                    "SCHEDMESH_LOG_LEVEL": "INFO"})
        self.proc = subprocess.Popen([sys.executable, str(script), mode], env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self._new: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._new.put((time.monotonic(), line))

    def wait_for(self, text: str, timeout: float) -> float:
        """When the line with `text` came."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                at, line = self._new.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {text!r} in {timeout}s; output:\n{self.output}") from None
            self.lines.append(line)
            if text in line:
                return at

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        time.sleep(0.1)  # the reader's last lines
        while not self._new.empty():
            self.lines.append(self._new.get()[1])
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def child(tmp_path: Path):
    script = tmp_path / "watchdog_child.py"
    script.write_text(CHILD)
    started: list[Child] = []

    def start(mode: str) -> Child:
        c = Child(script, mode)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill()


def test_a_service_whose_event_loop_blocks_exits_with_the_watchdog_code_and_its_stack(child) -> None:
    c = child("hang")
    c.wait_for("serving on port", timeout=60)
    blocked_at = c.wait_for("blocking the event loop", timeout=10)
    code = c.wait(timeout=15)
    exited_after = time.monotonic() - blocked_at
    out = c.output
    assert code == WATCHDOG_EXIT_CODE, f"exit code {code}; output:\n{out}"
    assert exited_after < 10, f"exited {exited_after:.1f}s after the loop blocked (limit {LIMIT}s)"
    assert "watchdog-test: event loop stalled: no tick for" in out, out
    assert f"exiting with code {WATCHDOG_EXIT_CODE}" in out, out
    # every thread's stack, the event loop's first, showing the blocking call
    _, loop_stack, *others = out[out.index("the event loop's first:"):].split("\nThread ")
    assert "(event loop), most recent call last:" in loop_stack.splitlines()[0], out
    assert "in block_the_event_loop" in loop_stack and "time.sleep(60)" in loop_stack, out
    assert others, out  # the other threads' too (gRPC's)
    assert "stopped cleanly" not in out


def test_a_healthy_service_keeps_running_and_stops_cleanly_on_sigterm(child) -> None:
    c = child("healthy")
    c.wait_for("serving on port", timeout=60)
    port = int(c.lines[-1].rsplit(" ", 1)[1])
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 2 * LIMIT + 1  # well past the watchdog's limit
        while time.monotonic() < deadline:
            assert c.proc.poll() is None, f"exited with {c.proc.returncode}; output:\n{c.output}"
            assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.SERVING
            time.sleep(0.5)
        # frozen as a whole (docker pause, SIGSTOP) past the limit: no stall of its loop
        c.proc.send_signal(signal.SIGSTOP)
        time.sleep(LIMIT + 1.5)
        c.proc.send_signal(signal.SIGCONT)
        time.sleep(LIMIT)
        assert c.proc.poll() is None, f"exited with {c.proc.returncode} after a pause; output:\n{c.output}"
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING
    c.proc.send_signal(signal.SIGTERM)
    code = c.wait(timeout=30)
    out = c.output
    assert code == 0, f"exit code {code}; output:\n{out}"
    assert "event-loop watchdog on" in out, out
    assert "shutting down" in out and "stopped cleanly" in out, out
    assert "stalled" not in out, out


def test_watchdog_seconds_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert seconds_from_env() == 120
    monkeypatch.setenv(ENV, "0")
    assert seconds_from_env() is None
    off = LoopWatchdog.from_env("off")
    assert not off.enabled
    off.start()  # a no-op: no thread, no tick
    assert not off.running
    monkeypatch.setenv(ENV, "2.5")
    assert seconds_from_env() == 2.5
    for bad in ("soon", "-1", "inf"):
        monkeypatch.setenv(ENV, bad)
        with pytest.raises(ValueError, match=ENV):
            seconds_from_env()


def test_the_tick_is_a_quarter_of_the_limit_and_at_most_tick_seconds() -> None:
    from schedmesh.mesh.watchdog import TICK_SECONDS
    assert LoopWatchdog("short", 2).interval == 0.5  # a stall noticed within 2.5 s
    # the default 120 s: the loop and the thread wake every 5 s, not every second (an idle
    # service's loop wakes for nothing else)
    assert LoopWatchdog("default", 120).interval == TICK_SECONDS == 5.0
