"""CacheFollower across a restart of a memory-only broker, with a real (embedded) broker restarted
on its port: the offsets the follower held belong to the lost broker, so they are forgotten before
any record of the new one is applied, and a view built from the cache afterwards is one a replica
that only ever read the new broker can reach (kept offsets made every shard wait for offsets the new
broker never reaches: "filter-worker-0 has not caught up with the event stream")."""
from __future__ import annotations

import asyncio
import gc
import time

import pytest
from aiokafka import AIOKafkaProducer

from schedmesh.api.types import Namespace
from schedmesh.broker.embedded import EmbeddedBroker
from schedmesh.bus import EventProducer
from schedmesh.bus.watch import cancel_and_wait
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import TOPIC_NAMESPACES, ClusterCache
from schedmesh.mesh.runtime import DEFAULT_GC_THRESHOLDS, CacheFollower, HeapFreezer, tune_gc

REVISIONS = 12  # records of the namespace on the lost broker; its owner re-publishes one


async def _eventually(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def _started_broker() -> EmbeddedBroker:
    broker = EmbeddedBroker()
    try:
        await broker.astart()
    except Exception as e:  # noqa: BLE001 - no Tansu binary in this installation
        pytest.skip(f"embedded broker unavailable: {e}")
    return broker


async def test_cache_follower_forgets_the_lost_brokers_offsets_on_a_broker_restart() -> None:
    broker = await _started_broker()
    bootstrap = broker.bootstrap_servers
    ns = Namespace("team-a", {"rev": str(REVISIONS - 1)})

    async def republish() -> None:  # the owner, as the queue-manager does: what it holds, once
        await records.publish(owner, [records.namespace_record(ns)])

    owner = EventProducer(bootstrap, client_id="test-owner", on_restart=republish, probe_interval=0.2)
    cache = ClusterCache()
    handed_over: list[dict[str, int]] = []  # the cache's offsets when the follower hands over to its owner

    async def restarted() -> None:
        handed_over.append(cache.view_offsets())

    follower = CacheFollower(bootstrap, cache, client_id="test-follower", on_restart=restarted)
    fresh = CacheFollower(bootstrap, ClusterCache(), client_id="test-fresh-replica")
    follow = None
    try:
        await owner.start(30)
        await follower.start(30)
        follow = asyncio.create_task(follower.follow())
        # the namespace's history, by a producer gone before the restart (the owner's own producer
        # would send its recent records again on the new broker, as it should)
        async with EventProducer(bootstrap, client_id="test-history") as history:
            for rev in range(REVISIONS):
                await records.publish(history, [records.namespace_record(Namespace("team-a", {"rev": str(rev)}))])
        await _eventually(lambda: sum(o for k, o in cache.view_offsets().items()
                                      if k.startswith(TOPIC_NAMESPACES + "/")) == REVISIONS,
                          "the follower reading the namespace's records")
        (key, old), = [(k, o) for k, o in cache.view_offsets().items() if k.startswith(TOPIC_NAMESPACES + "/")]
        assert old == REVISIONS

        await broker.astop()
        await broker.astart()  # same port, a new cluster id, no topics: offsets start from 0 again

        await _eventually(lambda: handed_over, "the follower noticing the broker restart")
        assert handed_over == [{}], f"offsets of the lost broker kept after its restart: {handed_over}"
        await _eventually(lambda: cache.view_offsets().get(key) == 1, f"the re-published namespace {key}")
        view = cache.view_offsets()
        assert view == {key: 1}, f"stale offsets in the view after the restart: {view}"
        with cache.lock:  # the objects are kept (their owners re-publish them)
            assert cache.snapshot.namespace_labels == {"team-a": {"rev": str(REVISIONS - 1)}}
        assert follower.consumer.restart_count == 1

        # A replica that only ever read the new broker (a shard restarted since) reaches the view.
        await fresh.start(30)
        assert fresh.cache.wait_for(view, timeout=5), \
            f"a fresh replica cannot reach the view {view} (it has {fresh.cache.view_offsets()})"
    finally:
        await cancel_and_wait(follow)
        await fresh.stop()
        await follower.stop()
        await owner.stop()
        await broker.astop()


async def test_a_record_the_cache_has_not_read_is_sent_again_after_a_broker_restart() -> None:
    """An owner re-publishes what its cache holds after a restart; what it sent and its cache had
    not read yet must be sent again, though a probe saw the broker holding it (read_back): the
    queue-manager lost an Apply's pods so when the broker died before its cache read them
    (tests/test_crash_safety.py, the broker case)."""
    broker = await _started_broker()
    bootstrap = broker.bootstrap_servers
    cache = ClusterCache()
    follower = CacheFollower(bootstrap, cache, client_id="test-slow-follower")

    async def republish() -> None:  # the owner, as the queue-manager does: what its cache holds
        with cache.lock:
            held = [Namespace(n, labels) for n, labels in cache.snapshot.namespace_labels.items()]
        await records.publish(owner, [records.namespace_record(ns) for ns in held])

    owner = EventProducer(bootstrap, client_id="test-owner", on_restart=republish, probe_interval=0.2,
                          read_back=follower.has_read)
    follow = None
    try:
        await owner.start(30)
        await records.publish(owner, [records.namespace_record(Namespace("team-c", {}))])
        await asyncio.sleep(1.0)  # probes vouch for the broker holding it; the cache has not read it
        await broker.astop()
        await broker.astart()
        await _eventually(lambda: owner.restart_count == 1, "the owner noticing the broker restart")
        await follower.start(30)  # (started earlier, its consumer might have fetched the record)
        follow = asyncio.create_task(follower.follow())
        await _eventually(lambda: "team-c" in cache.snapshot.namespace_labels,
                          "the record sent again on the new broker")
    finally:
        await cancel_and_wait(follow)
        await follower.stop()
        await owner.stop()
        await broker.astop()


async def test_a_reader_waiting_for_offsets_wakes_the_dozing_follower() -> None:
    """ClusterCache.wait_for wakes its follower (a BindBatch, the preemption service's and the
    shards' views wait so for the caller's offsets): here it dozes with a poll a minute away."""
    broker = await _started_broker()
    cache = ClusterCache()
    follower = CacheFollower(broker.bootstrap_servers, cache, client_id="test-dozing", idle_poll_ms=60_000,
                             idle_after=0.1)
    follow = None
    elsewhere = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)  # not this process's EventProducer
    try:
        await follower.start(30)
        follow = asyncio.create_task(follower.follow())
        await _eventually(lambda: follower.consumer.dozing, "the idle follower dozing")
        await elsewhere.start()
        topic, key, value = records.namespace_record(Namespace("team-b", {}))
        sent = await elsewhere.send_and_wait(topic, value, key=key.encode())
        started = time.monotonic()
        assert await asyncio.to_thread(cache.wait_for, {f"{topic}/{sent.partition}": sent.offset + 1}, 20)
        assert time.monotonic() - started < 10
        with cache.lock:
            assert "team-b" in cache.snapshot.namespace_labels
    finally:
        await elsewhere.stop()
        await cancel_and_wait(follow)
        await follower.stop()
        await broker.astop()


