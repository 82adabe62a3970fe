"""backoffQ: exponential backoff with a cap, separate error backoff, the 1 s ordering window
(kube's backoff_queue_test.go re-expressed for v1.35, where the backoff counts unschedulable
attempts / consecutive errors)."""
from __future__ import annotations

import pytest

from schedmesh.queue.backoff_queue import ZERO_TIME, BackoffQueue, backoff_duration_ns
from schedmesh.queue.queued_pod_info import QueuedPodInfo
from schedmesh.queue.testing import T0, fake_clock, make_pod, priority_sort_less

@pytest.mark.parametrize("initial_ns, max_ns, count, want_ns", [
    pytest.param(1, 32, 0, 0, id="no-backoff"),
    pytest.param(1, 32, 16, 32, id="capped"),
    pytest.param(1, 32, 3, 4, id="doubling"),
    pytest.param(1, 2**31 - 1, 32, 2**31 - 1, id="overflow-32bit"),
    pytest.param(1, 2**63 - 1, 64, 2**63 - 1, id="overflow-64bit"),
    pytest.param(1, 2**63 - 1, 63, 2**62, id="largest-doubling"),
])
def test_backoff_duration_ns(initial_ns, max_ns, count, want_ns):
    assert backoff_duration_ns(initial_ns, max_ns, count) == want_ns


@pytest.mark.parametrize("count, want_seconds", [
    pytest.param(1, 1, id="first"), pytest.param(2, 2, id="second"), pytest.param(3, 4, id="third"),
    pytest.param(4, 8, id="fourth"), pytest.param(5, 10, id="capped"), pytest.param(200, 10, id="huge-count"),
])
def test_default_backoff_doubles_from_1s_to_10s(count, want_seconds):
    bq = BackoffQueue(fake_clock(), 1.0, 10.0, priority_sort_less)
    assert bq.calculate_backoff_ns(count) == want_seconds * 1_000_000_000


def _info(name: str, ts: float, *, plugins=("plugin",), priority: int = 0, count: int = 1,
          errors: int = 0) -> QueuedPodInfo:
    p = QueuedPodInfo.of(make_pod(name, "", priority=priority), *plugins, timestamp=ts)
    p.unschedulable_count, p.consecutive_errors_count = count, errors
    return p


@pytest.mark.parametrize("in_backoff, want", [
    pytest.param([], [], id="both-empty"),
    pytest.param(["pod0", "pod1"], ["pod0"], id="only-backoffQ"),
    pytest.param(["pod2", "pod3"], ["pod2"], id="only-errorBackoffQ"),
    pytest.param(["pod0", "pod1", "pod2", "pod3"], ["pod0", "pod2"], id="both-some-done"),
    pytest.param(["pod0", "pod2"], ["pod0", "pod2"], id="both-all-done"),
    pytest.param(["pod1", "pod3"], [], id="both-none-done"),
])
@pytest.mark.parametrize("pop_from_backoff_q", [True, False], ids=["window", "no-window"])
def test_pop_all_backoff_completed(in_backoff, want, pop_from_backoff_q):
    clock = fake_clock(T0 + 0.25)
    now = clock.now()
    infos = {
        "pod0": _info("pod0", now - 2),
        "pod1": _info("pod1", now + 1),
        "pod2": _info("pod2", now - 2, plugins=(), count=0, errors=1),
        "pod3": _info("pod3", now + 1, plugins=(), count=0, errors=1),
    }
    bq = BackoffQueue(clock, 1.0, 10.0, priority_sort_less, pop_from_backoff_q)
    for name in in_backoff:
        bq.add(infos[name])
    assert [p.pod.name for p in bq.pop_all_backoff_completed()] == want
    assert len(bq) == len(in_backoff) - len(want)


@pytest.mark.parametrize("pop_from_backoff_q, want", [
    pytest.param(True, ["pod5", "pod4", "pod2", "pod3"], id="same-window-by-priority"),
    pytest.param(False, ["pod5", "pod4", "pod3", "pod2"], id="by-expiry-only"),
])
def test_backoff_ordering(pop_from_backoff_q, want):
    clock = fake_clock(T0)  # aligned with the ordering window
    now = clock.now()
    bq = BackoffQueue(clock, 1.0, 10.0, priority_sort_less, pop_from_backoff_q)
    for p in [_info("pod0", now, priority=1), _info("pod1", now - 1, priority=1),
              _info("pod2", now - 2 + 0.001, priority=2), _info("pod3", now - 2, priority=1),
              _info("pod4", now - 2, priority=2), _info("pod5", now - 3, priority=1)]:
        bq.add(p)
    assert [p.pod.name for p in bq.pop_all_backoff_completed()] == want


@pytest.mark.parametrize("count, errors, want_backoff", [
    pytest.param(0, 0, None, id="never-failed-no-backoff"),
    pytest.param(1, 0, 1.0, id="unschedulable-once"),
    pytest.param(3, 0, 4.0, id="unschedulable-thrice"),
    pytest.param(3, 1, 1.0, id="errors-take-over-the-count"),
    pytest.param(1, 2, 2.0, id="two-errors"),
])
def test_backoff_time_uses_errors_when_present(count, errors, want_backoff):
    clock = fake_clock(T0)
    bq = BackoffQueue(clock, 1.0, 10.0, priority_sort_less)
    p = _info("p", T0, count=count, errors=errors)
    got = bq.backoff_time(p)
    assert (got == ZERO_TIME) if want_backoff is None else (got == T0 + want_backoff)


def test_backoff_disabled_when_max_is_zero():
    bq = BackoffQueue(fake_clock(), 0.0, 0.0, priority_sort_less)
    p = _info("p", T0, count=5)
    assert bq.backoff_time(p) == ZERO_TIME and not bq.is_pod_backing_off(p)


@pytest.mark.parametrize("elapsed, backing_off", [
    pytest.param(0.0, True, id="just-failed"),
    pytest.param(1.0, True, id="expiry-window-not-over"),
    pytest.param(1.999, True, id="still-in-expiry-window"),
    pytest.param(2.0, False, id="next-window"),
])
def test_is_backing_off_until_the_expiry_window_is_over(elapsed, backing_off):
    clock = fake_clock(T0 + 0.4)
    bq = BackoffQueue(clock, 1.0, 10.0, priority_sort_less)
    p = _info("p", clock.now())  # expires at floor(T0 + 1.4) = T0 + 1
    assert bq.backoff_time(p) == T0 + 1
    clock.set_time(T0 + elapsed)
    assert bq.is_pod_backing_off(p) == backing_off


def test_add_keeps_a_pod_in_one_heap_only():
    bq = BackoffQueue(fake_clock(), 1.0, 10.0, priority_sort_less)
    p = _info("p", T0, plugins=())
    bq.add(p)
    assert bq.len_backoff() == 0 and len(bq) == 1  # an error: podErrorBackoffQ
    p.unschedulable_plugins.add("plugin")
    bq.add(p)
    assert bq.len_backoff() == 1 and len(bq) == 1
    assert bq.pop_backoff() is p and len(bq) == 0
