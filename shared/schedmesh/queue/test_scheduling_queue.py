"""The PriorityQueue's operations (kube's scheduling_queue_test.go, re-expressed with a fake clock)."""
from __future__ import annotations

import pytest

from schedmesh.api.types import Pod
from schedmesh.framework.events import (EVENT_FORCE_ACTIVATE, EVENT_UNSCHEDULABLE_TIMEOUT, ActionType,
                                        ClusterEvent, EventResource, QueueingHint)
from schedmesh.framework.interface import Code, PreEnqueuePlugin, Status
from schedmesh.queue import (ACTIVE_Q, BACKOFF_Q, EVENT_ASSIGNED_POD_ADD, EVENT_UNSCHEDULED_POD_ADD,
                             EVENT_UNSCHEDULED_POD_UPDATE, GATED, UNSCHEDULABLE_Q, InFlightEvent, QueuedPodInfo,
                             QueueingStrategy)
from schedmesh.queue.hints import BACKOFF_COMPLETE, FORCE_ACTIVATE, event_label
from schedmesh.queue.testing import (DEFAULT_SCHEDULER, NODE_ADD, NODE_UPDATE_LABEL, T0, AllowlistPreEnqueue,
                                     FakeSchedulingGates, clone, fake_clock, hint_error, hint_map, hint_queue,
                                     hint_skip, lookup, make_node, make_pod, new_queue, pod_affinity_exists)

HIGH, MID, LOW = 1000, 100, 0
MEDIUM = (LOW + HIGH) // 2
PV_ADD = NODE_UPDATE_LABEL  # stands in for kube's PersistentVolume/Add


def hpp() -> Pod:
    return make_pod("hpp", "ns1", uid="hppns1", priority=HIGH)


def hpp_nominated() -> Pod:
    return make_pod("hpp", "ns1", uid="hppns1", priority=HIGH, nominated_node_name="node1")


def mpp() -> Pod:
    return make_pod("mpp", "ns2", uid="mppns2", priority=MEDIUM, nominated_node_name="node1", annotations={"annot2": "val2"})


def upp() -> Pod:
    return make_pod("up", "ns1", uid="upns1", priority=LOW, nominated_node_name="node1", annotations={"annot2": "val2"})


def pop_names(q, n: int) -> list[str]:
    return [q.try_pop().pod.name for _ in range(n)]


# ---- Add / Pop ---------------------------------------------------------------------------------

def test_add_pops_by_priority():
    q = new_queue()
    m, u, h = mpp(), upp(), hpp()
    for p in (m, u, h):
        q.add(p)
    assert [q.try_pop().pod for _ in range(3)] == [h, m, u]
    assert q.try_pop() is None


def test_equal_priority_pops_in_arrival_order():
    clock = fake_clock()
    q = new_queue(clock=clock)
    for i in range(5):
        q.add(make_pod(f"p{i}", priority=7))
        clock.step(0.001)
    assert pop_names(q, 5) == [f"p{i}" for i in range(5)]


@pytest.mark.parametrize("pop_from_backoff_q, want", [
    pytest.param(True, ["mpp", "hpp"], id="pops-backoffQ-when-activeQ-empty"),
    pytest.param(False, ["mpp"], id="only-activeQ"),
])
def test_pop_from_backoff_q(pop_from_backoff_q, want):
    q = new_queue(pop_from_backoff_q=pop_from_backoff_q)
    q.add(mpp())
    # Still backing off, in podBackoffQ (rejected by a plugin) and podErrorBackoffQ (an error).
    for p in (q._new_queued_pod_info(hpp(), "plugin"), q._new_queued_pod_info(make_pod("hpp2", priority=HIGH))):
        p.unschedulable_count = 1
        q._backoff.add(p)
    q._unschedulable.add_or_update(q._new_queued_pod_info(upp(), "plugin"))
    got = []
    while (p := q.try_pop()) is not None:
        got.append(p.pod.name)
    assert got == want


# ---- AddUnschedulableIfNotPresent --------------------------------------------------------------

def test_add_unschedulable_if_not_present():
    q = new_queue()
    u = upp()
    q.add(u)
    assert q.try_pop().pod is u
    h = hpp_nominated()
    q.add(h)
    q.add_unschedulable_if_not_present(lookup(u, "plugin"), q.scheduling_cycle())
    assert q.try_pop().pod is h
    assert len(q.nominator.nominated_pods) == 1
    # No event arrived during its attempt: the pod waits in the unschedulable pool.
    assert q.queue_of(u) == UNSCHEDULABLE_Q and q.unschedulable_pods() == [u]


def test_add_unschedulable_after_a_move_request_during_the_attempt_goes_to_backoff():
    q = new_queue()
    pods = [make_pod(f"pod{i}", f"ns{i}", uid=f"upns{i}", priority=i) for i in range(10)]
    for p in pods:
        q.add(p)
    assert [q.try_pop().pod for _ in range(9)] == pods[:0:-1]
    q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)  # while pods 1..9 are in flight
    cycle = q.scheduling_cycle()
    assert q.try_pop().pod is pods[0]
    for p in pods[1:]:
        q.add_unschedulable_if_not_present(lookup(p, "plugin"), cycle)
    assert all(q.queue_of(p) == BACKOFF_Q for p in pods[1:])


@pytest.mark.parametrize("plugins, want_count, want_errors", [
    pytest.param(("plugin",), 1, 0, id="rejected-counts-unschedulable"),
    pytest.param((), 0, 1, id="error-counts-errors"),
])
def test_add_unschedulable_counts_attempts(plugins, want_count, want_errors):
    clock = fake_clock()
    q = new_queue(clock=clock)
    q.add(make_pod("p"))
    p = q.try_pop()
    p.unschedulable_plugins = set(plugins)
    clock.step(3)
    q.add_unschedulable_if_not_present(p, q.scheduling_cycle())
    assert (p.unschedulable_count, p.consecutive_errors_count, p.timestamp) == (want_count, want_errors, T0 + 3)


