"""Tests of the event bus against a real broker (no mocks).

Default: the embedded Tansu broker. ``SCHEDMESH_TEST_KAFKA=testcontainers`` runs the
same tests against Apache Kafka (KRaft) in Docker via testcontainers, and skips them
when no Docker engine is reachable. Restart tests need the embedded broker (they stop
and start it on the same port) and are skipped on Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from schedmesh.broker import EmbeddedBroker
from schedmesh.bus import EventConsumer, EventProducer, Record, TopicSpec
from schedmesh.bus import producer as producer_module
from schedmesh.bus.topics import DEFAULT_PARTITIONS
from schedmesh.bus.watch import BrokerWatch, cancel_and_wait

pytestmark = pytest.mark.timeout(90)

BACKEND = os.environ.get("SCHEDMESH_TEST_KAFKA", "embedded").strip().lower() or "embedded"


@dataclass(frozen=True)
class KafkaTarget:
    bootstrap_servers: str
    kind: str  # "embedded" | "kafka"


def _start_kafka_container() -> Iterator[KafkaTarget]:
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable engine
        pytest.skip(f"SCHEDMESH_TEST_KAFKA=testcontainers but no Docker engine: {exc}")
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # older testcontainers
        from testcontainers.kafka import KafkaContainer
    container = KafkaContainer().with_kraft()
    container.start()
    try:
        yield KafkaTarget(container.get_bootstrap_server(), "kafka")
    finally:
        container.stop()


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaTarget]:
    if BACKEND == "testcontainers":
        yield from _start_kafka_container()
    elif BACKEND == "embedded":
        with EmbeddedBroker() as broker:
            yield KafkaTarget(broker.bootstrap_servers, "embedded")
    else:
        pytest.fail(f"unknown SCHEDMESH_TEST_KAFKA={BACKEND!r} (embedded | testcontainers)")


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    """A private embedded broker that a test may stop and restart."""
    if BACKEND != "embedded":
        pytest.skip("restart tests stop/start the embedded memory-only broker")
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def topic() -> TopicSpec:
    return TopicSpec(f"test.{uuid.uuid4().hex[:10]}", partitions=3)


@pytest.fixture
def default_topic() -> TopicSpec:
    """A topic with the bus default partition count (what Tansu auto-creates)."""
    return TopicSpec(f"test.{uuid.uuid4().hex[:10]}")


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def _collect(consumer: EventConsumer, count: int, timeout: float = 10) -> list[Record]:
    out: list[Record] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"got {len(out)} of {count} records: {out}")
        out += await consumer.getmany(timeout=min(0.5, remaining))
    return out


# --------------------------------------------------------------------------- basics
async def test_produce_consume_keys_values_headers(kafka: KafkaTarget, topic: TopicSpec) -> None:
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer:
        sent = [
            await producer.send(topic.name, b"v1", key="pod-a", headers=[("kind", b"Pod")]),
            await producer.send(topic.name, b"v2", key=b"pod-b"),
            await producer.send(topic.name, b"v3", key="pod-a", headers=[("a", b"1"), ("b", b"")]),
            await producer.send(topic.name, None, key="pod-b"),  # tombstone
            await producer.send(topic.name, b"no-key"),
        ]
        assert [s.topic for s in sent] == [topic.name] * 5
        async with EventConsumer(kafka.bootstrap_servers, [topic]) as consumer:
            records = await consumer.catch_up(timeout=15)

    assert len(records) == 5
    by_value = {r.value: r for r in records}
    assert by_value[b"v1"].key == b"pod-a" and by_value[b"v1"].key_str == "pod-a"
    assert by_value[b"v1"].headers == (("kind", b"Pod"),)
    assert by_value[b"v1"].header("kind") == b"Pod"
    assert by_value[b"v3"].headers == (("a", b"1"), ("b", b""))
    assert by_value[b"no-key"].key is None
    [tombstone] = [r for r in records if r.value is None]
    assert tombstone.key == b"pod-b" and tombstone.is_tombstone
    # no active span: no trace headers, empty context
    assert all(r.header("traceparent") is None for r in records)
    assert not trace.get_current_span(records[0].context).get_span_context().is_valid
    # one key -> one partition, in order; offsets/partitions match what send() reported
    for key in (b"pod-a", b"pod-b"):
        mine = [r for r in records if r.key == key]
        assert len({r.partition for r in mine}) == 1
        assert [r.offset for r in mine] == sorted(r.offset for r in mine)
    assert {(s.partition, s.offset) for s in sent} == {(r.partition, r.offset) for r in records}


async def test_ensure_topics_is_idempotent(kafka: KafkaTarget, topic: TopicSpec) -> None:
    async with EventProducer(kafka.bootstrap_servers, topics=[]) as producer:
        assert await producer.ensure_topics([topic]) == [topic.name]
        assert await producer.ensure_topics([topic]) == []
        assert await producer.ensure_topics() == []  # now one of the producer's topics
    watch = BrokerWatch(kafka.bootstrap_servers)
    try:
        assert await watch.partitions(topic.name) == [0, 1, 2]
    finally:
        await watch.close()


def test_state_topics_are_kept_whole_and_leases_compacted() -> None:
    """Batch records (keyed batch/<writer>) and deltas keyed like their object: compaction would
    keep a delta and drop the object it applies to."""
    from schedmesh.bus.topics import LEASES, STATE_TOPICS, TOPIC_SPECS
    for name in STATE_TOPICS:
        assert TOPIC_SPECS[name].configs == {"cleanup.policy": "delete", "retention.ms": "-1",
                                             "retention.bytes": "-1"}, name
    assert TOPIC_SPECS[LEASES].configs == {"cleanup.policy": "compact"}


async def test_a_topic_created_compacted_is_switched_or_named(kafka: KafkaTarget, caplog) -> None:
    """A state topic an earlier version created compacted: Apache Kafka has it altered, a broker
    that cannot alter configs (Tansu) a warning naming the topic and the fix."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from schedmesh.bus.topics import KEEP_ALL
    name = f"test.{uuid.uuid4().hex[:10]}"
    async with EventProducer(kafka.bootstrap_servers, topics=[]) as producer:
        assert await producer.ensure_topics([TopicSpec(name, 1, configs={"cleanup.policy": "compact"})]) == [name]
        with caplog.at_level(logging.WARNING, logger="schedmesh.bus"):
            assert await producer.ensure_topics([TopicSpec(name, 1, configs=dict(KEEP_ALL))]) == []
    watch = BrokerWatch(kafka.bootstrap_servers)
    try:
        admin = await watch._client()
        (resp,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        policy = {e[0]: e[1] for r in resp.resources for e in r[4]}["cleanup.policy"]
    finally:
        await watch.close()
    warned = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    if policy == "delete":  # altered
        assert warned and "set to" in warned[0]
    else:
        assert kafka.kind == "embedded" and warned and "kafka-configs.sh" in warned[0], warned


async def test_replay_from_beginning_rebuilds_cache_then_follows(
    kafka: KafkaTarget, topic: TopicSpec
) -> None:
    """The informer pattern: list (replay) then watch (follow)."""
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer:
        for version in range(3):
            for node in ("n1", "n2", "n3", "n4"):
                await producer.send(topic.name, f"{node}@{version}".encode(), key=node)
        await producer.send(topic.name, None, key="n4")  # deleted

        cache: dict[bytes, bytes] = {}

        def apply(record: Record) -> None:
            assert record.key is not None
            if record.value is None:
                cache.pop(record.key, None)
            else:
                cache[record.key] = record.value

        async with EventConsumer(kafka.bootstrap_servers, [topic]) as informer:
            for record in await informer.catch_up(timeout=15):
                apply(record)
            assert cache == {b"n1": b"n1@2", b"n2": b"n2@2", b"n3": b"n3@2"}
            assert await informer.catch_up(timeout=5) == []  # nothing new

            async with EventConsumer(
                kafka.bootstrap_servers, [topic], from_beginning=False
            ) as tail:
                await producer.send(topic.name, b"n1@3", key="n1")
                await producer.send(topic.name, b"n5@0", key="n5")
                for record in await _collect(informer, 2):
                    apply(record)
                assert cache[b"n1"] == b"n1@3" and cache[b"n5"] == b"n5@0"
                # the tail-only consumer sees just the new records
                assert {r.value for r in await _collect(tail, 2)} == {b"n1@3", b"n5@0"}

            await informer.rewind()
            assert len(await informer.catch_up(timeout=15)) == 15

        # async iteration API
        async with EventConsumer(kafka.bootstrap_servers, [topic]) as again:
            seen = []
            async for record in again:
                seen.append(record)
                if len(seen) == 15:
                    break
            assert [r.value for r in seen if r.key == b"n1"] == [b"n1@0", b"n1@1", b"n1@2", b"n1@3"]


async def test_partition_subset(kafka: KafkaTarget, topic: TopicSpec) -> None:
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer:
        sent = [await producer.send(topic.name, str(i).encode(), key=str(i)) for i in range(12)]
    expected = {s.offset for s in sent if s.partition == 1}
    async with EventConsumer(kafka.bootstrap_servers, [topic], partitions=[1]) as consumer:
        records = await consumer.catch_up(timeout=15)
    assert {r.partition for r in records} == {1}
    assert {r.offset for r in records} == expected


async def test_a_single_partition_topic_is_read_from_partition_0_only(kafka: KafkaTarget) -> None:
    """Its records are all in partition 0; the other three exist only to match Tansu's
    auto-creation, and fetching them cost every fetch and every idle poll."""
    topic = TopicSpec(f"test.{uuid.uuid4().hex[:10]}", single_partition=True)
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer:
        sent = [await producer.send(topic.name, str(i).encode(), key=str(i)) for i in range(8)]
        async with EventConsumer(kafka.bootstrap_servers, [topic]) as consumer:
            assert consumer.assignment() == {TopicPartition(topic.name, 0)}
            records = await consumer.catch_up(timeout=15)
    assert {s.partition for s in sent} == {0}
    assert [r.value for r in records] == [str(i).encode() for i in range(8)]


async def test_a_single_partition_topic_an_earlier_version_spread_is_read_older_partitions_first(
        kafka: KafkaTarget) -> None:
    """The catalogue's namespaces, priority classes, PDBs, leases and events topics were spread by
    key before; on a broker that kept them (Apache Kafka), their other partitions are read first
    and partition 0 after them, so an object's newer records (now all in 0) come after its
    older ones; empty partitions are not read at all."""
    from schedmesh.bus.topics import TOPIC_SPECS, PDBS
    assert all(spec.single_partition for spec in TOPIC_SPECS.values())
    assert TOPIC_SPECS[PDBS].single_partition
    topic = TopicSpec(f"test.{uuid.uuid4().hex[:10]}", single_partition=True)
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer:
        earlier = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers)
        await earlier.start()
        try:
            for partition, values in ((1, [b"a1", b"a2"]), (2, [b"b1"])):
                for value in values:
                    await earlier.send_and_wait(topic.name, value, key=value[:1], partition=partition)
        finally:
            await earlier.stop()
        await producer.send(topic.name, b"a3", key="a")
        await producer.send(topic.name, b"b2", key="b")
        # one record per partition and fetch: partition 0 would otherwise come before a2
        async with EventConsumer(kafka.bootstrap_servers, [topic], max_partition_fetch_bytes=1) as consumer:
            assert consumer.assignment() == {TopicPartition(topic.name, p) for p in (0, 1, 2)}
            got = await _collect(consumer, 5)
            assert [r.partition for r in got][-2:] == [0, 0] and [r.value for r in got][-2:] == [b"a3", b"b2"]
            assert sorted(r.value for r in got[:3]) == [b"a1", b"a2", b"b1"]
            await producer.send(topic.name, b"a4", key="a")
            assert [r.value for r in await _collect(consumer, 1)] == [b"a4"]
            await consumer.rewind()  # a replay: the older partitions first again
            again = await _collect(consumer, 6)
            assert sorted(r.value for r in again[:3]) == [b"a1", b"a2", b"b1"]
            assert [r.value for r in again[3:]] == [b"a3", b"b2", b"a4"]
        async with EventConsumer(kafka.bootstrap_servers, [topic], from_beginning=False) as consumer:
            assert consumer.assignment() == {TopicPartition(topic.name, 0)}  # only what comes next


