"""Pods held by Permit (kube-scheduler's framework/runtime/waiting_pods_map.go).

A Permit plugin that answers Wait holds its pod: the pod stays assumed (its resources counted)
and waits until every plugin that asked to wait allows it, one rejects it, or one plugin's timeout
(the one it returned, at most 15 minutes) runs out. Plugins find waiting pods through their
handle (`get_waiting_pod`, `iterate_over_waiting_pods`, `reject_waiting_pod`: kube's
framework.Handle) and call `allow(plugin)` / `reject(plugin, msg)` on them; neither blocks.

The first outcome wins, as kube's one-slot channel: `wait()` returns it to a caller that blocks
(kube's WaitOnPermit), `when_done(callback)` hands it to one that does not (the queue-manager
holds waiting pods aside and passes them to the binding cycle when answered).

Timers run on one shared thread (kube's time.AfterFunc, without a thread per waiting plugin).
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional

from schedmesh.framework.interface import Code, Status

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.api.types import Pod

log = logging.getLogger("schedmesh.framework")

MAX_PERMIT_TIMEOUT_SECONDS = 15 * 60.0  # kube's maxTimeout for a Permit Wait

# ---------------------------------------------------------------------------------------------
# Go's time.Duration.String, for kube's timeout message
# ---------------------------------------------------------------------------------------------


def _fraction(v: int, digits: int) -> str:
    whole, frac = divmod(v, 10 ** digits)
    if not frac:
        return str(whole)
    return f"{whole}." + f"{frac:0{digits}d}".rstrip("0")


def go_duration(seconds: float) -> str:
    """A duration as Go prints it (%v of a time.Duration): 0s, 500ms, 1.5s, 1m30s, 15m0s, 1h0m0s."""
    ns = round(seconds * 1e9)
    sign, u = ("-", -ns) if ns < 0 else ("", ns)
    if u == 0:
        return "0s"
    if u < 1_000:
        out = f"{u}ns"
    elif u < 1_000_000:
        out = _fraction(u, 3) + "µs"
    elif u < 1_000_000_000:
        out = _fraction(u, 6) + "ms"
    else:
        out = _fraction(u % 60_000_000_000, 9) + "s"
        if u >= 60_000_000_000:
            out = f"{(u // 60_000_000_000) % 60}m" + out
        if u >= 3_600_000_000_000:
            out = f"{u // 3_600_000_000_000}h" + out
    return sign + out


# ---------------------------------------------------------------------------------------------
# timers
# ---------------------------------------------------------------------------------------------

class Timer:
    """One pending call; `stop()` as Go's Timer.Stop (True when it prevented the call)."""

    __slots__ = ("_fn", "_lock", "_state")

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn = fn
        self._lock = threading.Lock()
        self._state = 0  # 0 pending, 1 stopped, 2 fired

    def stop(self) -> bool:
        with self._lock:
            if self._state != 0:
                return False
            self._state = 1
            return True

    def _fire(self) -> None:
        with self._lock:
            if self._state != 0:
                return
            self._state = 2
        try:
            self._fn()
        except Exception:  # noqa: BLE001 - one callback's failure must not stop the others
            log.exception("permit timer callback failed")


