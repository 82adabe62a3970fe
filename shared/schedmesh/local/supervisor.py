"""Process supervision for the local mesh: start the embedded broker and every service as its
own OS process on free localhost ports, wait until each is healthy, keep them running, and stop
them all.

A mesh is described by a state file (``.schedmesh/mesh.json`` in the working directory) holding
ports, pids, restart counts, the supervisor's pid and the log directory, so `schedmesh down`
(and apply/get/...) can find a mesh from another process.

Supervision: a service that exits while the mesh is not being stopped, or that stays unhealthy
(gRPC health not SERVING or not answering; for the broker, no Kafka ApiVersions answer) for
``RestartPolicy.unhealthy_after`` seconds (counted from the first of its supervisor's own
health checks that failed: a service not checked yet, during a long launch, is not silent) is
started again on the same port (other services and the state file point at it) with its log
appended, after an exponential backoff. In the
foreground (`schedmesh up`) the `up` process supervises; with `--detach` a supervisor process
(``python -m schedmesh.local.supervisor``, started by `up` in its own session) does, and
`schedmesh down` asks it to stop with SIGTERM.

``SCHEDMESH_UNHEALTHY_SECONDS`` overrides how long a service may stay unhealthy (tests use a
few seconds).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from schedmesh.mesh.watchdog import WATCHDOG_EXIT_CODE
from schedmesh.ports import free_port

STATE_DIR = ".schedmesh"
STATE_FILE = "mesh.json"
LOGS_DIR = "logs"
LATEST_LOGS = "latest"  # symlink to the newest run's log directory
SUPERVISOR_LOG = "supervisor.log"
SUPERVISOR_MODULE = "schedmesh.local.supervisor"

#: What stopping the mesh keeps and loses with the embedded (memory-only) broker; `up` and `down`
#: say it. The queue-manager keeps applied objects in APPLIED_DIR (schedmesh.mesh.applied_store).
APPLIED_DIR = "applied"
EMBEDDED_BROKER_LOSES = (f"applied objects are kept in .schedmesh/{APPLIED_DIR}/ (a broker restart while the mesh "
                         "runs re-publishes them); the next `up` starts empty unless given --restore, which applies "
                         "them again; bindings, pod status and events are not kept (the pods are scheduled again)")


def external_broker_keeps(bootstrap: str) -> str:
    """What stopping a mesh started with `up --kafka` keeps: everything, on the broker's topics."""
    return (f"the Kafka broker at {bootstrap} (--kafka) was not started by `up` and is left running: applied objects, "
            "bindings, pod status and events stay on its topics (durability is the broker's; nothing is kept in "
            f".schedmesh/{APPLIED_DIR}/), and the next `up --kafka {bootstrap}` starts from them")


def stopped_note(state: "MeshState") -> str:
    """What `down` (and a stopped foreground `up`) says is kept and lost."""
    return external_broker_keeps(state.bootstrap) if state.external_kafka else EMBEDDED_BROKER_LOSES


def set_aside_applied(base: Path, restore: bool) -> Optional[str]:
    """At `up`: keep the objects applied before the last `down` for --restore, else move them
    aside (never deleted) so the new mesh starts empty. Returns what to tell the user."""
    store = base / STATE_DIR / APPLIED_DIR
    if restore or not store.is_dir() or not any(store.iterdir()):
        return f"restoring the objects applied before the last down from {store}" if restore and store.is_dir() else None
    aside = store.with_name(f"{APPLIED_DIR}-{time.strftime('%Y%m%d-%H%M%S')}")
    store.rename(aside)
    return (f"starting empty: the objects applied before were moved to {aside} "
            f"(`schedmesh up --restore` applies the kept objects again)")


class MeshError(ValueError):
    """A mesh operation failed; the message is printed as `schedmesh: error: ...` (exit 2)."""


NOT_RUNNING = ("the mesh is not running (no .schedmesh/mesh.json); start it with `schedmesh up`")


def state_path(base: Optional[Path] = None) -> Path:
    return (base or Path.cwd()) / STATE_DIR / STATE_FILE


