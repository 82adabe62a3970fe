"""Prometheus metrics for schedmesh: kube-scheduler v1.35's own metrics plus the mesh's.

The ``scheduler_*`` metrics carry kube-scheduler v1.35.4's names, label names, buckets and
help texts (pkg/scheduler/metrics/metrics.go). kube's component-base prefixes every help
text with the stability level (``[STABLE] ...``), so the help texts here do too: a scrape of
schedmesh reads like a scrape of kube-scheduler, and kube's dashboards and alerts work
unchanged. The ``schedmesh_*`` metrics describe the mesh itself.

Scheduler code calls one function per event, e.g.::

    from schedmesh.telemetry import metrics
    metrics.observe_attempt(metrics.SCHEDULED, profile, seconds)
    metrics.set_pending_pods(active=3, backoff=1, unschedulable=0, gated=2)

Every service serves ``/metrics`` through :class:`schedmesh.mesh.runtime.ServiceProcess`
(:func:`start_metrics_server`); :func:`serve_metrics` does the same for other programs.
All metrics live in prometheus_client's default registry, next to its process_* and
python_* collectors (kube-scheduler's go_* and process_* counterparts).
"""
from __future__ import annotations

import collections
import contextlib
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any, Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import numpy as np
import prometheus_client
from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client import Histogram as _CountingHistogram

log = logging.getLogger(__name__)

# kube-scheduler exposes no *_created series; neither do we.
prometheus_client.disable_created_metrics()


def exponential_buckets(start: float, factor: float, count: int) -> list[float]:
    """Go's prometheus.ExponentialBuckets, multiplied step by step as Go does (same floats)."""
    buckets = []
    for _ in range(count):
        buckets.append(start)
        start *= factor
    return buckets


class Histogram(_CountingHistogram):
    """prometheus_client's Histogram whose `observe` only queues the value: the queued values
    are counted into the buckets and the sum when the series is read (a scrape, `collect`,
    `REGISTRY.get_sample_value`) or once COUNT_AT are waiting. kube-scheduler keeps metrics off
    its scheduling path the same way (its MetricAsyncRecorder buffers observations and flushes
    them). A counted observation took two locked increments and a walk of the buckets, about
    1 us, and the queue-manager made some fifteen per pod; queuing one is a deque append.
    What a scrape shows is the same: every observation, in the same buckets."""

    COUNT_AT = 4096  # values waiting at most (a series nobody scrapes stays small)
    _pending: Optional[collections.deque] = None  # the labelled parent has none: it is not observed

    def _metric_init(self) -> None:
        super()._metric_init()
        self._pending = collections.deque()
        self._counting = threading.Lock()
        self._bounds = np.array(self._upper_bounds, dtype=float)

    def observe(self, amount: float, exemplar: Optional[dict[str, str]] = None) -> None:
        pending = self._pending
        if pending is None or exemplar:
            self._count_pending()
            super().observe(amount, exemplar)  # the parent's error, or the exemplar kept
            return
        pending.append(amount)  # atomic: observers in several threads need no lock
        if len(pending) >= self.COUNT_AT:
            self._count_pending()

    def _count_pending(self) -> None:
        if self._pending is None:
            return
        with self._counting:
            values = [self._pending.popleft() for _ in range(len(self._pending))]
            if not values:
                return
            # the first bucket whose bound is >= the value: `amount <= bound` as observe() counts
            index = np.searchsorted(self._bounds, np.array(values, dtype=float), side="left")
            for i, count in zip(*np.unique(index[index < len(self._bounds)], return_counts=True)):
                self._buckets[int(i)].inc(int(count))
            self._sum.inc(math.fsum(values))

    def _child_samples(self):
        self._count_pending()
        return super()._child_samples()


# ----------------------------------------------------------------------- label values
# scheduler_schedule_attempts_total / scheduler_scheduling_attempt_duration_seconds {result}
SCHEDULED, UNSCHEDULABLE, ERROR = "scheduled", "unschedulable", "error"
# scheduler_pending_pods / scheduler_queue_incoming_pods_total {queue}
QUEUES = ("active", "backoff", "unschedulable", "gated")
# {extension_point}, as kube spells them
EXTENSION_POINTS = (
    "PreEnqueue", "PreFilter", "Filter", "PreFilterExtensionAddPod", "PreFilterExtensionRemovePod",
    "PostFilter", "PreScore", "Score", "ScoreExtensionNormalize", "PreBind",
    "PreBindPreFlight", "Bind", "PostBind", "Reserve", "Unreserve", "Permit", "Sign",
)

