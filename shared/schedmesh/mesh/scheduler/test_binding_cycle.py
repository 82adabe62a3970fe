"""The binding cycle's answers to the binder: a refusal is forgotten and requeued; a binding whose
outcome is unknown (binder unreachable, or its record unacknowledged) is sent again to the same
node, never forgotten while it may be in the log."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import grpc
import pytest

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.framework.events import EVENT_ASSIGNED_POD_DELETE
from schedmesh.framework.interface import Code, Status
from schedmesh.mesh.binder import PUBLISH_FAILED
from schedmesh.mesh.scheduler.binding_cycle import BindingCycle, BindingQueue
from schedmesh.mesh.scheduler.state import AssumedPod, QueueManagerConfig
from schedmesh.v1 import binder_pb2


class Unavailable(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "connection refused"


class ScriptedBinder:
    """Answers BindBatch from a script: an exception to raise or a reason ("" = bound)."""

    def __init__(self, *answers) -> None:
        self.answers, self.calls = list(answers), []

    def BindBatch(self, req, timeout):
        self.calls.append([(b.pod.metadata.name, b.node_name) for b in req.binds])
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return binder_pb2.BindBatchResponse(results=[binder_pb2.BindResponse(bound=not answer, reason=answer)
                                                     for _ in req.binds])


class BinderService:
    """DefaultBinder in the profile: the binder service's turn."""
    name = "DefaultBinder"


class NoPlugins:
    points = {"bind": [BinderService()]}

    def run_pre_bind(self, *a):
        return None

    def run_post_bind(self, *a):
        pass

    def run_unreserve(self, *a):
        pass


