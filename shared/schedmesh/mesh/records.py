"""Encoding objects as event records (protos/schedmesh/v1/events.proto) and publishing them.

Per-pod work on the hot path travels in batches: as few Kafka records per Apply, per BindBatch,
per agent tick as BATCH_RECORD_BYTES allows (PodRecord.batch, Event.batch, NodeRecord.batch),
and bindings and status reports as deltas (PodRecord.update) rather than whole pods. Readers
flatten a record with `expand` and apply deltas with `apply_update`.
"""
from __future__ import annotations

import dataclasses
from operator import attrgetter
from typing import Callable, Iterable, Optional, Sequence, TypeVar

from schedmesh.api import convert
from schedmesh.api.evolve import evolve
from schedmesh.api.load import Manifests
from schedmesh.api.types import (DaemonSet, LimitRange, Namespace, Node, NodeCondition, Pod, PodCondition,
                                 PodDisruptionBudget, PriorityClass, RuntimeClass, Taint, WorkloadSelector)
from schedmesh.bus.topics import (EVENTS as TOPIC_EVENTS, NAMESPACES as TOPIC_NAMESPACES, NODES as TOPIC_NODES,
                                  PDBS as TOPIC_PDBS, PODS as TOPIC_PODS, PRIORITY_CLASSES as TOPIC_PRIORITY_CLASSES)
from schedmesh.v1 import events_pb2
from schedmesh.v1 import objects_pb2 as pb


def node_record(node: Node, deleted: bool = False, source: str = "") -> tuple[str, str, bytes]:
    return TOPIC_NODES, node.name, events_pb2.NodeRecord(node=convert.node_to_proto(node), deleted=deleted,
                                                         source=source).SerializeToString()


#: A batch record's encoded size at most: well under the 1 MB a record may have by default (Apache
#: Kafka's message.max.bytes, aiokafka's max_request_size). One record per Apply failed outright
#: for a Deployment of 6,000 replicas (3.4 MB).
BATCH_RECORD_BYTES = 256 * 1024

#: A record's encoded size at most (aiokafka's max_request_size, 1 MiB, less a request's overhead).
MAX_RECORD_BYTES = 1_000_000

#: The key of a batch record of pods or nodes: this prefix and its publisher.
BATCH_KEY_PREFIX = "batch/"


def describe(topic: str, value: bytes) -> tuple[str, int]:
    """What a record carries ("pod default/web-0", "node n1", else the topic) and its size."""
    if topic == TOPIC_PODS:
        items = expand(events_pb2.PodRecord.FromString(value))
        what = ", ".join(f"pod {i.pod.metadata.namespace}/{i.pod.metadata.name}" for i in items[:3])
    elif topic == TOPIC_NODES:
        items = expand(events_pb2.NodeRecord.FromString(value))
        what = ", ".join(f"node {i.node.metadata.name}" for i in items[:3])
    else:
        return topic, len(value)
    return what + (f" and {len(items) - 3} more" if len(items) > 3 else ""), len(value)


Msg = TypeVar("Msg", events_pb2.PodRecord, events_pb2.Event, events_pb2.NodeRecord)


def in_batches(items: Iterable[Msg], wrap: Callable[[list[Msg]], tuple[str, str, bytes]],
               limit: int = BATCH_RECORD_BYTES) -> list[tuple[str, str, bytes]]:
    """`wrap` applied to consecutive runs of `items`, in order, each run's items together under
    `limit` bytes (an item larger than that alone in its run)."""
    out: list[tuple[str, str, bytes]] = []
    run: list[Msg] = []
    size = 0
    for item in items:
        item_size = item.ByteSize() + 8  # the batch field's tag and length
        if run and size + item_size > limit:
            out.append(wrap(run))
            run, size = [], 0
        run.append(item)
        size += item_size
    if run:
        out.append(wrap(run))
    return out


def node_batch_records(nodes: Iterable[Node], source: str = "") -> list[tuple[str, str, bytes]]:
    """Whole nodes, many per record (NodeRecord.batch): a reader applies them in one pass instead
    of one record each (an agent registering 5,000 applied nodes one record at a time kept every
    cache rebuilding its node columns)."""
    def wrap(run: list[events_pb2.NodeRecord]) -> tuple[str, str, bytes]:
        return TOPIC_NODES, f"{BATCH_KEY_PREFIX}{source}", events_pb2.NodeRecord(batch=run, source=source).SerializeToString()
    return in_batches((events_pb2.NodeRecord(node=convert.node_to_proto(n), source=source) for n in nodes), wrap)


