"""schedmesh.telemetry.metrics: kube-scheduler's definitions, the helpers, /metrics over HTTP."""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
import urllib.request

import prometheus_client
import pytest
from aiokafka import TopicPartition
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from schedmesh.telemetry import metrics

pytestmark = pytest.mark.timeout(60)

# kube-scheduler v1.35.4, pkg/scheduler/metrics/metrics.go: name -> (type, labels, buckets)
KUBE = {
    "scheduler_schedule_attempts_total": ("counter", ("result", "profile"), None),
    "scheduler_scheduling_attempt_duration_seconds": ("histogram", ("result", "profile"), (0.001, 2, 15)),
    "scheduler_pod_scheduling_sli_duration_seconds": ("histogram", ("attempts",), (0.01, 2, 20)),
    "scheduler_pod_scheduling_attempts": ("histogram", (), (1, 2, 5)),
    "scheduler_pending_pods": ("gauge", ("queue",), None),
    "scheduler_queue_incoming_pods_total": ("counter", ("queue", "event"), None),
    "scheduler_framework_extension_point_duration_seconds":
        ("histogram", ("extension_point", "status", "profile"), (0.0001, 2, 12)),
    "scheduler_plugin_execution_duration_seconds":
        ("histogram", ("plugin", "extension_point", "status"), (0.00001, 1.5, 20)),
    "scheduler_preemption_attempts_total": ("counter", (), None),
    "scheduler_preemption_victims": ("histogram", (), (1, 2, 7)),
}


def _by_name(name: str):
    return next(m for m in metrics.ALL_METRICS if m._name == name.removesuffix("_total"))


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_exponential_buckets_match_go() -> None:
    assert metrics.exponential_buckets(1, 2, 5) == [1, 2, 4, 8, 16]
    b = metrics.exponential_buckets(0.00001, 1.5, 20)
    assert len(b) == 20 and b[0] == 0.00001 and b[-1] == pytest.approx(0.00001 * 1.5 ** 19)


@pytest.mark.parametrize("name", sorted(KUBE))
def test_kube_scheduler_metric_definitions(name: str) -> None:
    kind, labels, buckets = KUBE[name]
    assert metrics.metric_names()[name] == kind
    metric = _by_name(name)
    assert tuple(metric._labelnames) == labels
    if buckets is not None:
        assert list(metric._upper_bounds[:-1]) == metrics.exponential_buckets(*buckets)
        assert metric._upper_bounds[-1] == float("inf")
    assert metric._documentation.startswith(("[STABLE] ", "[BETA] ", "[ALPHA] "))



def test_queued_observations_read_as_counted_ones() -> None:
    """The Histogram here queues observe() and counts at read time: what a scrape shows is what
    prometheus_client's own Histogram shows for the same values, every value and every edge
    (a value on a bucket's bound, below the first, above the last, infinite, NaN, negative)."""
    registry = prometheus_client.CollectorRegistry()
    buckets = [0.001, 0.01, 0.1, 1.0]
    queued = metrics.Histogram("queued", "x", ["point"], registry=registry, buckets=buckets)
    counting = prometheus_client.Histogram("counting", "x", ["point"], registry=registry, buckets=buckets)
    values = [0.0, 0.0005, 0.001, 0.0010001, 0.01, 0.05, 0.1, 1.0, 1.5, 1e9, float("inf"), -2.0, 0.002] * 7
    for v in values:
        for h in (queued, counting):
            h.labels("Filter").observe(v)
    queued.labels("Score").observe(0.5)
    counting.labels("Score").observe(0.5)
    text = prometheus_client.generate_latest(registry).decode()
    assert 'queued_bucket{le="0.001",point="Filter"} 28.0' in text
    lines = lambda prefix: sorted(l.replace(prefix, "h_") for l in text.splitlines() if l.startswith(prefix))
    assert lines("queued_") == lines("counting_") and len(lines("queued_")) == 14  # 5 buckets, count, sum; twice
    # a second read counts nothing twice; later values join the earlier ones
    queued.labels("Filter").observe(0.05)
    assert REGISTRY is not registry and registry.get_sample_value("queued_count", {"point": "Filter"}) == len(values) + 1
    assert registry.get_sample_value("queued_bucket", {"point": "Filter", "le": "0.1"}) == 9 * 7 + 1


