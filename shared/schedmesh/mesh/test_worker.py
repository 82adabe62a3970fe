"""The worker's servicer answers a request whose feed follows what its shard has on the event
loop, and one that must wait for another request's feed on a thread, so that the loop stays free
to receive that feed."""
from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from schedmesh.bench.workloads import make_node, make_pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import build_frameworks
from schedmesh.mesh.shard import NodeShard
from schedmesh.mesh.shard_feed import FedCluster, ShardFeed
from schedmesh.mesh.worker import _Servicer
from schedmesh.v1 import scheduling_pb2 as spb


def shard_and_threads(wait_timeout: float = 5.0) -> tuple[NodeShard, list]:
    """A one-shard NodeShard whose filter_batch records, for each request it answers, its feed's
    generation and the thread it ran on."""
    cluster = FedCluster(wait_timeout=wait_timeout)
    frameworks = build_frameworks([default_profile()])
    for fw in frameworks.values():
        fw.set_snapshot_source(lambda: cluster.snapshot)
    shard = NodeShard(cluster, frameworks, 0, 1)
    threads: list = []
    evaluate = shard.filter_batch

    def recording(req, wait=True):
        answer = evaluate(req, wait)
        threads.append((req.view.shard_feed.generation, threading.current_thread()))
        return answer
    recording.__name__ = "filter_batch"
    shard.filter_batch = recording
    return shard, threads


def request(feed: ShardFeed, qm: Snapshot) -> spb.BatchRequest:
    req = spb.BatchRequest(order_digest=qm.cols.order_digest)
    feed.take(qm, req.view.shard_feed)
    return req


def test_a_feed_that_follows_is_answered_on_the_loop_and_one_that_waits_on_a_thread():
    qm = Snapshot([make_node(i, zone=None) for i in range(4)])
    feed = ShardFeed()
    shard, threads = shard_and_threads()
    servicer = _Servicer(shard)

    async def scenario():
        loop_thread = threading.current_thread()
        whole = request(feed, qm)
        qm.add_pod(make_pod("a"), "node-00000")
        first = request(feed, qm)
        qm.add_pod(make_pod("b"), "node-00001")
        second = request(feed, qm)
        await servicer.FilterBatch(whole, None)  # the whole cluster: on a thread
        # `second` arrives before `first`: it waits on a thread while the loop receives `first`.
        waiting = asyncio.ensure_future(servicer.FilterBatch(second, None))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await asyncio.wait_for(servicer.FilterBatch(first, None), 1)
        await asyncio.wait_for(waiting, 5)
        qm.add_pod(make_pod("c"), "node-00002")
        third = request(feed, qm)
        await servicer.FilterBatch(third, None)  # follows: on the loop
        on_loop = [(generation, thread is loop_thread) for generation, thread in threads]
        assert on_loop == [(whole.view.shard_feed.generation, False), (first.view.shard_feed.generation, True),
                           (second.view.shard_feed.generation, False), (third.view.shard_feed.generation, True)]
    asyncio.run(scenario())
    assert shard.cluster.generation == feed.generation
    assert sorted(pi.pod.meta.name for ni in shard.cluster.snapshot.node_info_list for pi in ni.pods) == ["a", "b", "c"]


class _Aborted(Exception):
    pass


class _Context:
    """What the servicer asks of a call's context: abort (raises, as grpc.aio's does)."""

    def __init__(self) -> None:
        self.status = None

    async def abort(self, code, details):
        self.status = (code, details)
        raise _Aborted(details)


def test_a_stream_answers_each_request_in_turn_and_ends_at_a_refused_feed():
    qm = Snapshot([make_node(i, zone=None) for i in range(4)])
    feed = ShardFeed()
    shard, threads = shard_and_threads()
    servicer = _Servicer(shard)
    requests = [request(feed, qm)]
    for i in range(3):
        qm.add_pod(make_pod(f"p{i}"), f"node-0000{i}")
        requests.append(request(feed, qm))
    stale = spb.BatchRequest(order_digest=qm.cols.order_digest)
    stale.view.shard_feed.CopyFrom(requests[1].view.shard_feed)  # a feed this shard is past

    async def incoming(reqs):
        for r in reqs:
            yield r

    async def scenario():
        answers = [a async for a in servicer.FilterBatches(incoming(requests), _Context())]
        assert len(answers) == 4 and all(len(a.results) == 0 for a in answers)
        context, got = _Context(), []
        with pytest.raises(_Aborted):
            async for a in servicer.FilterBatches(incoming([stale, requests[-1]]), context):
                got.append(a)
        assert got == [] and context.status[0] is grpc.StatusCode.FAILED_PRECONDITION
    asyncio.run(scenario())
    assert [generation for generation, _ in threads] == [r.view.shard_feed.generation for r in requests]
    assert sorted(pi.pod.meta.name for ni in shard.cluster.snapshot.node_info_list for pi in ni.pods) == \
        ["p0", "p1", "p2"]
