"""The asyncio side: pop() waits for pods, close() releases it, and run()'s flush loops driven by a
fake clock (kube's TestSchedulingQueue_Close, tryPop, and the Run goroutines)."""
from __future__ import annotations

import asyncio
import threading

from schedmesh.queue import ACTIVE_Q, BACKOFF_Q, UNSCHEDULABLE_Q
from schedmesh.queue.testing import NODE_ADD, T0, fake_clock, hint_map, hint_queue, lookup, make_pod, new_queue


async def settle(rounds: int = 10) -> None:
    """Let every ready task run until it blocks again."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_pop_waits_for_a_pod():
    q = new_queue()
    task = asyncio.create_task(q.pop())
    await settle()
    assert not task.done()
    pod = make_pod("p")
    q.add(pod)
    assert (await asyncio.wait_for(task, 1)).pod is pod


async def test_close_releases_a_waiting_pop():
    q = new_queue()
    task = asyncio.create_task(q.pop())
    await settle()
    q.close()
    assert await asyncio.wait_for(task, 1) is None


async def test_pop_still_drains_after_close():
    q = new_queue()
    pod = make_pod("p")
    q.add(pod)
    q.close()
    assert (await q.pop()).pod is pod
    assert await q.pop() is None


async def test_add_from_another_thread_wakes_pop():
    q = new_queue()
    task = asyncio.create_task(q.pop())
    await settle()
    pod = make_pod("p")
    t = threading.Thread(target=q.add, args=(pod,))
    t.start()
    t.join()
    assert (await asyncio.wait_for(task, 1)).pod is pod


async def test_pod_entering_backoff_wakes_pop_with_pop_from_backoff_q():
    q = new_queue(hint_map({NODE_ADD: [("plugin", hint_queue)]}))
    pod = make_pod("p")
    q.add(pod)
    p = q.try_pop()
    task = asyncio.create_task(q.pop())
    await settle()
    q.move_all_to_active_or_backoff_queue(NODE_ADD)  # arrives during the attempt
    q.add_unschedulable_if_not_present(lookup(pod, "plugin"), q.scheduling_cycle())
    assert p.pod is pod
    got = await asyncio.wait_for(task, 1)
    assert got.pod is pod  # taken from backoffQ although still backing off: activeQ was empty


async def test_cancelled_pop_leaves_no_waiter_behind():
    q = new_queue()
    task = asyncio.create_task(q.pop())
    await settle()
    task.cancel()
    await settle()
    assert q._waiters._futs == []


async def test_run_flushes_backoff_every_aligned_second():
    clock = fake_clock(T0 + 0.3)
    q = new_queue(hint_map({NODE_ADD: [("plugin", hint_queue)]}), clock=clock, pop_from_backoff_q=True)
    pod = make_pod("p")
    q.add(pod)
    q.try_pop()
    q.move_all_to_active_or_backoff_queue(NODE_ADD)
    q.add_unschedulable_if_not_present(lookup(pod, "plugin"), q.scheduling_cycle())  # expires in window T0+1
    assert q.queue_of(pod) == BACKOFF_Q
    q.run()
    try:
        await settle()
        seen = []
        for t in (T0 + 1, T0 + 2):
            clock.set_time(t)
            await settle()
            seen.append(q.queue_of(pod))
        assert seen == [BACKOFF_Q, ACTIVE_Q]  # flushed on the first tick after its window
    finally:
        q.close()
    await settle()


async def test_run_flushes_unschedulable_pods_after_5_minutes():
    clock = fake_clock()
    q = new_queue({}, clock=clock)
    pod = make_pod("p")
    q.add(pod)
    q.try_pop()
    q.add_unschedulable_if_not_present(lookup(pod, "plugin"), q.scheduling_cycle())
    q.run()
    try:
        await settle()
        for _ in range(10):  # T0+300: not longer than 5 minutes yet
            clock.step(30)
            await settle()
        assert q.queue_of(pod) == UNSCHEDULABLE_Q
        clock.step(30)  # the next 30 s flush
        await settle()
        assert q.queue_of(pod) == ACTIVE_Q
    finally:
        q.close()
    await settle()
    assert q.closed and q._tasks == []


# ---- the threading side: wait() for a scheduling loop on its own thread ----------------------
def test_wait_returns_at_once_when_a_pod_can_be_popped():
    q = new_queue()
    q.add(make_pod("p"))
    assert q.wait(5)


def test_wait_blocks_until_a_pod_is_added_from_another_thread():
    """(The scheduling loop polled try_pop every 20 ms instead: most of an idle queue-manager's CPU.)"""
    q = new_queue()
    assert not q.wait(0.05)  # nothing: times out
    timer = threading.Timer(0.1, q.add, args=(make_pod("p"),))
    timer.start()
    assert q.wait(10)
    timer.join()
    assert q.try_pop() is not None


def test_close_releases_a_waiting_thread():
    q = new_queue()
    timer = threading.Timer(0.1, q.close)
    timer.start()
    assert q.wait(10)
    timer.join()