# ------------------------------------------------------------------- kube-scheduler's
SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "[STABLE] Number of attempts to schedule pods, by the result. 'unschedulable' means a pod "
    "could not be scheduled, while 'error' means an internal scheduler problem.",
    ["result", "profile"],
)
SCHEDULING_ATTEMPT_DURATION = Histogram(
    "scheduler_scheduling_attempt_duration_seconds",
    "[STABLE] Scheduling attempt latency in seconds (scheduling algorithm + binding)",
    ["result", "profile"],
    buckets=exponential_buckets(0.001, 2, 15),
)
POD_SCHEDULING_SLI_DURATION = Histogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "[BETA] E2e latency for a pod being scheduled, from the time the pod enters the scheduling "
    "queue and might involve multiple scheduling attempts.",
    ["attempts"],
    buckets=exponential_buckets(0.01, 2, 20),
)
POD_SCHEDULING_ATTEMPTS = Histogram(
    "scheduler_pod_scheduling_attempts",
    "[STABLE] Number of attempts to successfully schedule a pod.",
    buckets=exponential_buckets(1, 2, 5),
)
PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "[STABLE] Number of pending pods, by the queue type. 'active' means number of pods in "
    "activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods "
    "in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the "
    "number of unschedulable pods that the scheduler never attempted to schedule because they "
    "are gated.",
    ["queue"],
)
QUEUE_INCOMING_PODS = Counter(
    "scheduler_queue_incoming_pods_total",
    "[STABLE] Number of pods added to scheduling queues by event and queue type.",
    ["queue", "event"],
)
FRAMEWORK_EXTENSION_POINT_DURATION = Histogram(
    "scheduler_framework_extension_point_duration_seconds",
    "[STABLE] Latency for running all plugins of a specific extension point.",
    ["extension_point", "status", "profile"],
    buckets=exponential_buckets(0.0001, 2, 12),
)
PLUGIN_EXECUTION_DURATION = Histogram(
    "scheduler_plugin_execution_duration_seconds",
    "[ALPHA] Duration for running a plugin at a specific extension point.",
    ["plugin", "extension_point", "status"],
    buckets=exponential_buckets(0.00001, 1.5, 20),
)
PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts_total",
    "[STABLE] Total preemption attempts in the cluster till now",
)
PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "[STABLE] Number of selected preemption victims",
    buckets=exponential_buckets(1, 2, 7),
)

# ------------------------------------------------------------------------ the mesh's
SHARD_REQUEST_DURATION = Histogram(
    "schedmesh_shard_request_duration_seconds",
    "Time a shard worker spends on one Filter, Score, FilterBatch or ScoreBatch request, in seconds.",
    ["shard", "method"],
    buckets=exponential_buckets(0.0005, 2, 16),
)
BATCH_SIZE = Histogram(
    "schedmesh_batch_size",
    "Number of items handled together in one batch, by pipeline stage.",
    ["stage"],
    buckets=exponential_buckets(1, 2, 14),
)
REPLICA_ANSWERS = Counter(
    "schedmesh_replica_answers_total",
    "Scheduling cycles whose Filter and raw Score came from their template's kept answers "
    "(mesh/replicas.py), and answers built.",
    ["event"],
)
KAFKA_CONSUMER_LAG = Gauge(
    "schedmesh_kafka_consumer_lag",
    "Records a consumer has not read yet (high watermark minus position), summed over the "
    "topic's assigned partitions.",
    ["consumer", "topic"],
)
BINDER_CONFLICTS = Counter(
    "schedmesh_binder_conflicts_total",
    "Bind requests the binder refused, by reason.",
    ["reason"],
)
EVICTIONS = Counter(
    "schedmesh_evictions_total",
    "Pods evicted, by reason.",
    ["reason"],
)
FETCH_GAPS = Counter(
    "schedmesh_kafka_fetch_gaps_total",
    "Fetches that skipped offsets of a partition and were made again from the hole, by topic "
    "(the embedded broker sometimes leaves out a record being written; bus/consumer.py).",
    ["topic"],
)
RECORDS_APPLIED = Counter(
    "schedmesh_records_applied_total",
    "Event-bus records applied to a cluster cache replica, by topic.",
    ["topic"],
)

SCHEDULER_METRICS = (
    SCHEDULE_ATTEMPTS, SCHEDULING_ATTEMPT_DURATION, POD_SCHEDULING_SLI_DURATION,
    POD_SCHEDULING_ATTEMPTS, PENDING_PODS, QUEUE_INCOMING_PODS, FRAMEWORK_EXTENSION_POINT_DURATION,
    PLUGIN_EXECUTION_DURATION, PREEMPTION_ATTEMPTS, PREEMPTION_VICTIMS,
)
MESH_METRICS = (
    SHARD_REQUEST_DURATION, BATCH_SIZE, KAFKA_CONSUMER_LAG, BINDER_CONFLICTS, EVICTIONS,
    RECORDS_APPLIED, FETCH_GAPS, REPLICA_ANSWERS,
)
ALL_METRICS = SCHEDULER_METRICS + MESH_METRICS