@dataclass
class ProcInfo:
    name: str  # broker, filter-worker-0, ..., queue-manager
    module: str
    port: int
    pid: int = 0
    log: str = ""
    health: bool = True  # gRPC health checking (the broker: a Kafka ApiVersions round trip)
    args: list[str] = field(default_factory=list)  # command-line arguments besides --port
    restarts: int = 0
    last_restart: str = ""  # when and why it was last restarted
    metrics_port: int = 0  # its Prometheus /metrics on 127.0.0.1 (0: none, e.g. the broker)


def _known_fields(cls, d: dict) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass
class MeshState:
    scheduler: str = ""  # queue-manager host:port (Scheduler API)
    bootstrap: str = ""  # Kafka bootstrap servers
    external_kafka: bool = False  # `up --kafka`: a broker the mesh uses but neither started nor stops
    log_dir: str = ""
    started: float = 0.0
    detached: bool = False
    filter_shards: int = 0
    score_shards: int = 0
    procs: list[ProcInfo] = field(default_factory=list)
    status: str = ""  # starting, running
    supervisor_pid: int = 0  # the process that restarts services and stops them on SIGTERM
    supervisor_started: int = 0  # its start time in clock ticks (Linux), so a reused pid is not taken for it
    supervisor_log: str = ""
    previous_logs: str = ""  # log directory of the run before this one, if any
    # Security (schedmesh.security): the CLI's defaults for this mesh. tls=False: plaintext on loopback.
    tls: bool = False
    ca: str = ""  # CA certificate the services' certificates chain to
    client_cert: str = ""  # the user's client certificate and key (identity schedmesh-admin)
    client_key: str = ""
    token_file: str = ""  # the Scheduler API's bearer token (0600)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "MeshState":
        d = json.loads(path.read_text())
        procs = [ProcInfo(**_known_fields(ProcInfo, p)) for p in d.pop("procs", [])]
        return cls(**_known_fields(cls, d), procs=procs)


def load_state(base: Optional[Path] = None) -> MeshState:
    path = state_path(base)
    if not path.exists():
        raise MeshError(NOT_RUNNING)
    try:
        return MeshState.load(path)
    except (ValueError, TypeError, KeyError) as e:
        raise MeshError(f"{path} is not a valid mesh state ({e}); remove it and run `schedmesh up`") from None


# ------------------------------------------------------------------ logs
def new_log_dir(base: Path) -> tuple[Path, Optional[Path]]:
    """A fresh log directory for this run (.schedmesh/logs/<timestamp>/) and the previous run's.

    Earlier runs' logs are never deleted; `.schedmesh/logs/latest` points at the newest run."""
    root = base / STATE_DIR / LOGS_DIR
    root.mkdir(parents=True, exist_ok=True)
    runs = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    previous: Optional[Path] = runs[-1] if runs else None
    if previous is None and any(root.glob("*.log")):
        previous = root  # logs of a version that wrote them straight into logs/
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run, n = root / stamp, 1
    while run.exists():
        n += 1
        run = root / f"{stamp}-{n}"
    run.mkdir()
    latest = root / LATEST_LOGS
    try:
        tmp = root / f".{LATEST_LOGS}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run.name)
        tmp.replace(latest)
    except OSError:
        pass  # a convenience only (some filesystems have no symlinks)
    return run, previous