def test_errors_back_off_separately_and_reset_on_a_rejection():
    clock = fake_clock()
    q = new_queue(clock=clock)
    q.add(make_pod("p"))
    backoffs = []
    for plugins in [(), (), (), ("plugin",), ()]:
        p = q.try_pop()
        p.unschedulable_plugins = set(plugins)
        q.add_unschedulable_if_not_present(p, q.scheduling_cycle())
        q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)
        backoffs.append((p.unschedulable_count, p.consecutive_errors_count, q._backoff.backoff_time(p) - clock.now()))
        clock.step(20)
        q.flush_backoff_q_completed()
    # errors: 1 s, 2 s, 4 s; then a rejection (count 1: 1 s, errors reset); then an error again: 1 s.
    assert backoffs == [(0, 1, 1), (0, 2, 2), (0, 3, 4), (1, 0, 1), (1, 1, 1)]


# ---- Update ------------------------------------------------------------------------------------

UPDATE_HINTS = hint_map({EVENT_UNSCHEDULED_POD_UPDATE: [("queuePlugin", hint_queue), ("skipPlugin", hint_skip)]})


def _update_not_queued(q):
    old = mpp()
    return old, clone(old, annotations={"annot2": "val2", "foo": "test"})


def _update_add_nomination(q):
    return hpp(), hpp_nominated()


def _update_in_active_q(q):
    h = hpp()
    q.add(h)
    return h, h


def _update_in_backoff_q(q):
    p = q._new_queued_pod_info(mpp())
    q._backoff.add(p)
    return p.pod, p.pod


def _update_unschedulable(plugin: str, step: float = 0.0):
    def prepare(q):
        p = q._new_queued_pod_info(mpp(), plugin)
        p.unschedulable_count += 1  # makes it back off
        q._unschedulable.add_or_update(p)
        q.clock.step(step)
        return p.pod, clone(p.pod, annotations={"annot2": "val2", "foo": "test1"})
    return prepare


def _update_in_flight(q):
    m = mpp()
    q.add(m)
    assert q.try_pop().pod is m
    return m, clone(m, annotations={"annot2": "val2", "foo": "bar"})


@pytest.mark.parametrize("prepare, want_queue, want_nominated", [
    pytest.param(_update_not_queued, ACTIVE_Q, False, id="not-in-queue-is-added"),
    pytest.param(_update_add_nomination, ACTIVE_Q, True, id="added-with-nominated-node"),
    pytest.param(_update_in_active_q, ACTIVE_Q, False, id="stays-in-activeQ"),
    pytest.param(_update_in_backoff_q, BACKOFF_Q, False, id="updated-in-backoffQ"),
    pytest.param(_update_unschedulable("queuePlugin"), BACKOFF_Q, False, id="unschedulable-backing-off-to-backoffQ"),
    pytest.param(_update_unschedulable("queuePlugin", step=10), ACTIVE_Q, False, id="unschedulable-backoff-over-to-activeQ"),
    pytest.param(_update_unschedulable("skipPlugin"), UNSCHEDULABLE_Q, False, id="hint-skip-stays-unschedulable"),
    pytest.param(_update_in_flight, None, False, id="in-flight-not-queued"),
])
def test_update(prepare, want_queue, want_nominated):
    q = new_queue(UPDATE_HINTS)
    old, new = prepare(q)
    q.update(old, new)
    assert q.queue_of(new) == want_queue
    if want_queue is not None:
        assert q.get_pod(new.name, new.namespace).pod is new
    if want_nominated:
        assert len(q.nominator.nominated_pods) == 1


# ---- Delete / Activate -------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["active", "backoff", "unschedulable", "gated", "nowhere"])
def test_delete_from_each_queue(where):
    q = new_queue(pre_enqueue=[FakeSchedulingGates()])
    pod = make_pod("p", gates=["g"] if where == "gated" else ())
    if where in ("active", "gated"):
        q.add(pod)
    elif where == "backoff":
        q._backoff.add(lookup(pod, "x"))
    elif where == "unschedulable":
        q._unschedulable.add_or_update(lookup(pod, "x"))
    q.delete(pod)
    assert q.queue_of(pod) is None and len(q) == 0


def _activate_setup(where: str):
    q = new_queue()
    target = hpp_nominated()
    if where == "active":
        q.add(target)
    elif where == "unschedulable":
        q._unschedulable.add_or_update(lookup(target))
    elif where == "backoff":
        q._backoff.add(lookup(target))
    elif where in ("in-flight", "other-in-flight"):
        q._active.add(lookup(target if where == "in-flight" else mpp()))
        q.try_pop()
    return q, target


@pytest.mark.parametrize("where, want_active, want_in_flight_event", [
    pytest.param("active", 1, False, id="already-in-activeQ"),
    pytest.param("nowhere", 0, False, id="unknown-pod-ignored"),
    pytest.param("in-flight", 0, True, id="in-flight-gets-ForceActivate-event"),
    pytest.param("other-in-flight", 0, False, id="another-pod-in-flight"),
    pytest.param("unschedulable", 1, False, id="from-unschedulable"),
    pytest.param("backoff", 1, False, id="from-backoffQ"),
])
def test_activate(where, want_active, want_in_flight_event):
    q, target = _activate_setup(where)
    q.activate([target])
    assert len(q.pods_in_active_q()) == want_active
    events = [e for e in q.in_flight_events() if isinstance(e, InFlightEvent)]
    if want_in_flight_event:
        assert len(q.in_flight_events()) == 2
        assert events == [InFlightEvent(EVENT_FORCE_ACTIVATE, None, target)]
    else:
        assert events == []


def test_force_activate_event_requeues_only_its_pod():
    q = new_queue()
    target, other = make_pod("a"), make_pod("b")
    for p in (target, other):
        q.add(p)
    q.try_pop(), q.try_pop()
    q.activate([target])  # both in flight: recorded as ForceActivate(target)
    q.add_unschedulable_if_not_present(lookup(target, "plugin"), q.scheduling_cycle())
    q.add_unschedulable_if_not_present(lookup(other, "plugin"), q.scheduling_cycle())
    assert (q.queue_of(target), q.queue_of(other)) == (BACKOFF_Q, UNSCHEDULABLE_Q)


