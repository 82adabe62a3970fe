"""RecordInbox: the follower's batches applied by the scheduling thread between its attempts, or
taken back and applied on a worker thread when it does not come for them; each batch once, in
order, its failure raised to the follower."""
from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest

from schedmesh.mesh.scheduler.record_inbox import RecordInbox


class Applied:
    def __init__(self) -> None:
        self.batches: list[tuple[list, str]] = []  # (records, the applying thread's name)

    def __call__(self, recs: list) -> None:
        if recs == ["bad"]:
            raise ValueError("a batch that fails")
        self.batches.append((recs, threading.current_thread().name))


def scheduling_thread(inbox: RecordInbox, stop: threading.Event, pause: float) -> threading.Thread:
    """Drains between 'attempts' of `pause` seconds each."""
    def loop() -> None:
        while not stop.is_set():
            inbox.drain()
            time.sleep(pause)
    t = threading.Thread(target=loop, name="schedule-one", daemon=True)
    t.start()
    return t


def test_a_busy_scheduling_thread_applies_the_batches_between_its_attempts() -> None:
    applied = Applied()
    inbox = RecordInbox(applied, wait_seconds=2.0)
    stop = threading.Event()
    thread = scheduling_thread(inbox, stop, 0.001)

    async def follow() -> None:
        for i in range(20):
            await inbox.apply([i])
    asyncio.run(follow())
    stop.set()
    thread.join(2)
    assert [r for r, _ in applied.batches] == [[i] for i in range(20)]
    assert {name for _, name in applied.batches} == {"schedule-one"}
    assert inbox.applied_here == 20 and inbox.taken_back == 0


def test_a_batch_not_taken_in_time_is_applied_by_the_follower_once() -> None:
    """The scheduling thread is blocked (the cycle gate held by a re-publication that waits for
    these records): the follower takes the batch back; the thread's next drain skips it."""
    applied = Applied()
    inbox = RecordInbox(applied, wait_seconds=0.02)

    async def follow() -> float:
        started = time.monotonic()
        await inbox.apply(["late"])
        return time.monotonic() - started
    took = asyncio.run(follow())
    assert 0.015 < took < 1.0
    assert [r for r, _ in applied.batches] == [["late"]] and applied.batches[0][1] != "schedule-one"
    assert inbox.taken_back == 1
    inbox.drain()
    assert len(applied.batches) == 1 and inbox.applied_here == 0


def test_a_batch_that_fails_on_the_scheduling_thread_raises_in_the_follower() -> None:
    applied = Applied()
    inbox = RecordInbox(applied, wait_seconds=2.0)
    stop = threading.Event()
    thread = scheduling_thread(inbox, stop, 0.001)

    async def follow() -> None:
        with pytest.raises(ValueError, match="a batch that fails"):
            await inbox.apply(["bad"])
        await inbox.apply(["next"])
    asyncio.run(follow())
    stop.set()
    thread.join(2)
    assert [r for r, _ in applied.batches] == [["next"]]


def test_racing_the_deadline_every_batch_is_applied_once_and_in_order() -> None:
    """Attempts about as long as the follower's wait: some batches are taken by the scheduling
    thread, some taken back, none twice, none lost, none out of order."""
    applied = Applied()
    inbox = RecordInbox(applied, wait_seconds=0.002)
    stop = threading.Event()
    rng = random.Random(7)

    def loop() -> None:
        while not stop.is_set():
            inbox.drain()
            time.sleep(rng.choice((0.0005, 0.001, 0.002, 0.003)))
    thread = threading.Thread(target=loop, name="schedule-one", daemon=True)
    thread.start()

    async def follow() -> None:
        for i in range(300):
            await inbox.apply([i])
    asyncio.run(follow())
    stop.set()
    thread.join(2)
    assert [r for r, _ in applied.batches] == [[i] for i in range(300)]
    assert inbox.applied_here + inbox.taken_back == 300
    assert inbox.applied_here > 0 and inbox.taken_back > 0
