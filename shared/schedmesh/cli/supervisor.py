"""Process supervision for the local mesh: start the embedded broker and every service as its
own OS process on free localhost ports, wait until each is healthy, and stop them all.

A mesh is described by a state file (``.schedmesh/mesh.json`` in the working directory) holding
ports, pids and the log directory, so `schedmesh down` (and apply/get/...) can find a detached
mesh from another process.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

STATE_DIR = ".schedmesh"
STATE_FILE = "mesh.json"


class MeshError(ValueError):
    """A mesh operation failed; the message is printed as `schedmesh: error: ...` (exit 2)."""


NOT_RUNNING = ("the mesh is not running (no .schedmesh/mesh.json); start it with `schedmesh up`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def state_path(base: Optional[Path] = None) -> Path:
    return (base or Path.cwd()) / STATE_DIR / STATE_FILE


@dataclass
class ProcInfo:
    name: str  # broker, filter-worker-0, ..., queue-manager
    module: str
    port: int
    pid: int = 0
    log: str = ""
    health: bool = True  # gRPC health checking (the broker: a TCP connect)


@dataclass
class MeshState:
    scheduler: str = ""  # queue-manager host:port (Scheduler API)
    bootstrap: str = ""  # Kafka bootstrap servers
    log_dir: str = ""
    started: float = 0.0
    detached: bool = False
    filter_shards: int = 0
    score_shards: int = 0
    procs: list[ProcInfo] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "MeshState":
        d = json.loads(path.read_text())
        procs = [ProcInfo(**p) for p in d.pop("procs", [])]
        return cls(**d, procs=procs)


def load_state(base: Optional[Path] = None) -> MeshState:
    path = state_path(base)
    if not path.exists():
        raise MeshError(NOT_RUNNING)
    try:
        return MeshState.load(path)
    except (ValueError, TypeError, KeyError) as e:
        raise MeshError(f"{path} is not a valid mesh state ({e}); remove it and run `schedmesh up`") from None


# ------------------------------------------------------------------ pid helpers
def pid_alive(pid: int, module: str = "") -> bool:
    """Whether `pid` is a live process (and, when /proc is available, still runs `module`)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # not ours (pid reused by another user)
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(")")[-1].split()[0] == "Z":
                return False
        if module:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            return module in cmd
    except OSError:
        pass
    return True


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)  # each service was started as leader of its own process group
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tier(p: ProcInfo) -> int:
    """Stop order: the queue-manager (no new bindings), then the other services together, the broker last."""
    return 0 if p.name == "queue-manager" else 2 if p.name == "broker" else 1


def stop_pids(procs: list[ProcInfo], grace: float = 10.0, log: Callable[[str], None] = lambda s: None) -> None:
    """SIGTERM the processes tier by tier (each tier stopped before the next), SIGKILL what outlives `grace`."""
    for tier in sorted({_tier(p) for p in procs}):
        group = [p for p in procs if _tier(p) == tier and pid_alive(p.pid, p.module)]
        for p in group:
            _signal(p.pid, signal.SIGTERM, group=False)
        deadline = time.time() + grace
        while time.time() < deadline and any(pid_alive(p.pid, p.module) for p in group):
            time.sleep(0.05)
        for p in group:
            if pid_alive(p.pid, p.module):
                log(f"{p.name} (pid {p.pid}) did not stop {grace:.0f}s after SIGTERM: SIGKILL")
                _signal(p.pid, signal.SIGKILL, group=True)
    # the broker's child (tansu) lives in the broker's process group: make sure it is gone
    for p in procs:
        if p.name == "broker":
            _signal(p.pid, signal.SIGTERM, group=True)


# ------------------------------------------------------------------ the supervisor
def _wait_health(target: str, proc: subprocess.Popen, info: ProcInfo, deadline: float) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.time() < deadline:
            if proc.poll() is not None:
                raise MeshError(f"{info.name} exited with code {proc.returncode} while starting; "
                                f"see {info.log}:\n{_tail(info.log)}")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == \
                        health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    raise MeshError(f"{info.name} on {target} not SERVING in time; see {info.log}:\n{_tail(info.log)}")


def _wait_tcp(port: int, proc: subprocess.Popen, info: ProcInfo, deadline: float, ready_text: str = "") -> None:
    while time.time() < deadline:
        if proc.poll() is not None:
            raise MeshError(f"{info.name} exited with code {proc.returncode} while starting; "
                            f"see {info.log}:\n{_tail(info.log)}")
        if ready_text:
            try:
                if ready_text in Path(info.log).read_text(errors="replace"):
                    return
            except OSError:
                pass
        else:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
        time.sleep(0.1)
    raise MeshError(f"{info.name} not ready on port {port} in time; see {info.log}:\n{_tail(info.log)}")


def _tail(path: str, n: int = 15) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in lines[-n:])


class Supervisor:
    """Starts processes (each its own session, so Ctrl-C reaches only us) and stops them in reverse order."""

    def __init__(self, log_dir: Path, env: Optional[dict] = None) -> None:
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **(env or {})}
        self.procs: list[tuple[ProcInfo, subprocess.Popen]] = []

    def start(self, name: str, module: str, args: list[str], port: int, health: bool = True,
              ready_text: str = "", timeout: float = 90.0) -> ProcInfo:
        log_path = self.log_dir / f"{name}.log"
        info = ProcInfo(name=name, module=module, port=port, log=str(log_path), health=health)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", module, *args, "--port", str(port)],
                                    env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        info.pid = proc.pid
        self.procs.append((info, proc))
        return info

    def wait_ready(self, info: ProcInfo, timeout: float = 90.0, ready_text: str = "") -> None:
        proc = next(p for i, p in self.procs if i is info)
        deadline = time.time() + timeout
        if info.health:
            _wait_health(f"127.0.0.1:{info.port}", proc, info, deadline)
        else:
            _wait_tcp(info.port, proc, info, deadline, ready_text)

    def dead(self) -> list[ProcInfo]:
        return [i for i, p in self.procs if p.poll() is not None]

    def stop_all(self, grace: float = 10.0, log: Callable[[str], None] = lambda s: None) -> None:
        stop_pids([i for i, _ in self.procs], grace, log)
        for _, p in self.procs:
            try:
                p.wait(1)
            except subprocess.TimeoutExpired:
                pass
