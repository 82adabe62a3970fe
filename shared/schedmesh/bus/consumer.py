"""EventConsumer: follow bus topics as an async iterator of :class:`Record`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError

from schedmesh.bus.records import Record
from schedmesh.security.credentials import kafka_client_options
from schedmesh.bus.topics import TopicSpec, spec_for
from schedmesh.bus.watch import (
    IDLE_AFTER_SECONDS,
    BrokerState,
    BrokerWatch,
    BusError,
    RestartCallback,
    call_restart_callback,
    cancel_and_wait,
    idle_probe_interval,
    raise_if_cancelling,
)
from schedmesh.telemetry import metrics

log = logging.getLogger(__name__)

_TRANSIENT = (KafkaError, OSError, asyncio.TimeoutError, BusError)


def fetch_max_wait_ms() -> int:
    """How long the broker may hold a fetch that has no data. Tansu (the embedded broker)
    does not answer a waiting fetch when a record arrives, so a record waits up to this
    long to reach a consumer: aiokafka's 500 ms default would add ~250 ms per hop. Small
    values cost idle fetch requests; SCHEDMESH_FETCH_MAX_WAIT_MS tunes it (Apache Kafka
    answers at once when data arrives, so a larger value is free there)."""
    return int(os.environ.get("SCHEDMESH_FETCH_MAX_WAIT_MS", "10"))


def _tuned_ms(variable: str, default: int, floor: int) -> int:
    """Milliseconds from `variable` (else `default`), never below `floor`."""
    return max(floor, int(os.environ.get(variable, str(default))))


def watcher_fetch_max_wait_ms() -> int:
    """The fetch wait of consumers off the scheduling path (the kubelet agent, the controllers,
    the preemption service, the queue-manager's Events): a longer wait
    lets more records come in each fetch (SchedulingBasic, 5,000 nodes, 9,000 pods: the mesh's
    CPU 57.5 s with 10 ms, 54.1 s with 50 ms; Tansu's 10.6 s, 8.7 s). Records reach these
    consumers up to this much later.
    SCHEDMESH_WATCHER_FETCH_MAX_WAIT_MS tunes it (never below the scheduling path's wait)."""
    return _tuned_ms("SCHEDMESH_WATCHER_FETCH_MAX_WAIT_MS", 50, floor=fetch_max_wait_ms())


def idle_fetch_max_wait_ms(busy_ms: int) -> int:
    """The fetch wait of a consumer that does not doze (idle_poll_ms 0) once it has had no
    records for IDLE_AFTER_SECONDS. The first record after a quiet spell then waits up to this
    long per hop; the next fetches are quick again. SCHEDMESH_IDLE_FETCH_MAX_WAIT_MS tunes it
    (never below the busy value)."""
    return max(busy_ms, int(os.environ.get("SCHEDMESH_IDLE_FETCH_MAX_WAIT_MS", "100")))


def idle_poll_ms() -> int:
    """How often a dozing consumer asks the broker whether its partitions grew. A consumer
    with no records for IDLE_AFTER_SECONDS stops fetching (Tansu spends 1-3 ms of CPU on each
    fetch it holds, and answering the idle 5,000-node mesh's empty fetches took it 10 % of a
    core) and instead asks for its partitions' end offsets this often (one ListOffsets
    request, under 0.5 ms in Tansu). It fetches again at once when this process publishes to
    one of its topics or waits for offsets it has not read (EventConsumer.wake), else when the
    end offsets grow: a record from another process reaches a dozing consumer up to this much
    later.
    SCHEDMESH_IDLE_POLL_MS tunes it; 0 turns dozing off (idle consumers then fetch with
    idle_fetch_max_wait_ms waits, which suits Apache Kafka: it answers a waiting fetch as soon
    as a record arrives)."""
    return max(0, int(os.environ.get("SCHEDMESH_IDLE_POLL_MS", "1000")))


_default_idle_poll_ms = idle_poll_ms  # (EventConsumer's parameters of these names hide them)


def watcher_fetch_min_bytes() -> int:
    """How much a consumer off the scheduling path asks the broker to gather before answering a
    fetch (it answers after watcher_fetch_max_wait_ms with less). With 1, a watcher under load
    fetched again as soon as any record had arrived, a few records per fetch.
    SCHEDMESH_WATCHER_FETCH_MIN_BYTES tunes it."""
    return max(1, int(os.environ.get("SCHEDMESH_WATCHER_FETCH_MIN_BYTES", "1")))


def fetch_interval_ms() -> int:
    """The least time between two fetches of a consumer on the scheduling path (the queue-manager's
    cache and the binder's pause longer: watcher_fetch_interval_ms, binder_fetch_interval_ms),
    and the floor of every other pause.
    SCHEDMESH_FETCH_INTERVAL_MS tunes it (0: fetch again at once)."""
    return max(0, int(os.environ.get("SCHEDMESH_FETCH_INTERVAL_MS", "0")))


_default_fetch_interval_ms = fetch_interval_ms


def watcher_fetch_interval_ms() -> int:
    """fetch_interval_ms for consumers off the scheduling path (watcher_options) and for the
    queue-manager's cache: a record from another process reaches them up to this much later,
    unless they wait for it (ClusterCache.wait_for) or their own process wrote it (wake_readers).
    150 ms rather than 50: SchedulingBasic (5,000 nodes, 5,000 pods, three alternated pairs)
    733, 731, 843 -> 878, 970, 957 pods/s (the last pair against 300 ms), the mesh's CPU about a
    fifth lower per pod, the queue-manager's most (fewer, fuller record batches under its cache
    lock); `--rate 500` within noise. SCHEDMESH_WATCHER_FETCH_INTERVAL_MS tunes it."""
    return _tuned_ms("SCHEDMESH_WATCHER_FETCH_INTERVAL_MS", 150, floor=fetch_interval_ms())


def binder_fetch_interval_ms() -> int:
    """fetch_interval_ms of the binder's cache. No binding waits for it: a binding is decided on
    the ledger's own commitments and what it has read, and publishes a delta for a pod its caller
    read from the topic even before the ledger has; only a refusal waits for the caller's offsets
    (a hurried fetch). 150 ms rather than none: `--rate 500` (3,000 pods, three alternated pairs)
    392, 386, 400 -> 402, 398, 422 pods/s, p50 1.7, 1.9, 1.6 -> 1.3, 1.4, 0.8 s, the mesh's CPU
    4.2-4.4 -> 3.9-4.1 ms per pod (the binder's and the broker's fetches); all pods at once within
    noise. SCHEDMESH_BINDER_FETCH_INTERVAL_MS tunes it."""
    return _tuned_ms("SCHEDMESH_BINDER_FETCH_INTERVAL_MS", 150, floor=fetch_interval_ms())


def watcher_options() -> dict[str, Any]:
    """EventConsumer options of a consumer off the scheduling path (the kubelet agent, the
    controllers, the preemption service, the queue-manager's Events): longer fetch waits
    (watcher_fetch_max_wait_ms), fuller fetches (watcher_fetch_min_bytes), more time between
    fetches (watcher_fetch_interval_ms)."""
    return {"fetch_max_wait_ms": watcher_fetch_max_wait_ms(), "fetch_min_bytes": watcher_fetch_min_bytes(),
            "fetch_interval_ms": watcher_fetch_interval_ms()}


#: aiokafka's fetch loop wakes up at least this often (its consumer_timeout_ms, 0.2 s) though a
#: paused partition's resume, a seek and a new assignment each wake it: while dozing, a safety net.
_DOZING_FETCHER_TIMEOUT = 5.0


def _set_fetcher_timeout(consumer: AIOKafkaConsumer, seconds: float) -> None:
    """aiokafka's fetch loop reads this timeout on every turn."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is not None and hasattr(fetcher, "_fetcher_timeout"):
        fetcher._fetcher_timeout = seconds


#: A fetch that skips offsets is repeated from the hole (EventConsumer._close_gaps) until the hole
#: has stayed for this many fetches and this long.
GAP_RETRIES = 5
GAP_PATIENCE_SECONDS = 1.0


#: A hole is suspect only before a record written less than this long ago (by its timestamp).
GAP_FRESH_SECONDS = 30.0


def _fresh(record: ConsumerRecord) -> bool:
    return time.time() * 1000 - record.timestamp < GAP_FRESH_SECONDS * 1000


@dataclass
class _Gap:
    expected: int  # the first offset missing
    since: float  # when first seen (monotonic)
    retries: int


#: The started consumers of this process, woken when it publishes to one of their topics
#: (the lock: a process may run consumers on several event loops, e.g. the bench's watcher).
_LIVE: weakref.WeakSet[EventConsumer] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def wake_readers(topic: str) -> None:
    """Hurry this process's consumers of ``topic``: a record it just published is coming back
    to them, and is fetched at once, through a pause between fetches too (EventProducer.send
    calls this: a queue-manager's Apply reaches its paced cache without waiting the pause).
    A consumer not ``hurried_by_own_writes`` is only woken: it reads the record after its pause."""
    with _LIVE_LOCK:
        readers = [c for c in _LIVE if topic in c.topics]
    for consumer in readers:
        if consumer.hurried_by_own_writes:
            consumer.hurry()
        else:
            consumer.wake()


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

    Dozing (manual assignment only): after ``idle_after`` seconds (default IDLE_AFTER_SECONDS)
    without records and without a :meth:`wake`, the consumer pauses its partitions and asks
    for their end offsets every ``idle_poll_ms`` (default :func:`idle_poll_ms`; 0: never doze)
    instead of fetching; new end offsets or :meth:`wake` make it fetch again. While dozing it
    probes the broker every :func:`idle_probe_interval` seconds.

    Pacing (manual assignment only): after each fetch the consumer pauses its partitions for
    ``fetch_interval_ms`` (default :func:`fetch_interval_ms`), so that it holds no fetch at the
    broker meanwhile, and the next fetch gets what was written in one answer. :meth:`hurry`
    (someone waits for offsets this consumer has not read: ClusterCache.wait_for) ends the pause.
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
        idle_poll_ms: int | None = None,
        idle_after: float = IDLE_AFTER_SECONDS,
        fetch_interval_ms: int | None = None,
        hurried_by_own_writes: bool = True,
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
        # a consumer group must keep polling (max_poll_interval_ms): it never dozes
        poll_ms = _default_idle_poll_ms() if idle_poll_ms is None else idle_poll_ms
        self._idle_poll = poll_ms / 1000 if group_id is None else 0.0
        self._idle_after = idle_after
        # pacing: after a fetch, none for this long (see fetch_interval_ms) unless hurried
        interval_ms = _default_fetch_interval_ms() if fetch_interval_ms is None else fetch_interval_ms
        self._fetch_interval = interval_ms / 1000
        self._paced_until = 0.0
        # False: what this process publishes to these topics is read at this consumer's pace
        # (woken from a doze, the pause kept), for a reader that holds its own writes until
        # they come back (the binder's ledger); see wake_readers
        self.hurried_by_own_writes = hurried_by_own_writes
        # a single-partition topic's partition 0 -> the other partitions an earlier version wrote
        # (spreading the topic by key) and their end offsets (nothing writes them any more); held:
        # those partition 0s not yet resumed because those partitions are not read to their ends
        self._legacy: dict[TopicPartition, dict[TopicPartition, int]] = {}
        self._held: dict[TopicPartition, dict[TopicPartition, int]] = {}
        self._dozing = False
        self._awake_until = 0.0
        self._next_poll = 0.0
        self._nap: asyncio.Future[None] | None = None  # what a dozing reader awaits; resolved to wake it
        self._probe_soon = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watch = BrokerWatch(bootstrap_servers, client_id=f"{client_id}-watch")
        self._consumer: AIOKafkaConsumer | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._buffer: deque[Record] = deque()
        self._delivered: dict[TopicPartition, int] = {}
        # Manual assignment: the next offset each partition must hand out, and the hole a fetch
        # skipped over that is being fetched again (see _close_gaps)
        self._next_offset: dict[TopicPartition, int] = {}
        self._gaps: dict[TopicPartition, _Gap] = {}
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

    @property
    def dozing(self) -> bool:
        """Whether it has paused fetching until its partitions grow or it is woken."""
        return self._dozing

    async def start(self, timeout: float = 30.0) -> Self:
        self._open_timeout = timeout
        self._stopped = False
        self._loop = asyncio.get_running_loop()
        await self._watch.wait_until_up(timeout)
        await self._watch.ensure_topics(self._specs)
        await self._open(from_beginning=self._from_beginning)
        if self._probe_interval:
            self._monitor = asyncio.create_task(self._watch_broker(), name="schedmesh-consumer-watch")
        with _LIVE_LOCK:
            _LIVE.add(self)
        return self

    async def stop(self) -> None:
        self._stopped = True
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._end_nap()  # a reader dozing in getmany returns
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
            assignment = await self._manual_assignment(consumer, from_beginning)
            consumer.assign(assignment)
            if from_beginning:
                await consumer.seek_to_beginning(*assignment)
            else:
                await consumer.seek_to_end(*assignment)
            await self._track_positions(consumer, assignment)
            self._hold_legacy(consumer)
        except BaseException:
            await self._close(consumer)
            raise
        self._consumer = consumer
        self._dozing = False
        self._paced_until = 0.0
        self._awake_until = time.monotonic() + IDLE_AFTER_SECONDS

    async def _manual_assignment(self, consumer: AIOKafkaConsumer, from_beginning: bool) -> list[TopicPartition]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._open_timeout
        assignment: list[TopicPartition] = []
        self._legacy = {}
        for spec in self._specs:
            topic = spec.name
            while not (ids := await self._watch.partitions(topic)):
                if loop.time() > deadline:
                    raise BusError(f"topic {topic} has no partitions in the metadata")
                await asyncio.sleep(0.05)
            if spec.single_partition:
                # every record of it is in partition 0 (EventProducer.send); the others, which
                # exist only to match Tansu's auto-creation (topics.DEFAULT_PARTITIONS), stay empty
                # unless an earlier version wrote them (_legacy_partitions)
                legacy = await self._legacy_partitions(consumer, topic, ids) if from_beginning else {}
                if legacy:
                    self._legacy[TopicPartition(topic, 0)] = legacy
                ids = [p for p in ids if p == 0 or TopicPartition(topic, p) in legacy]
            assignment += [
                TopicPartition(topic, p)
                for p in ids
                if self._only_partitions is None or p in self._only_partitions
            ]
        if not assignment:
            raise BusError(f"no partitions to read for {self._topics} (partitions={self._only_partitions})")
        return assignment

    @staticmethod
    async def _legacy_partitions(consumer: AIOKafkaConsumer, topic: str, ids: list[int]) -> dict[TopicPartition, int]:
        """The partitions other than 0 of a single-partition topic that hold records, with their
        end offsets: a topic that an earlier version spread by key (on a broker that keeps its
        topics). They are read first, and partition 0 only after them, so that every object's
        older records come before its newer ones; nothing writes them any more."""
        others = [TopicPartition(topic, p) for p in ids if p != 0]
        if not others:
            return {}
        ends = await consumer.end_offsets(others)
        starts = await consumer.beginning_offsets(others)
        legacy = {tp: end for tp, end in ends.items() if end > starts.get(tp, 0)}
        if legacy:
            log.info("%s: reading %d record(s) an earlier version wrote to partitions %s before partition 0",
                     topic, sum(end - starts.get(tp, 0) for tp, end in legacy.items()),
                     sorted(tp.partition for tp in legacy))
        return legacy

    def _hold_legacy(self, consumer: AIOKafkaConsumer) -> None:
        """From the beginning: partition 0 of each topic with legacy partitions waits for them."""
        self._held = dict(self._legacy)
        if self._held:
            consumer.pause(*self._held)

    async def _release_held(self, consumer: AIOKafkaConsumer) -> None:
        """Resume each held partition 0 whose topic's other partitions are read to their ends."""
        for p0, legacy in list(self._held.items()):
            if all([await consumer.position(tp) >= end for tp, end in legacy.items()]):
                del self._held[p0]
                if not (self._dozing or self._paced_until):
                    consumer.resume(p0)

    def _resumable(self, consumer: AIOKafkaConsumer) -> list[TopicPartition]:
        return [tp for tp in consumer.assignment() if tp not in self._held]

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
        self.hurry()
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
                self.hurry()  # behind: no dozing off or pause before the end
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
        if consumer is None or self._down or self._restart_pending or self._stopped:  # (pending: recovery failed)
            await asyncio.sleep(min(timeout, self._poll_interval))
            return []
        if self._dozing and not await self._doze(consumer, timeout):
            return []
        if self._paced_until and not await self._wait_pace(consumer, timeout):
            return []
        if self._idle_poll:
            # about to doze off: one more fetch, not the caller's whole timeout of fetches
            last_call = max(0.0, self._awake_until - time.monotonic()) + 2 * self._busy_wait_ms / 1000
            timeout = min(timeout, last_call)
        try:
            batches = await consumer.getmany(timeout_ms=int(timeout * 1000), max_records=max_records)
        except ConsumerStoppedError:  # stop() was called while we were waiting
            return []
        except _TRANSIENT as exc:
            log.debug("fetch failed: %r", exc)
            await asyncio.sleep(self._poll_interval)
            return []
        epoch = self._restart_count
        if self._group_id is None:
            batches = self._close_gaps(consumer, batches)
        out = [self._to_record(m, epoch) for msgs in batches.values() for m in msgs]
        if self._held:
            await self._release_held(consumer)
        self._pace(consumer, bool(out))
        return out

    # ------------------------------------------------------------------ holes in a fetch
    async def _track_positions(self, consumer: AIOKafkaConsumer, assignment: Iterable[TopicPartition]) -> None:
        """Start tracking where each partition must go on (after an open or a seek)."""
        self._gaps.clear()
        for tp in assignment:
            self._next_offset[tp] = await consumer.position(tp)

    def _close_gaps(self, consumer: AIOKafkaConsumer, batches: dict[TopicPartition, list]) -> dict[TopicPartition, list]:
        """A partition's offsets have no holes here (no compaction, no transactions), yet Tansu
        sometimes answers a fetch without a record that writers to the same partition were
        committing at that moment: a stress test (three producers, 30 s) saw a consumer get
        offset 130 then 132, though 131 was in the log. Silently skipped, such a record is
        lost for good (a binding a cache never sees). So a fetch that skips offsets is cut at
        the hole and the partition fetched again from it; a hole that stays after
        GAP_RETRIES fetches over GAP_PATIENCE_SECONDS is real and is skipped, with a warning.
        Only a hole before a fresh record (_fresh) is suspect: such a race happens at the head of
        the log, while Apache Kafka's compaction (of a topic an earlier version created compacted) leaves
        holes only among records older than that, which a replay takes as they are."""
        out: dict[TopicPartition, list] = {}
        for tp, msgs in batches.items():
            expected = self._next_offset.get(tp)
            keep = msgs
            if expected is not None:
                for i, m in enumerate(msgs):
                    if m.offset > expected and _fresh(m) and not self._hole_is_real(tp, expected, m.offset):
                        keep = msgs[:i]
                        consumer.seek(tp, expected)
                        break
                    expected = m.offset + 1
            if keep:
                self._next_offset[tp] = keep[-1].offset + 1
                out[tp] = keep
                gap = self._gaps.get(tp)
                if gap is not None and self._next_offset[tp] > gap.expected:
                    del self._gaps[tp]  # the hole was filled
        return out

    def _hole_is_real(self, tp: TopicPartition, expected: int, found: int) -> bool:
        gap = self._gaps.get(tp)
        now = time.monotonic()
        if gap is None or gap.expected != expected:
            self._gaps[tp] = _Gap(expected, now, 1)
            metrics.observe_fetch_gap(tp.topic)
            log.info("fetch of %s skipped offsets %d-%d; fetching them again", tp, expected, found - 1)
            return False
        gap.retries += 1
        if gap.retries <= GAP_RETRIES or now - gap.since < GAP_PATIENCE_SECONDS:
            return False
        del self._gaps[tp]
        log.warning("offsets %d-%d of %s are not in the log after %d fetches; going on from %d",
                    expected, found - 1, tp, gap.retries, found)
        return True

    # ------------------------------------------------------------------ dozing
    def wake(self) -> None:
        """Fetch now and for the next IDLE_AFTER_SECONDS: records are on their way (this
        process published them, or someone waits for offsets this consumer has not read).
        Thread-safe; cheap when awake."""
        self._on_loop(self._wake_now)

    def hurry(self) -> None:
        """Fetch now: like :meth:`wake`, and ends the pause after the last fetch (pacing).
        Thread-safe."""
        self._on_loop(self._hurry_now)

    def _on_loop(self, action: Callable[[], None]) -> None:
        """Run ``action`` now on this consumer's loop, or soon from another thread."""
        loop = self._loop
        if loop is None:
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            action()
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to do
            loop.call_soon_threadsafe(action)

    def _hurry_now(self) -> None:
        self._end_pace(self._consumer)
        self._wake_now()

    def _wake_now(self) -> None:
        self._awake_until = max(self._awake_until, time.monotonic() + IDLE_AFTER_SECONDS)
        self._resume()

    def _resume(self) -> None:
        if self._dozing:
            self._dozing = False
            self._paced_until = 0.0  # every partition resumes here
            consumer = self._consumer
            if consumer is not None:
                consumer.resume(*self._resumable(consumer))
                _set_fetcher_timeout(consumer, self._options.get("consumer_timeout_ms", 200) / 1000)
            self._probe_soon.set()  # a broker restart while dozing is noticed before the records are needed
        self._end_nap()

    async def _take_nap(self, seconds: float) -> None:
        """Wait ``seconds`` or until _end_nap (wake, hurry, stop). A future and a timer: the
        cheapest wait asyncio has (wait_for on an Event makes a task)."""
        loop = asyncio.get_running_loop()
        self._nap = nap = loop.create_future()
        timer = loop.call_later(seconds, self._end_nap)
        try:
            await nap
        finally:
            timer.cancel()
            self._nap = None

    def _end_nap(self) -> None:
        if self._nap is not None and not self._nap.done():
            self._nap.set_result(None)

    def _pace(self, consumer: AIOKafkaConsumer, got_records: bool) -> None:
        """After a fetch: records keep the consumer awake for ``idle_after`` seconds; then it
        dozes (or, with dozing off, fetches with longer waits)."""
        now = time.monotonic()
        if got_records:
            self._last_records = now
            self._awake_until = max(self._awake_until, now + self._idle_after)
        if not self._idle_poll:
            self._adapt_fetch_wait(consumer, now)
        elif not got_records and now >= self._awake_until and consumer.assignment():
            consumer.pause(*consumer.assignment())
            _set_fetcher_timeout(consumer, _DOZING_FETCHER_TIMEOUT)
            self._dozing = True
            self._next_poll = now + self._idle_poll
            return
        if self._fetch_interval and self._group_id is None and consumer.assignment():
            consumer.pause(*consumer.assignment())
            self._paced_until = now + self._fetch_interval

    async def _wait_pace(self, consumer: AIOKafkaConsumer, timeout: float) -> bool:
        """Until the pause after the last fetch ends (or :meth:`hurry`); True when it may fetch,
        False when ``timeout`` ended first."""
        wait = min(self._paced_until - time.monotonic(), timeout)
        if wait > 0:
            await self._take_nap(wait)
        if consumer is not self._consumer or self._stopped:
            return False
        if self._paced_until and time.monotonic() < self._paced_until:
            return False  # the caller's timeout, or a wake() that does not hurry: still paced
        self._end_pace(consumer)
        return True

    def _end_pace(self, consumer: AIOKafkaConsumer | None) -> None:
        if self._paced_until:
            self._paced_until = 0.0
            if consumer is not None and not self._dozing:
                consumer.resume(*self._resumable(consumer))

    async def _doze(self, consumer: AIOKafkaConsumer, timeout: float) -> bool:
        """While dozing, wait until woken, the end offsets grow or ``timeout`` ends; True
        once awake (then fetch)."""
        deadline = time.monotonic() + timeout
        while self._dozing and consumer is self._consumer and not (self._stopped or self._restart_pending):
            now = time.monotonic()
            if now >= self._next_poll:
                self._next_poll = now + self._idle_poll
                if await self._has_unread(consumer):
                    self._resume()
                continue
            if now >= deadline:
                return False
            await self._take_nap(min(self._next_poll, deadline) - now)
        return not self._dozing and consumer is self._consumer and not self._stopped

    async def _has_unread(self, consumer: AIOKafkaConsumer) -> bool:
        """Whether an assigned partition ends after the consumer's position (one ListOffsets)."""
        try:
            ends = await consumer.end_offsets(list(consumer.assignment()))
            behind = await asyncio.wait_for(self._behind(consumer, ends), 1.0)
        except _TRANSIENT as exc:  # the probe tells whether the broker went away
            log.debug("end offsets while dozing: %r", exc)
            return False
        return behind is None or bool(behind)  # None: the assignment changed; look by fetching

    def _adapt_fetch_wait(self, consumer: AIOKafkaConsumer, now: float) -> None:
        """Short fetch waits while records flow, longer ones once quiet (idle_fetch_max_wait_ms).
        aiokafka reads its fetcher's wait for every fetch request it builds."""
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
        await self._track_positions(self._consumer, assignment)
        self._hold_legacy(self._consumer)  # an earlier version's partitions come first again
        self.hurry()

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
            interval = max(self._probe_interval, idle_probe_interval()) if self._dozing else self._probe_interval
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._probe_soon.wait(), interval)
            self._probe_soon.clear()
            recoveries_before = self._recoveries
            state = await self._watch.probe(self._topics)
            self._down = state is BrokerState.DOWN
            if state is BrokerState.RESTARTED:
                self._restart_pending = True
            elif state is BrokerState.TOPICS_MISSING and self._recoveries == recoveries_before:
                # (if the reader began a recovery meanwhile, it re-creates the topics
                # after this probe listed them: the answer is stale)
                self._restart_pending = True
            if self._restart_pending:
                self._end_nap()  # a dozing reader recovers now