# ---- PreEnqueue: moveToActiveQ / moveToBackoffQ ------------------------------------------------

TWO_ALLOWLISTS = [AllowlistPreEnqueue(["foo", "bar"]), AllowlistPreEnqueue(["foo"])]  # same name: the last wins


MOVE_TO_ACTIVE_CASES = [
    # (id, plugins, labels, event, from_backoffQ, popFromBackoffQ values to run, want unschedulable, want added)
    ("no-plugins", [], {"p": ""}, event_label(EVENT_UNSCHEDULED_POD_ADD), False, (True, False), 0, True),
    ("not-in-allowlist", [AllowlistPreEnqueue(), AllowlistPreEnqueue()], {"p": ""},
     event_label(EVENT_UNSCHEDULED_POD_ADD), False, (True, False), 1, False),
    ("fails-one-plugin", TWO_ALLOWLISTS, {"bar": ""}, event_label(EVENT_UNSCHEDULED_POD_ADD), False, (True, False), 1,
     False),
    ("after-backoff-still-gated", TWO_ALLOWLISTS, {"bar": ""}, BACKOFF_COMPLETE, False, (False,), 1, False),
    ("from-backoffQ-skips-PreEnqueue", TWO_ALLOWLISTS, {"bar": ""}, BACKOFF_COMPLETE, True, (True,), 0, True),
    ("activated-from-unschedulable", TWO_ALLOWLISTS, {"bar": ""}, FORCE_ACTIVATE, False, (True,), 1, False),
    ("activated-from-backoffQ", TWO_ALLOWLISTS, {"bar": ""}, FORCE_ACTIVATE, True, (True,), 0, True),
    ("passes-all", [AllowlistPreEnqueue(["foo", "bar"]), AllowlistPreEnqueue(["bar"])], {"bar": ""},
     event_label(EVENT_UNSCHEDULED_POD_ADD), False, (True, False), 0, True),
]


@pytest.mark.parametrize("plugins, labels, event, from_backoff, flag, want_unsched, want_ok", [
    pytest.param(*case[1:5], flag, *case[6:], id=f"{case[0]}-popFromBackoffQ={flag}")
    for case in MOVE_TO_ACTIVE_CASES for flag in case[5]])
def test_move_to_active_q(plugins, labels, event, from_backoff, flag, want_unsched, want_ok):
    pod = make_pod("bar", labels=labels)
    q = new_queue(pre_enqueue=plugins, pop_from_backoff_q=flag, pod_initial_backoff_seconds=30,
                  pod_max_backoff_seconds=60)
    assert q._move_to_active_q(q._new_queued_pod_info(pod), event, from_backoff) is want_ok
    assert len(q.unschedulable_pods()) == want_unsched
    q.update(pod, clone(pod, annotations={"foo": ""}))  # an unrelated update doesn't ungate it
    assert len(q.unschedulable_pods()) == want_unsched


@pytest.mark.parametrize("plugins, labels, pop_from_backoff_q, want_ok", [
    pytest.param([], {"p": ""}, True, True, id="no-plugins"),
    pytest.param([AllowlistPreEnqueue(), AllowlistPreEnqueue()], {"p": ""}, False, True, id="PreEnqueue-not-run"),
    pytest.param([AllowlistPreEnqueue(), AllowlistPreEnqueue()], {"p": ""}, True, False, id="gated-on-the-way-in"),
    pytest.param(TWO_ALLOWLISTS, {"bar": ""}, False, True, id="would-fail-but-not-run"),
    pytest.param(TWO_ALLOWLISTS, {"bar": ""}, True, False, id="fails-one-plugin"),
    pytest.param([AllowlistPreEnqueue(["foo", "bar"]), AllowlistPreEnqueue(["bar"])], {"bar": ""}, True, True,
                 id="passes-all"),
])
def test_move_to_backoff_q(plugins, labels, pop_from_backoff_q, want_ok):
    q = new_queue(pre_enqueue=plugins, pop_from_backoff_q=pop_from_backoff_q)
    p = q._new_queued_pod_info(make_pod("bar", labels=labels))
    assert q._move_to_backoff_q(p, event_label(EVENT_UNSCHEDULED_POD_ADD)) is want_ok
    assert q._backoff.has(p) is want_ok
    assert (q._unschedulable.get(p.pod) is None) is want_ok


# ---- MoveAllToActiveOrBackoffQueue -------------------------------------------------------------

def _gated(p: QueuedPodInfo, plugin: str, events: list[ClusterEvent]) -> QueuedPodInfo:
    p.gating_plugin, p.unschedulable_plugins, p.gating_plugin_events = plugin, {plugin}, events
    return p


def _must_not_run(pod, old, new):
    raise AssertionError("hint must not run for a pod gated by a plugin not interested in the event")


