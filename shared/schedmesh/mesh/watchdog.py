"""A watchdog for a process's asyncio event loop: a hung loop ends the process, so it is restarted.

Docker Compose's ``restart: unless-stopped`` restarts a container whose process exits, never
one that is merely unhealthy; a service whose event loop hangs (a deadlock, a blocking call on
the loop) would stay hung forever there. The loop ticks (a callback every few seconds updating a
timestamp); a daemon thread checks the timestamp, and once the loop has not ticked for
``SCHEDMESH_WATCHDOG_SECONDS`` it logs the stall with every thread's stack and ends the process
with :data:`WATCHDOG_EXIT_CODE` (``os._exit``: no clean-up that could hang too). Compose, Kubernetes
and ``schedmesh up``'s supervisor then start it again.

``SCHEDMESH_WATCHDOG_SECONDS``: default :data:`DEFAULT_SECONDS` (120); 0 turns the watchdog off.
The longest the loop legitimately blocks today is a few seconds (applying a 5,000-node batch
takes ~0.35 s, 30,000 pods in 500-pod batches ~4 s on a loaded 2-core machine; a cache follower
also waits on the cache's lock while a shard batch or a preemption evaluation holds it); a
start-up catch-up applies the whole history in one go, ~0.14 ms a pod record, so 120 s leaves
room for several hundred thousand records.

Only a loop that is running counts: a loop stopped between ``run_until_complete`` calls is not
stalled, nor is a process frozen as a whole (``docker pause``, SIGSTOP: the watching thread notices
it overslept); the watchdog ends by itself once its loop is closed (or on :meth:`LoopWatchdog.stop`).

Standard library only: the embedded broker's wrapper uses it too.
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import sys
import threading
import time
import traceback
from typing import Optional

log = logging.getLogger("schedmesh.watchdog")

ENV = "SCHEDMESH_WATCHDOG_SECONDS"
DEFAULT_SECONDS = 120.0
# sysexits.h's EX_SOFTWARE ("internal software error"); no other schedmesh exit uses it
WATCHDOG_EXIT_CODE = 70
# once the stall is detected, the process ends within this long even if logging itself hangs
_EXIT_DEADLINE = 10.0
# The loop ticks and the thread checks every quarter of the limit, at most this often apart. An
# idle service's loop wakes for nothing but the tick: an idle filter worker used 1.20-1.45 ms of
# CPU a second with ticks a second apart, 1.01-1.12 with 5 s (this 2-core VM, 2026-12-01).
TICK_SECONDS = 5.0


def seconds_from_env(default: float = DEFAULT_SECONDS) -> Optional[float]:
    """SCHEDMESH_WATCHDOG_SECONDS: seconds without a tick before the process ends; None when off (0)."""
    raw = os.environ.get(ENV, "").strip()
    try:
        seconds = float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{ENV}={raw!r} is not a number of seconds (0 turns the watchdog off)") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{ENV}={raw!r} is not a number of seconds (0 turns the watchdog off)")
    return seconds or None


def thread_stacks(first: Optional[int] = None, labels: Optional[dict[int, str]] = None) -> str:
    """Every other thread's stack (most recent call last), thread `first` first; `labels`: extra
    words after a thread's name."""
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    frames.pop(threading.get_ident(), None)  # the caller's own stack says nothing
    order = sorted(frames, key=lambda ident: ident != first)
    out = []
    for ident in order:
        label = f" ({labels[ident]})" if labels and ident in labels else ""
        out.append(f"Thread {names.get(ident, '<unknown>')!r} (id {ident}){label}, most recent call last:\n"
                   + "".join(traceback.format_stack(frames[ident])))
    return "\n".join(out)


class LoopWatchdog:
    """Ends the process when `loop` (the running one at :meth:`start`) stops ticking for `seconds`."""

    def __init__(self, name: str, seconds: Optional[float], exit_code: int = WATCHDOG_EXIT_CODE) -> None:
        self.name = name
        self.seconds = seconds  # None: off
        self.exit_code = exit_code
        # a stall is noticed within the limit and a quarter of it at the most (TICK_SECONDS)
        self.interval = min(TICK_SECONDS, seconds / 4) if seconds else TICK_SECONDS
        self.last_tick = time.monotonic()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[int] = None
        self._handle: Optional[asyncio.TimerHandle] = None
        self._thread: Optional[threading.Thread] = None
        self._stopped = threading.Event()

    @classmethod
    def from_env(cls, name: str) -> "LoopWatchdog":
        return cls(name, seconds_from_env())

    @property
    def enabled(self) -> bool:
        return self.seconds is not None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Watch the running loop (call from a coroutine on it); a no-op when off or already started."""
        if not self.enabled or self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.last_tick = time.monotonic()
        self._handle = self._loop.call_later(self.interval, self._tick)
        self._thread = threading.Thread(target=self._watch, name=f"watchdog-{self.name}", daemon=True)
        self._thread.start()
        log.info("%s: event-loop watchdog on: exit code %d after %gs without a tick (%s)",
                 self.name, self.exit_code, self.seconds, ENV)

    def stop(self) -> None:
        """Stop watching (the service is done with its loop: shutting down)."""
        self._stopped.set()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    # ---------------------------------------------------------- on the loop
    def _tick(self) -> None:
        self.last_tick = time.monotonic()
        if not self._stopped.is_set() and self._loop is not None:
            self._handle = self._loop.call_later(self.interval, self._tick)

    # ---------------------------------------------------------- the watching thread
    def _watch(self) -> None:
        loop, limit = self._loop, self.seconds
        assert loop is not None and limit is not None
        # This thread overslept this much: the whole process was frozen (docker pause, SIGSTOP),
        # not just its loop. Long enough for a loaded machine's scheduling delays, well short of
        # any freeze that alone could reach the limit.
        frozen = max(self.interval + 1.0, limit / 4)
        woke = time.monotonic()
        while not self._stopped.wait(self.interval):
            if loop.is_closed():
                return
            now = time.monotonic()
            slept, woke = now - woke, now
            if not loop.is_running() or slept > frozen:
                # stopped between runs, or frozen with the loop: not stalled; start afresh
                self.last_tick = now
                continue
            silent = now - self.last_tick
            if silent >= limit and not self._stopped.is_set():
                self._fire(silent)
                return

    def _fire(self, silent: float) -> None:
        code = self.exit_code
        try:
            stacks = thread_stacks(self._loop_thread, {self._loop_thread: "event loop"} if self._loop_thread else None)
        except Exception as e:  # noqa: BLE001 - the exit matters more than the stacks
            stacks = f"<cannot read the stacks: {e!r}>"
        # Exit even if logging blocks (e.g. the stuck thread holds a handler's lock).
        threading.Thread(target=_exit_after, args=(_EXIT_DEADLINE, code), name="watchdog-exit", daemon=True).start()
        message = (f"{self.name}: event loop stalled: no tick for {silent:.1f}s (limit {self.seconds:g}s, {ENV}); "
                   f"exiting with code {code} so that the service is restarted. Every thread's stack, the event "
                   f"loop's first:\n")
        try:
            log.critical("%s%s", message, stacks)
            for h in logging.getLogger().handlers:
                h.flush()
        except Exception:  # noqa: BLE001 - a broken handler must not keep a hung process alive
            try:
                os.write(2, (message + stacks + "\n").encode(errors="replace"))
            except OSError:
                pass
        os._exit(code)


def _exit_after(seconds: float, code: int) -> None:
    time.sleep(seconds)
    os._exit(code)