class Cycle(BindingCycle):
    def __init__(self, binder: ScriptedBinder, retry_seconds: float) -> None:
        self.cfg = QueueManagerConfig(filter_workers=[], score_workers=[], binder="", bind_retry_seconds=retry_seconds)
        self.binder = binder
        self._stop = threading.Event()
        self._resent = threading.Event()
        self._resent.set()
        self._bind_queue = BindingQueue()
        self._assumed_lock, self._notes_lock = threading.Lock(), threading.Lock()
        self.assumed, self.notes = {}, {}
        self.cache = SimpleNamespace(lock=threading.RLock(), pods={}, view_offsets=dict, expect_records=lambda now=True: None,
                                     encoded_pod=lambda pod: None)
        self.done, self.forgotten, self.requeued, self.events, self.moved = [], [], [], [], []
        self.active: list[str] = []  # the pods activeQ holds (the binding loop's linger asks)
        self.deciding = False
        self.queue = SimpleNamespace(
            has_active=lambda: bool(self.active),
            done=self.done.append,
            move_all_to_active_or_backoff_queue=lambda ev, old, new, pre_check=None: self.moved.append(
                (ev, old.name, old.node_name)))

    def _forget(self, a):
        self.forgotten.append(a.pod.name)
        self.assumed.pop(a.pod.uid, None)

    def _requeue_error(self, qpi, cycle):
        self.requeued.append(qpi.pod.name)

    def _event_record(self, pod, type_, reason, message, trace_id=""):
        return (reason, message)

    def _publish_sync(self, recs, timeout=15.0):
        self.events += recs

    def assume(self, name: str, node: str) -> AssumedPod:
        pod = Pod(meta=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"))
        a = AssumedPod(pod=pod, node=node, fw=NoPlugins(), state=None,
                       qpi=SimpleNamespace(pod=pod, attempts=1, initial_attempt_timestamp=0.0), cycle=1)
        self.assumed[pod.uid] = a
        return a


@pytest.mark.parametrize("unknown", [Unavailable(), f"{PUBLISH_FAILED}: KafkaTimeoutError"], ids=["unreachable", "unacknowledged"])
def test_unknown_outcome_is_sent_again_to_the_same_node_until_answered(unknown) -> None:
    binder = ScriptedBinder(unknown, unknown, "")
    c = Cycle(binder, retry_seconds=30)
    c._bind_batch([c.assume("a", "node-1"), c.assume("b", "node-2")])
    assert binder.calls == [[("a", "node-1"), ("b", "node-2")]] * 3
    assert c.done == ["uid-a", "uid-b"] and not c.forgotten and not c.requeued


def test_a_refusal_is_forgotten_and_requeued_at_once() -> None:
    binder = ScriptedBinder('pod default/a is already bound to node-9')
    c = Cycle(binder, retry_seconds=30)
    c._bind_batch([c.assume("a", "node-1")])
    assert len(binder.calls) == 1 and c.forgotten == ["a"] and c.requeued == ["a"]
    assert c.events == [("FailedScheduling", "Binding rejected: pod default/a is already bound to node-9")]
    # kube's handleBindingCycleError: the forgotten pod's room frees others, as its deletion would
    assert c.moved == [(EVENT_ASSIGNED_POD_DELETE, "a", "node-1")]


def test_unknown_outcome_past_the_retry_time_is_refused() -> None:
    binder = ScriptedBinder(Unavailable())
    c = Cycle(binder, retry_seconds=0)
    c._bind_batch([c.assume("a", "node-1")])
    assert c.forgotten == ["a"] and c.requeued == ["a"]
    assert c.events[0][1].startswith("Binding rejected: binder unavailable: UNAVAILABLE")


def test_a_binding_seen_in_the_cache_while_retrying_is_done_and_a_deleted_pod_dropped() -> None:
    c = Cycle(None, retry_seconds=30)
    a, b = c.assume("a", "node-1"), c.assume("b", "node-2")

    class SeenMeanwhile(ScriptedBinder):
        def BindBatch(self, req, timeout):
            # while the binder is down the pods topic shows a bound, b is deleted
            c.assumed.clear()
            c.cache.pods[a.pod.uid] = SimpleNamespace(node_name="node-1")
            return super().BindBatch(req, timeout)
    c.binder = SeenMeanwhile(Unavailable())
    c._bind_batch([a, b])
    assert c.done == ["uid-a"] and not c.forgotten and not c.requeued


def test_bindings_wait_for_the_records_re_sent_after_a_broker_restart() -> None:
    """A binding published before the re-sent record of the pod it binds would be followed by
    that pod unbound: while the producer re-sends (its resend window), bindings wait."""
    binder = ScriptedBinder("")
    c = Cycle(binder, retry_seconds=30)
    c._resent.clear()  # EventProducer's resend_window(True)
    t = threading.Thread(target=c._bind_batch, args=([c.assume("a", "node-1")],))
    t.start()
    t.join(0.5)
    assert t.is_alive() and binder.calls == []
    c._resent.set()  # resend_window(False)
    t.join(5)
    assert binder.calls == [[("a", "node-1")]] and c.done == ["uid-a"]


class ScriptedBind:
    """A Bind plugin ahead of DefaultBinder answering with `status` (None: bound)."""
    name = "Scripted"

    def __init__(self, status) -> None:
        self.status, self.calls = status, []

    def bind(self, state, pod, node):
        self.calls.append((pod.name, node))
        if isinstance(self.status, Exception):
            raise self.status
        return self.status


@pytest.mark.parametrize("answer, sent_to_binder, bound_by", [
    (None, True, "Scripted"),                         # it bound the pod: the binder commits it
    (Status(Code.SKIP), True, ""),                    # not its pod: DefaultBinder's turn
    (Status.as_error("no quota"), False, ""),        # its error fails the binding
    (RuntimeError("boom"), False, ""),
])
def test_bind_plugins_run_in_the_profiles_order_before_the_binder(answer, sent_to_binder, bound_by) -> None:
    binder = ScriptedBinder("")
    c = Cycle(binder, retry_seconds=30)
    plugin = ScriptedBind(answer)
    a = c.assume("a", "node-1")
    a.fw = SimpleNamespace(points={"bind": [plugin, BinderService()]}, run_pre_bind=lambda *x: None,
                           run_post_bind=lambda *x: None, run_unreserve=lambda *x: None)
    c._bind_batch([a])
    assert plugin.calls == [("a", "node-1")]
    assert (binder.calls == [[("a", "node-1")]]) is sent_to_binder and a.bound_by == bound_by
    if not sent_to_binder:
        assert c.forgotten == ["a"] and c.requeued == ["a"]
        assert c.events[0][1].startswith("Binding rejected: running Bind plugin 'Scripted': ")


def test_binding_cycle_lines_carry_their_pod_and_its_attempts_trace() -> None:
    """kube's V(2) "Successfully bound pod to node" for the bound pod; every line about the
    refused one carries that pod and its attempt's trace id, though the binding thread runs
    outside both attempts' spans; the refused attempt's root span ends with status ERROR."""
    import io
    import json
    import logging

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from schedmesh.telemetry.logs import JsonFormatter, TraceContextFilter, v

    class PerPod(ScriptedBinder):
        def BindBatch(self, req, timeout):
            self.calls.append([(b.pod.metadata.name, b.node_name) for b in req.binds])
            return binder_pb2.BindBatchResponse(results=[
                binder_pb2.BindResponse(bound=b.pod.metadata.name == "a",
                                        reason="" if b.pod.metadata.name == "a" else "0/1 nodes: Insufficient cpu")
                for b in req.binds])

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(TraceContextFilter())
    logger = logging.getLogger("schedmesh.queue_manager")
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(v(2))
    try:
        c = Cycle(PerPod(), retry_seconds=30)
        a, b = c.assume("a", "node-1"), c.assume("b", "node-2")
        for x in (a, b):
            x.span = tracer.start_span("schedule_pod")
            x.trace_id = f"{x.span.get_span_context().trace_id:032x}"
        a.evaluated_nodes, a.feasible_nodes = 12, 5
        c._bind_batch([a, b])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    bound = [ln for ln in lines if ln["msg"] == "Successfully bound pod to node"]
    assert len(bound) == 1 and bound[0]["v"] == 2
    assert {k: bound[0][k] for k in ("pod", "node", "evaluatedNodes", "feasibleNodes", "trace_id")} == {
        "pod": "default/a", "node": "node-1", "evaluatedNodes": 12, "feasibleNodes": 5, "trace_id": a.trace_id}
    about_b = [ln for ln in lines if "default/b" in ln["msg"] or ln.get("pod") == "default/b"]
    assert about_b and all((ln.get("pod"), ln.get("trace_id")) == ("default/b", b.trace_id) for ln in about_b), about_b
    spans = {s.context.trace_id: s for s in exporter.get_finished_spans() if s.name == "schedule_pod"}
    refused = spans[b.span.get_span_context().trace_id]
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.status.description == "Binding rejected: 0/1 nodes: Insufficient cpu"
    assert spans[a.span.get_span_context().trace_id].status.status_code is StatusCode.UNSET


def test_bind_is_observed_once_the_binder_answered_as_kubes_bind_extension_point() -> None:
    """kube's Bind extension point metric covers RunBindPlugins, DefaultBinder's API call
    included: here from the pod's Bind plugins to the binder's answer, Success when bound, Error
    when refused; a pod an extender bound has no Bind plugins run, and no observation."""
    from dataclasses import replace

    from prometheus_client import REGISTRY

    def count(status: str) -> float:
        return REGISTRY.get_sample_value("scheduler_framework_extension_point_duration_seconds_count", {
            "extension_point": "Bind", "status": status, "profile": "bind-metrics"}) or 0.0

    c = Cycle(ScriptedBinder("", "pod default/b is already bound to node-9"), retry_seconds=30)
    ok, refused, by_extender = c.assume("a", "node-1"), c.assume("b", "node-2"), c.assume("c", "node-3")
    for a in (ok, refused, by_extender):
        a.pod = replace(a.pod, scheduler_name="bind-metrics")
    by_extender.bound_by = "an-extender"
    before = count("Success"), count("Error")
    c._bind_batch([ok, by_extender])
    c._bind_batch([refused])
    assert c.done == ["uid-a", "uid-c"] and c.forgotten == ["b"]
    assert (count("Success") - before[0], count("Error") - before[1]) == (1, 1)


def test_a_binder_answer_wakes_the_follower_for_the_bindings_it_published() -> None:
    """A dozing follower would read them only at its next poll (bus.consumer.idle_poll_ms)."""
    woken = []
    c = Cycle(ScriptedBinder("", Unavailable()), retry_seconds=0)
    c.cache.expect_records = lambda now=True: woken.append("woken now" if now else "woken")
    c._bind_batch([c.assume("a", "node-1")])
    assert woken == ["woken"]  # at the follower's pace: the assumed pod stands for its binding
    c._bind_batch([c.assume("b", "node-1")])  # no answer: nothing published that it knows of
    assert woken == ["woken"]


def test_the_binding_loop_waits_for_bindings_and_ends_when_stop_wakes_it() -> None:
    """It blocks on its queue (polling it every 0.1 s was a tenth of an idle queue-manager's
    wake-ups); QueueManager.stop puts None to end the wait."""
    c = Cycle(ScriptedBinder(), retry_seconds=0)
    batches: list[list[str]] = []
    c._bind_batch = lambda batch: batches.append([a.pod.name for a in batch])
    loop = threading.Thread(target=c._binding_loop, daemon=True)
    loop.start()
    c._bind_queue.put(c.assume("a", "node-1"))
    deadline = time.monotonic() + 5
    while not batches and time.monotonic() < deadline:
        time.sleep(0.005)
    assert batches == [["a"]]
    time.sleep(0.2)
    stopped = time.monotonic()
    c._stop.set()
    c._bind_queue.put(None)
    loop.join(5)
    assert not loop.is_alive() and time.monotonic() - stopped < 0.5
    assert batches == [["a"]]


def test_bindings_of_pods_still_in_active_q_join_the_batch_for_a_moment() -> None:
    """Every BindBatch is a binder record that every service reads: while activeQ holds pods
    (their bindings are a cycle away) the loop waits up to bind_linger_seconds for them; with
    activeQ empty a lone binding goes at once."""
    c = Cycle(ScriptedBinder(), retry_seconds=0)
    c.cfg.bind_linger_seconds = 1.0
    batches: list[list[str]] = []
    c._bind_batch = lambda batch: batches.append([a.pod.name for a in batch])
    loop = threading.Thread(target=c._binding_loop, daemon=True)
    loop.start()

    def wait_for(count: int) -> float:
        started, deadline = time.monotonic(), time.monotonic() + 5
        while len(batches) < count and time.monotonic() < deadline:
            time.sleep(0.005)
        return time.monotonic() - started

    c._bind_queue.put(c.assume("alone", "node-1"))
    assert wait_for(1) < 0.5 and batches == [["alone"]]
    c.active = ["b", "c"]
    c._bind_queue.put(c.assume("a", "node-1"))
    time.sleep(0.1)
    c._bind_queue.put(c.assume("b", "node-1"))
    c.active, c.deciding = [], True  # the last one popped, its cycle running
    time.sleep(0.1)
    c.deciding = False
    c._bind_queue.put(c.assume("c", "node-1"))  # decided: its binding ends the wait
    assert wait_for(2) < 0.5 and batches == [["alone"], ["a", "b", "c"]]
    c.active = ["never-bound"]  # a pod that fails its cycle: the batch waits no longer than the linger
    c._bind_queue.put(c.assume("d", "node-1"))
    assert 0.8 < wait_for(3) < 1.6 and batches[-1] == ["d"]
    c._stop.set()
    c._bind_queue.put(None)
    loop.join(5)


def test_the_first_binding_after_a_pause_does_not_linger() -> None:
    """No batch went for bind_linger_seconds: the first binding goes at once even while activeQ
    holds pods; the next, queued while batches follow one another, waits for its companions."""
    c = Cycle(ScriptedBinder(), retry_seconds=0)
    c.cfg.bind_linger_seconds = 0.4
    sent: list[tuple[float, list[str]]] = []
    c._bind_batch = lambda batch: sent.append((time.monotonic(), [a.pod.name for a in batch]))
    loop = threading.Thread(target=c._binding_loop, daemon=True)
    loop.start()

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 5
        while len(sent) < count and time.monotonic() < deadline:
            time.sleep(0.005)

    c.active = ["later"]  # pods still to decide: a batch may wait for their bindings
    queued = time.monotonic()
    c._bind_queue.put(c.assume("first", "node-1"))
    wait_for(1)
    assert sent[0][0] - queued < 0.2 and sent[0][1] == ["first"]  # nothing sent for a while: at once
    c._bind_queue.put(c.assume("second", "node-1"))
    wait_for(2)
    assert 0.3 < sent[1][0] - sent[0][0] < 0.9 and sent[1][1] == ["second"]  # the linger
    time.sleep(0.5)  # a pause longer than the linger
    queued = time.monotonic()
    c._bind_queue.put(c.assume("third", "node-1"))
    wait_for(3)
    assert sent[2][0] - queued < 0.2 and sent[2][1] == ["third"]
    c._stop.set()
    c._bind_queue.put(None)
    loop.join(5)


def test_a_gathering_binding_cycle_is_woken_by_what_it_waits_for_not_by_each_pod() -> None:
    """The waiter sleeps through puts that leave its wait unmet (a wake-up per pod was two thread
    switches per pod); the put that completes the count, a recheck() once `done` holds, or stop's
    None ends the wait at once."""
    bq = BindingQueue()
    flag = threading.Event()
    waiter_checks: list[str] = []  # the predicate's evaluations on the waiting thread

    def done() -> bool:
        if threading.current_thread() is waiting:
            waiter_checks.append("checked")
        return flag.is_set()

    def gather(count: int) -> None:
        bq.wait(count, 5.0, done)
        ended.append(time.monotonic())

    for ending in ("count", "recheck", "stop"):
        ended: list[float] = []
        waiter_checks.clear()
        flag.clear()
        waiting = threading.Thread(target=gather, args=(bq.qsize() + 20,), daemon=True)
        waiting.start()
        time.sleep(0.05)
        for i in range(19):
            bq.put(SimpleNamespace(name=f"{ending}-{i}"))
        time.sleep(0.1)
        assert not ended and len(waiter_checks) == 1  # 19 puts, not one wake-up
        started = time.monotonic()
        if ending == "count":
            bq.put(SimpleNamespace(name="twentieth"))
        elif ending == "recheck":
            bq.recheck()  # nothing changed: still waiting
            time.sleep(0.05)
            assert not ended
            flag.set()
            bq.recheck()
        else:
            bq.put(None)
        waiting.join(2)
        assert ended and ended[0] - started < 0.5 and len(waiter_checks) <= 2  # woken once
    assert bq.qsize() == 20 + 19 + 20 and bq.take(100)[-1] is None and bq.empty()