@pytest.mark.parametrize("make_info, hint, elapsed, want", [
    pytest.param(lambda p: _pending(lookup(p), "foo"), hint_queue, 0, ACTIVE_Q, id="pending-queue-to-activeQ"),
    pytest.param(lambda p: lookup(p, "foo"), hint_queue, 0, BACKOFF_Q, id="queue-while-backing-off-to-backoffQ"),
    pytest.param(lambda p: lookup(p, "foo"), hint_queue, 2, ACTIVE_Q, id="queue-after-backoff-to-activeQ"),
    pytest.param(lambda p: lookup(p, "foo"), hint_skip, 0, UNSCHEDULABLE_Q, id="skip-stays"),
    pytest.param(lambda p: _gated(lookup(p), "FakeSchedulingGates", [EVENT_UNSCHEDULED_POD_UPDATE]), _must_not_run, 0,
                 GATED, id="gated-by-uninterested-plugin-hint-not-called"),
    pytest.param(lambda p: _gated(lookup(p), "foo", [NODE_ADD]), hint_queue, 0, BACKOFF_Q,
                 id="gated-by-interested-plugin-moves"),
])
def test_move_all_with_queueing_hint(make_info, hint, elapsed, want):
    class Foo(AllowlistPreEnqueue):
        name = "foo"

    pod = make_pod("pod1", uid="1", labels={"foo": "bar"})
    q = new_queue(hint_map({NODE_ADD: [("foo", hint)],
                            EVENT_UNSCHEDULED_POD_UPDATE: [("FakeSchedulingGates", hint_queue)]}),
                  pre_enqueue=[FakeSchedulingGates(), Foo(["foo"])])
    q.add(pod)
    assert q.try_pop().pod is pod
    q.add_unschedulable_if_not_present(make_info(pod), q.scheduling_cycle())
    q.clock.step(elapsed)
    q.move_all_to_active_or_backoff_queue(NODE_ADD)
    assert q.queue_of(pod) == want


def _pending(p: QueuedPodInfo, *plugins: str) -> QueuedPodInfo:
    p.pending_plugins = set(plugins)
    return p


def test_move_all_to_active_or_backoff_queue_scenario():
    clock = fake_clock()
    q = new_queue(hint_map({NODE_ADD: [("fooPlugin", hint_queue)]}), clock=clock)
    u, h, m = upp(), hpp(), mpp()
    hpp1 = clone(h, name="hpp1", uid="hpp1ns1")
    hpp2 = clone(h, name="hpp2", uid="hpp2ns1")
    for p in (u, h):
        q.add(p)
        q.try_pop()
    assert sorted(x.uid for x in q.in_flight_pods()) == ["hppns1", "upns1"]
    for p in (u, h):
        q.add_unschedulable_if_not_present(q._new_queued_pod_info(p, "fooPlugin"), q.scheduling_cycle())
    assert q.in_flight_pods() == []
    q.add(hpp1)
    q.try_pop()
    info = q._new_queued_pod_info(hpp1)
    info.unschedulable_count += 1
    q.add_unschedulable_if_not_present(info, q.scheduling_cycle())  # no plugin: backoffQ
    q.add(hpp2)
    q.try_pop()
    q.add_unschedulable_if_not_present(q._new_queued_pod_info(hpp2, "barPlugin"), q.scheduling_cycle())
    q.move_all_to_active_or_backoff_queue(NODE_ADD)  # fooPlugin's pods: to backoffQ
    q.add(m)
    assert len(q.pods_in_active_q()) == 1 and q.try_pop().pod is m
    assert len(q.pods_in_backoff_q()) == 3 and q.queue_of(hpp2) == UNSCHEDULABLE_Q
    clock.step(10)
    q._backoff.pop_all_backoff_completed()  # drop them from the queue without making them in flight
    assert [x.uid for x in q.in_flight_pods()] == ["mppns2"]
    for p in (u, h, hpp1):
        q.add(p)
        q.try_pop()
    for info in (q._new_queued_pod_info(u, "fooPlugin"), q._new_queued_pod_info(h, "fooPlugin"),
                 q._new_queued_pod_info(hpp1)):
        q.add_unschedulable_if_not_present(info, q.scheduling_cycle())
    assert [x.uid for x in q.in_flight_pods()] == ["mppns2"]
    q.add(m)
    assert [q.queue_of(p) for p in (u, h, hpp2, hpp1, m)] == [UNSCHEDULABLE_Q] * 3 + [BACKOFF_Q, ACTIVE_Q]
    clock.step(10)
    q.flush_backoff_q_completed()
    q.move_all_to_active_or_backoff_queue(NODE_ADD)
    assert len(q.pods_in_active_q()) == 4 and q.pods_in_backoff_q() == []
    assert q.unschedulable_pods() == [hpp2]  # barPlugin never registered NodeAdd


@pytest.mark.parametrize("pre_check, event, want", [
    pytest.param(None, EVENT_UNSCHEDULABLE_TIMEOUT, {"p0", "p1", "p2", "p3", "p4"}, id="no-pre-check"),
    pytest.param(lambda pod: pod.priority >= 2, EVENT_UNSCHEDULABLE_TIMEOUT, {"p2", "p3", "p4"}, id="priority>=2"),
    pytest.param(lambda pod: pod.priority % 2 == 0 and pod.priority >= 2, EVENT_UNSCHEDULABLE_TIMEOUT, {"p2", "p4"},
                 id="even-and>=2"),
    pytest.param(lambda pod: pod.priority % 2 == 0 and pod.priority < 0, EVENT_UNSCHEDULABLE_TIMEOUT, set(),
                 id="none"),
    pytest.param(lambda pod: (_ for _ in ()).throw(AssertionError("pre_check must not run")), PV_ADD, set(),
                 id="uninteresting-event-skips-pre-check"),
])
def test_move_all_pre_check(pre_check, event, want):
    clock = fake_clock()
    q = new_queue(clock=clock)
    for i in range(5):
        pod = make_pod(f"p{i}", "", priority=i)
        q.add(pod)
        assert q.try_pop().pod is pod
        q.add_unschedulable_if_not_present(lookup(pod, "plugin"), q.scheduling_cycle())
    q.move_all_to_active_or_backoff_queue(event, pre_check=pre_check)
    clock.step(20)
    assert {p.pod.name for p in q._backoff.pop_all_backoff_completed()} == want