def metric_names() -> dict[str, str]:
    """Every metric defined here: exposed name -> type (counter, gauge, histogram)."""
    names = {}
    for m in ALL_METRICS:
        for family in m.describe():
            name = family.name + "_total" if family.type == "counter" else family.name
            names[name] = family.type
    return names


# --------------------------------------------------------------------- recording helpers
def status_label(status: Any) -> str:
    """kube's status label: None -> "Success"; a framework Status or Code -> its kube name
    ("Unschedulable", "UnschedulableAndUnresolvable", "Error", "Skip", ...); a str as is."""
    if status is None:
        return "Success"
    if isinstance(status, str):
        return status
    code = getattr(status, "code", status)
    return str(code)


_CHILDREN: dict[tuple, Any] = {}


def _child(metric, *values: str):
    """metric.labels(*values), kept: labels() takes a lock and checks its values on every call,
    and the queue-manager observes several labelled series per pod (a dict lookup here)."""
    key = (id(metric), values)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*values)
    return child


def observe_attempt(result: str, profile: str, seconds: float) -> None:
    """One scheduling attempt ended (scheduling algorithm + binding) with ``result``
    (SCHEDULED, UNSCHEDULABLE or ERROR) for the pod's ``profile`` (its schedulerName)."""
    _child(SCHEDULE_ATTEMPTS, result, profile).inc()
    _child(SCHEDULING_ATTEMPT_DURATION, result, profile).observe(seconds)


def observe_pod_scheduled(attempts: int, seconds: float) -> None:
    """A pod was bound after ``attempts`` attempts, ``seconds`` after it first entered the
    scheduling queue (kube's SLI: records both pod_scheduling_* metrics)."""
    _child(POD_SCHEDULING_SLI_DURATION, str(attempts)).observe(seconds)
    POD_SCHEDULING_ATTEMPTS.observe(attempts)


def set_pending_pods(*, active: Optional[int] = None, backoff: Optional[int] = None,
                     unschedulable: Optional[int] = None, gated: Optional[int] = None) -> None:
    """The queue's current sizes; queues not given keep their value."""
    for queue, count in (("active", active), ("backoff", backoff),
                         ("unschedulable", unschedulable), ("gated", gated)):
        if count is not None:
            _child(PENDING_PODS, queue).set(count)


def add_pending_pods(queue: str, delta: int) -> None:
    """A pod entered (+1) or left (-1) ``queue`` (active, backoff, unschedulable, gated)."""
    _child(PENDING_PODS, queue).inc(delta)


def observe_incoming_pod(queue: str, event: str) -> None:
    """A pod was added to ``queue`` because of ``event`` (kube's event label, e.g. "PodAdd",
    "ScheduleAttemptFailure", "BackoffComplete", "NodeAdd")."""
    _child(QUEUE_INCOMING_PODS, queue, event).inc()


def observe_extension_point(extension_point: str, status: Any, profile: str, seconds: float) -> None:
    """All plugins of one extension point ran for ``seconds``; ``status`` as status_label."""
    _child(FRAMEWORK_EXTENSION_POINT_DURATION, extension_point, status_label(status), profile).observe(seconds)


def observe_plugin(plugin: str, extension_point: str, status: Any, seconds: float) -> None:
    """One plugin ran at one extension point for ``seconds``. (kube samples this one: it records
    10 % of scheduling cycles, those whose CycleState.record_plugin_metrics is set.)"""
    _child(PLUGIN_EXECUTION_DURATION, plugin, extension_point, status_label(status)).observe(seconds)


def observe_preemption(victims: Optional[int]) -> None:
    """PostFilter tried preemption; ``victims`` is how many it selected (None: no candidate,
    only the attempt is counted, as in kube)."""
    PREEMPTION_ATTEMPTS.inc()
    if victims is not None:
        PREEMPTION_VICTIMS.observe(victims)


def observe_shard_request(shard: str | int, method: str, seconds: float) -> None:
    """One Filter/Score request to ``shard`` (its index or address) took ``seconds``."""
    _child(SHARD_REQUEST_DURATION, str(shard), method).observe(seconds)