async def _send_from_elsewhere(bootstrap: str, topic: str, value: bytes) -> None:
    """A send this process's consumers are not told about (as another process's would be)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=b"k")
    finally:
        await producer.stop()


async def _until_dozing(consumer: EventConsumer, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not consumer.dozing:
        assert time.monotonic() < deadline, "the idle consumer did not doze"
        await consumer.getmany(timeout=0.1)


async def test_an_idle_consumer_dozes_and_wakes_for_new_records(kafka: KafkaTarget, topic: TopicSpec) -> None:
    """No records for idle_after seconds: it pauses its fetches (an idle mesh's consumers kept
    Tansu busy answering empty fetches) and looks at the end offsets every idle_poll_ms; a
    record from another process is read at the next look."""
    async with EventConsumer(kafka.bootstrap_servers, [topic], idle_poll_ms=200, idle_after=0.2) as consumer:
        await _until_dozing(consumer)
        assert consumer._consumer is not None and consumer._consumer.paused() == consumer.assignment()
        await _send_from_elsewhere(kafka.bootstrap_servers, topic.name, b"from-elsewhere")
        records = await _collect(consumer, 1)
        assert [r.value for r in records] == [b"from-elsewhere"]
        assert not consumer._consumer.paused()
        await _until_dozing(consumer)  # and dozes off again


async def test_a_dozing_consumer_wakes_at_once_for_what_its_process_publishes(
    kafka: KafkaTarget, topic: TopicSpec
) -> None:
    """A publish of this process, or wake() (ClusterCache.wait_for's), does not wait for the
    next poll (here a minute away)."""
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer, EventConsumer(
        kafka.bootstrap_servers, [topic], idle_poll_ms=60_000, idle_after=0.2
    ) as consumer:
        await _until_dozing(consumer)
        await producer.send(topic.name, b"mine", key="k")
        assert not consumer.dozing
        assert [r.value for r in await _collect(consumer, 1, timeout=5)] == [b"mine"]
        await _until_dozing(consumer)
        consumer.wake()
        assert not consumer.dozing
        await _send_from_elsewhere(kafka.bootstrap_servers, topic.name, b"after-wake")
        assert [r.value for r in await _collect(consumer, 1, timeout=5)] == [b"after-wake"]


async def test_no_record_is_lost_or_repeated_across_dozing_and_waking(kafka: KafkaTarget, topic: TopicSpec) -> None:
    """Bursts separated by gaps shorter and longer than idle_after, sent both by this process
    (which wakes the consumer) and from elsewhere (found by the offsets poll): every record
    arrives once, in order, however often the consumer paused and resumed in between."""
    rng = random.Random(7)
    outsider = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers)
    await outsider.start()
    got: list[int] = []
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer, EventConsumer(
        kafka.bootstrap_servers, [topic], idle_poll_ms=50, idle_after=0.15
    ) as consumer:
        async def read() -> None:
            while True:
                got.extend(int(r.value) for r in await consumer.getmany(timeout=0.2))

        reader = asyncio.create_task(read())
        sent, dozed = 0, 0
        try:
            for burst in range(30):
                mine = burst % 6 == 0  # a publish of its own keeps it awake IDLE_AFTER_SECONDS
                for _ in range(rng.randint(1, 15)):
                    value = str(sent).encode()
                    if mine and rng.random() < 0.5:
                        await producer.send(topic.name, value, key="k")
                    else:
                        await outsider.send_and_wait(topic.name, value, key=b"k")
                    sent += 1
                await asyncio.sleep(2.3 if mine else rng.choice([0, 0.01, 0.1, 0.3, 0.5]))
                dozed += consumer.dozing
            deadline = time.monotonic() + 10
            while len(got) < sent and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            await cancel_and_wait(reader)
            await outsider.stop()
    assert dozed > 3, "the consumer never dozed: the test proves nothing"
    assert got == list(range(sent))


async def test_a_paced_consumer_waits_between_fetches_unless_hurried(kafka: KafkaTarget, topic: TopicSpec) -> None:
    """fetch_interval_ms: after a fetch the consumer holds none at the broker for that long (the
    embedded broker re-examines every held fetch at each record written), so records written
    meanwhile come together in the next fetch; hurry() (ClusterCache.wait_for's) fetches at once.
    Nothing is lost or repeated across the pauses."""
    async with EventConsumer(kafka.bootstrap_servers, [topic], fetch_interval_ms=1500, idle_poll_ms=0) as consumer:
        await _send_from_elsewhere(kafka.bootstrap_servers, topic.name, b"0")
        assert [r.value for r in await _collect(consumer, 1)] == [b"0"]
        assert consumer._consumer is not None and consumer._consumer.paused() == consumer.assignment()
        for value in (b"1", b"2"):
            await _send_from_elsewhere(kafka.bootstrap_servers, topic.name, value)
        started = time.monotonic()
        assert await consumer.getmany(timeout=0.5) == []  # still paced
        got = await _collect(consumer, 2, timeout=5)
        assert [r.value for r in got] == [b"1", b"2"] and time.monotonic() - started > 0.9
        await _send_from_elsewhere(kafka.bootstrap_servers, topic.name, b"3")
        consumer.hurry()
        started = time.monotonic()
        assert [r.value for r in await _collect(consumer, 1, timeout=5)] == [b"3"]
        assert time.monotonic() - started < 1.0


async def test_what_its_process_publishes_reaches_a_paced_consumer_without_the_pause(
    kafka: KafkaTarget, topic: TopicSpec
) -> None:
    """A publish of this process hurries its consumers of the topic (the queue-manager's paced
    cache reads its own Apply at once); a record from elsewhere still waits for the pause."""
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer, EventConsumer(
        kafka.bootstrap_servers, [topic], fetch_interval_ms=3000, idle_poll_ms=0
    ) as consumer:
        await _send_from_elsewhere(kafka.bootstrap_servers, topic.name, b"0")
        assert [r.value for r in await _collect(consumer, 1)] == [b"0"]
        await _send_from_elsewhere(kafka.bootstrap_servers, topic.name, b"elsewhere")
        assert await consumer.getmany(timeout=0.5) == []  # paced
        started = time.monotonic()
        await producer.send(topic.name, b"mine", key="k")
        got = await _collect(consumer, 2, timeout=5)
        assert [r.value for r in got] == [b"elsewhere", b"mine"] and time.monotonic() - started < 1.5


async def test_a_consumer_not_hurried_by_own_writes_reads_them_after_its_pause(
    kafka: KafkaTarget, topic: TopicSpec
) -> None:
    """hurried_by_own_writes=False (the binder's cache, whose ledger holds its own bindings until
    they come back): this process's publish does not end the pause; the record comes with the
    next paced fetch, and a dozing consumer is still woken for it."""
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer, EventConsumer(
        kafka.bootstrap_servers, [topic], fetch_interval_ms=2000, idle_poll_ms=0, hurried_by_own_writes=False
    ) as consumer:
        await _send_from_elsewhere(kafka.bootstrap_servers, topic.name, b"0")
        assert [r.value for r in await _collect(consumer, 1)] == [b"0"]
        started = time.monotonic()
        await producer.send(topic.name, b"mine", key="k")
        assert await consumer.getmany(timeout=0.8) == []  # still paced
        got = await _collect(consumer, 1, timeout=5)
        assert [r.value for r in got] == [b"mine"] and time.monotonic() - started > 1.5


async def test_stop_ends_a_reader_dozing_in_getmany(kafka: KafkaTarget, topic: TopicSpec) -> None:
    """(A follow loop once spun on the event loop from there, so stop() never finished.)"""
    consumer = EventConsumer(kafka.bootstrap_servers, [topic], idle_poll_ms=60_000, idle_after=0.1)
    await consumer.start()
    await _until_dozing(consumer)
    calls = 0

    async def follow() -> None:
        nonlocal calls
        while True:
            calls += 1
            await consumer.getmany(timeout=30)

    reader = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    await asyncio.wait_for(consumer.stop(), 10)
    await asyncio.sleep(0.3)
    assert calls < 10
    await cancel_and_wait(reader)


async def test_idle_clients_probe_the_broker_less_often_and_at_once_when_busy_again(
    kafka: KafkaTarget, topic: TopicSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 0.5 s, the probes of an idle mesh's clients were a fifth of its CPU."""
    monkeypatch.setenv("SCHEDMESH_IDLE_PROBE_SECONDS", "60")
    monkeypatch.setattr(producer_module, "IDLE_AFTER_SECONDS", 0.3)
    async with EventProducer(kafka.bootstrap_servers, topics=[topic], probe_interval=0.1) as producer, EventConsumer(
        kafka.bootstrap_servers, [topic], probe_interval=0.1, idle_poll_ms=60_000, idle_after=0.2
    ) as consumer:
        probes: list[str] = []
        for who, client in (("producer", producer), ("consumer", consumer)):
            original = client._watch.probe

            async def counted(*args: Any, _who: str = who, _probe: Any = original) -> Any:
                probes.append(_who)
                return await _probe(*args)

            monkeypatch.setattr(client._watch, "probe", counted)
        await producer.send(topic.name, b"one", key="k")
        await _collect(consumer, 1)
        await _until_dozing(consumer)
        await asyncio.sleep(0.8)  # both idle now
        probes.clear()
        await asyncio.sleep(1.0)
        assert probes == [], "idle: no probe for a minute"
        await producer.send(topic.name, b"two", key="k")  # busy again: the producer, and the consumer it wakes
        deadline = asyncio.get_running_loop().time() + 5
        while not {"producer", "consumer"} <= set(probes):
            assert asyncio.get_running_loop().time() < deadline, f"busy again, but only {probes} probed"
            await asyncio.sleep(0.02)


async def test_trace_context_travels_in_headers(
    kafka: KafkaTarget, topic: TopicSpec, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("test")
    async with EventProducer(
        kafka.bootstrap_servers, topics=[topic], tracer_provider=provider
    ) as producer:
        with tracer.start_as_current_span("schedule pod") as root:
            await producer.send(topic.name, b"pod", key="uid-1", headers=[("x", b"y")])
        async with EventConsumer(kafka.bootstrap_servers, [topic]) as consumer:
            [record] = await consumer.catch_up(timeout=15)

    assert record.header("traceparent") is not None
    assert record.header("x") == b"y"
    [publish] = [s for s in exporter.get_finished_spans() if s.name == f"publish {topic.name}"]
    assert publish.kind is trace.SpanKind.PRODUCER
    assert publish.parent is not None and publish.parent.span_id == root.get_span_context().span_id
    assert dict(publish.attributes or {})["messaging.destination.name"] == topic.name

    remote = trace.get_current_span(record.context).get_span_context()
    assert remote.is_remote
    assert remote.trace_id == root.get_span_context().trace_id
    assert remote.span_id == publish.context.span_id

    # the consumer continues the same trace
    with tracer.start_as_current_span("handle", context=record.context, kind=trace.SpanKind.CONSUMER):
        pass
    [handle] = [s for s in exporter.get_finished_spans() if s.name == "handle"]
    assert handle.context.trace_id == root.get_span_context().trace_id
    assert handle.parent is not None and handle.parent.span_id == publish.context.span_id


async def test_consumer_group_commits_offsets(kafka: KafkaTarget, topic: TopicSpec) -> None:
    # Tansu answers JoinGroup after ~half the session timeout; Kafka needs >= 6 s.
    timing: dict[str, Any] = (
        {"session_timeout_ms": 1000, "heartbeat_interval_ms": 100}
        if kafka.kind == "embedded"
        else {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
    )
    group = f"g-{uuid.uuid4().hex[:6]}"
    async with EventProducer(kafka.bootstrap_servers, topics=[topic]) as producer:
        for i in range(5):
            await producer.send(topic.name, f"first-{i}".encode(), key=str(i))
        async with EventConsumer(
            kafka.bootstrap_servers, [topic], group_id=group, **timing
        ) as member:
            first = await member.catch_up(timeout=30)
            assert sorted(r.value or b"" for r in first) == [f"first-{i}".encode() for i in range(5)]
            await member.commit()
        await producer.send(topic.name, b"second", key="0")
        async with EventConsumer(
            kafka.bootstrap_servers, [topic], group_id=group, **timing
        ) as member:
            again = await member.catch_up(timeout=30)
    assert [r.value for r in again] == [b"second"]


# --------------------------------------------------------------------------- restarts
async def _read_into(consumer: EventConsumer, sink: list[Record]) -> None:
    async for record in consumer:
        sink.append(record)


async def _eventually(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await asyncio.sleep(0.02)


async def test_broker_restart_consumer_reconnects_and_callbacks_fire(
    own_broker: EmbeddedBroker, default_topic: TopicSpec
) -> None:
    topic = default_topic
    fired: list[str] = []

    async def producer_restarted() -> None:  # async callbacks are awaited
        fired.append("producer")

    bootstrap = own_broker.bootstrap_servers
    received: list[Record] = []
    async with EventProducer(
        bootstrap, topics=[topic], on_restart=producer_restarted, probe_interval=0.2
    ) as producer, EventConsumer(
        bootstrap, [topic], on_restart=lambda: fired.append("consumer"), probe_interval=0.2
    ) as consumer:
        reader = asyncio.create_task(_read_into(consumer, received))
        try:
            for i in range(3):
                await producer.send(topic.name, f"before-{i}".encode(), key=f"k{i}")
            await _eventually(lambda: len(received) >= 3, what="records before the restart")
            first_cluster = producer.cluster_id

            await own_broker.astop()
            await own_broker.astart()  # same port, new cluster id, no topics

            await _eventually(
                lambda: {"producer", "consumer"} <= set(fired), what=f"restart callbacks ({fired})"
            )
            assert producer.restart_count == 1 and consumer.restart_count == 1
            assert producer.cluster_id == consumer.cluster_id == own_broker.cluster_id != first_cluster

            for i in range(3):
                await producer.send(topic.name, f"after-{i}".encode(), key=f"k{i}")
            await _eventually(
                lambda: {b"after-0", b"after-1", b"after-2"} <= {r.value for r in received},
                what="records after the restart",
            )
        finally:
            await cancel_and_wait(reader)

    after = [r for r in received if r.value and r.value.startswith(b"after")]
    assert all(r.epoch == 1 for r in after)
    # the topic exists again with its spec's partition count (whoever re-created it:
    # the bus, or Tansu auto-creating it for a client's metadata request)
    watch = BrokerWatch(bootstrap)
    try:
        assert await watch.partitions(topic.name) == list(range(DEFAULT_PARTITIONS))
    finally:
        await watch.close()


async def test_restart_recovery_survives_a_fetch_sleeping_out_its_retry_backoff(
    own_broker: EmbeddedBroker, default_topic: TopicSpec
) -> None:
    """Recovering from a broker restart closes the old aiokafka consumer. A fetch of the old
    broker that failed is then sleeping out its retry backoff; aiokafka 0.14's Fetcher.close()
    cancels it and awaits it unguarded, so stop() raises CancelledError though nobody cancelled
    the reader (aio-libs/aiokafka#647). It must not end the reader: a CacheFollower's follow
    task died that way, silently, and its cache stayed on the lost broker's offsets for good
    ("filter-worker-1 has not caught up with the event stream")."""
    topic = default_topic
    bootstrap = own_broker.bootstrap_servers
    async with EventProducer(bootstrap, topics=[topic], probe_interval=0.2) as producer, EventConsumer(
        bootstrap, [topic], probe_interval=0.2, retry_backoff_ms=5000  # a long window, as under load
    ) as consumer:
        await producer.send(topic.name, b"before", key="k")
        assert b"before" in {r.value for r in await _collect(consumer, 1)}
        await own_broker.astop()
        await asyncio.sleep(0.5)  # the reader's fetch fails: its task sleeps 5 s before retrying
        assert await consumer.getmany(timeout=0.5) == []
        await own_broker.astart()  # same port, new cluster: the reader recovers within that sleep
        await _eventually(lambda: producer.restart_count == 1, what="producer restart handled")
        await producer.send(topic.name, b"after", key="k")
        values: list[bytes | None] = []
        deadline = time.monotonic() + 20
        while b"after" not in values:  # getmany raised CancelledError here
            assert time.monotonic() < deadline, f"nothing read after the restart: {values}"
            values += [r.value for r in await consumer.getmany(timeout=0.5)]
        assert consumer.restart_count == 1


async def test_send_right_after_restart_is_not_lost(
    own_broker: EmbeddedBroker, default_topic: TopicSpec
) -> None:
    """The producer cannot know the broker restarted before its probe runs; Tansu
    accepts the record into a topic that no longer exists. The producer re-sends what
    no probe confirmed once it notices, so the record arrives (maybe twice)."""
    topic = default_topic
    bootstrap = own_broker.bootstrap_servers
    async with EventProducer(bootstrap, topics=[topic], probe_interval=0.3) as producer:
        await producer.send(topic.name, b"old", key="k")
        await own_broker.arestart()
        await producer.send(topic.name, b"racy", key="k")  # no waiting for the probe
        await producer.send(topic.name, b"racy-other-key", key="other")
        async with EventConsumer(bootstrap, [topic], probe_interval=0.3) as consumer:
            received: list[Record] = []
            reader = asyncio.create_task(_read_into(consumer, received))
            try:
                await _eventually(
                    lambda: {b"racy", b"racy-other-key"} <= {r.value for r in received},
                    what="records sent right after the restart",
                )
            finally:
                await cancel_and_wait(reader)
        await _eventually(lambda: producer.restart_count == 1, what="producer restart handled")


async def test_resend_rewrites_or_drops_what_is_sent_again(
    own_broker: EmbeddedBroker, default_topic: TopicSpec
) -> None:
    """An owner that re-publishes newer state itself drops (None) or rewrites the records the
    producer would send again after a restart; its resend window opens before the first is asked
    about and closes once all are sent."""
    topic = default_topic
    bootstrap = own_broker.bootstrap_servers
    asked: list[bytes] = []
    window: list[object] = []

    def resend(t: str, value: bytes) -> bytes | None:
        asked.append(value)
        window.append(value)
        return None if value == b"stale" else value.upper()

    async with EventProducer(bootstrap, topics=[topic], probe_interval=0.3, resend=resend,
                             resend_window=window.append) as producer:
        await own_broker.arestart()
        await producer.send(topic.name, b"stale", key="k")  # before the probe notices
        await producer.send(topic.name, b"fresh", key="other")
        await _eventually(lambda: producer.restart_count == 1, what="producer restart handled")
        async with EventConsumer(bootstrap, [topic], probe_interval=0.3) as consumer:
            received: list[Record] = []
            reader = asyncio.create_task(_read_into(consumer, received))
            try:
                await _eventually(lambda: b"FRESH" in {r.value for r in received}, what="the rewritten record")
                await asyncio.sleep(0.5)
            finally:
                await cancel_and_wait(reader)
    assert set(asked) == {b"stale", b"fresh"}
    assert b"stale" not in {r.value for r in received}
    assert window[0] is True and window[-1] is False and set(window[1:-1]) == {b"stale", b"fresh"}


async def test_send_waits_while_the_broker_is_down(
    own_broker: EmbeddedBroker, default_topic: TopicSpec
) -> None:
    topic = default_topic
    bootstrap = own_broker.bootstrap_servers
    async with EventProducer(
        bootstrap, topics=[topic], probe_interval=0.1, send_timeout=20
    ) as producer:
        await own_broker.astop()
        await asyncio.sleep(0.5)  # the probe sees the broker down
        pending = asyncio.create_task(producer.send(topic.name, b"while-down", key="k"))
        await asyncio.sleep(0.5)
        assert not pending.done(), "send waits for the broker instead of failing"
        await own_broker.astart()
        sent = await asyncio.wait_for(pending, 15)
        assert sent.topic == topic.name
        async with EventConsumer(bootstrap, [topic]) as consumer:
            values = [r.value for r in await consumer.catch_up(timeout=10)]
        assert b"while-down" in values


def test_watcher_options_wait_longer_and_gather_more(monkeypatch):
    """Consumers off the scheduling path: fetch waits never below the scheduling path's, fetch
    sizes from SCHEDMESH_WATCHER_FETCH_MIN_BYTES (at least 1)."""
    from schedmesh.bus.consumer import fetch_max_wait_ms, watcher_options
    monkeypatch.delenv("SCHEDMESH_WATCHER_FETCH_MIN_BYTES", raising=False)
    monkeypatch.setenv("SCHEDMESH_WATCHER_FETCH_MAX_WAIT_MS", "1")
    monkeypatch.delenv("SCHEDMESH_FETCH_INTERVAL_MS", raising=False)
    monkeypatch.delenv("SCHEDMESH_WATCHER_FETCH_INTERVAL_MS", raising=False)
    assert watcher_options() == {"fetch_max_wait_ms": fetch_max_wait_ms(), "fetch_min_bytes": 1, "fetch_interval_ms": 150}
    monkeypatch.setenv("SCHEDMESH_WATCHER_FETCH_MIN_BYTES", "65536")
    monkeypatch.setenv("SCHEDMESH_WATCHER_FETCH_MAX_WAIT_MS", "80")
    monkeypatch.setenv("SCHEDMESH_FETCH_INTERVAL_MS", "170")  # never below the scheduling path's
    assert watcher_options() == {"fetch_max_wait_ms": 80, "fetch_min_bytes": 65536, "fetch_interval_ms": 170}
    monkeypatch.setenv("SCHEDMESH_WATCHER_FETCH_MIN_BYTES", "0")
    assert watcher_options()["fetch_min_bytes"] == 1