# ------------------------------------------------------------------ pid helpers
def _proc_stat(pid: int) -> Optional[list[str]]:
    """Fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def process_start_ticks(pid: int) -> int:
    """When `pid` started, in clock ticks since boot (0 where /proc is unavailable)."""
    st = _proc_stat(pid)
    return int(st[19]) if st and len(st) > 19 else 0


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
        st = _proc_stat(pid)
        if st and st[0] in ("Z", "X"):
            return False
        if module:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            return module in cmd
    except OSError:
        pass
    return True


def supervisor_alive(state: MeshState) -> bool:
    pid = state.supervisor_pid
    if not pid_alive(pid, "schedmesh"):
        return False
    ticks = process_start_ticks(pid)
    return not (ticks and state.supervisor_started and ticks != state.supervisor_started)


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


def stray_pids(state: MeshState) -> list[int]:
    """Processes of this user that serve one of the mesh's ports but are not the recorded ones:
    services started again by hand (`python -m services.x ... --port P`) and a broker's tansu
    child. Linux only (reads /proc); elsewhere an empty list."""
    wanted = {(p.module, str(p.port)) for p in state.procs}
    broker_ports = {str(p.port) for p in state.procs if p.name == "broker"}
    recorded = {p.pid for p in state.procs if pid_alive(p.pid, p.module)} | {os.getpid()}
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) in recorded:
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
        port = argv[argv.index("--port") + 1] if "--port" in argv[:-1] else ""
        is_service = (module, port) in wanted
        is_tansu = Path(argv[0]).name == "tansu" and any(
            a.rsplit(":", 1)[-1] in broker_ports for a in argv if a.startswith("tcp://"))
        if (is_service or is_tansu) and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def stop_mesh_processes(state: MeshState, log: Callable[[str], None], timeout: float = 90.0) -> None:
    """Stop a mesh described by `state`: ask its supervisor (SIGTERM; it stops every child it runs,
    restarted ones included), then stop whatever is still alive itself, so nothing leaks when the
    supervisor is gone."""
    if state.supervisor_pid and supervisor_alive(state):
        _signal(state.supervisor_pid, signal.SIGTERM, group=False)
        deadline = time.time() + timeout
        while time.time() < deadline and supervisor_alive(state):
            time.sleep(0.1)
        if supervisor_alive(state):
            log(f"the mesh supervisor (pid {state.supervisor_pid}) did not stop in {timeout:.0f}s: SIGKILL")
            _signal(state.supervisor_pid, signal.SIGKILL, group=False)
    elif state.supervisor_pid:
        log(f"the mesh supervisor (pid {state.supervisor_pid}) is gone; stopping the recorded processes")
    stop_pids([p for p in state.procs if pid_alive(p.pid, p.module)], log=log)
    strays = stray_pids(state)
    for pid in strays:
        log(f"stopping pid {pid}, which serves one of the mesh's ports but was not started by it")
        _signal(pid, signal.SIGTERM, group=False)
    deadline = time.time() + 10
    while time.time() < deadline and any(pid_alive(pid) for pid in strays):
        time.sleep(0.05)
    for pid in strays:
        if pid_alive(pid):
            _signal(pid, signal.SIGKILL, group=False)


# ------------------------------------------------------------------ readiness and health
def _wait_health(target: str, proc: subprocess.Popen, info: ProcInfo, deadline: float,
                 stopping: threading.Event, tls=None) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from schedmesh.security.credentials import channel

    # (reconnecting every 0.1 s: with grpc's default backoff, 1 s growing 1.6-fold, a service
    # asked before it listened was seen SERVING up to 2 s after it was)
    with channel(target, tls, _STARTING_CHANNEL_OPTIONS) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.time() < deadline and not stopping.is_set():
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
    if stopping.is_set():
        raise MeshError(f"stopped while waiting for {info.name} to start")
    raise MeshError(f"{info.name} on {target} not SERVING in time; see {info.log}:\n{_tail(info.log)}")


def _wait_tcp(port: int, proc: subprocess.Popen, info: ProcInfo, deadline: float, ready_text: str,
              stopping: threading.Event) -> None:
    while time.time() < deadline and not stopping.is_set():
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
    if stopping.is_set():
        raise MeshError(f"stopped while waiting for {info.name} to start")
    raise MeshError(f"{info.name} not ready on port {port} in time; see {info.log}:\n{_tail(info.log)}")


def _tail(path: str, n: int = 15) -> str:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in lines[-n:])


def kafka_answers(port: int, timeout: float = 2.0, host: str = "127.0.0.1") -> bool:
    """Whether a Kafka broker on `host`:`port` answers an ApiVersions (v0) request: unlike a TCP
    connect (which the kernel accepts for a hung process too) this needs the broker to work."""
    correlation = int(time.monotonic_ns() & 0x7FFFFFFF)
    client = b"schedmesh-supervisor"
    request = struct.pack(">hhih", 18, 0, correlation, len(client)) + client
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(struct.pack(">i", len(request)) + request)
            head = b""
            while len(head) < 8:
                chunk = s.recv(8 - len(head))
                if not chunk:
                    return False
                head += chunk
    except OSError:
        return False
    return struct.unpack(">ii", head)[1] == correlation


def _grpc_serving(channel, timeout: float) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    try:
        resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
    except grpc.RpcError:
        return False
    return resp.status == health_pb2.HealthCheckResponse.SERVING


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code == WATCHDOG_EXIT_CODE:  # schedmesh.mesh.watchdog: its log has every thread's stack
        return f"exited with code {code} (its event loop stalled: watchdog)"
    return f"exited with code {code}"


# ------------------------------------------------------------------ the supervisor
@dataclass
class RestartPolicy:
    initial_backoff: float = 0.5  # first restart after this many seconds, doubling per failure in a row
    max_backoff: float = 10.0
    reset_after: float = 30.0  # healthy this long: the next failure starts from initial_backoff again
    unhealthy_after: float = 20.0  # once SERVING, unhealthy this long: restart
    start_timeout: float = 120.0  # a restarted process not SERVING this long after its start: restart
    # a health check of every process this often (at most a quarter of unhealthy_after): each
    # check wakes the supervisor and the process it asks (a check alone costs a shard about 1.4 ms
    # of CPU: grpc.aio's call path, grpc's pool threads waking). Every 2 s, an idle 5,000-node
    # mesh with 4 + 4 shards took 5.5 % of a core, 5.1 % every 5 s.
    check_interval: float = 5.0
    check_timeout: float = 5.0  # a busy service may answer slowly; only a long silence counts
    # the longest the supervising loop sleeps with nothing due: a child's exit (SIGCHLD, where the
    # main thread calls wake_on_child_exit), a finished check and a stop request wake it at once.
    # It ticked every 0.2 s: 1.3 ms of CPU a second in an idle supervisor of 7 processes.
    idle_wake: float = 1.0

    @classmethod
    def from_env(cls, **overrides) -> "RestartPolicy":
        policy = cls(**overrides)
        env = os.environ.get("SCHEDMESH_UNHEALTHY_SECONDS")
        if env:
            policy.unhealthy_after = float(env)
        policy.check_interval = min(policy.check_interval, policy.unhealthy_after / 4)
        return policy

    def backoff(self, failures: int) -> float:
        return min(self.max_backoff, self.initial_backoff * 2 ** max(0, failures - 1))


class _Child:
    """One supervised process: what was started and how it has been doing."""

    def __init__(self, info: ProcInfo, ready_text: str) -> None:
        self.info = info
        self.ready_text = ready_text
        self.proc: Optional[subprocess.Popen] = None
        self.started_at = 0.0
        self.serving_once = False  # answered health checks since its last start
        # when the first health check that failed since the last one that passed was sent (None: passing)
        self.failing_since: Optional[float] = None
        self.healthy_since: Optional[float] = None
        self.failures = 0  # in a row, for the backoff
        self.restart_at: Optional[float] = None  # dead and waiting for its backoff
        self.check: Optional[concurrent.futures.Future] = None
        self.last_check = 0.0
        self.channel = None
        self.env: dict[str, str] = {}

    def close_channel(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None


# Channels to the services reconnect quickly, so a restarted service is seen as soon as it listens.
def _reconnecting(first_ms: int, longest_ms: int) -> list[tuple[str, int]]:
    return [("grpc.initial_reconnect_backoff_ms", first_ms), ("grpc.min_reconnect_backoff_ms", first_ms),
            ("grpc.max_reconnect_backoff_ms", longest_ms)]


_HEALTH_CHANNEL_OPTIONS = _reconnecting(200, 1000)
_STARTING_CHANNEL_OPTIONS = _reconnecting(100, 100)  # a service starting: seen as soon as it listens


class Supervisor:
    """Starts processes (each its own session and process group, so Ctrl-C reaches only us and a
    service can be killed with everything it started), restarts them when they die or stay
    unhealthy (`supervise`), and stops them in order (`stop_all`)."""

    def __init__(self, log_dir: Path, env: Optional[dict] = None, policy: Optional[RestartPolicy] = None,
                 say: Callable[[str], None] = lambda s: None) -> None:
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **(env or {})}
        self.policy = policy or RestartPolicy.from_env()
        self.say = say
        self.children: list[_Child] = []
        self.stopping = threading.Event()  # set by signal handlers: leave `supervise`, abort starting
        self._wake = threading.Event()  # something for the supervising loop to look at now
        self.state: Optional[MeshState] = None
        self.state_file: Optional[Path] = None
        self._checks: Optional[concurrent.futures.ThreadPoolExecutor] = None
        # schedmesh.security.credentials.TLSFiles for health checks of mutual-TLS services (None: plaintext)
        self.health_tls = None

    @property
    def procs(self) -> list[tuple[ProcInfo, subprocess.Popen]]:
        return [(c.info, c.proc) for c in self.children]

    def attach_state(self, state: MeshState, path: Path) -> None:
        """Keep `state` (pids, restart counts) current in `path` from now on."""
        self.state, self.state_file = state, path
        if not state.external_kafka:
            # where the queue-manager keeps what was applied (the embedded broker keeps nothing
            # across down/up); a broker given with --kafka keeps its topics itself
            from schedmesh.mesh.applied_store import STATE_DIR_ENV
            self.env.setdefault(STATE_DIR_ENV, str(path.parent / APPLIED_DIR))
        self.record()

    def record(self) -> None:
        if self.state is None or self.state_file is None:
            return
        self.state.procs = [c.info for c in self.children]
        self.state.save(self.state_file)

    # ---------------------------------------------------------- starting
    def start(self, name: str, module: str, args: list[str], port: int, health: bool = True,
              ready_text: str = "", timeout: float = 90.0, env: Optional[dict] = None) -> ProcInfo:
        """`env`: this service's own variables on top of the supervisor's (its certificate)."""
        info = ProcInfo(name=name, module=module, port=port, log=str(self.log_dir / f"{name}.log"),
                        health=health, args=list(args))
        child = _Child(info, ready_text)
        child.env = dict(env or {})
        if health:  # a mesh service (the broker has no /metrics): a fixed port, kept across restarts
            info.metrics_port = free_port()
            child.env["SCHEDMESH_METRICS_PORT"] = str(info.metrics_port)
        self._spawn(child)
        self.children.append(child)
        self.record()
        return info

    def _spawn(self, child: _Child) -> None:
        info = child.info
        with open(info.log, "ab") as log:
            if info.restarts:
                log.write(f"--- schedmesh supervisor {time.strftime('%Y-%m-%d %H:%M:%S')}: restart "
                          f"{info.restarts} ({info.last_restart})\n".encode())
                log.flush()
            child.proc = subprocess.Popen([sys.executable, "-m", info.module, *info.args, "--port", str(info.port)],
                                          env={**self.env, **child.env}, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        info.pid = child.proc.pid
        child.started_at = time.monotonic()
        child.serving_once, child.healthy_since, child.check, child.failing_since = False, None, None, None
        child.close_channel()

    def _child(self, info: ProcInfo) -> _Child:
        return next(c for c in self.children if c.info is info)

    def wait_ready(self, info: ProcInfo, timeout: float = 90.0, ready_text: str = "") -> None:
        child = self._child(info)
        deadline = time.time() + timeout
        if info.health:
            _wait_health(f"127.0.0.1:{info.port}", child.proc, info, deadline, self.stopping, self.health_tls)
        else:
            _wait_tcp(info.port, child.proc, info, deadline, ready_text or child.ready_text, self.stopping)
        child.serving_once, child.healthy_since = True, time.monotonic()

    def dead(self) -> list[ProcInfo]:
        return [c.info for c in self.children if c.proc is not None and c.proc.poll() is not None]

    # ---------------------------------------------------------- supervising
    def request_stop(self) -> None:
        """Leave `supervise` (and abort starting): for signal handlers."""
        self.stopping.set()
        self._wake.set()

    def wake_on_child_exit(self) -> None:
        """From the main thread: a child's exit wakes the supervising loop at once (SIGCHLD)."""
        signal.signal(signal.SIGCHLD, lambda signum, frame: self._wake.set())

    def supervise(self) -> None:
        """Restart what dies or stays unhealthy until `stopping` is set (by a signal handler)."""
        self._checks = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="health")
        try:
            while not self.stopping.is_set():
                self.supervise_once()
                self._wake.wait(self._until_due())
                self._wake.clear()  # (what woke it is looked at next, whenever it came)
        finally:
            self._checks.shutdown(wait=False, cancel_futures=True)

    def _until_due(self) -> float:
        """Seconds until the next restart or health check is due, at most the policy's idle_wake."""
        policy, now = self.policy, time.monotonic()
        wait = min(policy.idle_wake, policy.check_interval)
        for child in self.children:
            if child.restart_at is not None:
                wait = min(wait, child.restart_at - now)
            elif child.check is None:
                wait = min(wait, child.last_check + policy.check_interval - now)
        return max(wait, 0.01)

    def supervise_once(self) -> None:
        now = time.monotonic()
        changed = False
        for child in self.children:
            if self.stopping.is_set():
                return
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._restart(child)
                    changed = True
                continue
            code = child.proc.poll()
            if code is not None:
                self._schedule_restart(child, _exit_text(code))
                changed = True
            elif self._restart_if_unhealthy(child, now):
                changed = True
        if changed:
            self.record()

    def _schedule_restart(self, child: _Child, why: str) -> None:
        info = child.info
        child.failures += 1
        delay = self.policy.backoff(child.failures)
        child.restart_at = time.monotonic() + delay
        child.close_channel()
        info.last_restart = f"{time.strftime('%Y-%m-%d %H:%M:%S')}: pid {info.pid} {why}"
        self.say(f"{info.name} (pid {info.pid}) {why}; restarting it on 127.0.0.1:{info.port} in {delay:.1f}s "
                 f"(log {info.log})")

    def _restart(self, child: _Child) -> None:
        child.restart_at = None
        child.info.restarts += 1
        try:
            self._spawn(child)
        except OSError as e:
            self._schedule_restart(child, f"could not be started again ({e})")
            return
        self.say(f"restarted {child.info.name} on 127.0.0.1:{child.info.port} (pid {child.info.pid}, "
                 f"restart {child.info.restarts})")

    def _restart_if_unhealthy(self, child: _Child, now: float) -> bool:
        """Track `child`'s health checks; kill and schedule a restart once it has been unhealthy too long."""
        policy = self.policy
        if child.check is not None and child.check.done():
            ok = not child.check.cancelled() and child.check.exception() is None and child.check.result()
            child.check = None
            if ok:
                child.serving_once, child.failing_since = True, None
                if child.healthy_since is None:
                    child.healthy_since = now
            else:
                child.healthy_since = None
                if child.failing_since is None:
                    child.failing_since = child.last_check  # (when the check that failed was sent)
        if child.check is None and now - child.last_check >= policy.check_interval and self._checks is not None:
            child.last_check = now
            child.check = self._checks.submit(self._check, child)
            child.check.add_done_callback(lambda _done: self._wake.set())
        if child.healthy_since is not None and now - child.healthy_since >= policy.reset_after:
            child.failures = 0
        if child.serving_once:
            # Unhealthy from the first check of its that failed, not from its last good one: a
            # service not checked meanwhile (the launch waits for each in turn; at 200,000 nodes
            # the queue-manager took 23 s to start) or whose checks queued is not silent.
            if child.failing_since is None:
                return False
            silent, limit = now - child.failing_since, policy.unhealthy_after
            why = f"was unhealthy for {silent:.0f}s"
        else:
            silent, limit = now - child.started_at, policy.start_timeout
            why = f"was not healthy {silent:.0f}s after it started"
        if silent <= limit:
            return False
        _signal(child.info.pid, signal.SIGKILL, group=True)
        try:
            child.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self._schedule_restart(child, why)
        return True

    def _check(self, child: _Child) -> bool:
        if not child.info.health:
            return kafka_answers(child.info.port, self.policy.check_timeout)
        if child.channel is None:
            from schedmesh.security.credentials import channel
            child.channel = channel(f"127.0.0.1:{child.info.port}", self.health_tls, _HEALTH_CHANNEL_OPTIONS)
        return _grpc_serving(child.channel, self.policy.check_timeout)

    # ---------------------------------------------------------- stopping
    def stop_all(self, grace: float = 10.0, log: Callable[[str], None] = lambda s: None) -> None:
        self.request_stop()
        running = []
        for c in self.children:
            c.restart_at = None
            c.close_channel()
            if c.proc is not None and c.proc.poll() is None:
                running.append(c.info)
        stop_pids(running, grace, log)
        for c in self.children:
            if c.proc is None:
                continue
            try:
                c.proc.wait(1)
            except subprocess.TimeoutExpired:
                pass


