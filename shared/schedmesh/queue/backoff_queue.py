"""backoffQ: pods waiting out their backoff before they may be retried (kube's backoffQueue).

Two heaps that behave as one queue:
* podBackoffQ for pods rejected by plugins (backoff from unschedulable_count), and
* podErrorBackoffQ for pods whose attempt ended in an error (backoff from consecutive_errors_count),
both ordered by backoff expiry. The backoff is initial * 2^(count-1), capped at max.

With SchedulerPopFromBackoffQ (on by default in v1.35) expiries are truncated to a 1-second
ordering window; inside one window podBackoffQ orders pods like activeQ does, and a pod still counts
as backing off until its whole window is over. Pop may then take a pod from podBackoffQ when activeQ
is empty.
"""
from __future__ import annotations

import functools
import heapq
import math
from typing import Callable, Optional

from schedmesh.queue.clock import Clock
from schedmesh.queue.heap import Heap
from schedmesh.queue.queued_pod_info import QueuedPodInfo

BACKOFF_Q_ORDERING_WINDOW = 1.0  # seconds; also the backoffQ flush interval
ZERO_TIME = float("-inf")  # Go's zero time.Time: before every real time
_NS = 1_000_000_000

LessFn = Callable[[QueuedPodInfo, QueuedPodInfo], bool]


def backoff_duration_ns(initial_ns: int, max_ns: int, count: int) -> int:
    """initial * 2^(count-1), capped at max, in nanoseconds, without overflowing int64 as Go does."""
    if count == 0:
        return 0
    shift = count - 1
    if initial_ns > max_ns >> shift:
        return max_ns
    return initial_ns << shift


def _key(p: QueuedPodInfo) -> str:
    return p.key


class BackoffQueue:
    def __init__(self, clock: Clock, initial_backoff: float, max_backoff: float, active_less: LessFn,
                 pop_from_backoff_q: bool = True) -> None:
        self.clock = clock
        # Durations kept in integer nanoseconds, as Go's time.Duration, so doubling/capping is exact.
        self._initial_ns = round(initial_backoff * _NS)
        self._max_ns = round(max_backoff * _NS)
        self._active_less = active_less
        self.pop_from_backoff_q = pop_from_backoff_q
        less = self._less_with_priority if pop_from_backoff_q else self._less_backoff_completed
        self._backoff = Heap[QueuedPodInfo](_key, less)
        self._error_backoff = Heap[QueuedPodInfo](_key, self._less_backoff_completed)

    @property
    def initial_backoff(self) -> float:
        return self._initial_ns / _NS

    @property
    def max_backoff(self) -> float:
        return self._max_ns / _NS

    # ---- backoff arithmetic ----------------------------------------------------------------
    def align_to_window(self, t: float) -> float:
        """The start of t's ordering window (time.Truncate(1s)); t itself without the window."""
        return math.floor(t / BACKOFF_Q_ORDERING_WINDOW) * BACKOFF_Q_ORDERING_WINDOW if self.pop_from_backoff_q else t

    def calculate_backoff_ns(self, count: int) -> int:
        return backoff_duration_ns(self._initial_ns, self._max_ns, count)

    def backoff_time(self, p: QueuedPodInfo) -> float:
        """When p completes its backoff (cached in p.backoff_expiration until the next attempt)."""
        if self._max_ns == 0:
            return ZERO_TIME  # backoff disabled
        count = p.consecutive_errors_count if p.consecutive_errors_count > 0 else p.unschedulable_count
        if count == 0:
            return ZERO_TIME  # never attempted: no backoff
        if p.backoff_expiration is None:
            p.backoff_expiration = self.align_to_window(p.timestamp + self.calculate_backoff_ns(count) / _NS)
        return p.backoff_expiration

    def is_pod_backing_off(self, p: QueuedPodInfo) -> bool:
        # Equality counts as backing off: the pod's window must be fully over.
        return not (self.backoff_time(p) < self.align_to_window(self.clock.now()))

    def _less_backoff_completed(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.backoff_time(a) < self.backoff_time(b)

    def _less_with_priority(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        ta, tb = self.backoff_time(a), self.backoff_time(b)
        if ta != tb:
            return ta < tb
        return self._active_less(a, b)

    # ---- queue operations ------------------------------------------------------------------
    def _pop_completed(self, heap: Heap[QueuedPodInfo]) -> list[QueuedPodInfo]:
        out = []
        while True:
            p = heap.peek()
            if p is None or self.is_pod_backing_off(p):
                break
            heap.pop()
            out.append(p)
        return out

    def pop_all_backoff_completed(self) -> list[QueuedPodInfo]:
        return self._pop_completed(self._backoff) + self._pop_completed(self._error_backoff)

    def add(self, p: QueuedPodInfo) -> None:
        """Into the error heap when no plugin rejected the pod (it failed with an error), else the other."""
        if not p.unschedulable_plugins and not p.pending_plugins:
            self._error_backoff.add_or_update(p)
            self._backoff.delete(p)
        else:
            self._backoff.add_or_update(p)
            self._error_backoff.delete(p)

    def update(self, new_pod, old_lookup: QueuedPodInfo) -> Optional[QueuedPodInfo]:
        for heap in (self._backoff, self._error_backoff):
            p = heap.get(old_lookup)
            if p is not None:
                p.update(new_pod)
                heap.add_or_update(p)
                return p
        return None

    def delete(self, p: QueuedPodInfo) -> bool:
        return self._backoff.delete(p) or self._error_backoff.delete(p)

    def pop_backoff(self) -> Optional[QueuedPodInfo]:
        """Pop podBackoffQ's head (never podErrorBackoffQ's), for Pop when activeQ is empty."""
        return self._backoff.pop()

    def get(self, lookup: QueuedPodInfo) -> Optional[QueuedPodInfo]:
        return self.get_by_key(lookup.key)

    def get_by_key(self, key: str) -> Optional[QueuedPodInfo]:
        p = self._backoff.get_by_key(key)
        return p if p is not None else self._error_backoff.get_by_key(key)

    def has(self, p: QueuedPodInfo) -> bool:
        return self._backoff.has(p) or self._error_backoff.has(p)

    def has_key(self, key: str) -> bool:
        return self._backoff.has_key(key) or self._error_backoff.has_key(key)

    def list(self) -> list[QueuedPodInfo]:
        return self._backoff.list() + self._error_backoff.list()

    def sorted(self) -> list[QueuedPodInfo]:
        """Pods in the order they will leave: by backoff expiry (podBackoffQ's ties in activeQ order),
        podErrorBackoffQ's pods after podBackoffQ's on equal expiry."""
        def ordered(heap: Heap[QueuedPodInfo]) -> list[QueuedPodInfo]:
            less = heap.less
            return sorted(heap.list(), key=functools.cmp_to_key(
                lambda a, b: -1 if less(a, b) else (1 if less(b, a) else 0)))
        return list(heapq.merge(ordered(self._backoff), ordered(self._error_backoff), key=self.backoff_time))

    def len_backoff(self) -> int:
        return len(self._backoff)

    def __len__(self) -> int:
        return len(self._backoff) + len(self._error_backoff)