def pod_record(pod: Pod, deleted: bool = False, source: str = "") -> tuple[str, str, bytes]:
    return TOPIC_PODS, pod.uid, events_pb2.PodRecord(pod=convert.pod_to_proto(pod), deleted=deleted,
                                                     source=source).SerializeToString()


def priority_class_record(pc: PriorityClass, deleted: bool = False) -> tuple[str, str, bytes]:
    return TOPIC_PRIORITY_CLASSES, pc.name, events_pb2.PriorityClassRecord(
        priority_class=convert.priority_class_to_proto(pc), deleted=deleted).SerializeToString()


RUNTIME_CLASS_KEY_PREFIX = "runtimeclass/"


def runtime_class_record(rc: RuntimeClass, deleted: bool = False) -> tuple[str, str, bytes]:
    """A RuntimeClass rides on the priority classes' topic (see PriorityClassRecord.runtime_class)."""
    return TOPIC_PRIORITY_CLASSES, RUNTIME_CLASS_KEY_PREFIX + rc.name, events_pb2.PriorityClassRecord(
        runtime_class=convert.runtime_class_to_proto(rc), deleted=deleted).SerializeToString()


def pdb_record(pdb: PodDisruptionBudget, deleted: bool = False) -> tuple[str, str, bytes]:
    return TOPIC_PDBS, f"{pdb.namespace}/{pdb.name}", events_pb2.PodDisruptionBudgetRecord(
        pdb=convert.pdb_to_proto(pdb), deleted=deleted).SerializeToString()


def pdb_status_record(pdb: PodDisruptionBudget) -> tuple[str, str, bytes]:
    """The disruption controller's status write for a PDB (applied only to a known PDB)."""
    return TOPIC_PDBS, f"{pdb.namespace}/{pdb.name}", events_pb2.PodDisruptionBudgetRecord(
        pdb=convert.pdb_to_proto(pdb), status_only=True).SerializeToString()


def _riding_pdbs(key: str, deleted: bool, **obj) -> tuple[str, str, bytes]:
    """An object that rides the PDBs' topic under its own key prefix (see events.proto)."""
    return TOPIC_PDBS, key, events_pb2.PodDisruptionBudgetRecord(deleted=deleted, **obj).SerializeToString()


WORKLOAD_KEY_PREFIX = "workload/"


def workload_key(w: WorkloadSelector) -> str:
    return f"{WORKLOAD_KEY_PREFIX}{w.kind}/{w.namespace}/{w.name}"


def workload_record(w: WorkloadSelector, deleted: bool = False) -> tuple[str, str, bytes]:
    """A pod controller's selector, on the PDBs' topic (see events.proto)."""
    return _riding_pdbs(workload_key(w), deleted, workload=convert.workload_to_proto(w))


DAEMON_SET_KEY_PREFIX = "daemonset/"


def daemon_set_key(ds: DaemonSet) -> str:
    return f"{DAEMON_SET_KEY_PREFIX}{ds.namespace}/{ds.name}"


def daemon_set_record(ds: DaemonSet, deleted: bool = False) -> tuple[str, str, bytes]:
    """An apps/v1 DaemonSet, on the PDBs' topic (see events.proto)."""
    return _riding_pdbs(daemon_set_key(ds), deleted, daemon_set=convert.daemon_set_to_proto(ds))


LIMIT_RANGE_KEY_PREFIX = "limitrange/"


def limit_range_key(r: LimitRange) -> str:
    return f"{LIMIT_RANGE_KEY_PREFIX}{r.namespace}/{r.name}"


def limit_range_record(r: LimitRange, deleted: bool = False) -> tuple[str, str, bytes]:
    """A v1 LimitRange, on the PDBs' topic (see events.proto)."""
    return _riding_pdbs(limit_range_key(r), deleted, limit_range=convert.limit_range_to_proto(r))


def namespace_record(ns: Namespace, deleted: bool = False) -> tuple[str, str, bytes]:
    return TOPIC_NAMESPACES, ns.name, events_pb2.NamespaceRecord(
        namespace=convert.namespace_to_proto(ns), deleted=deleted).SerializeToString()


def manifest_records(m: Manifests, source: str = "",
                     updated_pods: frozenset[str] = frozenset()) -> list[tuple[str, str, bytes]]:
    """Records for everything in a manifest set, cluster-scoped objects first; the nodes and the
    pods in batch records; the pods whose uids are in `updated_pods` as spec updates."""
    out = [namespace_record(n) for n in m.namespaces]
    out += [priority_class_record(c) for c in m.priority_classes]
    out += [runtime_class_record(c) for c in m.runtime_classes]
    out += [pdb_record(p) for p in m.pdbs]
    out += [workload_record(w) for w in m.workloads]
    out += [daemon_set_record(d) for d in m.daemon_sets]
    out += [limit_range_record(r) for r in m.limit_ranges]
    out += node_batch_records(m.nodes, source=source)
    messages = PodMessages()
    out += pod_batch_records((messages.message(p, source=source, spec_update=p.uid in updated_pods) for p in m.pods),
                             source)
    return out