def test_queued_observations_from_threads_are_all_counted() -> None:
    registry = prometheus_client.CollectorRegistry()
    h = metrics.Histogram("threads", "x", ["point"], registry=registry, buckets=[0.5])
    h.COUNT_AT = 64  # counting often, meanwhile the other threads observe
    child = h.labels("Bind")

    def observe() -> None:
        for i in range(5000):
            child.observe(i % 2)
    threads = [threading.Thread(target=observe) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert registry.get_sample_value("threads_count", {"point": "Bind"}) == 20000
    assert registry.get_sample_value("threads_bucket", {"point": "Bind", "le": "0.5"}) == 10000
    assert registry.get_sample_value("threads_sum", {"point": "Bind"}) == 10000
    assert len(child._pending) == 0


def test_queued_histogram_keeps_prometheus_errors_and_exemplars() -> None:
    registry = prometheus_client.CollectorRegistry()
    h = metrics.Histogram("labelled", "x", ["point"], registry=registry, buckets=[1.0])
    with pytest.raises(ValueError, match="missing label values"):
        h.observe(0.5)
    h.labels("Bind").observe(0.2)
    h.labels("Bind").observe(0.3, {"trace_id": "abc"})  # counted at once, after the queued one
    assert registry.get_sample_value("labelled_count", {"point": "Bind"}) == 2
    assert h.labels("Bind")._buckets[0].get_exemplar().labels == {"trace_id": "abc"}
    plain = metrics.Histogram("plain", "x", registry=registry, buckets=[1.0])
    plain.observe(3.0)
    assert registry.get_sample_value("plain_bucket", {"le": "+Inf"}) == 1


def test_help_texts_are_kubes() -> None:
    assert _by_name("scheduler_schedule_attempts_total")._documentation == (
        "[STABLE] Number of attempts to schedule pods, by the result. 'unschedulable' means a pod "
        "could not be scheduled, while 'error' means an internal scheduler problem.")
    assert _by_name("scheduler_plugin_execution_duration_seconds")._documentation == (
        "[ALPHA] Duration for running a plugin at a specific extension point.")


def test_mesh_metric_definitions() -> None:
    names = metrics.metric_names()
    expected = {
        "schedmesh_shard_request_duration_seconds": ("histogram", ("shard", "method")),
        "schedmesh_batch_size": ("histogram", ("stage",)),
        "schedmesh_kafka_consumer_lag": ("gauge", ("consumer", "topic")),
        "schedmesh_binder_conflicts_total": ("counter", ("reason",)),
        "schedmesh_evictions_total": ("counter", ("reason",)),
        "schedmesh_records_applied_total": ("counter", ("topic",)),
        "schedmesh_kafka_fetch_gaps_total": ("counter", ("topic",)),
        "schedmesh_replica_answers_total": ("counter", ("event",)),
    }
    for name, (kind, labels) in expected.items():
        assert names[name] == kind
        assert tuple(_by_name(name)._labelnames) == labels
    assert set(names) == set(KUBE) | set(expected)


def test_attempt_and_sli_helpers() -> None:
    before = _value("scheduler_schedule_attempts_total", result="scheduled", profile="p-test")
    count_before = _value("scheduler_scheduling_attempt_duration_seconds_count", result="scheduled", profile="p-test")
    metrics.observe_attempt(metrics.SCHEDULED, "p-test", 0.003)
    assert _value("scheduler_schedule_attempts_total", result="scheduled", profile="p-test") == before + 1
    assert _value("scheduler_scheduling_attempt_duration_seconds_count",
                  result="scheduled", profile="p-test") == count_before + 1
    assert _value("scheduler_scheduling_attempt_duration_seconds_bucket",
                  result="scheduled", profile="p-test", le="0.004") >= 1

    sli = _value("scheduler_pod_scheduling_sli_duration_seconds_count", attempts="3")
    attempts = _value("scheduler_pod_scheduling_attempts_sum")
    metrics.observe_pod_scheduled(3, 1.5)
    assert _value("scheduler_pod_scheduling_sli_duration_seconds_count", attempts="3") == sli + 1
    assert _value("scheduler_pod_scheduling_attempts_sum") == attempts + 3


def test_helpers_keep_each_series_child_and_keep_series_apart() -> None:
    """The helpers keep the labelled children they observe into (_child): a kept child is the
    registry's own series, and other label values get series of their own."""
    a = _value("scheduler_schedule_attempts_total", result="scheduled", profile="p-kept")
    b = _value("scheduler_schedule_attempts_total", result="error", profile="p-kept")
    for _ in range(3):
        metrics.observe_attempt(metrics.SCHEDULED, "p-kept", 0.001)
    metrics.observe_attempt(metrics.ERROR, "p-kept", 0.001)
    assert _value("scheduler_schedule_attempts_total", result="scheduled", profile="p-kept") == a + 3
    assert _value("scheduler_schedule_attempts_total", result="error", profile="p-kept") == b + 1
    assert metrics._child(metrics.SCHEDULE_ATTEMPTS, "scheduled", "p-kept") is \
        metrics.SCHEDULE_ATTEMPTS.labels("scheduled", "p-kept")


def test_queue_helpers() -> None:
    metrics.set_pending_pods(active=4, backoff=2, unschedulable=1, gated=0)
    metrics.add_pending_pods("active", -1)
    metrics.set_pending_pods(gated=5)  # the others keep their values
    assert [_value("scheduler_pending_pods", queue=q) for q in metrics.QUEUES] == [3, 2, 1, 5]
    before = _value("scheduler_queue_incoming_pods_total", queue="active", event="PodAdd")
    metrics.observe_incoming_pod("active", "PodAdd")
    assert _value("scheduler_queue_incoming_pods_total", queue="active", event="PodAdd") == before + 1


def test_framework_helpers_take_kube_status_labels() -> None:
    from schedmesh.framework.interface import Code, Status

    assert metrics.status_label(None) == "Success"
    assert metrics.status_label(Status.unresolvable("x")) == "UnschedulableAndUnresolvable"
    assert metrics.status_label(Code.SKIP) == "Skip"
    metrics.observe_extension_point("Filter", Status.unschedulable("no"), "p-test", 0.0002)
    assert _value("scheduler_framework_extension_point_duration_seconds_count",
                  extension_point="Filter", status="Unschedulable", profile="p-test") >= 1
    metrics.observe_plugin("NodeResourcesFit", "Filter", None, 0.00002)
    assert _value("scheduler_plugin_execution_duration_seconds_count",
                  plugin="NodeResourcesFit", extension_point="Filter", status="Success") >= 1


def test_preemption_and_mesh_helpers() -> None:
    attempts = _value("scheduler_preemption_attempts_total")
    victims = _value("scheduler_preemption_victims_count")
    metrics.observe_preemption(None)
    metrics.observe_preemption(2)
    assert _value("scheduler_preemption_attempts_total") == attempts + 2
    assert _value("scheduler_preemption_victims_count") == victims + 1

    with metrics.time_shard_request(1, "Filter"):
        pass
    assert _value("schedmesh_shard_request_duration_seconds_count", shard="1", method="Filter") >= 1
    metrics.observe_batch("bind", 7)
    assert _value("schedmesh_batch_size_sum", stage="bind") >= 7
    for helper, name in ((metrics.observe_binder_conflict, "schedmesh_binder_conflicts_total"),
                         (metrics.observe_eviction, "schedmesh_evictions_total")):
        before = _value(name, reason="test-reason")
        helper("test-reason")
        assert _value(name, reason="test-reason") == before + 1
    before = _value("schedmesh_records_applied_total", topic="t-test")
    metrics.observe_records_applied("t-test", 3)
    assert _value("schedmesh_records_applied_total", topic="t-test") == before + 3


class _FakeKafkaConsumer:
    """What ConsumerLagSampler reads from an aiokafka consumer."""

    def __init__(self, high: dict, positions: dict) -> None:
        self.high, self.positions = high, positions

    def assignment(self):
        return set(self.high)

    def highwater(self, tp):
        return self.high[tp]

    async def position(self, tp):
        return self.positions[tp]


async def test_consumer_lag_sampler_sums_partitions_and_throttles() -> None:
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    consumer = _FakeKafkaConsumer({a0: 10, a1: 5, b0: None}, {a0: 7, a1: 5, b0: 0})
    sampler = metrics.ConsumerLagSampler("c-test", interval=3600)
    assert await sampler.sample(consumer) == {"a": 3}
    assert _value("schedmesh_kafka_consumer_lag", consumer="c-test", topic="a") == 3
    consumer.positions[a0] = 10
    assert await sampler.sample(consumer) is None  # throttled
    sampler.interval = 0
    assert await sampler.sample(consumer) == {"a": 0}
    assert await sampler.sample(None) is None


def _scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}, text