class Timers:
    """Calls functions after a delay, from one daemon thread started on first use."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._thread: Optional[threading.Thread] = None

    def after(self, seconds: float, fn: Callable[[], None]) -> Timer:
        t = Timer(fn)
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, seconds), next(self._seq), t))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="permit-timers", daemon=True)
                self._thread.start()
            self._cv.notify()
        return t

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if not self._heap:
                        self._cv.wait()
                        continue
                    at, _, t = self._heap[0]
                    left = at - time.monotonic()
                    if left <= 0:
                        heapq.heappop(self._heap)
                        break
                    self._cv.wait(left)
            t._fire()  # outside the lock: a callback may start timers


_DEFAULT_TIMERS = Timers()

# ---------------------------------------------------------------------------------------------
# the waiting pod and the map
# ---------------------------------------------------------------------------------------------

Listener = Callable[[Status], None]


class WaitingPod:
    """A pod waiting in Permit (kube's waitingPod): one timer per plugin that asked to wait."""

    def __init__(self, pod: "Pod", plugins_max_wait: Mapping[str, float], timers: Optional[Timers] = None) -> None:
        self._pod = pod
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._status: Optional[Status] = None
        self._listeners: list[Listener] = []
        self._pending: dict[str, Timer] = {}
        timers = timers or _DEFAULT_TIMERS
        # Held while the timers start: a timer already due waits for the pod to be complete.
        with self._lock:
            for plugin, wait in plugins_max_wait.items():
                self._pending[plugin] = timers.after(wait, self._timeout_fn(plugin, wait))

    def _timeout_fn(self, plugin: str, wait: float) -> Callable[[], None]:
        msg = f"rejected due to timeout after waiting {go_duration(wait)} at plugin {plugin}"
        return lambda: self.reject(plugin, msg)

    @property
    def pod(self) -> "Pod":
        return self._pod

    def get_pod(self) -> "Pod":
        return self._pod

    def get_pending_plugins(self) -> list[str]:
        with self._lock:
            return list(self._pending)

    def allow(self, plugin: str) -> None:
        """`plugin` allows the pod; the last pending plugin to allow it lets it go on."""
        with self._lock:
            t = self._pending.pop(plugin, None)
            if t is not None:
                t.stop()
            if self._pending:
                return
            deliver = self._send(Status())
        self._notify(deliver)

    def reject(self, plugin: str, msg: str) -> None:
        """The pod is unschedulable (`plugin` may be "": kube's RejectWaitingPod)."""
        with self._lock:
            for t in self._pending.values():
                t.stop()
            deliver = self._send(Status(Code.UNSCHEDULABLE, (msg,), plugin))
        self._notify(deliver)

    def _send(self, st: Status) -> list[tuple[Listener, Status]]:
        """The first answer is kept, later ones dropped (kube's non-blocking send to a 1-slot channel)."""
        if self._status is not None:
            return []
        self._status = st
        self._done.set()
        out = [(fn, st) for fn in self._listeners]
        self._listeners.clear()
        return out

    @staticmethod
    def _notify(deliver: list[tuple[Listener, Status]]) -> None:
        for fn, st in deliver:
            fn(st)

    def when_done(self, fn: Listener) -> None:
        """Call `fn(status)` once answered (at once, from this thread, if it already is)."""
        with self._lock:
            if self._status is None:
                self._listeners.append(fn)
                return
            st = self._status
        fn(st)

    def wait(self, timeout: Optional[float] = None) -> Optional[Status]:
        """Block until answered (kube's receive in WaitOnPermit); None if `timeout` ran out first."""
        if not self._done.wait(timeout):
            return None
        return self._status

    def answered(self) -> Optional[Status]:
        return self._status


class WaitingPodsMap:
    """The waiting pods of a scheduler, by uid, shared by its profiles' frameworks (kube's
    waitingPodsMap); also what a plugin's handle answers from."""

    def __init__(self, timers: Optional[Timers] = None) -> None:
        self.timers = timers or _DEFAULT_TIMERS
        self._pods: dict[str, WaitingPod] = {}
        self._lock = threading.Lock()

    def add(self, wp: WaitingPod) -> None:
        with self._lock:
            self._pods[wp.pod.meta.uid] = wp

    def remove(self, uid: str) -> None:
        with self._lock:
            self._pods.pop(uid, None)

    def get(self, uid: str) -> Optional[WaitingPod]:
        with self._lock:
            return self._pods.get(uid)

    def iterate(self, callback: Callable[[WaitingPod], None]) -> None:
        # Over a copy: a callback may allow, reject or remove pods of this map.
        with self._lock:
            pods = list(self._pods.values())
        for wp in pods:
            callback(wp)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    def __iter__(self) -> Iterator[WaitingPod]:
        with self._lock:
            return iter(list(self._pods.values()))

    # ---- framework.Handle --------------------------------------------------------------------
    def get_waiting_pod(self, uid: str) -> Optional[WaitingPod]:
        return self.get(uid)

    def iterate_over_waiting_pods(self, callback: Callable[[WaitingPod], None]) -> None:
        self.iterate(callback)

    def reject_waiting_pod(self, uid: str) -> bool:
        """Reject the pod if it is waiting (with kube's message "removed"); whether it was."""
        wp = self.get(uid)
        if wp is None:
            return False
        wp.reject("", "removed")
        return True