# ---- batches and deltas ---------------------------------------------------------------------


def expand(msg: Msg) -> Sequence[Msg]:
    """The records a (possibly batch) record carries, in order."""
    return msg.batch if len(msg.batch) else (msg,)


def pod_message(pod: Pod, deleted: bool = False, source: str = "", spec_update: bool = False) -> events_pb2.PodRecord:
    return events_pb2.PodRecord(pod=convert.pod_to_proto(pod), deleted=deleted, source=source,
                                spec_update=spec_update)


# A pod's fields but its metadata, read at once.
_NOT_META = attrgetter(*(f.name for f in dataclasses.fields(Pod) if f.name != "meta"))


class PodMessages:
    """pod_message for many pods (an Apply's), each pod's encoding past its metadata made once for
    pods whose other fields are the very same objects: a workload's replicas, which the manifest
    reader's memo and admission leave sharing them (load.parse_pod). Nothing edits a pod's spec
    or status in place, so those pods encode alike but for their metadata; 16-17 -> 9-10 us a pod
    of a 500-pod Apply."""

    def __init__(self) -> None:
        # the fields' ids -> (the fields, kept so that their ids stay theirs; the encoding past the metadata)
        self._tails: dict[tuple[int, ...], tuple[tuple, bytes]] = {}

    def message(self, pod: Pod, deleted: bool = False, source: str = "",
                spec_update: bool = False) -> events_pb2.PodRecord:
        fields = _NOT_META(pod)
        key = tuple(map(id, fields))
        known = self._tails.get(key)
        if known is None:
            whole = convert.pod_to_proto(pod)
            whole.ClearField("metadata")
            known = self._tails[key] = (fields, whole.SerializeToString())
        meta = convert.meta_to(pod.meta, pb.ObjectMeta()).SerializeToString()
        rec = events_pb2.PodRecord(deleted=deleted, source=source, spec_update=spec_update)
        rec.pod.MergeFromString(convert.join_pod_encoding(meta, known[1]))  # pod_to_proto's message
        return rec


def pod_batch_record(items: Sequence[events_pb2.PodRecord], source: str = "") -> tuple[str, str, bytes]:
    if len(items) == 1:
        return TOPIC_PODS, items[0].pod.metadata.uid or items[0].update.uid, items[0].SerializeToString()
    return TOPIC_PODS, f"{BATCH_KEY_PREFIX}{source}", events_pb2.PodRecord(batch=items, source=source).SerializeToString()


def pod_batch_records(items: Iterable[events_pb2.PodRecord], source: str = "") -> list[tuple[str, str, bytes]]:
    """Pod records and deltas, as few records as BATCH_RECORD_BYTES allows."""
    return in_batches(items, lambda run: pod_batch_record(run, source))


def event_batch_record(events: Sequence[events_pb2.Event]) -> tuple[str, str, bytes]:
    if len(events) == 1:
        return TOPIC_EVENTS, events[0].pod_uid, events[0].SerializeToString()
    return TOPIC_EVENTS, "batch", events_pb2.Event(batch=events).SerializeToString()


def event_batch_records(events: Iterable[events_pb2.Event]) -> list[tuple[str, str, bytes]]:
    """Events, as few records as BATCH_RECORD_BYTES allows."""
    return in_batches(events, event_batch_record)


def binding_update(pod: Pod, node_name: str, source: str = "", traceparent: str = "") -> events_pb2.PodRecord:
    """The binding of a pod as a delta: spec.nodeName and PodScheduled=True."""
    rec = events_pb2.PodRecord(source=source, traceparent=traceparent)
    rec.update.uid, rec.update.node_name = pod.uid, node_name
    return rec


def status_update(pod: Pod, source: str = "") -> events_pb2.PodRecord:
    """A kubelet's status report (phase, startTime, conditions, and status.reason / message when
    set, e.g. Evicted or OutOfcpu) as a delta. Its conditions are merged by type, as the kubelet's
    status manager keeps the conditions it does not own: a DisruptionTarget an eviction or a
    preemption set after the agent's copy was taken stays."""
    rec = events_pb2.PodRecord(source=source)
    u = rec.update
    u.uid, u.phase, u.start_time = pod.uid, pod.phase, pod.start_time or 0.0
    u.merge_conditions = True
    u.status_reason, u.status_message = pod.status_reason, pod.status_message
    for c in pod.conditions:
        u.conditions.add(type=c.type, status=c.status, reason=c.reason, message=c.message)
    return rec


