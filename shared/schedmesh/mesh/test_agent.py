"""The kubelet agent's reconcile loop, in-process (its Kafka clients are never started): it sleeps
until a timer is due instead of passing over nothing every tick."""
from __future__ import annotations

import asyncio
import time

from schedmesh.bus.watch import cancel_and_wait
from schedmesh.mesh.agent import KubeletAgent


async def test_the_reconcile_loop_sleeps_until_a_timer_is_due() -> None:
    """(Ten passes a second over no due timer were a fifth of an idle agent's wake-ups.)"""
    agent = KubeletAgent("agent-t", [], "127.0.0.1:9", tick=0.01)
    passes: list[float] = []

    async def reconcile() -> None:  # as the real one: handles (pops) what is due
        now = agent.clock()
        if agent._timers.pop_due(now) or agent._checks.pop_due(now):
            passes.append(time.monotonic())
        else:
            passes.append(-1.0)  # a pass with nothing due

    agent.reconcile = reconcile
    loop = asyncio.create_task(agent.reconcile_loop())
    try:
        await asyncio.sleep(0.3)
        assert passes == [], f"{len(passes)} passes in 0.3 s with no timer"
        pushed = time.monotonic()
        agent._timers.push(agent.clock() + 0.2, "uid-a")  # e.g. a pod's start, due in 0.2 s
        await asyncio.sleep(0.05)
        agent._checks.push(agent.clock() + 0.05, "node-a")  # one due sooner, pushed while it sleeps
        await asyncio.sleep(0.5)
        assert len(passes) == 2 and -1.0 not in passes
        assert 0.08 <= passes[0] - pushed < 0.2  # the evictor check's time, not the pod's
        assert passes[1] - pushed >= 0.2
    finally:
        await cancel_and_wait(loop)