def test_move_all_skips_the_pool_when_no_pooled_pod_was_rejected_by_an_interested_plugin():
    """The pool keeps which plugins rejected its pods: an event only other plugins registered asks
    no pod (not even pre_check), still reaches pods in flight, and the summary follows the pool."""
    pre_checked: list[str] = []

    def pre_check(pod: Pod) -> bool:
        pre_checked.append(pod.name)
        return True

    q = new_queue(hint_map({NODE_ADD: [("fooPlugin", hint_queue)], PV_ADD: [("barPlugin", hint_queue)]}))
    bar = make_pod("bar", uid="bar")
    q.add(bar)
    q.try_pop()
    q.add_unschedulable_if_not_present(lookup(bar, "barPlugin"), q.scheduling_cycle())
    in_flight = make_pod("flying", uid="flying")
    q.add(in_flight)
    q.try_pop()
    q.move_all_to_active_or_backoff_queue(NODE_ADD, pre_check=pre_check)
    assert pre_checked == [] and q.queue_of(bar) == UNSCHEDULABLE_Q
    # The pod in flight was rejected by fooPlugin: NODE_ADD arrived during its attempt.
    q.add_unschedulable_if_not_present(lookup(in_flight, "fooPlugin"), q.scheduling_cycle())
    assert q.queue_of(in_flight) == BACKOFF_Q
    # A pod rejected by fooPlugin joins the pool: the same event now moves it, and only it.
    foo = make_pod("foo", uid="foo")
    q.add(foo)
    q.try_pop()
    q.add_unschedulable_if_not_present(lookup(foo, "fooPlugin"), q.scheduling_cycle())
    q.move_all_to_active_or_backoff_queue(NODE_ADD, pre_check=pre_check)
    assert sorted(pre_checked) == ["bar", "foo"]
    assert q.queue_of(foo) == BACKOFF_Q and q.queue_of(bar) == UNSCHEDULABLE_Q
    q.move_all_to_active_or_backoff_queue(PV_ADD)
    assert q.queue_of(bar) == BACKOFF_Q


def test_move_all_moves_a_pod_no_plugin_rejected_on_any_interesting_event():
    q = new_queue(hint_map({NODE_ADD: [("fooPlugin", hint_queue)]}))
    errored, rejected = make_pod("errored", uid="e"), make_pod("rejected", uid="r")
    for pod, plugins in ((errored, ()), (rejected, ("barPlugin",))):
        q.add(pod)
        q.try_pop()
        q._unschedulable.add_or_update(lookup(pod, *plugins))  # as a pod put back by a flush would sit
    q.move_all_to_active_or_backoff_queue(NODE_ADD)
    assert q.queue_of(errored) != UNSCHEDULABLE_Q and q.queue_of(rejected) == UNSCHEDULABLE_Q


# ---- isPodWorthRequeuing -----------------------------------------------------------------------

class _Counted:
    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, fn):
        def hint(pod, old, new):
            self.calls += 1
            return fn(pod, old, new)
        return hint


NODE = make_node("n")
POD1 = make_pod("pod1", "ns1", uid="1")


@pytest.mark.parametrize("unsched, pending, event, new_obj, hints, want, want_calls", [
    pytest.param({"fooPlugin1"}, set(), NODE_ADD, NODE, {EVENT_ASSIGNED_POD_ADD: [("fooPlugin1", hint_queue)]},
                 QueueingStrategy.QUEUE_SKIP, 0, id="no-hint-for-the-event"),
    pytest.param({"fooPlugin1"}, set(), NODE_ADD, NODE, {NODE_ADD: [("fooPlugin1", hint_error)]},
                 QueueingStrategy.QUEUE_AFTER_BACKOFF, 1, id="hint-error-counts-as-queue"),
    pytest.param({"fooPlugin1"}, set(), EVENT_UNSCHEDULABLE_TIMEOUT, None, {}, QueueingStrategy.QUEUE_AFTER_BACKOFF, 0,
                 id="wildcard"),
    pytest.param({"fooPlugin1"}, set(), EVENT_FORCE_ACTIVATE, make_pod("pod1", "ns1", uid="1"), {},
                 QueueingStrategy.QUEUE_AFTER_BACKOFF, 0, id="wildcard-for-this-pod"),
    pytest.param({"fooPlugin1"}, set(), EVENT_FORCE_ACTIVATE, make_pod("pod-different", "ns2", uid="2"), {},
                 QueueingStrategy.QUEUE_SKIP, 0, id="wildcard-for-another-pod"),
    pytest.param({"fooPlugin1", "fooPlugin3"}, {"fooPlugin2"}, NODE_ADD, NODE,
                 {NODE_ADD: [("fooPlugin1", hint_queue), ("fooPlugin2", hint_queue), ("fooPlugin3", hint_queue),
                             ("fooPlugin4", hint_error)]},
                 QueueingStrategy.QUEUE_IMMEDIATELY, 2, id="pending-plugin-queue-is-immediate"),
    pytest.param({"fooPlugin1", "fooPlugin2"}, set(), NODE_ADD, NODE,
                 {NODE_ADD: [("fooPlugin1", hint_skip), ("fooPlugin2", hint_queue)]},
                 QueueingStrategy.QUEUE_AFTER_BACKOFF, 2, id="unschedulable-plugin-queue-after-backoff"),
    pytest.param({"fooPlugin1", "fooPlugin2"}, set(), NODE_ADD, NODE,
                 {NODE_ADD: [("fooPlugin1", hint_skip), ("fooPlugin2", hint_skip), ("fooPlugin3", hint_queue)]},
                 QueueingStrategy.QUEUE_SKIP, 2, id="hints-of-other-plugins-ignored"),
    pytest.param({"fooPlugin1", "fooPlugin2"}, set(), NODE_UPDATE_LABEL, NODE,
                 {NODE_UPDATE_LABEL: [("fooPlugin1", hint_queue), ("fooPlugin2", hint_queue)],
                  ClusterEvent(EventResource.NODE, ActionType.UPDATE): [("fooPlugin1", hint_queue)],
                  NODE_ADD: [("fooPlugin1", hint_queue)]},
                 QueueingStrategy.QUEUE_AFTER_BACKOFF, 1, id="specific-update-also-runs-general-update-hints"),
    pytest.param({"fooPlugin1"}, set(), NODE_ADD, NODE,
                 {ClusterEvent(EventResource.WILDCARD, ActionType.ADD): [("fooPlugin1", hint_queue)]},
                 QueueingStrategy.QUEUE_AFTER_BACKOFF, 1, id="wildcard-resource-registration"),
    pytest.param({"fooPlugin1"}, set(),
                 ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT), NODE,
                 {ClusterEvent(EventResource.WILDCARD, ActionType.ALL): [("fooPlugin1", hint_queue)]},
                 QueueingStrategy.QUEUE_AFTER_BACKOFF, 1, id="wildcard-registration"),
    pytest.param(set(), set(), NODE_ADD, NODE, {}, QueueingStrategy.QUEUE_AFTER_BACKOFF, 0, id="no-rejecting-plugin"),
])
def test_is_pod_worth_requeuing(unsched, pending, event, new_obj, hints, want, want_calls):
    counter = _Counted()
    q = new_queue(hint_map({ev: [(n, counter.wrap(f)) for n, f in fns] for ev, fns in hints.items()}))
    p = lookup(POD1, *unsched)
    p.pending_plugins = set(pending)
    assert q.is_pod_worth_requeuing(p, event, None, new_obj) == want
    assert counter.calls == want_calls