def nomination_update(pod: Pod, node_name: str, source: str = "") -> events_pb2.PodRecord:
    """status.nominatedNodeName set by preemption (node_name="" clears it)."""
    rec = events_pb2.PodRecord(source=source)
    rec.update.uid = pod.uid
    if node_name:
        rec.update.nominated_node_name = node_name
    else:
        rec.update.clear_nominated_node_name = True
    return rec


def scheduling_failure_update(pod: Pod, condition: PodCondition, nominated_node_name: Optional[str] = None,
                              source: str = "") -> events_pb2.PodRecord:
    """A failed attempt's status patch (kube's updatePod): PodScheduled=False and, when PostFilter
    nominated (nominated_node_name not None; "" clears), status.nominatedNodeName. A delta, not the
    scheduler's copy of the pod: published after a deletion it re-creates nothing, after an
    Apply's update it reverts no label, after a binding it is moot (apply_update)."""
    rec = events_pb2.PodRecord(source=source)
    u = rec.update
    u.uid = pod.uid
    u.pod_scheduled.type, u.pod_scheduled.status = condition.type, condition.status
    u.pod_scheduled.reason, u.pod_scheduled.message = condition.reason, condition.message
    if nominated_node_name is not None:
        if nominated_node_name:
            u.nominated_node_name = nominated_node_name
        else:
            u.clear_nominated_node_name = True
    return rec


def deletion_update(pod: Pod, when: float, source: str = "",
                    condition: PodCondition | None = None) -> events_pb2.PodRecord:
    """A graceful deletion request (metadata.deletionTimestamp); the pod's kubelet ends it.
    `condition` (DisruptionTarget, from an eviction or a preemption) is patched onto the pod in
    the same delta: that condition alone, so a kubelet report the writer has not read (Ready,
    which PDBs count) is not undone."""
    rec = events_pb2.PodRecord(source=source)
    rec.update.uid, rec.update.deletion_timestamp = pod.uid, when
    if condition is not None:
        rec.update.merge_conditions = True
        rec.update.conditions.add(type=condition.type, status=condition.status, reason=condition.reason,
                                  message=condition.message)
    return rec


def apply_update(pod: Pod, u: events_pb2.PodUpdate) -> Pod:
    if u.HasField("pod_scheduled"):
        return _apply_scheduling_failure(pod, u)
    changes: dict = {}
    conditions = [PodCondition(c.type, c.status, c.reason, c.message) for c in u.conditions]
    if u.merge_conditions:
        conditions = patched_conditions(pod.conditions, conditions)
    if u.node_name:
        changes["node_name"] = u.node_name
        if not conditions:  # kube's binding sets PodScheduled=True
            conditions = [PodCondition("PodScheduled", "True")] + [c for c in pod.conditions
                                                                   if c.type != "PodScheduled"]
    if u.phase:
        changes["phase"] = u.phase
    if u.start_time:
        changes["start_time"] = u.start_time
    if conditions:
        changes["conditions"] = conditions
    if u.nominated_node_name or u.clear_nominated_node_name:
        changes["nominated_node_name"] = u.nominated_node_name
    if u.status_reason:
        changes["status_reason"] = u.status_reason
    if u.status_message:
        changes["status_message"] = u.status_message
    if u.deletion_timestamp and pod.meta.deletion_timestamp is None:
        changes["meta"] = evolve(pod.meta, deletion_timestamp=u.deletion_timestamp)
    return evolve(pod, **changes)


def patched_conditions(conditions: list[PodCondition], patch: list[PodCondition]) -> list[PodCondition]:
    """podutil.UpdatePodCondition for each of `patch`: the condition of that type replaced where
    it stands, else appended."""
    by_type = {c.type: c for c in patch}
    out = [by_type.pop(c.type, c) for c in conditions]
    return out + [c for c in patch if c.type in by_type]


def _apply_scheduling_failure(pod: Pod, u: events_pb2.PodUpdate) -> Pod:
    if pod.node_name:  # bound since the attempt failed: the binding's PodScheduled stands
        return pod
    c = u.pod_scheduled
    changes: dict = {"conditions": patched_conditions(pod.conditions, [PodCondition(c.type, c.status, c.reason,
                                                                                       c.message)])}
    if u.nominated_node_name or u.clear_nominated_node_name:
        changes["nominated_node_name"] = u.nominated_node_name
    return evolve(pod, **changes)


