"""The waiting-pods map (kube's waiting_pods_map.go): allow / reject / timeout per plugin, the
first answer wins, timers stopped by an answer, the handle's get / iterate / reject."""
from __future__ import annotations

import threading
import time

import pytest

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.framework.interface import Code
from schedmesh.framework.waiting_pods import Timers, WaitingPod, WaitingPodsMap, go_duration

LONG = 600.0  # a timeout no test reaches


def pod(name: str) -> Pod:
    return Pod(meta=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"))


@pytest.mark.parametrize("seconds,want", [
    (0, "0s"), (5e-7, "500ns"), (1e-6, "1µs"), (1.5e-3, "1.5ms"), (0.05, "50ms"), (0.5, "500ms"), (1, "1s"),
    (1.5, "1.5s"), (10, "10s"), (60, "1m0s"), (90, "1m30s"), (900, "15m0s"), (3600, "1h0m0s"),
    (3725.25, "1h2m5.25s"), (-2, "-2s"),
])
def test_go_duration(seconds, want) -> None:
    assert go_duration(seconds) == want


# (plugins and their timeouts, operations in order, expected answer or None, expected pending plugins)
ALLOWED = ("allowed", "", "")
CASES = {
    "one of two plugins allowed: still waiting": (
        {"A": LONG, "B": LONG}, [("allow", "A")], None, ["B"]),
    "both allowed": ({"A": LONG, "B": LONG}, [("allow", "A"), ("allow", "B")], ALLOWED, []),
    "both allowed, other order": ({"A": LONG, "B": LONG}, [("allow", "B"), ("allow", "A")], ALLOWED, []),
    "allowed twice by the same plugin": ({"A": LONG, "B": LONG}, [("allow", "A"), ("allow", "A")], None, ["B"]),
    "a plugin that did not ask to wait allows nothing": (
        {"A": LONG}, [("allow", "C")], None, ["A"]),
    "rejected": ({"A": LONG, "B": LONG}, [("reject", "B", "no room for the gang")],
                 ("rejected", "B", "no room for the gang"), ["A", "B"]),
    "rejected after one allowed": ({"A": LONG, "B": LONG}, [("allow", "A"), ("reject", "B", "no")],
                                   ("rejected", "B", "no"), ["B"]),
    "the first answer wins: allowed then rejected": (
        {"A": LONG}, [("allow", "A"), ("reject", "A", "late")], ALLOWED, []),
    "the first answer wins: rejected then allowed": (
        {"A": LONG, "B": LONG}, [("reject", "A", "first"), ("allow", "A"), ("allow", "B")],
        ("rejected", "A", "first"), []),
    "the first answer wins: two rejections": (
        {"A": LONG}, [("reject", "A", "one"), ("reject", "", "two")], ("rejected", "A", "one"), ["A"]),
    "timed out at the plugin whose time ran out": (
        {"A": 0.05, "B": LONG}, [("sleep", 0.3)],
        ("rejected", "A", "rejected due to timeout after waiting 50ms at plugin A"), ["A", "B"]),
    "allowed before the timeout: the timer is stopped": (
        {"A": 0.1}, [("allow", "A"), ("sleep", 0.3)], ALLOWED, []),
    "rejected before the timeout keeps its message": (
        {"A": 0.1}, [("reject", "A", "mine"), ("sleep", 0.3)], ("rejected", "A", "mine"), ["A"]),
    "a zero timeout rejects at once": (
        {"A": 0}, [("sleep", 0.2)], ("rejected", "A", "rejected due to timeout after waiting 0s at plugin A"), ["A"]),
}


@pytest.mark.parametrize("waits,ops,want,pending", CASES.values(), ids=CASES.keys())
def test_waiting_pod(waits, ops, want, pending) -> None:
    wp = WaitingPod(pod("p"), waits)
    heard = []
    wp.when_done(heard.append)
    for op, *args in ops:
        if op == "sleep":
            time.sleep(args[0])
        else:
            getattr(wp, op)(*args)
    got = wp.wait(0 if want is None else 2.0)
    if want is None:
        assert got is None and heard == []
    else:
        kind, plugin, msg = want
        assert got is not None
        if kind == "allowed":
            assert got.is_success()
        else:
            assert (got.code, got.plugin, got.message()) == (Code.UNSCHEDULABLE, plugin, msg)
        assert heard == [got], "a listener hears the answer once"
    assert sorted(wp.get_pending_plugins()) == pending


def test_a_listener_added_after_the_answer_hears_it_at_once() -> None:
    wp = WaitingPod(pod("p"), {"A": LONG})
    wp.allow("A")
    heard = []
    wp.when_done(heard.append)
    assert len(heard) == 1 and heard[0].is_success()


def test_a_blocked_waiter_wakes_on_an_answer_from_another_thread() -> None:
    wp = WaitingPod(pod("p"), {"A": LONG})
    threading.Timer(0.05, wp.reject, ("A", "from elsewhere")).start()
    st = wp.wait(5)
    assert st is not None and st.message() == "from elsewhere"


def test_the_map_and_the_handle() -> None:
    m = WaitingPodsMap()
    a, b = WaitingPod(pod("a"), {"P": LONG}, m.timers), WaitingPod(pod("b"), {"P": LONG}, m.timers)
    m.add(a)
    m.add(b)
    assert len(m) == 2 and m.get_waiting_pod("uid-a") is a and m.get_waiting_pod("uid-x") is None
    seen = []
    # a callback may change the map (it walks a copy)
    m.iterate_over_waiting_pods(lambda wp: (seen.append(wp.pod.name), m.remove(wp.pod.meta.uid)))
    assert sorted(seen) == ["a", "b"] and len(m) == 0
    m.add(a)
    assert m.reject_waiting_pod("uid-a") is True
    assert m.reject_waiting_pod("uid-b") is False  # not in the map
    st = a.wait(0)
    assert (st.code, st.plugin, st.message()) == (Code.UNSCHEDULABLE, "", "removed")
    assert b.wait(0) is None


def test_timers_fire_in_deadline_order_and_stop_prevents_a_call() -> None:
    timers = Timers()
    fired: list[str] = []
    done = threading.Event()
    timers.after(0.15, lambda: (fired.append("late"), done.set()))
    timers.after(0.05, lambda: fired.append("early"))
    stopped = timers.after(0.1, lambda: fired.append("stopped"))
    assert stopped.stop() is True
    assert done.wait(5)
    assert fired == ["early", "late"]
    assert stopped.stop() is False  # already stopped