def test_hint_returning_anything_but_skip_is_queue():
    q = new_queue(hint_map({NODE_ADD: [("p", lambda pod, old, new: QueueingHint.QUEUE)]}))
    assert q.is_pod_worth_requeuing(lookup(POD1, "p"), NODE_ADD, None, NODE) == QueueingStrategy.QUEUE_AFTER_BACKOFF


def test_missing_profile_hints_count_as_queue():
    q = new_queue({})
    pod = make_pod("x", scheduler_name="other-scheduler")
    assert q.is_pod_worth_requeuing(lookup(pod, "p"), NODE_ADD, None, NODE) == QueueingStrategy.QUEUE_AFTER_BACKOFF


# ---- AssignedPodAdded / AssignedPodUpdated -----------------------------------------------------

AFFINITY_POD = dict(name="afp", uid="afp", annotations={"annot2": "val2"}, affinity=pod_affinity_exists("service", "region"))
SPREAD_POD = dict(name="tsp", uid="tsp", spread=[])
RELATED = make_pod("lbp", "ns1", labels={"service": "securityscan"}, node_name="node1")
UNRELATED = make_pod("lbp", "unrelated", labels={"unrelated": "unrelated"}, node_name="node1")

ASSIGNED_CASES = [
    pytest.param(AFFINITY_POD, "InterPodAffinity", RELATED, True, id="affinity-matching-pod"),
    pytest.param(AFFINITY_POD, "InterPodAffinity", UNRELATED, False, id="affinity-unrelated-pod"),
    pytest.param(SPREAD_POD, "PodTopologySpread", RELATED, True, id="spread-same-namespace"),
    pytest.param(AFFINITY_POD, "PodTopologySpread", UNRELATED, False, id="spread-other-namespace"),
    pytest.param(dict(name="afp", uid="afp"), "fakePlugin", UNRELATED, False, id="other-plugin"),
]


def _rejected(q, spec: dict, plugin: str) -> Pod:
    pod = make_pod(spec["name"], "ns1", uid=spec["uid"], annotations=spec.get("annotations"),
                   affinity=spec.get("affinity"))
    q.add(pod)
    assert q.try_pop().pod is pod
    q.add_unschedulable_if_not_present(q._new_queued_pod_info(pod, plugin), q.scheduling_cycle())
    q.clock.step(2)  # past the initial backoff
    return pod


@pytest.mark.parametrize("spec, plugin, assigned, want_requeue", ASSIGNED_CASES)
def test_assigned_pod_added(spec, plugin, assigned, want_requeue):
    q = new_queue(hint_map({EVENT_ASSIGNED_POD_ADD: [("fakePlugin", hint_queue), ("InterPodAffinity", hint_queue),
                                                     ("PodTopologySpread", hint_queue)]}))
    pod = _rejected(q, spec, plugin)
    q.assigned_pod_added(assigned)
    assert (q.queue_of(pod) == ACTIVE_Q) is want_requeue


UPDATE_LABEL = ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_LABEL)


@pytest.mark.parametrize("spec, plugin, assigned, event, want_requeue", [
    *[pytest.param(*c.values[:3], UPDATE_LABEL, c.values[3], id=c.id) for c in ASSIGNED_CASES],
    pytest.param(dict(name="rp", uid="afp"), "NodeResourcesFit", make_pod("lbp", "ns2", node_name="node1"),
                 ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE_POD_SCALE_DOWN), True,
                 id="scale-down-requeues-resource-fit"),
])
def test_assigned_pod_updated(spec, plugin, assigned, event, want_requeue):
    q = new_queue(hint_map({
        UPDATE_LABEL: [("fakePlugin", hint_queue), ("InterPodAffinity", hint_queue), ("PodTopologySpread", hint_queue)],
        ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCALE_DOWN): [("NodeResourcesFit", hint_queue)]}))
    pod = _rejected(q, spec, plugin)
    q.assigned_pod_updated(None, assigned, event)
    assert (q.queue_of(pod) == ACTIVE_Q) is want_requeue


# ---- flushes, backoff, timestamps --------------------------------------------------------------

def test_recently_tried_pods_go_back():
    clock = fake_clock()
    q = new_queue(clock=clock)
    for i in range(5):
        q.add(make_pod(f"test-pod-{i}", uid=f"tp00{i}", priority=HIGH, node_name="node1", nominated_node_name="node1"))
    clock.step(1e-6 * 4)  # 4 µs: above the float clock's resolution at today's epoch
    p1 = q.try_pop()
    p1.unschedulable_plugins = {"plugin"}
    q.add_unschedulable_if_not_present(p1, q.scheduling_cycle())
    clock.step(10)
    q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)
    popped = [q.try_pop() for _ in range(5)]
    assert popped[-1] is p1 and p1 not in popped[:-1]


