"""Broker identity watch and topic creation, shared by the producer and the consumer.

A memory-only broker (the embedded Tansu) forgets every topic, offset and group when it
restarts, and aiokafka clients reconnect to it without noticing. :class:`BrokerWatch`
notices: it polls ``list_topics()`` and ``describe_cluster()`` (two Metadata requests)
and reports

* ``DOWN`` while the broker does not answer,
* ``RESTARTED`` when the cluster id changed (EmbeddedBroker uses a fresh id per start),
* ``TOPICS_MISSING`` when one of the topics we rely on is gone while the id is the same
  (a restarted memory broker with a fixed id, or someone deleted the topic),
* ``UP`` otherwise.

On a real Kafka the cluster id is persistent, so a broker restart that keeps its data
is (correctly) not reported as RESTARTED.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from schedmesh.bus.topics import TopicSpec, spec_for
from schedmesh.security.credentials import kafka_client_options

log = logging.getLogger(__name__)

#: ``on_restart`` callbacks may be plain functions or coroutine functions.
RestartCallback = Callable[[], Awaitable[None] | None]

_TOPIC_ALREADY_EXISTS = 36

#: Seconds without records (a consumer) or sends (a producer) after which a bus client is idle.
IDLE_AFTER_SECONDS = 2.0


def idle_probe_interval() -> float:
    """Seconds between the broker probes of an idle bus client (a dozing consumer, a producer
    that has sent nothing for IDLE_AFTER_SECONDS): at the 0.5 s of a busy one, the probes of an
    idle mesh's eleven clients were about 3 % of a core in the services and 1 % in Tansu. A
    client probes soon after it becomes busy again (one probe interval after its first send, at
    once on its wake-up), so a
    broker that restarted meanwhile is noticed before its records are needed; a restart of an
    idle mesh is noticed up to this much later. SCHEDMESH_IDLE_PROBE_SECONDS tunes it (never
    below the client's own probe interval)."""
    return float(os.environ.get("SCHEDMESH_IDLE_PROBE_SECONDS", "5"))


class BusError(RuntimeError):
    """The event bus could not reach the broker or set up its topics in time."""


class BrokerState(enum.Enum):
    UP = "up"
    DOWN = "down"
    RESTARTED = "restarted"
    TOPICS_MISSING = "topics-missing"


def raise_if_cancelling() -> None:
    """Re-raise a cancellation that was swallowed on the way.

    On Python 3.11 ``asyncio.wait_for`` (used here and inside aiokafka) returns the
    result instead of raising when its inner future finishes at the moment the task is
    cancelled; the task then keeps looping. The unbounded loops of the bus (the probe
    tasks and the consumer's iterator) call this so ``task.cancel()`` always ends them.
    Bounded loops (sends, start-up, catch_up) do not, so cleanup code of a cancelled
    task can still use them.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(task: asyncio.Task[Any] | None, timeout: float = 5.0) -> None:
    """Cancel ``task`` and wait (bounded) until it has finished."""
    if task is None or task.done():
        return
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        log.warning("task %s did not stop within %.1fs", task.get_name(), timeout)
        return
    if not task.cancelled() and task.exception() is not None:
        log.warning("task %s ended with %r", task.get_name(), task.exception())


async def call_restart_callback(callback: RestartCallback | None, who: str) -> None:
    """Run an ``on_restart`` callback; its failures are logged, never propagated."""
    if callback is None:
        return
    try:
        result = callback()
        if inspect.isawaitable(result):
            await result
    except Exception:  # noqa: BLE001 - a faulty callback must not kill the bus
        log.exception("%s: on_restart callback failed", who)


class BrokerWatch:
    """Owns one admin client; tells whether the broker is up, down or a new one."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "schedmesh-watch",
        request_timeout: float = 3.0,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._client_id = client_id
        self._timeout = request_timeout
        self._admin: AIOKafkaAdminClient | None = None
        self._cluster_id: str | None = None

    @property
    def cluster_id(self) -> str | None:
        return self._cluster_id

    async def _client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self._bootstrap,
                client_id=self._client_id,
                request_timeout_ms=int(self._timeout * 1000),
                **kafka_client_options(),  # SSL when SCHEDMESH_KAFKA_TLS=1
            )
            await asyncio.wait_for(admin.start(), self._timeout)
            self._admin = admin
        return self._admin

    async def _drop_client(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                await asyncio.wait_for(admin.close(), self._timeout)
            except (TimeoutError, KafkaError, OSError):
                pass

    async def wait_until_up(self, timeout: float) -> str:
        """Wait for the broker to answer; returns (and remembers) its cluster id."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last: BaseException | None = None
        while True:
            try:
                admin = await self._client()
                cluster = await asyncio.wait_for(admin.describe_cluster(), self._timeout)
                self._cluster_id = cluster.get("cluster_id")
                return self._cluster_id or ""
            except (TimeoutError, KafkaError, OSError) as exc:
                last = exc
                await self._drop_client()
            if loop.time() >= deadline:
                raise BusError(f"broker {self._bootstrap} unreachable: {last!r}")
            await asyncio.sleep(0.1)

    async def probe(self, expect_topics: Collection[str] = ()) -> BrokerState:
        """One check of the broker's identity (and that ``expect_topics`` exist)."""
        try:
            admin = await self._client()
            # One metadata request answers both: the broker's identity and its topics (the
            # admin client's list_topics and describe_cluster each send that same request, and
            # the probes of every client of every process were a tenth of the broker's requests
            # at a steady rate). Both from one answer, a restart cannot fall between them. (The
            # admin client's own method for that request, which both of those call, is private.)
            metadata = await asyncio.wait_for(admin._get_cluster_metadata(), self._timeout)
            answer = metadata.to_object()
        except (TimeoutError, KafkaError, OSError) as exc:
            log.debug("probe of %s failed: %r", self._bootstrap, exc)
            await self._drop_client()
            return BrokerState.DOWN
        cluster_id = answer.get("cluster_id")
        topics = {t["topic"] for t in answer.get("topics", ())}
        previous, self._cluster_id = self._cluster_id, cluster_id
        if previous is not None and cluster_id != previous:
            log.warning(
                "broker %s restarted (cluster id %s -> %s)", self._bootstrap, previous, cluster_id
            )
            return BrokerState.RESTARTED
        missing = [t for t in expect_topics if t not in topics]
        if missing:
            log.warning("broker %s lost topics %s", self._bootstrap, missing)
            return BrokerState.TOPICS_MISSING
        return BrokerState.UP

    async def ensure_topics(self, topics: Iterable[str | TopicSpec]) -> list[str]:
        """Create the topics that do not exist yet; returns the names created."""
        specs = [spec_for(t) for t in topics]
        if not specs:
            return []
        admin = await self._client()
        request = [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=s.replication_factor,
                topic_configs=dict(s.configs),
            )
            for s in specs
        ]
        response = await asyncio.wait_for(admin.create_topics(request), self._timeout * 2)
        created: list[str] = []
        existing: list[str] = []
        for entry in response.topic_errors:
            name, code = entry[0], entry[1]
            if code == 0:
                created.append(name)
            elif code == _TOPIC_ALREADY_EXISTS:
                existing.append(name)
            else:
                message = entry[2] if len(entry) > 2 else ""
                raise BusError(f"creating topic {name} failed: error {code} {message}")
        if created:
            log.info("created topics %s", created)
        if existing:
            await self._check_partition_counts({s.name: s for s in specs}, existing)
            await self._check_cleanup_policies({s.name: s for s in specs}, existing)
        return created

    async def _check_cleanup_policies(self, specs: dict[str, TopicSpec], names: list[str]) -> None:
        """A topic created compacted by an earlier version (the state topics were) is switched to
        its spec's policy: compacting batch and delta records loses objects (see bus.topics). A
        broker that cannot alter configs gets a warning naming the command that does."""
        wanted = {n: specs[n] for n in names if n in specs and "cleanup.policy" in specs[n].configs}
        if not wanted:
            return
        admin = await self._client()
        try:
            described = await asyncio.wait_for(admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, n) for n in wanted]),
                self._timeout)
        except (TimeoutError, KafkaError, OSError) as exc:
            log.debug("describe_configs %s failed: %r", list(wanted), exc)
            return
        wrong = []
        for response in described:
            for _err, _msg, _type, name, entries in (r[:5] for r in response.resources):
                for entry in entries:
                    if (entry[0] == "cleanup.policy" and name in wanted
                            and entry[1] != wanted[name].configs["cleanup.policy"]):
                        wrong.append(name)
        if not wrong:
            return
        try:
            await asyncio.wait_for(admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, n, configs=dict(wanted[n].configs)) for n in wrong]),
                self._timeout)
            log.warning("topics %s had another cleanup policy; set to %s", wrong,
                        {n: wanted[n].configs for n in wrong})
        except (TimeoutError, KafkaError, OSError) as exc:
            log.warning("topics %s have another cleanup policy than %s and it cannot be changed here (%r): "
                        "compaction can lose applied objects; set it with kafka-configs.sh --alter "
                        "--entity-type topics --entity-name <topic> --add-config cleanup.policy=delete,"
                        "retention.ms=-1,retention.bytes=-1", wrong,
                        {n: wanted[n].configs["cleanup.policy"] for n in wrong}, exc)

    async def _check_partition_counts(self, specs: dict[str, TopicSpec], names: list[str]) -> None:
        admin = await self._client()
        try:
            described = await asyncio.wait_for(admin.describe_topics(names), self._timeout)
        except (TimeoutError, KafkaError, OSError) as exc:
            log.debug("describe_topics %s failed: %r", names, exc)
            return
        for entry in described:
            spec = specs.get(entry.get("topic", ""))
            count = len(entry.get("partitions", []))
            if spec is not None and count and count != spec.partitions:
                log.warning(
                    "topic %s exists with %d partitions, spec wants %d "
                    "(auto-created by a client, e.g. after a broker restart?)",
                    spec.name,
                    count,
                    spec.partitions,
                )

    async def partitions(self, topic: str) -> list[int]:
        """Partition ids of ``topic`` from a fresh Metadata request."""
        admin = await self._client()
        described = await asyncio.wait_for(admin.describe_topics([topic]), self._timeout)
        for entry in described:
            if entry.get("topic") == topic and entry.get("error_code", 0) == 0:
                return sorted(p["partition"] for p in entry.get("partitions", []))
        return []

    async def close(self) -> None:
        await self._drop_client()