def test_serve_metrics_over_http() -> None:
    metrics.observe_attempt(metrics.UNSCHEDULABLE, "http-profile", 0.01)
    server = metrics.start_metrics_server(0)
    try:
        assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}/metrics"
        families, text = _scrape(server.url)
    finally:
        server.close()
    # the parser drops _total from counter family names
    for name, kind in metrics.metric_names().items():
        assert families[name.removesuffix("_total")].type == kind, name
    assert ('scheduler_schedule_attempts_total{profile="http-profile",result="unschedulable"} 1.0' in text
            or 'scheduler_schedule_attempts_total{result="unschedulable",profile="http-profile"} 1.0' in text)
    assert "# HELP scheduler_pending_pods [STABLE] Number of pending pods, by the queue type." in text
    assert "_created" not in text  # kube-scheduler has no *_created series
    assert "process_cpu_seconds_total" in text
    port = metrics.serve_metrics(0)
    assert port > 0 and port != server.port
    assert "scheduler_preemption_victims_bucket" in _scrape(f"http://127.0.0.1:{port}/metrics")[1]


def test_the_metrics_server_sleeps_until_closed_and_then_lets_its_port_go() -> None:
    """Its thread waits for a scrape without a timeout (no wake-ups while idle): close() wakes it,
    ends it and frees the port; over IPv6 too where the host has it."""
    hosts = ["127.0.0.1"] + (["::1"] if socket.has_ipv6 else [])
    for host in hosts:
        try:
            server = metrics.start_metrics_server(0, host)
        except OSError:  # no IPv6 loopback in this sandbox
            assert host == "::1"
            continue
        assert "# HELP" in _scrape(server.url)[1]
        server.close()
        assert not server._thread.is_alive(), "the serving thread outlived close()"
        with pytest.raises(OSError):
            socket.create_connection((host, server.port), timeout=2).close()


