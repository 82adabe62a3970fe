"""Kafka topics of the schedmesh event bus.

Every topic is keyed by the identity of the object it is about, so all records for one
object land in one partition, in order. Values are protobuf messages from
``protos/schedmesh/v1/events.proto`` (encoded by the callers; the bus moves bytes).
Replaying a topic from the beginning rebuilds a cache (the informer pattern). The state
topics are not compacted: their records are batches (one per Apply, per BindBatch, per
agent tick, keyed ``batch/<writer>``) and deltas keyed like the whole object (a binding,
a node's conditions), so keeping only the last record per key would drop the objects
they build on. They are kept in full (``retention.ms=-1``). Leases are compacted: an
agent's last heartbeat batch, keyed by the agent, is all a reader needs.

| topic                     | key            | value (events.proto)      | written by                              |
|---------------------------|----------------|---------------------------|-----------------------------------------|
| schedmesh.namespaces      | name           | NamespaceRecord           | queue-manager (apply)                   |
| schedmesh.priorityclasses | name           | PriorityClassRecord       | queue-manager (apply)                   |
| schedmesh.pdbs            | namespace/name | PodDisruptionBudgetRecord | queue-manager (apply), and the          |
|                           | (workload/...) | (pdb, or a workload's     | disruption controller (status)          |
|                           |                | controller selector, a    |                                         |
|                           |                | DaemonSet, a LimitRange)  |                                         |
| schedmesh.nodes           | node name      | NodeRecord                | kubelet agents, queue-manager (apply)   |
| schedmesh.leases          | node name      | NodeRecord (heartbeat)    | kubelet agents, every 10 s              |
| schedmesh.pods            | pod uid        | PodRecord                 | queue-manager (submit, delete request,  |
|                           |                |                           | status), binder (bound), agents (phase, |
|                           |                |                           | terminated tombstone)                   |
| schedmesh.events          | pod uid        | Event                     | queue-manager, binder, agents           |

Heartbeats have their own topic so that a heartbeat never invalidates the node caches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PODS = "schedmesh.pods"
NODES = "schedmesh.nodes"
LEASES = "schedmesh.leases"
PRIORITY_CLASSES = "schedmesh.priorityclasses"
PDBS = "schedmesh.pdbs"
NAMESPACES = "schedmesh.namespaces"
EVENTS = "schedmesh.events"
#: The topics whose replay rebuilds the cluster (ClusterCache), cluster-scoped first.
STATE_TOPICS: tuple[str, ...] = (NAMESPACES, PRIORITY_CLASSES, PDBS, NODES, PODS)

#: Partitions of every bus topic: the unit of scale-out for consumer groups (e.g.
#: queue-managers owning pod partitions). It is deliberately Tansu's auto-create default
#: (4): after the embedded broker restarts, aiokafka clients re-request metadata for the
#: topics they know before anyone can re-create them, and Tansu then auto-creates them
#: with 4 partitions (aiokafka always allows auto-creation; Tansu has no switch). With
#: the same count here, such a topic is indistinguishable from one we created.
#: Tansu cannot add partitions later.
DEFAULT_PARTITIONS = 4


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """How a topic is created (``ensure_topics``)."""

    name: str
    partitions: int = DEFAULT_PARTITIONS
    replication_factor: int = 1
    configs: dict[str, str] = field(default_factory=dict)
    # Every record goes to partition 0, so every consumer sees one total order. Nodes: kube's
    # node tree order is the order nodes were added, and replicas that must walk the same
    # order (sampling across shards) need the same add order. Pods: batches of bindings and
    # status deltas from different writers apply after the pod's own record. The other topics:
    # a reader's fetch then names one partition of each, not four (each partition in a fetch
    # costs the broker and aiokafka's pure-Python decoding, every fetch of every reader).
    # Partitions an earlier version wrote by key are read first (EventConsumer). Every topic of
    # the catalogue is single-partition; other names (tests, tools) are spread by key.
    single_partition: bool = False


_COMPACT = {"cleanup.policy": "compact"}
#: The state topics' log kept whole and forever (see the module's docstring: compaction would lose
#: objects).
KEEP_ALL = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}

TOPIC_SPECS: dict[str, TopicSpec] = {
    spec.name: spec
    for spec in (
        *(TopicSpec(t, DEFAULT_PARTITIONS, configs=dict(KEEP_ALL), single_partition=True) for t in STATE_TOPICS),
        TopicSpec(LEASES, DEFAULT_PARTITIONS, configs=dict(_COMPACT), single_partition=True),
        TopicSpec(EVENTS, DEFAULT_PARTITIONS, single_partition=True),
    )
}

ALL_TOPICS: tuple[str, ...] = tuple(TOPIC_SPECS)


def spec_for(topic: str | TopicSpec) -> TopicSpec:
    """The catalogue spec of ``topic`` (``DEFAULT_PARTITIONS`` for unknown names)."""
    if isinstance(topic, TopicSpec):
        return topic
    return TOPIC_SPECS.get(topic) or TopicSpec(topic, DEFAULT_PARTITIONS)