def test_pod_failing_repeatedly_does_not_block_a_newer_pod():
    clock = fake_clock()
    q = new_queue(clock=clock)
    unsched = make_pod("test-pod-unscheduled", uid="tp001", priority=HIGH, nominated_node_name="node1")
    q.add(unsched)
    assert q.try_pop().pod is unsched
    q.add_unschedulable_if_not_present(lookup(unsched, "plugin"), q.scheduling_cycle())
    clock.step(2)
    q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)
    assert q.try_pop().pod is unsched
    newer = make_pod("test-newer-pod", uid="tp002", priority=HIGH, nominated_node_name="node1")
    q.add(newer)
    q.add_unschedulable_if_not_present(lookup(unsched, "plugin"), q.scheduling_cycle())
    clock.step(2)
    q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)
    assert q.try_pop().pod is newer


def test_high_priority_pod_backing_off_does_not_block_others():
    q = new_queue()
    mid = make_pod("test-midpod", uid="tp-mid", priority=MID, nominated_node_name="node1")
    high = make_pod("test-highpod", uid="tp-high", priority=HIGH, nominated_node_name="node1")
    q.add(mid)
    q.add(high)
    p = q.try_pop()
    assert p.pod is high
    q.add_unschedulable_if_not_present(lookup(p.pod, "fooPlugin"), q.scheduling_cycle())
    q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)
    assert q.queue_of(high) == BACKOFF_Q
    assert q.try_pop().pod is mid


@pytest.mark.parametrize("elapsed, want_moved", [
    pytest.param(300, False, id="exactly-5-minutes-stays"),
    pytest.param(301, True, id="over-5-minutes-moves"),
])
def test_flush_unschedulable_pods_leftover_after_5_minutes(elapsed, want_moved):
    clock = fake_clock()
    q = new_queue(hint_map({NODE_ADD: [("fakePlugin", hint_queue)]}), clock=clock)
    mid = make_pod("test-midpod", uid="tp-mid", priority=MID, nominated_node_name="node1")
    high = make_pod("test-highpod", uid="tp-high", priority=HIGH, nominated_node_name="node1")
    for p in (high, mid):
        q.add(p)
        q.try_pop()
    for p in (high, mid):
        q.add_unschedulable_if_not_present(q._new_queued_pod_info(p, "fakePlugin"), q.scheduling_cycle())
    clock.step(elapsed)
    q.flush_unschedulable_pods_leftover()
    if want_moved:
        assert [q.try_pop().pod for _ in range(2)] == [high, mid]
    else:
        assert q.try_pop() is None and len(q.unschedulable_pods()) == 2


def test_gated_pods_are_not_flushed_by_the_timeout():
    clock = fake_clock()
    q = new_queue(pre_enqueue=[FakeSchedulingGates()], clock=clock)
    pod = make_pod("g", gates=["wait"])
    q.add(pod)
    clock.step(600)
    q.flush_unschedulable_pods_leftover()
    assert q.queue_of(pod) == GATED


@pytest.mark.parametrize("max_duration", [None, 30.0], ids=["default", "custom"])
def test_pod_max_in_unschedulable_pods_duration(max_duration):
    clock = fake_clock()
    kwargs = {} if max_duration is None else {"pod_max_in_unschedulable_pods_duration": max_duration}
    q = new_queue(clock=clock, **kwargs)
    p1 = QueuedPodInfo.of(make_pod("test-pod-1", "ns1", uid="tp-1", nominated_node_name="node1"), timestamp=T0 - 1)
    p2 = QueuedPodInfo.of(make_pod("test-pod-2", "ns2", uid="tp-2", nominated_node_name="node2"), timestamp=T0 - 2)
    for p in (p1, p2):
        p.unschedulable_count += 1
        q._unschedulable.add_or_update(p)
    clock.step(q.pod_max_in_unschedulable_pods_duration)
    q.flush_unschedulable_pods_leftover()
    assert [q.try_pop() for _ in range(2)] == [p2, p1]


def _add_direct(q, p):
    q._active.add(p)


def _add_unschedulable(q, p):
    p.unschedulable_count += 1
    q._unschedulable.add_or_update(p)


def _add_backoff(q, p):
    q._backoff.add(p)


def _step3(q, p):
    q.clock.step(3)


def _flush_backoff(q, p):
    q.clock.step(3)
    q.flush_backoff_q_completed()


def _move_all(q, p):
    q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)


@pytest.mark.parametrize("ops", [
    pytest.param([(_add_direct, 2), (_add_direct, 1)], id="activeQ-sorted-by-timestamp"),
    pytest.param([(_add_unschedulable, 2), (_add_unschedulable, 1), (_step3, None), (_move_all, None)],
                 id="from-unschedulable-sorted-by-timestamp"),
    pytest.param([(_add_direct, 2), (_add_backoff, 1), (_flush_backoff, None), (_move_all, None)],
                 id="from-backoffQ-keeps-timestamp"),
])
def test_pod_timestamp(ops):
    q = new_queue()
    infos = {1: QueuedPodInfo.of(make_pod("test-pod-1", "ns1", uid="tp-1"), timestamp=T0),
             2: QueuedPodInfo.of(make_pod("test-pod-2", "ns2", uid="tp-2"), timestamp=T0 + 1)}
    for op, which in ops:
        op(q, infos.get(which))
    assert [q.try_pop() for _ in range(2)] == [infos[1], infos[2]]


def _scenario_once(q, clock, pod):
    q.add(pod)


def _scenario_twice(q, clock, pod):
    q.add(pod)
    p = q.try_pop()
    p.unschedulable_plugins = {"plugin"}
    q.add_unschedulable_if_not_present(p, 1)
    clock.set_time(T0 + 300 + 0.001)
    q.flush_unschedulable_pods_leftover()


def _scenario_twice_with_update(q, clock, pod):
    _scenario_twice(q, clock, pod)
    q.update(pod, clone(pod, annotations={"generation": "1"}))