@pytest.fixture
def keep_logging():
    """ServiceProcess configures the root logger; put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    own = logging.getLogger("schedmesh").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("schedmesh").setLevel(own)


async def test_service_process_serves_metrics(monkeypatch: pytest.MonkeyPatch, keep_logging: None) -> None:
    from schedmesh.mesh.runtime import ServiceProcess

    monkeypatch.delenv("SCHEDMESH_METRICS_PORT", raising=False)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    proc = ServiceProcess("metrics-test", 0, host="127.0.0.1")
    assert proc.metrics_port == 0
    await proc.start()
    try:
        assert proc.metrics_port and proc.metrics_port != proc.port
        families, _ = await asyncio.to_thread(_scrape, f"http://127.0.0.1:{proc.metrics_port}/metrics")
        assert "scheduler_schedule_attempts" in families
    finally:
        proc.stopping.set()
        await proc.wait_and_stop(grace=0)
    assert proc.metrics_server is None
    monkeypatch.setenv("SCHEDMESH_METRICS_PORT", "-1")
    assert ServiceProcess("metrics-off", 0).metrics_port is None


@pytest.mark.parametrize("reason, label", [
    ("pod default/web-1 is already bound to node-3", "already bound"),
    ("pod default/a-pod-with-a-rather-long-name-indeed is already bound to general-1", "already bound"),
    ("pod team/x has been deleted", "pod deleted"),
    ("pod team/x is being deleted", "pod being deleted"),
    ('node "general-7" not found', "node not found"),
    ("Insufficient cpu", "Insufficient cpu"),
    ("Insufficient cpu, Insufficient memory", "Insufficient cpu, Insufficient memory"),
    ("publishing the binding failed: KafkaTimeoutError", "publishing the binding failed"),
    ("", "unknown"),
])
def test_binder_conflict_reasons_name_no_pod_or_node(reason: str, label: str) -> None:
    """One series per kind of refusal, not per pod: the reasons that name a pod or node are
    their kind; a fit plugin's reason is kept."""
    assert metrics.binder_conflict_reason(reason) == label
    before = _value("schedmesh_binder_conflicts_total", reason=label)
    metrics.observe_binder_conflict(reason)
    assert _value("schedmesh_binder_conflicts_total", reason=label) == before + 1
