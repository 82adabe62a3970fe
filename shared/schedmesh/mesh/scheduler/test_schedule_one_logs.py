"""The scheduling cycle's log lines and spans: every line of an attempt, from its own code or
from anything it calls (the queue, plugins), carries the pod and the attempt's trace id, on the
error path too; kube's V(2) lines for a pod that does not fit or finds no node; the attempt's
root span with kube's k8s.* attributes, ERROR when the attempt failed."""
from __future__ import annotations

import io
import json
import logging
import threading
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.framework.interface import Code, PluginError, Status
from schedmesh.mesh.scheduler import schedule_one as schedule_one_module
from schedmesh.mesh.scheduler.schedule_one import ScheduleOne
from schedmesh.scheduling.cycle import Diagnosis, FitError, NoNodesAvailableError
from schedmesh.telemetry.logs import JsonFormatter, TraceContextFilter, v

# a logger of another module, as the queue's or a plugin's: it passes no pod
elsewhere = logging.getLogger("schedmesh.queue.test-elsewhere")


class Harness(ScheduleOne):
    """Just what schedule_one reads; the algorithm raises `error`."""

    def __init__(self, pod: Pod, error: Exception) -> None:
        self.attempts = 0
        self._early_roots = {}
        self.preemption = None
        self.queue = SimpleNamespace(scheduling_cycle=lambda: 1, done=lambda uid: None)
        fw = SimpleNamespace(name="default-scheduler", has_post_filter_plugins=lambda: False)
        self.frameworks = {pod.scheduler_name: fw}
        self.cache = SimpleNamespace(lock=threading.RLock(), pods={pod.uid: pod}, snapshot=None)
        self._notes_lock = threading.Lock()
        self.notes = {}
        self.requeued: list[str] = []
        self.failed: list[str] = []

        def schedule_pod(*args, **kwargs):
            elsewhere.info("filtering the nodes")
            raise error
        self.algo = SimpleNamespace(schedule_pod=schedule_pod)

    def _post_filter_locally(self, fw, state, pod, err) -> None:
        pass

    def _requeue(self, qpi, cycle) -> None:
        elsewhere.debug("pod moved to unschedulable")
        self.requeued.append(qpi.pod.name)

    def _requeue_error(self, qpi, cycle) -> None:
        elsewhere.debug("pod moved to backoffQ")
        self.requeued.append(qpi.pod.name)

    def _publish_failed(self, pod, message, trace_id, nominating=None) -> None:
        self.failed.append(message)


@pytest.fixture
def captured(monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(schedule_one_module, "tracer", provider.get_tracer("test"))
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(TraceContextFilter())
    loggers = [logging.getLogger("schedmesh.queue_manager"), elsewhere]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield exporter, out
    for lg, level in zip(loggers, saved):
        lg.removeHandler(handler)
        lg.setLevel(level)


def _attempt(error: Exception):
    pod = Pod(meta=ObjectMeta(name="web-1", namespace="default", uid="uid-1"))
    h = Harness(pod, error)
    qpi = SimpleNamespace(pod=pod, attempts=3, timestamp=0.0, key=pod.key)
    return h, h.schedule_one(qpi)


def _unfit() -> FitError:
    pod = Pod(meta=ObjectMeta(name="web-1", namespace="default", uid="uid-1"))
    d = Diagnosis()
    d.node_to_status.set("n1", Status(Code.UNSCHEDULABLE, ("Insufficient cpu",)).with_plugin("NodeResourcesFit"))
    d.unschedulable_plugins = {"NodeResourcesFit"}
    return FitError(pod, 1, d)


@pytest.mark.parametrize("error, result, line, level", [
    (PluginError(Status(Code.ERROR, ("etcd is down",)).with_plugin("VolumeBinding")), "error",
     "Error scheduling pod; retrying", "error"),
    (NoNodesAvailableError(), "error",
     "Unable to schedule pod; no nodes are registered to the cluster; waiting", "info"),
    (_unfit(), "unschedulable", "Unable to schedule pod; no fit; waiting", "info"),
])
def test_every_line_of_the_attempt_carries_its_pod_and_trace(captured, error, result, line, level) -> None:
    exporter, out = captured
    h, got = _attempt(error)
    assert got == result and h.requeued == ["web-1"]
    [root] = [s for s in exporter.get_finished_spans() if s.name == "schedule_pod"]
    assert {k: root.attributes.get(k) for k in ("k8s.pod.name", "k8s.namespace.name", "k8s.pod.uid")} == {
        "k8s.pod.name": "web-1", "k8s.namespace.name": "default", "k8s.pod.uid": "uid-1"}
    assert root.attributes["schedmesh.attempt"] == 3 and "pod" not in root.attributes
    trace_id = f"{root.context.trace_id:032x}"
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    # the plugin's line, the requeue's, the attempt's own: all with the pod and the trace
    assert {x["msg"] for x in lines} >= {"filtering the nodes", line}
    assert any(x["msg"].startswith("pod moved to ") for x in lines)
    assert all((x.get("pod"), x.get("trace_id")) == ("default/web-1", trace_id) for x in lines), lines
    [kube] = [x for x in lines if x["msg"] == line]
    assert kube["level"] == level
    if level == "info":
        assert kube["v"] == 2  # kube's V(2): shown from SCHEDMESH_VERBOSITY=2 on
    if isinstance(error, PluginError):
        assert kube["err"] == "VolumeBinding: etcd is down"
    if isinstance(error, FitError):
        assert kube["err"] == error.message() and h.failed == [error.message()]
        assert root.status.status_code is StatusCode.UNSET and root.attributes["unschedulable"] == error.message()
    else:
        assert root.status.status_code is StatusCode.ERROR  # set_error: status and the exception event
        assert [e.name for e in root.events] == ["exception"]
    # nothing leaks past the attempt
    logging.getLogger("schedmesh.queue_manager").info("next")
    last = json.loads(out.getvalue().splitlines()[-1])
    assert "pod" not in last and "trace_id" not in last


def test_v2_lines_are_hidden_below_verbosity_2(captured) -> None:
    _, out = captured
    logging.getLogger("schedmesh.queue_manager").setLevel(v(1))
    _attempt(_unfit())
    assert "no fit" not in out.getvalue()
