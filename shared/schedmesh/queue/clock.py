"""Time for the scheduling queue, injectable so tests advance it without sleeping.

Times are float seconds since the epoch (like `time.time()` and `ObjectMeta.creation_timestamp`);
durations are float seconds. `FakeClock.sleep` completes when `step`/`set_time` moves the clock past
its deadline, so the queue's flush loops can be driven deterministically.
"""
from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when told to (k8s.io/utils/clock/testing.FakeClock)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    def step(self, seconds: float) -> None:
        self.set_time(self._now + seconds)

    def set_time(self, t: float) -> None:
        self._now = float(t)
        due = [s for s in self._sleepers if s[0] <= self._now]
        self._sleepers = [s for s in self._sleepers if s[0] > self._now]
        for _, fut in due:
            if not fut.done():
                fut.set_result(None)

    def has_sleepers(self) -> bool:
        return any(not f.done() for _, f in self._sleepers)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + seconds, fut))
        await fut
