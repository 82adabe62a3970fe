"""EventConsumer: follow bus topics as an async iterator of :class:`Record`."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError

from schedmesh.bus.records import Record
from schedmesh.security.credentials import kafka_client_options
from schedmesh.bus.topics import TopicSpec, spec_for
from schedmesh.bus.watch import (
    BrokerState,
    BrokerWatch,
    BusError,
    RestartCallback,
    call_restart_callback,
    cancel_and_wait,
    raise_if_cancelling,
)
from schedmesh.telemetry.propagation import extract_kafka_headers

log = logging.getLogger(__name__)

_TRANSIENT = (KafkaError, OSError, asyncio.TimeoutError, BusError)


def fetch_max_wait_ms() -> int:
    """How long the broker may hold a fetch that has no data. Tansu (the embedded broker)
    does not answer a waiting fetch when a record arrives, so a record waits up to this
    long to reach a consumer: aiokafka's 500 ms default would add ~250 ms per hop. Small
    values cost idle fetch requests; SCHEDMESH_FETCH_MAX_WAIT_MS tunes it (Apache Kafka
    answers at once when data arrives, so a larger value is free there)."""
    return int(os.environ.get("SCHEDMESH_FETCH_MAX_WAIT_MS", "10"))


def watcher_fetch_max_wait_ms() -> int:
    """The fetch wait of consumers off the scheduling path (the kubelet agent, the controllers,
    the preemption service, the queue-manager's Events): a longer wait
    lets more records come in each fetch (SchedulingBasic, 5,000 nodes, 9,000 pods: the mesh's
    CPU 57.5 s with 10 ms, 54.1 s with 50 ms; Tansu's 10.6 s, 8.7 s). Records reach these
    consumers up to this much later.
    SCHEDMESH_WATCHER_FETCH_MAX_WAIT_MS tunes it (never below the scheduling path's wait)."""
    return max(fetch_max_wait_ms(), int(os.environ.get("SCHEDMESH_WATCHER_FETCH_MAX_WAIT_MS", "50")))


#: Seconds without records after which a consumer's fetches may wait longer (see idle_fetch_max_wait_ms).
IDLE_AFTER_SECONDS = 2.0


def idle_fetch_max_wait_ms(busy_ms: int) -> int:
    """The fetch wait of a consumer that has had no records for IDLE_AFTER_SECONDS: an idle
    local mesh otherwise keeps Tansu busy answering ~100 empty fetches a second per consumer
    (most of a core for a whole mesh). The first record after a quiet spell then waits up to
    this long per hop; the next fetches are quick again. SCHEDMESH_IDLE_FETCH_MAX_WAIT_MS tunes it
    (never below the busy value)."""
    return max(busy_ms, int(os.environ.get("SCHEDMESH_IDLE_FETCH_MAX_WAIT_MS", "100")))


class EventConsumer:
    """Reads ``topics`` and keeps following them; ``async for record in consumer``.

    Modes:

    * default (``group_id=None``): every partition of every topic is assigned to this
      consumer (optionally only ``partitions``), no consumer group. With
      ``from_beginning=True`` (default) the topics are replayed from offset 0 first: the
      informer pattern. :meth:`catch_up` returns everything up to the end offsets seen
      when it is called (the "list" phase); iterating afterwards is the "watch" phase.
    * ``group_id`` set: Kafka consumer group (partitions shared among members, offsets
      committed with :meth:`commit`; auto-commit is off). On Tansu, joining takes about
      half the session timeout; pass ``session_timeout_ms``/``heartbeat_interval_ms``
      in ``consumer_options`` to shorten it (Kafka itself requires >= 6000 ms).

    Broker restarts: a background probe (every ``probe_interval`` s) compares the
    broker's cluster id. When a memory-only broker restarted, the reader of this
    consumer (``getmany`` / the iterator / ``catch_up``) re-creates the topics, drops the
    underlying aiokafka consumer, opens a new one that reads the new (empty) topics from
    offset 0, increments ``restart_count`` and calls ``on_restart`` - before returning
    any record of the new broker, except for records read in the short window before the
    probe noticed (those are delivered again afterwards: expect duplicates, but nothing
    stored on the new broker is skipped). ``Record.epoch`` tells which broker lifetime a
    record came from. ``probe_interval=None`` disables all of this.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topics: Iterable[str | TopicSpec],
        *,
        from_beginning: bool = True,
        group_id: str | None = None,
        partitions: Iterable[int] | None = None,
        client_id: str = "schedmesh-consumer",
        on_restart: RestartCallback | None = None,
        probe_interval: float | None = 0.5,
        poll_interval: float = 0.2,
        **consumer_options: Any,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._specs = [spec_for(t) for t in topics]
        if not self._specs:
            raise ValueError("EventConsumer needs at least one topic")
        self._topics = tuple(s.name for s in self._specs)
        self._from_beginning = from_beginning
        self._group_id = group_id
        self._only_partitions = frozenset(partitions) if partitions is not None else None
        if group_id is not None and self._only_partitions is not None:
            raise ValueError("partitions= cannot be combined with group_id=")
        self._client_id = client_id
        self._on_restart = on_restart
        self._probe_interval = probe_interval
        self._poll_interval = poll_interval
        # SSL with the process's certificate when SCHEDMESH_KAFKA_TLS=1 (Apache Kafka with client auth)
        self._options = {"request_timeout_ms": 5000, "fetch_max_wait_ms": fetch_max_wait_ms(),
                         **kafka_client_options(), **consumer_options}
        self._busy_wait_ms = int(self._options["fetch_max_wait_ms"])
        self._idle_wait_ms = idle_fetch_max_wait_ms(self._busy_wait_ms)
        self._last_records = time.monotonic()
        self._watch = BrokerWatch(bootstrap_servers, client_id=f"{client_id}-watch")
        self._consumer: AIOKafkaConsumer | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._buffer: deque[Record] = deque()
        self._delivered: dict[TopicPartition, int] = {}
        self._restart_pending = False
        self._down = False
        self._restart_count = 0
        self._recoveries = 0
        self._stopped = False
        self._open_timeout = 30.0

    # ------------------------------------------------------------------ lifecycle
    @property
    def topics(self) -> tuple[str, ...]:
        return self._topics

    @property
    def restart_count(self) -> int:
        """How many broker restarts (data loss) this consumer has handled."""
        return self._restart_count

    @property
    def cluster_id(self) -> str | None:
        return self._watch.cluster_id

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(self._consumer.assignment()) if self._consumer is not None else frozenset()

    async def start(self, timeout: float = 30.0) -> Self:
        self._open_timeout = timeout
        self._stopped = False
        await self._watch.wait_until_up(timeout)
        await self._watch.ensure_topics(self._specs)
        await self._open(from_beginning=self._from_beginning)
        if self._probe_interval:
            self._monitor = asyncio.create_task(self._watch_broker(), name="schedmesh-consumer-watch")
        return self

    async def stop(self) -> None:
        self._stopped = True
        await cancel_and_wait(self._monitor)
        self._monitor = None
        consumer, self._consumer = self._consumer, None
        await self._close(consumer)
        await self._watch.close()
        self._buffer.clear()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _open(self, *, from_beginning: bool) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            client_id=self._client_id,
            group_id=self._group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
            **self._options,
        )
        if self._group_id is not None:
            consumer.subscribe(list(self._topics))
            await consumer.start()
            self._consumer = consumer
            return
        await consumer.start()
        try:
            assignment = await self._manual_assignment()
            consumer.assign(assignment)
            if from_beginning:
                await consumer.seek_to_beginning(*assignment)
            else:
                await consumer.seek_to_end(*assignment)
        except BaseException:
            await self._close(consumer)
            raise
        self._consumer = consumer

    async def _manual_assignment(self) -> list[TopicPartition]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._open_timeout
        assignment: list[TopicPartition] = []
        for topic in self._topics:
            while not (ids := await self._watch.partitions(topic)):
                if loop.time() > deadline:
                    raise BusError(f"topic {topic} has no partitions in the metadata")
                await asyncio.sleep(0.05)
            assignment += [
                TopicPartition(topic, p)
                for p in ids
                if self._only_partitions is None or p in self._only_partitions
            ]
        if not assignment:
            raise BusError(f"no partitions to read for {self._topics} (partitions={self._only_partitions})")
        return assignment

    @staticmethod
    async def _close(consumer: AIOKafkaConsumer | None) -> None:
        if consumer is None:
            return
        try:
            await asyncio.wait_for(consumer.stop(), 5.0)
        except asyncio.CancelledError:
            # aiokafka's Fetcher.close() cancels its requests in flight and awaits them unguarded:
            # a fetch that failed (the broker went away) and sleeps out its retry backoff ends
            # cancelled, and stop() raises CancelledError though nobody cancelled this task
            # (aio-libs/aiokafka#647). Propagated, it ended the reader recovering from a broker
            # restart: a cache stopped following for good. Only a real cancellation goes on.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            log.warning("consumer stop: an aiokafka request cancelled while closing escaped stop()")
            client = getattr(consumer, "_client", None)  # what stop() did not get to close
            if client is not None:
                try:
                    await asyncio.wait_for(client.close(), 5.0)
                except (TimeoutError, KafkaError, OSError, asyncio.CancelledError) as exc:
                    if task is not None and task.cancelling():
                        raise
                    log.warning("consumer client close: %r", exc)
        except (TimeoutError, KafkaError, OSError) as exc:
            log.warning("consumer stop: %r", exc)

    # ------------------------------------------------------------------ reading
    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Record:
        while not self._buffer:
            raise_if_cancelling()
            if self._stopped:
                raise StopAsyncIteration
            self._buffer.extend(await self._fetch(self._poll_interval, None))
        return self._deliver(self._buffer.popleft())

    async def getmany(self, timeout: float = 1.0, max_records: int | None = None) -> list[Record]:
        """The records available within ``timeout`` seconds (maybe none)."""
        if not self._buffer:
            self._buffer.extend(await self._fetch(timeout, max_records))
        count = len(self._buffer) if max_records is None else min(max_records, len(self._buffer))
        return [self._deliver(self._buffer.popleft()) for _ in range(count)]

    async def end_offsets(self) -> dict[str, int]:
        """The broker's end offset (the next offset it will write) of every assigned partition,
        as "topic/partition" -> offset (ClusterCache.offsets' keys); reads nothing."""
        consumer = self._consumer
        if consumer is None:
            raise BusError("EventConsumer not started")
        ends = await consumer.end_offsets(list(consumer.assignment()))
        return {f"{tp.topic}/{tp.partition}": offset for tp, offset in ends.items()}

    async def catch_up(self, timeout: float = 30.0) -> list[Record]:
        """Read until every assigned partition reaches the end offset it had when called.

        If the broker restarts meanwhile, the records of the lost broker are dropped and
        the catch-up starts over on the new one.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        out: list[Record] = []
        epoch = self._restart_count
        while True:
            await self._handle_restart_if_pending()
            if epoch != self._restart_count:  # records of the lost broker are void
                out.clear()
                epoch = self._restart_count
            consumer = self._consumer
            if consumer is None or self._down or not consumer.assignment():
                if loop.time() > deadline:
                    raise BusError("catch_up timed out waiting for the broker / an assignment")
                await asyncio.sleep(self._poll_interval)
                continue
            try:
                ends = await consumer.end_offsets(list(consumer.assignment()))
            except _TRANSIENT:
                await asyncio.sleep(self._poll_interval)
                continue
            out += [self._deliver(r) for r in self._drain_buffer()]
            while epoch == self._restart_count and consumer is self._consumer:
                behind = await self._behind(consumer, ends)
                if behind is None:
                    break  # assignment changed under us (rebalance): new end offsets
                if not behind:
                    return out
                if loop.time() > deadline:
                    raise BusError(f"catch_up timed out; still behind on {behind}")
                out += await self.getmany(self._poll_interval)

    @staticmethod
    async def _behind(
        consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]
    ) -> list[TopicPartition] | None:
        """Partitions whose position (next offset to hand out) is before ``ends``."""
        try:
            return [tp for tp, end in ends.items() if await consumer.position(tp) < end]
        except Exception:  # noqa: BLE001 - e.g. IllegalStateError: partition not assigned now
            return None

    def _drain_buffer(self) -> list[Record]:
        items = list(self._buffer)
        self._buffer.clear()
        return items

    def _deliver(self, record: Record) -> Record:
        self._delivered[TopicPartition(record.topic, record.partition)] = record.offset + 1
        return record

    async def _fetch(self, timeout: float, max_records: int | None) -> list[Record]:
        await self._handle_restart_if_pending()
        consumer = self._consumer
        if consumer is None or self._down:
            await asyncio.sleep(min(timeout, self._poll_interval))
            return []
        try:
            batches = await consumer.getmany(timeout_ms=int(timeout * 1000), max_records=max_records)
        except ConsumerStoppedError:  # stop() was called while we were waiting
            return []
        except _TRANSIENT as exc:
            log.debug("fetch failed: %r", exc)
            await asyncio.sleep(self._poll_interval)
            return []
        epoch = self._restart_count
        out = [self._to_record(m, epoch) for msgs in batches.values() for m in msgs]
        self._adapt_fetch_wait(consumer, bool(out))
        return out

    def _adapt_fetch_wait(self, consumer: AIOKafkaConsumer, got_records: bool) -> None:
        """Short fetch waits while records flow, longer ones once quiet (idle_fetch_max_wait_ms).
        aiokafka reads its fetcher's wait for every fetch request it builds."""
        now = time.monotonic()
        if got_records:
            self._last_records = now
        wait = self._busy_wait_ms if now - self._last_records < IDLE_AFTER_SECONDS else self._idle_wait_ms
        fetcher = getattr(consumer, "_fetcher", None)
        if fetcher is not None and getattr(fetcher, "_fetch_max_wait_ms", wait) != wait:
            fetcher._fetch_max_wait_ms = wait

    @staticmethod
    def _to_record(msg: ConsumerRecord[bytes, bytes], epoch: int) -> Record:
        headers = tuple((k, v if v is not None else b"") for k, v in (msg.headers or ()))
        return Record(
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=msg.key,
            value=msg.value,
            headers=headers,
            timestamp_ms=msg.timestamp,
            epoch=epoch,
            context=extract_kafka_headers(headers),
        )

    async def rewind(self) -> None:
        """Replay the assigned partitions from the beginning (e.g. to rebuild a cache)."""
        if self._consumer is None:
            raise BusError("EventConsumer not started")
        self._buffer.clear()
        assignment = list(self._consumer.assignment())
        await self._consumer.seek_to_beginning(*assignment)
        for tp in assignment:
            self._delivered.pop(tp, None)

    async def commit(self) -> None:
        """Commit the offsets of the records handed out so far (group mode only)."""
        if self._group_id is None:
            raise BusError("commit() needs group_id")
        if self._consumer is None:
            raise BusError("EventConsumer not started")
        offsets = {tp: off for tp, off in self._delivered.items() if tp in self._consumer.assignment()}
        if offsets:
            await self._consumer.commit(offsets)

    # ------------------------------------------------------------------ restarts
    async def _handle_restart_if_pending(self) -> None:
        if not self._restart_pending or self._stopped:
            return
        # cleared first: a restart reported while we recover is handled again afterwards
        self._restart_pending = False
        self._recoveries += 1
        try:
            await self._watch.ensure_topics(self._specs)
            old, self._consumer = self._consumer, None
            await self._close(old)
            self._buffer.clear()
            self._delivered.clear()
            # the new broker's topics hold only new records: read all of them
            await self._open(from_beginning=True)
        except _TRANSIENT as exc:
            log.warning("recovering from a broker restart failed, will retry: %r", exc)
            self._restart_pending = True
            return
        self._restart_count += 1
        log.info("consumer of %s resumed on the restarted broker", self._topics)
        await call_restart_callback(self._on_restart, "EventConsumer")

    async def _watch_broker(self) -> None:
        assert self._probe_interval
        while True:
            raise_if_cancelling()
            await asyncio.sleep(self._probe_interval)
            recoveries_before = self._recoveries
            state = await self._watch.probe(self._topics)
            self._down = state is BrokerState.DOWN
            if state is BrokerState.RESTARTED:
                self._restart_pending = True
            elif state is BrokerState.TOPICS_MISSING and self._recoveries == recoveries_before:
                # (if the reader began a recovery meanwhile, it re-creates the topics
                # after this probe listed them: the answer is stale)
                self._restart_pending = True