# ------------------------------------------------------------------ the detached supervisor process
def start_detached(launch: dict, base: Path, log_dir: Path, say: Callable[[str], None]) -> MeshState:
    """Start `python -m schedmesh.local.supervisor` in its own session; it starts the mesh
    (`schedmesh.cli.mesh.launch_services(**launch)`), reports progress and readiness through a
    pipe, then keeps supervising after this process is gone. Returns the state it wrote."""
    log_path = log_dir / SUPERVISOR_LOG
    read_end, write_end = os.pipe()
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", SUPERVISOR_MODULE, "--status-fd", str(write_end),
                                     "--launch", json.dumps(launch)],
                                    cwd=base, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    pass_fds=(write_end,), start_new_session=True)
    finally:
        os.close(write_end)
    try:
        with os.fdopen(read_end) as status:
            for line in status:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if "say" in msg:
                    say(msg["say"])
                elif "error" in msg:
                    proc.wait(60)
                    raise MeshError(msg["error"])
                elif msg.get("ready"):
                    return load_state(base)
    except BaseException:
        if proc.poll() is None:  # interrupted: the supervisor stops what it started
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise
    try:
        code = proc.wait(10)
    except subprocess.TimeoutExpired:
        code = None
    raise MeshError(f"the mesh supervisor exited (code {code}) while starting the mesh; "
                    f"see {log_path}:\n{_tail(str(log_path))}")


