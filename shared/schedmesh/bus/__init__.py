"""The schedmesh event bus: Kafka topics as the watch stream of every object.

* :mod:`schedmesh.bus.topics` - topic names, keys and record types; ``TopicSpec``.
* :class:`EventProducer` - async producer; trace context into record headers; topics
  created idempotently; survives broker restarts (``on_restart`` to re-publish).
* :class:`EventConsumer` - async iterator of :class:`Record`; replays from the beginning
  (informer pattern, :meth:`EventConsumer.catch_up`) then follows; trace context from
  the headers in ``Record.context``; survives broker restarts.

Values are bytes: protobuf encoding/decoding is the caller's job.
"""

from schedmesh.bus.consumer import EventConsumer, watcher_fetch_max_wait_ms, watcher_options
from schedmesh.bus.producer import EventProducer
from schedmesh.bus.records import Record, Sent
from schedmesh.bus.topics import (
    ALL_TOPICS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    PRIORITY_CLASSES,
    STATE_TOPICS,
    TOPIC_SPECS,
    TopicSpec,
    spec_for,
)
from schedmesh.bus.watch import BrokerState, BrokerWatch, BusError, RestartCallback

__all__ = [
    "watcher_fetch_max_wait_ms",
    "watcher_options",
    "ALL_TOPICS",
    "EVENTS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PDBS",
    "PODS",
    "PRIORITY_CLASSES",
    "STATE_TOPICS",
    "TOPIC_SPECS",
    "BrokerState",
    "BrokerWatch",
    "BusError",
    "EventConsumer",
    "EventProducer",
    "Record",
    "RestartCallback",
    "Sent",
    "TopicSpec",
    "spec_for",
]
