"""The cluster as every service sees it: rebuilt by replaying the Kafka topics (the informer
pattern) and kept current by following them.

Records are protobuf messages of protos/schedmesh/v1/events.proto. The offset read of every
topic is tracked so a caller can ask "have you seen at least what I have seen?" (`wait_for`):
the preemption service and the controller-manager answer a queue-manager from a view at least
as new as its own, and the controllers act again when what they read has moved (`view_offsets`).

Pods scheduled but not yet seen bound are assumed, per client, kube's AssumePod and ForgetPod:
the queue-manager assumes each pod it decides (`assume`) and forgets it when its binding fails
(`forget`); the preemption service overlays the assumptions a queue-manager sends with a request
(`set_assumed`). A binding, the pod's end or its deletion ends the assumption here.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

from schedmesh.api import convert
from schedmesh.api.evolve import evolve
from schedmesh.api.types import (POD_BINDING_AND_STATUS, DaemonSet, LimitRange, Namespace, Node, Pod, PodDisruptionBudget,
                                 PriorityClass, RuntimeClass, WorkloadSelector, same_but_status)
from schedmesh.plugins.pod_topology_spread import WorkloadSelectors
from schedmesh.bus import topics
from schedmesh.cache.snapshot import Snapshot
from schedmesh.mesh.records import apply_node_update, apply_update, expand
from schedmesh.v1 import events_pb2

# Topic names live in the bus catalogue; here under the names the mesh uses.
TOPIC_EVENTS, TOPIC_NAMESPACES, TOPIC_NODES = topics.EVENTS, topics.NAMESPACES, topics.NODES
TOPIC_PDBS, TOPIC_PODS, TOPIC_PRIORITY_CLASSES = topics.PDBS, topics.PODS, topics.PRIORITY_CLASSES
STATE_TOPICS = topics.STATE_TOPICS


# uids of deleted pods remembered by a reader that asks ClusterCache.was_deleted (the binder, the
# queue-manager): about 10 MB at most
REMEMBERED_DELETIONS = 100_000
# Pods kept as their records encoded them (ClusterCache.encoded_pod): more than a burst of pending
# pods; a few tens of MB at most.
KEPT_ENCODED_PODS = 65_536

# Listener: (kind, old object or None, new object or None)
Listener = Callable[[str, object, object], None]


def is_terminal(pod: Pod) -> bool:
    return pod.phase in ("Succeeded", "Failed")


# Terminal pods (Succeeded, Failed: e.g. evicted by the kubelet, refused by its admission) stay in
# `ClusterCache.pods` until they are deleted, as kube keeps them (`get pods` shows them), but they
# leave the snapshot, and listeners see them go: kube-scheduler's pod informer excludes terminal
# pods (field selector status.phase!=Succeeded,Failed), so to scheduling they are deleted.


@dataclass
class ClusterCache:
    """A Snapshot plus the non-node objects, fed by event records. Thread-safe via `lock`."""

    snapshot: Snapshot = field(default_factory=Snapshot)
    pods: dict[str, Pod] = field(default_factory=dict)  # every known pod by uid (pending, bound, terminal)
    priority_classes: dict[str, PriorityClass] = field(default_factory=dict)
    runtime_classes: dict[str, RuntimeClass] = field(default_factory=dict)
    pdbs: dict[str, PodDisruptionBudget] = field(default_factory=dict)
    # pod controllers' selectors by (kind, namespace, name), for PodTopologySpread's defaults
    workloads: WorkloadSelectors = field(default_factory=WorkloadSelectors)
    daemon_sets: dict[str, DaemonSet] = field(default_factory=dict)  # by namespace/name
    limit_ranges: dict[str, LimitRange] = field(default_factory=dict)  # by namespace/name
    offsets: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> next offset to read
    lock: threading.RLock = field(default_factory=threading.RLock)
    listeners: list[Listener] = field(default_factory=list)
    # wake this cache's CacheFollower (from any thread), at once when given True: see expect_records
    wakers: list[Callable[[bool], None]] = field(default_factory=list)
    _assumed: dict[str, dict[str, tuple[Pod, str]]] = field(default_factory=dict)  # client -> uid -> (pod, node)
    _expected: dict[str, Pod] = field(default_factory=dict)  # uid -> pod this process published
    # (namespace, name) -> uids of `pods` (a live pod and terminal ones may share a name): an Apply
    # looks up its own pods instead of scanning every pod
    _uids_by_name: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    # Called with each pod record (a batch's items one by one) once the cache has applied it,
    # under the lock: readers that need the records themselves (the binder's ledger) without
    # decoding them a second time.
    pod_record_hooks: list[Callable[[events_pb2.PodRecord], None]] = field(default_factory=list)
    node_record_hooks: list[Callable[[events_pb2.NodeRecord], None]] = field(default_factory=list)
    # How many uids of deleted pods to remember (was_deleted); 0: none. A whole record of the same
    # uid after its tombstone (the pod created again under that uid) forgets it.
    remember_deletions: int = 0
    # How many pods to keep as their records encoded them (encoded_pod); 0: none. The queue-manager
    # sends each pod it binds, and its shards each pod on their nodes: copying the record's bytes
    # is a tenth of encoding the pod again.
    keep_encoded: int = 0
    _encoded: dict[str, tuple[Pod, bytes]] = field(default_factory=dict)  # uid -> (pod, its Pod message)
    _deleted: OrderedDict[str, None] = field(default_factory=OrderedDict)
    _changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self.lock)

    # ---- applying records --------------------------------------------------------------
    def apply(self, topic: str, value: bytes, offset: int, partition: int = 0) -> None:
        with self.lock:
            if topic == TOPIC_NODES:
                for rec in expand(events_pb2.NodeRecord.FromString(value)):
                    if rec.HasField("update"):
                        ni = self.snapshot.get(rec.update.name)
                        if ni is not None and ni.node is not None:  # a delta for a deleted node is moot
                            self._apply_node(apply_node_update(ni.node, rec.update), False)
                    else:
                        self._apply_node(convert.node_from_proto(rec.node), rec.deleted)
                    for node_hook in self.node_record_hooks:
                        node_hook(rec)
            elif topic == TOPIC_PODS:
                for rec in expand(events_pb2.PodRecord.FromString(value)):
                    if rec.HasField("update"):
                        old = self.pods.get(rec.update.uid)
                        if old is not None:  # a delta for a pod already deleted is moot
                            self._apply_pod(apply_update(old, rec.update), False)
                    else:
                        self._apply_pod(self._decode_pod(rec.pod), rec.deleted, rec.spec_update)
                        if self.remember_deletions:
                            self._note_deletion(rec.pod.metadata.uid, rec.deleted)
                    for hook in self.pod_record_hooks:
                        hook(rec)
            elif topic == TOPIC_PRIORITY_CLASSES:
                rec = events_pb2.PriorityClassRecord.FromString(value)
                if rec.HasField("runtime_class"):  # RuntimeClasses share the topic
                    classes, cls = self.runtime_classes, convert.runtime_class_from_proto(rec.runtime_class)
                else:
                    classes, cls = self.priority_classes, convert.priority_class_from_proto(rec.priority_class)
                if rec.deleted:
                    classes.pop(cls.name, None)
                else:
                    classes[cls.name] = cls
            elif topic == TOPIC_PDBS:
                rec = events_pb2.PodDisruptionBudgetRecord.FromString(value)
                if rec.HasField("workload"):  # a pod controller's selector (events.proto)
                    self._apply_workload(convert.workload_from_proto(rec.workload), rec.deleted)
                elif rec.HasField("daemon_set"):
                    ds = convert.daemon_set_from_proto(rec.daemon_set)
                    if rec.deleted:
                        self.daemon_sets.pop(ds.key, None)
                    else:
                        self.daemon_sets[ds.key] = ds
                elif rec.HasField("limit_range"):
                    lr = convert.limit_range_from_proto(rec.limit_range)
                    if rec.deleted:
                        self.limit_ranges.pop(lr.key, None)
                    else:
                        self.limit_ranges[lr.key] = lr
                else:
                    self._apply_pdb(rec)
            elif topic == TOPIC_NAMESPACES:
                rec = events_pb2.NamespaceRecord.FromString(value)
                ns = convert.namespace_from_proto(rec.namespace)
                self.snapshot.set_namespace_labels(ns.name, None if rec.deleted else ns.labels)
            key = f"{topic}/{partition}"
            self.offsets[key] = max(self.offsets.get(key, 0), offset + 1)
            self._changed.notify_all()

    def _apply_workload(self, w: WorkloadSelector, deleted: bool) -> None:
        if deleted:
            self.workloads.pop(w.key, None)
        else:
            self.workloads[w.key] = w

    def _apply_pdb(self, rec: events_pb2.PodDisruptionBudgetRecord) -> None:
        pdb = convert.pdb_from_proto(rec.pdb)
        key = f"{pdb.namespace}/{pdb.name}"
        if rec.deleted:
            self.pdbs.pop(key, None)
        elif rec.status_only:  # the disruption controller's status: never re-creates a deleted PDB
            known = self.pdbs.get(key)
            if known is not None:
                self.pdbs[key] = dataclasses.replace(
                    known, disruptions_allowed=pdb.disruptions_allowed, disrupted_pods=pdb.disrupted_pods,
                    expected_pods=pdb.expected_pods, current_healthy=pdb.current_healthy,
                    desired_healthy=pdb.desired_healthy)
        else:
            self.pdbs[key] = pdb

    def _note_deletion(self, uid: str, deleted: bool) -> None:
        if deleted:
            self._deleted[uid] = None
            self._deleted.move_to_end(uid)
            if len(self._deleted) > self.remember_deletions:
                self._deleted.popitem(last=False)
        elif self._deleted:
            self._deleted.pop(uid, None)

    def was_deleted(self, uid: str) -> bool:
        """Whether the pod `uid` was deleted and not created again since (among the latest
        `remember_deletions` deletions read)."""
        with self.lock:
            return uid in self._deleted

    def expect(self, pods: list[Pod]) -> None:
        """Pods this process itself is publishing: when their records come back, these objects
        are used instead of decoding the records again (the queue-manager's Apply)."""
        with self.lock:
            for p in pods:
                self._expected[p.meta.uid] = p

    def _decode_pod(self, msg) -> Pod:
        mine = self._expected.pop(msg.metadata.uid, None) if self._expected else None
        # bytes, not the message: a batch record's item keeps the whole batch alive; serialized
        # once, for both the decoding's spec memo and encoded_pod
        data = msg.SerializeToString(deterministic=True) if self.keep_encoded else None
        if mine is not None and mine.meta.resource_version == msg.metadata.resource_version:
            pod = mine
        else:
            pod = convert.pod_from_proto(msg, data)
        if data is not None:
            if len(self._encoded) >= self.keep_encoded:
                self._encoded.clear()
            self._encoded[pod.meta.uid] = (pod, data)
        return pod

    def encoded_pod(self, pod: Pod) -> Optional[bytes]:
        """The serialized Pod message `pod` was read from, when this very object came from a
        record (None for one made here: a delta applied, an evolved copy; or when not kept)."""
        got = self._encoded.get(pod.meta.uid)
        return got[1] if got is not None and got[0] is pod else None

    def encoded_spec(self, pod: Pod) -> Optional[bytes]:
        """The serialized Pod message of a record of this pod that differs from `pod` in its
        binding, status or version at most (what a shard's feed needs: its plugins read neither),
        when kept: a pod bound or started since is not encoded again."""
        got = self._encoded.get(pod.meta.uid)
        return got[1] if got is not None and (got[0] is pod or same_but_status(got[0], pod)) else None

    def _apply_node(self, node: Node, deleted: bool) -> None:
        old = self.snapshot.get(node.name)
        old_node = old.node if old else None
        if deleted:
            self.snapshot.remove_node(node.name)
            self._emit("node", old_node, None)
        else:
            self.snapshot.add_node(node)
            self._emit("node", old_node, node)

    def _apply_pod(self, pod: Pod, deleted: bool, spec_update: bool = False) -> None:
        uid = pod.meta.uid
        old = self.pods.get(uid)
        if old is not None and is_terminal(old):
            old = None  # already gone from the snapshot and, for listeners, deleted
        if spec_update and old is not None:
            # an Apply's update: its metadata and spec; the binding, status and deletion request
            # are what this cache has read (the Apply's copy of them may be older)
            kept = {f: getattr(old, f) for f in POD_BINDING_AND_STATUS}
            kept["node_name"] = old.node_name or pod.node_name
            if old.meta.deletion_timestamp is not None and pod.meta.deletion_timestamp is None:
                kept["meta"] = evolve(pod.meta, deletion_timestamp=old.meta.deletion_timestamp)
            pod = evolve(pod, **kept)
        if old is not None and old.node_name and not pod.node_name and not deleted:
            # spec.nodeName never goes back to empty (the API server forbids it): an unbound copy
            # of a bound pod is stale (e.g. re-published from a cache that had not seen the binding
            # before a broker restart) and must not unbind it; its binding and status stay.
            pod = evolve(pod, **{f: getattr(old, f) for f in POD_BINDING_AND_STATUS})
        if old is not None and old.node_name and (deleted or is_terminal(pod) or pod.node_name != old.node_name
                                                  or self.snapshot.node_of(uid) != old.node_name):
            self.snapshot.remove_pod(old)
        # (still on its node: add_pod below replaces it, as a status update where only that changed)
        if deleted:
            if self.pods.pop(uid, None) is not None:
                self._unindex(pod.meta.namespace, pod.meta.name, uid)
            if old is not None:
                self._emit("pod", old, None)
            self._end_assumptions(uid, bound=old is not None and bool(old.node_name))
            return
        if uid not in self.pods:
            self._uids_by_name.setdefault((pod.meta.namespace, pod.meta.name), set()).add(uid)
        self.pods[uid] = pod
        if is_terminal(pod):
            if old is not None:
                self._emit("pod", old, None)
            self._end_assumptions(uid, bound=bool(pod.node_name))
            return
        if pod.node_name:  # the real binding supersedes an assumption (its copy is replaced below)
            self._end_assumptions(uid, bound=True)
        if pod.node_name:
            self.snapshot.add_pod(pod)
        self._emit("pod", old, pod)

    def _emit(self, kind: str, old: object, new: object) -> None:
        for listener in self.listeners:
            listener(kind, old, new)

    # ---- consistency -------------------------------------------------------------------
    def has_read(self, offsets: dict[str, int]) -> bool:
        """Whether this cache has consumed each "topic/partition" up to the given offsets."""
        with self.lock:
            return all(self.offsets.get(t, 0) >= o for t, o in offsets.items() if o > 0)

    def wait_for(self, offsets: dict[str, int], timeout: float = 5.0) -> bool:
        """Block until has_read(offsets)."""
        with self._changed:
            if not self.has_read(offsets):
                self.expect_records()
            return self._changed.wait_for(lambda: self.has_read(offsets), timeout)

    def expect_records(self, now: bool = True) -> None:
        """Records are on their way (another process answered that it published them, or a
        caller waits for offsets not read yet): a dozing follower fetches instead of at its next
        poll (bus.consumer.idle_poll_ms), at once with `now`, else after its pause between
        fetches (pacing: records nobody waits for, such as the bindings of assumed pods)."""
        for wake in self.wakers:
            wake(now)

    def view_offsets(self) -> dict[str, int]:
        with self.lock:
            return dict(self.offsets)

    def set_assumed(self, client: str, assignments: list[tuple[Pod, str]]) -> None:
        """Replace a client's assumed pods (pods scheduled but not yet seen bound)."""
        with self.lock:
            old = self._assumed.get(client, {})
            new = {p.meta.uid: (p, n) for p, n in assignments if not self._is_bound(p.meta.uid)}
            for uid, (pod, _node) in old.items():
                if uid not in new and not self._is_bound(uid):
                    self.snapshot.remove_pod(pod)
            for uid, (pod, node) in new.items():
                if uid not in old or old[uid][1] != node:
                    self.snapshot.add_pod(pod, node)
            self._assumed[client] = new

    def assume(self, client: str, pod: Pod, node: str) -> None:
        """Count `pod` on `node` until its binding comes back (or `forget`): kube's AssumePod."""
        with self.lock:
            if self._is_bound(pod.meta.uid):
                return
            self._assumed.setdefault(client, {})[pod.meta.uid] = (pod, node)
            self.snapshot.add_pod(pod, node)

    def forget(self, client: str, uid: str) -> None:
        """Drop an assumption whose binding failed: kube's ForgetPod."""
        with self.lock:
            entry = self._assumed.get(client, {}).pop(uid, None)
            if entry is not None and not self._is_bound(uid):
                self.snapshot.remove_pod(entry[0])

    def _end_assumptions(self, uid: str, bound: bool) -> None:
        """The pod was bound, ended or deleted: no client assumes it any more. Unbound, the copy
        an assumption put on its node goes too (the room it was assumed to take is free)."""
        for assumed in self._assumed.values():
            entry = assumed.pop(uid, None)
            if entry is not None and not bound:
                self.snapshot.remove_pod(entry[0])

    def _is_bound(self, uid: str) -> bool:
        p = self.pods.get(uid)
        return p is not None and bool(p.node_name)

    # ---- reading -----------------------------------------------------------------------
    def pending_pods(self) -> list[Pod]:
        with self.lock:
            return [p for p in self.pods.values() if not p.node_name and not is_terminal(p)]

    def pdb_list(self) -> list[PodDisruptionBudget]:
        with self.lock:
            return list(self.pdbs.values())

    def namespaces(self) -> list[Namespace]:
        with self.lock:
            return [Namespace(k, dict(v)) for k, v in self.snapshot.namespace_labels.items()]

    def _unindex(self, namespace: str, name: str, uid: str) -> None:
        uids = self._uids_by_name.get((namespace, name))
        if uids is not None:
            uids.discard(uid)
            if not uids:
                del self._uids_by_name[(namespace, name)]

    def get_pod(self, namespace: str, name: str) -> Optional[Pod]:
        """The pod of that name: a live pod before a terminal one."""
        with self.lock:
            found = [self.pods[u] for u in self._uids_by_name.get((namespace, name), ())]
            return min(found, key=is_terminal, default=None)
