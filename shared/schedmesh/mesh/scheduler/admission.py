"""Reading and admitting an applied manifest (the API server's decoding and the admission that
needs no live pod: Priority, DefaultTolerationSeconds), and encoding the records to publish, in
a worker process for large manifests.

The queue-manager's scheduling loop shares one interpreter lock with its API: reading a
500-pod manifest in a thread of that process took the lock from the loop for as long as it
took (a seventh of the queue-manager's CPU with all pods applied at once), and encoding its
pods a tenth. A worker process does both beside the loop; objects cross pickled (a fifth of
the cost of reading or encoding them). Small manifests (`--rate`'s 10-pod Applies) stay in this
process: a round trip to the worker would cost more than it frees."""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import os
import stat
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from typing import Iterable, Optional

try:
    import fcntl
except ImportError:  # (not on Windows)
    fcntl = None

from schedmesh.api.load import ManifestError, Manifests, admit_all, api_server_name_warnings, load_text
from schedmesh.api.types import PriorityClass
from schedmesh.eviction.taint_eviction import default_toleration_seconds
from schedmesh.mesh import cpu_affinity, records

log = logging.getLogger("schedmesh.queue_manager")

# Manifests at least this long (characters) are read in the worker process: about 60 pods.
WORKER_MIN_CHARS = 32 * 1024
# Applies publishing at least this many pods and nodes are encoded in the worker process.
WORKER_MIN_OBJECTS = 64


def admit_manifest(text: str, source: str, strict_names: bool,
                   classes: Iterable[PriorityClass]) -> tuple[Manifests, list[str]]:
    """The objects of a manifest, admitted, and the warnings about their names; ManifestError or
    AdmissionError when it cannot be applied. `classes`: the PriorityClasses that exist."""
    m = load_text(text, source, strict_names=strict_names)
    warnings = [] if strict_names else api_server_name_warnings(m)
    admit_all(m, classes)
    # kube-apiserver's DefaultTolerationSeconds admission (not-ready, unreachable: 300 s), once for
    # the replicas sharing a list (a pod's spec is never edited in place): they then share the
    # result, and records.PodMessages encodes them once
    defaulted: dict[int, tuple[list, list]] = {}
    for p in m.pods:
        done = defaulted.get(id(p.tolerations))
        if done is None:  # (the input list kept alive: its id stays its own)
            done = defaulted[id(p.tolerations)] = (p.tolerations, default_toleration_seconds(p.tolerations))
        p.tolerations = done[1]
    return m, warnings


def _exit_with(parent: int) -> None:
    """The worker's initializer: it ends when the queue-manager does, killed or not (a worker
    blocked on its call queue outlives a killed parent, and a restarted queue-manager starts its own).
    It runs on the queue-manager's helpers' CPUs, not on the scheduler's own (cpu_affinity)."""
    cpu_affinity.pin_from_env(cpu_affinity.HELPER_CPUS_ENV)
    _widen_pipes()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None  # (Linux only)
PIPE_BYTES = 1 << 20  # /proc/sys/fs/pipe-max-size's default: what any process may ask for


def _pipes() -> list[int]:
    """This process's pipes (their file descriptors; none where /proc is not Linux's)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    fds = []
    for name in names:
        try:
            if stat.S_ISFIFO(os.fstat(int(name)).st_mode):
                fds.append(int(name))
        except OSError:
            pass  # closed meanwhile (listdir's own)
    return fds


def _widen_pipes() -> None:
    """Widen the pipes this worker talks to the queue-manager through (its only pipes but for
    inherited stdio) from 64 KiB to 1 MiB: a 500-pod manifest or its pickled objects then cross in
    one write instead of four or more, each of which waited for the other side's reader, and on the
    queue-manager's side for the interpreter lock its scheduling thread holds (with 4 + 4, an
    encoding's records came back in 1.5 ms instead of 9.6, an admission's objects in 13 instead of 18.5)."""
    if _F_SETPIPE_SZ is None:
        return
    for fd in _pipes():
        try:
            fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # a limit lower than the default: kept as is


class Admission:
    """admit_manifest off the event loop: in a thread, or for a large manifest in one worker
    process (started with the queue-manager, started again if it dies);
    records.manifest_records there too for a large Apply.

    A manifest whose reading kills the worker is read once more in a new worker (the first may
    have died of something else), then refused: it is never read in the queue-manager itself,
    so a manifest made to exhaust memory costs the worker, not the scheduler."""

    def __init__(self, worker_min_chars: int = WORKER_MIN_CHARS, worker_min_objects: int = WORKER_MIN_OBJECTS) -> None:
        self.worker_min_chars = worker_min_chars
        self.worker_min_objects = worker_min_objects
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the worker now (it imports the loader: about a second), not on the first large Apply."""
        self._worker().submit(int, 0)

    def _worker(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # spawn: forking a process with gRPC's and Kafka's threads running is unsafe
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    1, mp_context=multiprocessing.get_context("spawn"), initializer=_exit_with, initargs=(os.getpid(),))
            return self._pool

    async def admit(self, text: str, source: str, strict_names: bool,
                    classes: list[PriorityClass]) -> tuple[Manifests, list[str]]:
        if len(text) < self.worker_min_chars:
            return await asyncio.to_thread(admit_manifest, text, source, strict_names, classes)
        for attempt in (1, 2):
            try:
                return await self._in_worker(admit_manifest, text, source, strict_names, classes)
            except BrokenProcessPool:
                log.warning("the admission worker process died reading %s (%d characters, attempt %d)",
                            source, len(text), attempt)
        raise ManifestError(source, "", "could not be read: the process reading it died twice "
                                        "(a manifest too large for the memory it may use?); nothing was applied")

    async def encode(self, m: Manifests, source: str,
                     updated_pods: frozenset[str] = frozenset()) -> list[tuple[str, str, bytes]]:
        """records.manifest_records(m, source, updated_pods): in the worker for many pods and
        nodes, else on the caller's event loop (a few pods take less than handing them over)."""
        if len(m.pods) + len(m.nodes) < self.worker_min_objects:
            return records.manifest_records(m, source, updated_pods)
        try:
            return await self._in_worker(records.manifest_records, m, source, updated_pods)
        except BrokenProcessPool:  # objects already read and admitted: safe to encode here
            log.warning("the admission worker process died encoding %d pods and %d nodes; encoding them here",
                        len(m.pods), len(m.nodes))
            return await asyncio.to_thread(records.manifest_records, m, source, updated_pods)

    async def _in_worker(self, fn, *args):
        """fn(*args) in the worker; BrokenProcessPool when it died (the next call starts another)."""
        pool = self._worker()
        try:
            return await asyncio.wrap_future(pool.submit(fn, *args))
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise

    def stop(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
