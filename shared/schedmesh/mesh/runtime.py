"""What every mesh service process shares: a gRPC server with health checking and graceful
shutdown, Prometheus /metrics, logs in kube's formats, tracing from OTEL_* variables, and a
ClusterCache fed from the event bus.

Environment:

* ``SCHEDMESH_HOST`` / the port argument: where the gRPC server listens.
* ``SCHEDMESH_METRICS_PORT``: the /metrics port on the same host; 0 (default) picks a free
  one (``ServiceProcess.metrics_port`` tells which, and the start is logged); -1 turns the
  endpoint off.
* ``SCHEDMESH_LOG_FORMAT`` (text | json), ``SCHEDMESH_VERBOSITY``, ``SCHEDMESH_LOG_LEVEL``:
  see :mod:`schedmesh.telemetry.logs`.
* ``SCHEDMESH_TLS_CA`` / ``SCHEDMESH_TLS_CERT`` / ``SCHEDMESH_TLS_KEY``: serve mutual TLS and
  check callers' identities (schedmesh.security); without them the server is plaintext, which
  is allowed on a loopback address only. ``SCHEDMESH_API_TOKEN(_FILE)``: the Scheduler API's token.
* ``SCHEDMESH_GC_THRESHOLDS``: the cyclic garbage collector's thresholds (tune_gc).
* ``SCHEDMESH_GC_FREEZE``: 0 keeps a cache's long-lived state in the collector's generations
  (HeapFreezer; default 1: frozen as it grows).
* ``SCHEDMESH_WATCHDOG_SECONDS``: the event-loop watchdog (schedmesh.mesh.watchdog): once the
  loop has not run for this long (default 120; 0: off), the process logs every thread's stack
  and exits with code 70 (WATCHDOG_EXIT_CODE), so Compose, Kubernetes or `schedmesh up` restart it.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from typing import Awaitable, Callable, Iterable, Optional

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from schedmesh.bus import EventConsumer, Record
from schedmesh.mesh import cpu_affinity
from schedmesh.mesh.cluster_cache import STATE_TOPICS, ClusterCache
from schedmesh.mesh.watchdog import LoopWatchdog
from schedmesh.security.credentials import TLSFiles, channel, is_loopback, token_from_env
from schedmesh.security.identity import allowed_callers
from schedmesh.security.interceptors import BearerTokenInterceptor, CallerIdentityInterceptor, with_check
from schedmesh.telemetry import (
    metrics,
    server_interceptor,
    setup_logging,
    setup_tracing,
    shutdown_tracing,
)

log = logging.getLogger("schedmesh.mesh")

MAX_MESSAGE_BYTES = 64 << 20  # a gRPC message, either way, between the mesh's processes and from its clients
# HTTP/2 flow control with a fixed window instead of grpc's bandwidth-delay-product probing,
# as Go's and Java's gRPC do once a window is set: each burst a receiver read cost a probe PING,
# its ACK and settings updates, waking both sides' grpc threads (a shard's CPU a pod was about 15 %
# lower without; benchmarks in the README). 4 MiB is the window that probing settles on when memory
# is not short, max(4 MiB, 2 x BDP), and more than a mesh in one cluster needs (1 Gbit/s x 1 ms is
# 125 KB).
FLOW_CONTROL_WINDOW_BYTES = 4 << 20
GRPC_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", FLOW_CONTROL_WINDOW_BYTES)]


def peer_channel(target: str, aio: bool = False):
    """This process's channel to another of the mesh's processes (the CLI's, with the user's
    certificate and token, is schedmesh.security.local.mesh_channel): mutual TLS with this
    process's certificate when SCHEDMESH_TLS_* name one (the callee admits only the identities it
    expects), plaintext otherwise (a local mesh on loopback); GRPC_OPTIONS either way."""
    return channel(target, TLSFiles.from_env(), GRPC_OPTIONS, aio=aio)


def configure_logging(service: str) -> None:
    """klog-style text lines (JSON with SCHEDMESH_LOG_FORMAT=json) on stderr, each with the
    current span's trace_id/span_id and the pod given in ``extra={"pod": ...}``; levels from
    SCHEDMESH_VERBOSITY (kube's -v) or SCHEDMESH_LOG_LEVEL (schedmesh.telemetry.logs)."""
    setup_logging(service)


def metrics_port_from_env(default: int = 0) -> Optional[int]:
    """SCHEDMESH_METRICS_PORT: a port, 0 for a free one, -1 for no /metrics (None)."""
    raw = os.environ.get("SCHEDMESH_METRICS_PORT", "").strip()
    port = int(raw) if raw else default
    return None if port < 0 else port


#: Python's are 700, 10, 10. A follower holds every node and pod, hundreds of thousands of objects,
#: and allocates a few dozen per pod record: at the defaults a full collection ran every few
#: thousand pods and each took 0.15-0.25 s, so collecting was 20 % of the mesh's CPU while
#: scheduling (SchedulingBasic, 5,000 nodes: 3.0-5.4 s of ~20 s; 1.2-2.0 s with these).
DEFAULT_GC_THRESHOLDS = (20_000, 20, 20)


def tune_gc() -> tuple[int, ...]:
    """Set the collector's thresholds from SCHEDMESH_GC_THRESHOLDS ("20000,20,20"; "default":
    Python's own) or DEFAULT_GC_THRESHOLDS; the thresholds in force. A garbage cycle then lives
    a little longer (up to 20,000 allocations), which costs a few MiB at most."""
    raw = os.environ.get("SCHEDMESH_GC_THRESHOLDS", "").strip()
    if raw == "default":
        return gc.get_threshold()
    try:
        thresholds = tuple(int(x) for x in raw.split(",")) if raw else DEFAULT_GC_THRESHOLDS
        if len(thresholds) != 3 or min(thresholds) < 1:
            raise ValueError
    except ValueError:
        raise SystemExit(f"SCHEDMESH_GC_THRESHOLDS={raw!r}: want three positive integers, e.g. 20000,20,20, "
                         "or 'default'") from None
    gc.set_threshold(*thresholds)
    return thresholds


def freezing_from_env() -> bool:
    """SCHEDMESH_GC_FREEZE: 1 / on / true (the default) or 0 / off / false (HeapFreezer)."""
    raw = os.environ.get("SCHEDMESH_GC_FREEZE", "").strip().lower()
    if raw in ("", "1", "on", "true"):
        return True
    if raw in ("0", "off", "false"):
        return False
    raise SystemExit(f"SCHEDMESH_GC_FREEZE={raw!r}: want 1 (freeze a cache's state as it grows) or 0")


class HeapFreezer:
    """Takes a cache's long-lived state out of the cyclic collector's reach (gc.freeze) each time
    the cache has grown by a quarter since the last time (and by at least `minimum` objects).

    Every full collection scans every tracked object: a process holding 5,000 nodes and 30,000
    pods tracks about 780,000, and one full collection of them took 430-545 ms. Under load (60 s
    at `--rate 300`) every service paused 553-1,314 ms in a full collection and 150-352 ms in a
    middle one (which scanned the nodes read since the last); frozen as the cache grows, no
    pause was longer than 39 ms. Frozen objects are never scanned again, and are still freed
    when their last reference goes: a cache's pods, nodes and indexes hold no reference cycles
    (test_heap_freezer), so deleting them frees them as before. What a freeze keeps for good is
    only cyclic garbage that was alive at that moment, and freezes come at growth by a quarter:
    a few dozen from an empty cache to a million objects. gc.freeze moves the generations' lists
    whole: it costs nothing."""

    def __init__(self, size: Callable[[], int], growth: float = 0.25, minimum: int = 1000) -> None:
        self._size = size
        self.growth, self.minimum = growth, minimum
        self.enabled = freezing_from_env()
        self.frozen_at = 0  # the cache's size at the last freeze
        self.freezes = 0

    def after_apply(self) -> bool:
        """Call after records were applied; whether it froze."""
        if not self.enabled:
            return False
        n = self._size()
        if n - self.frozen_at < max(self.minimum, self.frozen_at * self.growth):
            return False
        gc.freeze()
        self.frozen_at, self.freezes = n, self.freezes + 1
        if log.isEnabledFor(logging.DEBUG):  # gc.get_freeze_count walks every frozen object: 4 % of a busy queue-manager
            log.debug("froze the heap's %d objects: the cache holds %d pods and nodes", gc.get_freeze_count(), n)
        return True


_HEALTH_METHODS = "/grpc.health.v1.Health/"


class ServingGate(grpc.aio.ServerInterceptor):
    """UNAVAILABLE for every call but health checks while the service does not serve: from the
    server's start until its caches are replayed (set_serving(True)), and from set_serving(False)
    at shutdown. The server listens before the caches are read, and a call in that window was
    answered from an empty cache: a restarted queue-manager listed no pods and would have
    planned an Apply against nothing; a restarted binder's empty ledger would have bound a pod
    already bound. Every caller sends such a call again: the CLI while the supervisor restarts
    the queue-manager, the binding cycle, the shard fan-outs' retried attempts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.open = False

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or self.open or handler_call_details.method.startswith(_HEALTH_METHODS):
            return handler

        async def check(context) -> None:
            if not self.open:
                await context.abort(grpc.StatusCode.UNAVAILABLE,
                                    f"{self.name} is not serving: starting (its caches are being read) "
                                    "or stopping; send the call again")
        return with_check(handler, check)


class ServiceProcess:
    """A service's gRPC server, health status and shutdown handling."""

    def __init__(self, name: str, port: int, host: Optional[str] = None,
                 metrics_port: Optional[int] = None) -> None:
        # Local runs listen on loopback only; containers set SCHEDMESH_HOST=0.0.0.0.
        host = host or os.environ.get("SCHEDMESH_HOST", "127.0.0.1")
        self.name, self.host, self.port = name, host, port
        # the requested /metrics port (None: off); after start(), the bound one
        self.metrics_port: Optional[int] = metrics_port if metrics_port is not None else metrics_port_from_env()
        self.metrics_server: Optional[metrics.MetricsServer] = None
        configure_logging(name)
        cpus = cpu_affinity.pin_from_env()  # before this process starts its threads (cpu_affinity)
        if cpus is not None:
            log.info("running on CPU(s) %s (%s)", cpu_affinity.format_cpus(cpus), cpu_affinity.CPUS_ENV)
        setup_tracing(name)
        tune_gc()
        self.tls: Optional[TLSFiles] = TLSFiles.from_env()
        # who may call what depends on this server's own identity (its certificate's CN)
        rules = allowed_callers(self.tls.identity() if self.tls is not None else None)
        self.gate = ServingGate(name)
        interceptors = [server_interceptor(), self.gate,
                        CallerIdentityInterceptor(rules, tls_required=self.tls is not None)]
        token = token_from_env()
        if token:
            interceptors.append(BearerTokenInterceptor(token))
        self.server = grpc.aio.server(interceptors=interceptors, options=GRPC_OPTIONS)
        self.health = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        # started with the server; a hung event loop ends the process (so it is restarted)
        self.watchdog = LoopWatchdog.from_env(name)

    async def set_serving(self, serving: bool, service: str = "") -> None:
        """The health status (of `service`, "" for the whole process); the whole process's also
        opens or closes its calls (ServingGate)."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        if not service:
            self.gate.open = serving
        r = self.health.set(service, status)
        if asyncio.iscoroutine(r):
            await r

    def spawn(self, coro: Awaitable, name: str) -> asyncio.Task:
        t = asyncio.create_task(coro, name=name)
        self._tasks.append(t)
        return t

    async def start(self) -> None:
        address = f"{self.host}:{self.port}"
        if self.tls is not None:
            bound = self.server.add_secure_port(address, self.tls.server_credentials())
        elif is_loopback(self.host):
            log.warning("%s: plaintext gRPC on %s (loopback only): callers are not authenticated", self.name, address)
            bound = self.server.add_insecure_port(address)
        else:
            raise RuntimeError(f"{self.name}: refusing plaintext gRPC on {self.host} (not a loopback address); "
                               "set SCHEDMESH_TLS_CA, SCHEDMESH_TLS_CERT and SCHEDMESH_TLS_KEY")
        if bound == 0:
            raise RuntimeError(f"{self.name}: cannot listen on {self.host}:{self.port}")
        self.port = bound
        self._start_metrics()
        await self.set_serving(False)
        await self.server.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        log.info("%s listening on %s:%d (%s)", self.name, self.host, self.port,
                 "mutual TLS" if self.tls is not None else "plaintext")
        self.watchdog.start()

    def _start_metrics(self) -> None:
        if self.metrics_port is None or self.metrics_server is not None:
            return
        try:
            self.metrics_server = metrics.start_metrics_server(self.metrics_port, self.host)
        except OSError as e:
            raise RuntimeError(f"{self.name}: cannot serve metrics on {self.host}:{self.metrics_port}: {e}") from e
        self.metrics_port = self.metrics_server.port
        log.info("%s metrics on %s", self.name, self.metrics_server.url)

    def _stop_metrics(self) -> None:
        if self.metrics_server is not None:
            self.metrics_server.close()
            self.metrics_server = None

    async def wait_and_stop(self, cleanup: Optional[Callable[[], Awaitable]] = None, grace: float = 5.0) -> None:
        await self.stopping.wait()
        log.info("%s shutting down", self.name)
        await self.set_serving(False)
        await self.server.stop(grace)
        if cleanup is not None:
            await cleanup()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Watched up to here (a shutdown that hangs the loop is a hang too); what follows (the
        # trace exporter's flush, asyncio.run's teardown, the interpreter's exit) may block or
        # outlive the loop without being one.
        self.watchdog.stop()
        self._stop_metrics()
        shutdown_tracing()


class CacheFollower:
    """Replays the state topics into a ClusterCache, then follows them."""

    def __init__(self, bootstrap: str, cache: ClusterCache, client_id: str,
                 topics: Iterable[str] = STATE_TOPICS,
                 on_record: Optional[Callable[[Record], None]] = None,
                 on_restart: Optional[Callable[[], Awaitable]] = None,
                 **consumer_options) -> None:
        """`consumer_options`: EventConsumer's, e.g. bus.watcher_options() for a cache off the
        scheduling path (the default is the scheduling path's pace)."""
        self.cache = cache
        self.on_record = on_record
        self._user_restart = on_restart
        topics = list(topics)
        self.topics = frozenset(topics)
        self.consumer = EventConsumer(bootstrap, topics, client_id=client_id, on_restart=self._restarted,
                                      **consumer_options)
        # whoever waits for offsets this cache has not read (ClusterCache.wait_for) wakes a dozing
        # consumer and ends its pause between fetches; expect_records(now=False) only wakes it
        cache.wakers.append(lambda now: self.consumer.hurry() if now else self.consumer.wake())
        self._lag = metrics.ConsumerLagSampler(client_id)
        self.heap = HeapFreezer(lambda: len(cache.pods) + cache.snapshot.num_nodes())

    def has_read(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the cache holds the record at `offset` (True for a topic it does not follow): an
        EventProducer's read_back. Without the cache's lock, which a scheduling cycle may hold for
        long, on the event loop; a dict lookup is atomic."""
        if topic not in self.topics:
            return True
        return self.cache.offsets.get(f"{topic}/{partition}", 0) > offset

    async def _restarted(self) -> None:
        # A memory-only broker came back empty: offsets start again from 0. Keep the cached
        # objects (their owners re-publish them) but forget the old offsets (a view carrying them
        # would make every shard wait for offsets the new broker never reaches). Off the event
        # loop: a scheduling cycle may hold the cache's lock.
        def forget_offsets() -> None:
            with self.cache.lock:
                self.cache.offsets.clear()
        await asyncio.to_thread(forget_offsets)
        if self._user_restart is not None:
            await self._user_restart()

    def _apply(self, r: Record) -> bool:
        """Whether the record was applied (a tombstone or a bad record is not)."""
        applied = False
        if r.value is not None:
            try:
                self.cache.apply(r.topic, r.value, r.offset, r.partition)
                applied = True
            except Exception:  # a bad record must not stop the cache
                log.exception("cannot apply record %s/%d@%d", r.topic, r.partition, r.offset)
        if self.on_record is not None:
            self.on_record(r)
        return applied

    def apply_records(self, records: list[Record]) -> None:
        """Apply one batch from the consumer (thread-safe as ClusterCache.apply is); for
        owners that run their own read loop instead of :meth:`follow`."""
        if records:
            metrics.observe_batch("cache_apply", len(records))
            self._apply_all(records)

    def _apply_all(self, records: list[Record]) -> None:
        applied: dict[str, int] = {}
        for r in records:
            if self._apply(r):
                applied[r.topic] = applied.get(r.topic, 0) + 1
        for topic, n in applied.items():  # one counter update per topic and batch, not per record
            metrics.observe_records_applied(topic, n)
        if applied:
            self.heap.after_apply()

    async def sample_lag(self) -> None:
        """Update schedmesh_kafka_consumer_lag; cheap, does the work at most once a second.
        Call it after each getmany when not using :meth:`follow`."""
        # EventConsumer keeps its aiokafka consumer private (bus/ is not this module's).
        await self._lag.sample(getattr(self.consumer, "_consumer", None))

    async def start(self, timeout: float = 60.0) -> None:
        await self.consumer.start(timeout)
        self._apply_all(await self.consumer.catch_up(timeout))
        await self.sample_lag()

    async def follow(self) -> None:
        while True:
            self.apply_records(await self.consumer.getmany(timeout=0.5))
            await self.sample_lag()

    async def stop(self) -> None:
        await self.consumer.stop()