def node_update(name: str, *, conditions: Sequence[NodeCondition] = (), taints: Sequence[Taint] | None = None,
                unschedulable: bool | None = None, add_taints: Sequence[Taint] = (),
                remove_taints: Sequence[Taint] = (), source: str = "") -> tuple[str, str, bytes]:
    """A node delta from one owner (see NodeUpdate in events.proto)."""
    rec = events_pb2.NodeRecord(source=source)
    u = rec.update
    u.name = name
    for c in conditions:
        u.conditions.add(type=c.type, status=c.status, reason=c.reason, message=c.message,
                         last_heartbeat_time=c.last_heartbeat_time or 0.0)
    if taints is not None:
        u.set_taints = True
        _add_taints(u.taints, taints)
    _add_taints(u.add_taints, add_taints)
    _add_taints(u.remove_taints, remove_taints)
    if unschedulable is not None:
        u.unschedulable = unschedulable
    return TOPIC_NODES, name, rec.SerializeToString()


def _add_taints(field, taints: Sequence[Taint]) -> None:
    for t in taints:
        field.add(key=t.key, value=t.value, effect=t.effect, time_added=t.time_added or 0.0)


def _taint_from(t) -> Taint:
    return Taint(t.key, t.effect, t.value, t.time_added or None)


def edit_taints(taints: Sequence[Taint], add: Sequence[Taint] = (), remove: Sequence[Taint] = ()) -> list[Taint]:
    """`taints` without those `remove` names (same key and effect; an empty effect names every
    effect of the key), then with `add` (replacing the taint of the same key and effect in place)."""
    out = [t for t in taints if not any(t.key == r.key and (not r.effect or t.effect == r.effect) for r in remove)]
    for a in add:
        i = next((i for i, t in enumerate(out) if (t.key, t.effect) == (a.key, a.effect)), None)
        if i is None:
            out.append(a)
        else:
            out[i] = a
    return out


def apply_node_update(node: Node, u: events_pb2.NodeUpdate) -> Node:
    changes: dict = {}
    if len(u.conditions):
        merged = {c.type: c for c in node.conditions}
        for c in u.conditions:
            merged[c.type] = NodeCondition(c.type, c.status, c.reason, c.message, c.last_heartbeat_time or None)
        changes["conditions"] = list(merged.values())
    if u.set_taints:
        changes["taints"] = [_taint_from(t) for t in u.taints]
    if len(u.add_taints) or len(u.remove_taints):
        changes["taints"] = edit_taints(changes.get("taints", node.taints), [_taint_from(t) for t in u.add_taints],
                                        [_taint_from(t) for t in u.remove_taints])
    if u.HasField("unschedulable"):
        changes["unschedulable"] = u.unschedulable
    return evolve(node, **changes) if changes else node


async def publish(producer, records: Iterable[tuple[str, str, bytes]]) -> None:
    for topic, key, value in records:
        await producer.send(topic, value, key=key)


class PodTopicFold:
    """Folds schedmesh.pods records (batches, deltas) into per-pod facts without a cluster
    cache: names, the current node and every node a pod was ever bound to (for checks that
    no pod is bound twice)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # uid -> namespace/name
        self.node: dict[str, str] = {}  # uid -> current spec.nodeName ("" when unbound)
        self.bindings: dict[str, list[str]] = {}  # uid -> nodes bound to, in order, without repeats
        self.phase: dict[str, str] = {}
        self.deleted: set[str] = set()

    def add(self, value: bytes | None) -> None:
        if not value:
            return
        for rec in expand(events_pb2.PodRecord.FromString(value)):
            if rec.HasField("update"):
                uid, node, phase = rec.update.uid, rec.update.node_name, rec.update.phase
            else:
                uid, node, phase = rec.pod.metadata.uid, rec.pod.node_name, rec.pod.phase
                self.names[uid] = f"{rec.pod.metadata.namespace}/{rec.pod.metadata.name}"
                if rec.deleted:
                    self.deleted.add(uid)
                    continue
            if node:
                self.node[uid] = node
                seen = self.bindings.setdefault(uid, [])
                if not seen or seen[-1] != node:
                    seen.append(node)
            if phase:
                self.phase[uid] = phase

    def bound_by_name(self) -> dict[str, str]:
        """name (without namespace) -> node, for pods currently bound and not deleted."""
        return {self.names[u].split("/", 1)[1]: n for u, n in self.node.items()
                if n and u in self.names and u not in self.deleted}