def _main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {SUPERVISOR_MODULE}",
                                     description="Start the local mesh and keep it running until SIGTERM "
                                                 "(started by `schedmesh up --detach`).")
    parser.add_argument("--launch", required=True, help="JSON: keyword arguments of launch_services")
    parser.add_argument("--status-fd", type=int, default=-1, help="pipe for progress and readiness (JSON lines)")
    args = parser.parse_args(argv)
    launch = json.loads(args.launch)
    status = os.fdopen(args.status_fd, "w") if args.status_fd >= 0 else None

    def tell(**msg) -> None:
        nonlocal status
        if status is None:
            return
        try:
            status.write(json.dumps(msg) + "\n")
            status.flush()
        except OSError:  # `up` is gone (interrupted): only the log remains
            status = None

    def log(line: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}", file=sys.stderr, flush=True)

    def progress(line: str) -> None:
        log(line)
        tell(say=line)

    from schedmesh.local.launch import launch_services
    base = Path(launch["base"])
    sup = Supervisor(Path(launch["log_dir"]), policy=RestartPolicy.from_env(start_timeout=launch.get("timeout", 120.0)),
                     say=log)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sup.request_stop())
    log(f"supervisor pid {os.getpid()} starting the mesh in {base}")
    try:
        state = launch_services(sup, say=progress, detached=True, **launch)
    except BaseException as e:  # noqa: BLE001 - reported to `up`, then everything started is stopped
        if not isinstance(e, MeshError):
            log(traceback.format_exc())
        tell(error=str(e) if isinstance(e, MeshError) else f"the mesh supervisor failed: {e!r}")
        sup.stop_all(grace=5, log=log)
        _forget_state(base)
        return 2
    tell(ready=True)
    if status is not None:
        status.close()
        status = None
    log(f"mesh running: scheduler {state.scheduler}, broker {state.bootstrap}; supervising")
    sup.wake_on_child_exit()
    sup.supervise()
    log("stopping the mesh")
    sup.stop_all(log=log)
    _forget_state(base)
    log(f"mesh stopped; {stopped_note(state)}")
    return 0


def _forget_state(base: Path) -> None:
    """Remove the state file if it still describes this supervisor's mesh."""
    path = state_path(base)
    try:
        if MeshState.load(path).supervisor_pid == os.getpid():
            path.unlink(missing_ok=True)
    except (OSError, ValueError, TypeError):
        pass


if __name__ == "__main__":
    sys.exit(_main())
