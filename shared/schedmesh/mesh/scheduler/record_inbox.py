"""Record batches the cache follower hands to the scheduling thread, applied between attempts.

Why: applied on a worker thread, a batch competed with the attempts for the interpreter lock.
numpy lets go of that lock around every loop over the nodes, so the two threads handed it back
and forth many times per batch, each hand-off a thread switch; in process, applying the same
records that way cost 8 % more CPU than between attempts on the scheduling thread
(docs/performance-log.md, twenty-fourth session). The follower offers a batch only while the
scheduling thread is busy (it then reaches its next attempt within a cycle or so); if the batch
is not taken within `wait_seconds` (the thread is blocked: a shard batch, a broker restart's
re-publication holding the cycle gate while it waits for these very records) the follower takes
it back and applies it on a worker thread as before. Either way the follower awaits each batch
before it reads the next, so batches are applied in order, each once."""
from __future__ import annotations

import asyncio
import collections
import threading
from typing import Callable

from schedmesh.bus import Record


class _Offer:
    __slots__ = ("records", "taken", "done", "loop")

    def __init__(self, records: list[Record], loop: asyncio.AbstractEventLoop) -> None:
        self.records = records
        self.taken = False  # by the scheduling thread or back by the follower (under the inbox's lock)
        self.loop = loop
        self.done: asyncio.Future = loop.create_future()


def _settle(fut: asyncio.Future, error: BaseException | None) -> None:
    if fut.done():  # the follower was cancelled meanwhile
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)


class RecordInbox:
    def __init__(self, apply: Callable[[list[Record]], None], wait_seconds: float = 0.01) -> None:
        self._apply = apply
        self.wait_seconds = wait_seconds
        self._lock = threading.Lock()
        self._offers: collections.deque[_Offer] = collections.deque()
        self.applied_here = 0  # batches the scheduling thread applied
        self.taken_back = 0  # batches the follower applied itself after waiting

    async def apply(self, records: list[Record]) -> None:
        """On the event loop: `records` applied, by the scheduling thread if it takes them soon."""
        offer = _Offer(records, asyncio.get_running_loop())
        with self._lock:
            self._offers.append(offer)
        done, _ = await asyncio.wait([offer.done], timeout=self.wait_seconds)
        if not done:
            with self._lock:
                mine = not offer.taken
                offer.taken = True
            if mine:
                self.taken_back += 1
                await asyncio.to_thread(self._apply, records)
                return
        await offer.done  # applied by the scheduling thread (raises what applying it raised)

    def drain(self) -> None:
        """On the scheduling thread, between attempts: apply every batch offered, in order."""
        if not self._offers:  # the common case, without the lock
            return
        while True:
            with self._lock:
                if not self._offers:
                    return
                offer = self._offers.popleft()
                if offer.taken:
                    continue
                offer.taken = True
            error: BaseException | None = None
            try:
                self._apply(offer.records)
                self.applied_here += 1
            except Exception as e:  # noqa: BLE001 - the follower's await raises it, as from its worker thread
                error = e
            try:
                offer.loop.call_soon_threadsafe(_settle, offer.done, error)
            except RuntimeError:  # the loop has closed (shutting down)
                pass