def _scenario_gated(q, clock, pod):
    q.pre_enqueue_plugins = {DEFAULT_SCHEDULER: {"preEnqueuePlugin": AllowlistPreEnqueue(["foo"])}}
    q.add(pod)
    assert q.queue_of(pod) == GATED
    clock.step(60)
    q.update(pod, clone(pod, labels={"foo": ""}))


@pytest.mark.parametrize("scenario, want_attempts, want_initial", [
    pytest.param(_scenario_once, 1, T0, id="scheduled-after-1-attempt"),
    pytest.param(_scenario_twice, 2, T0, id="scheduled-after-2-attempts"),
    pytest.param(_scenario_twice_with_update, 2, T0, id="updated-before-second-pop"),
    pytest.param(_scenario_gated, 1, T0 + 60, id="gated-pod-initial-attempt-when-ungated"),
])
def test_per_pod_scheduling_metrics(scenario, want_attempts, want_initial):
    clock = fake_clock()
    q = new_queue(clock=clock)
    pod = make_pod("test-pod", "test-ns", uid="test-uid")
    scenario(q, clock, pod)
    p = q.try_pop()
    assert (p.attempts, p.initial_attempt_timestamp) == (want_attempts, want_initial)


@pytest.mark.parametrize("pop_from_backoff_q", [True, False], ids=["window", "no-window"])
def test_backoff_doubles_and_caps(pop_from_backoff_q):
    clock = fake_clock(T0 + 0.5)  # off the window, as a real clock would be
    q = new_queue(clock=clock, pop_from_backoff_q=pop_from_backoff_q)
    pod = make_pod("test-pod", "test-ns", uid="test-uid")
    q.add(pod)
    for i, want in enumerate([1, 2, 4, 8, 10, 10, 10]):
        ts = clock.now()
        p = q.try_pop()
        assert p.attempts == i + 1
        p.unschedulable_plugins.add("unsched-plugin")
        q.add_unschedulable_if_not_present(p, i)
        q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)
        assert q.queue_of(pod) == BACKOFF_Q
        backoff = p.backoff_expiration - ts
        if pop_from_backoff_q:  # the expiry is truncated to its window: round up to get the backoff
            backoff = int(backoff) + 1
        assert backoff == want
        clock.step(1)
        q.flush_backoff_q_completed()
        assert q.queue_of(pod) == BACKOFF_Q  # an early flush leaves it there
        clock.step(backoff)
        q.flush_backoff_q_completed()
        assert q.queue_of(pod) == ACTIVE_Q


# ---- gates, listing ----------------------------------------------------------------------------

def test_gated_on_creation_ungated_by_update():
    q = new_queue(pre_enqueue=[FakeSchedulingGates()])
    gated = make_pod("p", gates=["hello world"])
    q.add(gated)
    assert q._unschedulable.get(gated).gated and q.queue_of(gated) == GATED
    assert q.try_pop() is None
    q.update(gated, clone(gated, scheduling_gates=[]))
    p = q.try_pop()
    assert p is not None and not p.gated and p.pod.scheduling_gates == []


def test_pending_pods():
    q = new_queue()
    u, h, m = upp(), hpp(), mpp()
    for p in (u, h):
        q.add(p)
        q.try_pop()
    q.add(m)
    for p in (u, h):
        q.add_unschedulable_if_not_present(q._new_queued_pod_info(p, "plugin"), q.scheduling_cycle())
    assert {p.pod.name for p in q.pending_pods()} == {"mpp", "up", "hpp"}
    assert q.pending_pods_summary() == "activeQ:1; backoffQ:0; unschedulablePods:2"
    q.move_all_to_active_or_backoff_queue(EVENT_UNSCHEDULABLE_TIMEOUT)
    # backoffQ lists the order pods will leave it: same window, so by priority.
    assert [(p.pod.name, p.queue) for p in q.pending_pods()] == [("mpp", ACTIVE_Q), ("hpp", BACKOFF_Q),
                                                                 ("up", BACKOFF_Q)]
    assert q.pending_pods_summary() == "activeQ:1; backoffQ:2; unschedulablePods:0"


def test_pending_pods_shows_gated_and_unschedulable_separately():
    q = new_queue(pre_enqueue=[FakeSchedulingGates()])
    g, u = make_pod("g", gates=["x"]), make_pod("u")
    q.add(g)
    q.add(u)
    q.try_pop()
    q.add_unschedulable_if_not_present(lookup(u, "plugin"), q.scheduling_cycle())
    assert [(p.pod.name, p.queue) for p in q.pending_pods()] == [("g", GATED), ("u", UNSCHEDULABLE_Q)]
    assert q.pending_pods()[0].info.gating_plugin == "FakeSchedulingGates"


@pytest.mark.parametrize("name, found", [("pod1", True), ("pod2", True), ("pod3", True), ("pod4", False)],
                         ids=["activeQ", "backoffQ", "unschedulable", "missing"])
def test_get_pod(name, found):
    q = new_queue()
    pods = {n: make_pod(n, "default") for n in ("pod1", "pod2", "pod3")}
    q._active.add(lookup(pods["pod1"]))
    q._backoff.add(lookup(pods["pod2"]))
    q._unschedulable.add_or_update(lookup(pods["pod3"]))
    got = q.get_pod(name, "default")
    assert (got is not None) is found
    if found:
        assert got.pod is pods[name]


def test_pre_enqueue_plugin_error_gates_the_pod():
    class Broken(PreEnqueuePlugin):
        name = "Broken"

        def pre_enqueue(self, pod):
            raise RuntimeError("boom")

    class ErrorStatus(PreEnqueuePlugin):
        name = "ErrorStatus"

        def pre_enqueue(self, pod):
            return Status.of(Code.ERROR, "bad")

    for plugin in (Broken(), ErrorStatus()):
        q = new_queue(pre_enqueue=[plugin])
        pod = make_pod("p")
        q.add(pod)
        assert q.queue_of(pod) == GATED and q._unschedulable.get(pod).unschedulable_plugins == {plugin.name}
