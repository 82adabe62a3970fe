"""The binding cycle's answers to the binder: a refusal is forgotten and requeued; a binding whose
outcome is unknown (binder unreachable, or its record unacknowledged) is sent again to the same
node, never forgotten while it may be in the log."""
from __future__ import annotations

import queue
import threading
from types import SimpleNamespace

import grpc
import pytest

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.framework.events import EVENT_ASSIGNED_POD_DELETE
from schedmesh.framework.interface import Code, Status
from schedmesh.mesh.binder import PUBLISH_FAILED
from schedmesh.mesh.scheduler.binding_cycle import BindingCycle
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
        self._bind_queue = queue.SimpleQueue()
        self._assumed_lock, self._notes_lock = threading.Lock(), threading.Lock()
        self.assumed, self.notes = {}, {}
        self.cache = SimpleNamespace(lock=threading.RLock(), pods={}, view_offsets=dict)
        self.done, self.forgotten, self.requeued, self.events, self.moved = [], [], [], [], []
        self.queue = SimpleNamespace(
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