@contextlib.contextmanager
def time_shard_request(shard: str | int, method: str) -> Iterator[None]:
    """``with time_shard_request(0, "Filter"): ...`` observes the block's duration (also when it raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        observe_shard_request(shard, method, time.perf_counter() - start)


def observe_batch(stage: str, size: int) -> None:
    """``size`` items went through ``stage`` together (e.g. "bind", "publish", "apply")."""
    _child(BATCH_SIZE, stage).observe(size)


# The binder's refusals that name a pod or a node, by their kind: a label value must not carry
# a name (one series per pod). What a fit plugin says ("Insufficient cpu") is kept as it is.
# (Prefixes: a caller may have cut the reason short.)
_CONFLICT_KINDS = (
    (re.compile(r"pod \S+ is already bound"), "already bound"),
    (re.compile(r"pod \S+ has been deleted"), "pod deleted"),
    (re.compile(r"pod \S+ is being deleted"), "pod being deleted"),
    (re.compile(r'node "'), "node not found"),
)


def binder_conflict_reason(reason: str) -> str:
    """The reason label of a refusal: its kind when it names a pod or node, else its text up to
    the first ':' (at most 60 characters)."""
    for pattern, kind in _CONFLICT_KINDS:
        if pattern.match(reason):
            return kind
    return reason.split(":")[0][:60] or "unknown"


def observe_binder_conflict(reason: str) -> None:
    """The binder refused a bind: ``reason`` is the refusal as answered (binder_conflict_reason
    makes it a label: "already bound", "node not found", "Insufficient cpu", ...)."""
    BINDER_CONFLICTS.labels(binder_conflict_reason(reason)).inc()


def observe_eviction(reason: str) -> None:
    """A pod was evicted (e.g. "Preempted", "TaintManagerEviction", "NodePressure", "API")."""
    EVICTIONS.labels(reason).inc()


def observe_fetch_gap(topic: str) -> None:
    FETCH_GAPS.labels(topic).inc()


def observe_records_applied(topic: str, count: int = 1) -> None:
    """``count`` records of ``topic`` were applied to a cluster cache."""
    _child(RECORDS_APPLIED, topic).inc(count)


def set_consumer_lag(consumer: str, topic: str, lag: int) -> None:
    KAFKA_CONSUMER_LAG.labels(consumer, topic).set(lag)


class ConsumerLagSampler:
    """Sets schedmesh_kafka_consumer_lag from an aiokafka consumer: for every assigned
    partition, the high watermark of the last fetch minus the consumer's position, summed per
    topic. Call :meth:`sample` after each poll; it does the work at most every ``interval``
    seconds, and only reads what the consumer already knows (no broker round trip)."""

    def __init__(self, consumer_name: str, interval: float = 1.0) -> None:
        self.consumer_name = consumer_name
        self.interval = interval
        self._last = float("-inf")

    async def sample(self, kafka_consumer: Any) -> Optional[dict[str, int]]:
        """The lag per topic it set, or None when skipped (too soon, or no consumer)."""
        now = time.monotonic()
        if kafka_consumer is None or now - self._last < self.interval:
            return None
        self._last = now
        lags: dict[str, int] = {}
        try:
            for tp in kafka_consumer.assignment():
                high = kafka_consumer.highwater(tp)
                if high is None:  # nothing fetched from this partition yet
                    continue
                position = await kafka_consumer.position(tp)
                lags[tp.topic] = lags.get(tp.topic, 0) + max(0, high - position)
        except Exception as exc:  # noqa: BLE001 - consumer closing or rebalancing: try next time
            log.debug("consumer lag not sampled: %r", exc)
            return None
        for topic, lag in lags.items():
            set_consumer_lag(self.consumer_name, topic, lag)
        return lags


# ---------------------------------------------------------------------------- serving
class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        """A scrape every few seconds is not worth a line of the service's log."""


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds the process's exit


class MetricsServer:
    """prometheus_client's /metrics WSGI app on a threading HTTP server, in a daemon thread (a
    scrape never waits for the event loop). Not prometheus_client.start_http_server: its thread
    wakes every 0.5 s to look for a shutdown, 0.26 ms of CPU a second in every idle process
    (a mesh runs nine or more); this one sleeps until a scrape comes, and close() wakes it."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        server = type("_MetricsHTTPServer", (_ThreadingWSGIServer,),
                      {"address_family": socket.AF_INET6 if ":" in host else socket.AF_INET})
        self._httpd = make_server(host, port, prometheus_client.make_wsgi_app(REGISTRY), server,
                                  handler_class=_QuietHandler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": None},
                                        name="metrics-http", daemon=True)
        self._thread.start()
        self.host = host
        self.port: int = self._httpd.server_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        # shutdown() waits for serve_forever to notice; a connection wakes its wait
        stopper = threading.Thread(target=self._httpd.shutdown, name="metrics-http-stop", daemon=True)
        stopper.start()
        deadline = time.monotonic() + 5
        while stopper.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection((self.host, self.port), timeout=1).close()
            stopper.join(0.05)
        self._httpd.server_close()
        self._thread.join(timeout=5)


def start_metrics_server(port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
    """Serve /metrics on ``host:port`` (0: a free port; read it from ``.port``)."""
    return MetricsServer(port, host)


def serve_metrics(port: int = 0, host: str = "127.0.0.1") -> int:
    """Serve /metrics for the rest of the process; returns the bound port (port 0 picks one)."""
    return start_metrics_server(port, host).port