def test_gc_thresholds_from_the_environment(monkeypatch):
    before = gc.get_threshold()
    try:
        monkeypatch.delenv("SCHEDMESH_GC_THRESHOLDS", raising=False)
        assert tune_gc() == DEFAULT_GC_THRESHOLDS == gc.get_threshold()
        monkeypatch.setenv("SCHEDMESH_GC_THRESHOLDS", "5000,5,5")
        assert tune_gc() == (5000, 5, 5) == gc.get_threshold()
        monkeypatch.setenv("SCHEDMESH_GC_THRESHOLDS", "default")
        assert tune_gc() == (5000, 5, 5)  # left as it is
        for bad in ("5000,5", "a,b,c", "0,10,10"):
            monkeypatch.setenv("SCHEDMESH_GC_THRESHOLDS", bad)
            with pytest.raises(SystemExit, match="SCHEDMESH_GC_THRESHOLDS"):
                tune_gc()
    finally:
        gc.set_threshold(*before)


def test_applied_records_are_counted_per_topic_once_per_batch(monkeypatch):
    """schedmesh_records_applied_total counts the records a batch applied, per topic, in one
    update per topic (one per record was a tenth of the preemption service's profile); tombstones
    and records the cache refuses are not counted, and the cache goes on after them."""
    from schedmesh.bus.records import Record
    from schedmesh.telemetry import metrics

    class Cache:
        applied: list = []

        def apply(self, topic, value, offset, partition):
            if value == b"bad":
                raise ValueError("not a record")
            self.applied.append((topic, value))

    updates = []
    monkeypatch.setattr(metrics, "observe_records_applied", lambda topic, n=1: updates.append((topic, n)))
    follower = CacheFollower.__new__(CacheFollower)
    follower.cache, follower.on_record = Cache(), None
    follower.heap = HeapFreezer(lambda: 0)
    batch = [Record("a", 0, 0, None, b"1"), Record("b", 0, 0, None, b"2"), Record("a", 0, 1, None, None),
             Record("a", 0, 2, None, b"bad"), Record("a", 0, 3, None, b"3")]
    follower.apply_records(batch)
    assert follower.cache.applied == [("a", b"1"), ("b", b"2"), ("a", b"3")]
    assert sorted(updates) == [("a", 2), ("b", 1)]
