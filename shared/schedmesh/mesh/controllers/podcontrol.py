"""What the controllers that create and delete pods for their owners share (the DaemonSet
controller and the workload controller): kube's PodControl with its ControllerExpectations and
the garbage collector's part, over the controller-manager's cache.

* A pod created is admitted as kube-apiserver admits a pod (LimitRanger, Priority,
  DefaultTolerationSeconds, RuntimeClass: schedmesh.api.admission), gets a creation time, a
  resource version and its controller as its source; the queue-manager schedules it like any pod.
* A pod deleted goes gracefully when it is bound to a live node and has not ended (its kubelet
  agent ends it), at once when it is unbound, ended or on a node that is gone (the pod garbage
  collector's part).
* What one sync of an owner published is expected back (kube's expectations): the owner is not
  synced again until the cache shows every pod created and every deletion, or
  EXPECTATIONS_TIMEOUT passed (a record lost with the broker), so nothing is sent twice while on
  its way.
* An owner deleted has its pods deleted (the garbage collector's part): those of the owners this
  process saw go, and, found at a scan, the pods an owner applied here made (their controller
  reference carries the uid schedmesh gives an object of that kind and name) whose owner is gone
  although this process never saw it go (deleted while it was down), once they have stayed so
  for ORPHAN_GRACE. Pods recorded from a real cluster name real uids and are never taken for
  orphans.

A pass runs when the pods, nodes or the PDBs' topic (which carries the owners) changed, or when
something falls due, else every RESYNC_PERIOD; within it, as kube's controllers enqueue an owner
on its own events, only the owners that need it are synced: those whose record changed, whose
pods changed (the cache's listener reads their controller references), a DaemonSet's when a node
changed (`follows_nodes`), those due (a retry, an expectation given up, pods awaited), those
whose own records are on their way, and all
of them when the PDBs' topic changed and every RESYNC_PERIOD. A DaemonSet's sync walks every node:
at 5,000 nodes each pass that synced it on any pod's change took 50-125 ms of the
controller-manager's event loop. A subclass says what its owners are and what one sync of an
owner does (`_owners`, `_owner_key`, `_controlled`, `_sync_owner`).
"""
from __future__ import annotations

import itertools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from schedmesh.api.admission import AdmissionObjects, admit_created_pod
from schedmesh.api.load import AdmissionError, object_uid
from schedmesh.api.types import Node, OwnerReference, Pod
from schedmesh.bus.topics import NODES, PDBS, PODS
from schedmesh.mesh.cluster_cache import ClusterCache, is_terminal
from schedmesh.mesh.records import deletion_update, pod_batch_records, pod_message
from schedmesh.v1 import events_pb2

# A sync's pods not seen back within this long are given up on and decided again (kube: 5 min).
EXPECTATIONS_TIMEOUT = 30.0
# Every owner is synced at least this often even when nothing changed.
RESYNC_PERIOD = 30.0
# Pods of an owner gone are deleted only after this long without it: a cache being filled
# again (a broker restart's re-publication) may show pods before their owner.
ORPHAN_GRACE = 10.0
# A pod admission refused (a PriorityClass not applied yet, say) is tried again this much later.
REFUSED_RETRY = 5.0


@dataclass
class Expected:
    """What one sync of an owner published and the cache has not shown yet."""
    created: set[str] = field(default_factory=set)  # pod uids
    deleted: set[str] = field(default_factory=set)  # pod uids still live, not yet marked for deletion
    until: float = 0.0


@dataclass
class Cluster:
    """What one sync reads besides an owner's pods: the nodes and every owner's pods by key."""
    nodes: list[Node]
    node_names: set[str]
    owned: dict[str, list[Pod]]


class PodControl:
    """The pod control, expectations and garbage collection of one kind of owner (see the module)."""

    #: What logs call an owner ("daemonset", "statefulset", ...): see `_what`.
    what = "owner"
    #: Whether a node's change can change what an owner wants (a DaemonSet's); else only the
    #: owner's record, its pods and its due times do.
    follows_nodes = False

    def __init__(self, cache: ClusterCache, source: str = "",
                 new_uid: Callable[[], str] = lambda: str(uuid.uuid4()),
                 log: Optional[logging.Logger] = None) -> None:
        self.cache, self.source, self.new_uid = cache, source, new_uid
        self.log = log or logging.getLogger("schedmesh.controllers")
        self._expected: dict[str, Expected] = {}  # owner key -> its sync's records on their way
        self._known: dict[str, object] = {}       # the owners of the last sync
        self._gone: dict[str, object] = {}        # deleted ones whose pods are being deleted
        self._versions = itertools.count(1)
        self._started_ns = time.time_ns()
        self._refused: set[tuple[str, str]] = set()  # (owner, admission error) already logged
        self._last_offsets: dict[str, int] = {}
        self._next_sync = 0.0
        self._orphaned_since: dict[str, float] = {}  # owner key -> when its pods were first found without it
        self._next_orphan_scan = 0.0
        # which owners the next pass syncs (see the module's docstring)
        self._dirty: set[str] = set()            # owners whose pods changed (the cache's listener)
        self._nodes_changed = False
        self._owners_topic_changed = True
        self._due_at: dict[str, float] = {}      # owner key -> when it must be synced again
        self._next_full = 0.0
        cache.listeners.append(self._on_change)

    # ---- what a subclass says ------------------------------------------------------------------
    def _owners(self) -> dict[str, object]:
        """The live owners by key (under the cache's lock)."""
        raise NotImplementedError

    def _owner_key(self, namespace: str, ref: OwnerReference) -> Optional[str]:
        """The key of the owner a pod's controller reference names, None when not of this kind."""
        raise NotImplementedError

    def _controlled(self, owner, pod: Pod) -> bool:
        """Whether `pod` is `owner`'s (the reference `_owner_key` read, checked against the owner)."""
        raise NotImplementedError

    def _sync_owner(self, key: str, owner, pods: list[Pod], cluster: Cluster,
                    now: float) -> tuple[list[events_pb2.PodRecord], Optional[float]]:
        """One sync of a settled owner given its pods: the records, and when to sync again (None: no need)."""
        raise NotImplementedError

    def _forget(self, live: dict[str, object]) -> None:
        """Drop what is kept of owners not among `live` (deleted ones)."""

    def _waiting(self, key: str, owner, pods: list[Pod], now: float) -> Optional[float]:
        """Besides this controller's own expectations, what the owner waits for before a sync:
        until when, or None when nothing (the workload controller's pods on their way from Apply)."""
        return None

    def _what(self, key: str) -> str:
        return f"{self.what} {key}"

    # ---- one pass ------------------------------------------------------------------------------
    def _on_change(self, kind: str, old, new) -> None:
        """The cache's listener (under its lock): mark the owners of a changed pod, note a node's change."""
        if kind == "node":
            self._nodes_changed = self._nodes_changed or self.follows_nodes
            return
        if kind != "pod":
            return
        for p in (old, new):
            if p is not None:
                for ref in p.meta.owner_references:
                    if ref.controller:
                        key = self._owner_key(p.namespace, ref)
                        if key is not None:
                            self._dirty.add(key)

    def _defer(self, key: str, when: float) -> None:
        self._due_at[key] = min(self._due_at.get(key, when), when)

    def _due(self, now: float) -> bool:
        offsets = {k: v for k, v in self.cache.view_offsets().items() if k.split("/", 1)[0] in (PODS, NODES, PDBS)}
        if offsets != self._last_offsets or now >= self._next_sync:
            if any(k.startswith(PDBS + "/") and offsets.get(k) != self._last_offsets.get(k)
                   for k in offsets.keys() | self._last_offsets.keys()):
                self._owners_topic_changed = True
            self._last_offsets = offsets
            return True
        return False

    def sync(self, now: float) -> list[tuple[str, str, bytes]]:
        """The records of one pass over every owner (call under the controller lock)."""
        if not self._due(now):
            return []
        out: list[events_pb2.PodRecord] = []
        with self.cache.lock:
            owners = self._owners()
            for key in [k for k in self._known if k not in owners]:
                self._gone[key] = self._known[key]
                self.log.info("%s deleted: deleting its pods", self._what(key))
            for key in [k for k in self._gone if k in owners]:  # applied again: its pods are its own again
                del self._gone[key]
            previous, self._known = self._known, owners
            self._forget(owners)
            full = self._owners_topic_changed or now >= self._next_full
            if full:
                self._owners_topic_changed, self._next_full = False, now + RESYNC_PERIOD
            nodes_changed, self._nodes_changed = self._nodes_changed, False
            dirty, self._dirty = self._dirty, set()
            # (an owner whose own records are on their way is looked at on every change: an ended
            # pod's deletion is no change to listeners, the cache having let it go when it ended)
            todo = [key for key, owner in owners.items()
                    if full or nodes_changed or key in dirty or key in self._expected
                    or previous.get(key) is not owner or self._due_at.get(key, now + 1) <= now]
            cluster: Optional[Cluster] = None
            if todo or self._gone:
                nodes = [ni.node for ni in self.cache.snapshot.node_info_list if ni.node is not None]
                cluster = Cluster(nodes, {n.name for n in nodes}, self._pods_by_owner())
                for key in todo:
                    owner = owners[key]
                    self._due_at.pop(key, None)
                    pods = [p for p in cluster.owned.get(key, ()) if self._controlled(owner, p)]
                    if not self._settled(key, now):
                        self._defer(key, self._expected[key].until)
                        continue
                    waiting = self._waiting(key, owner, pods, now)
                    if waiting is not None:
                        self._defer(key, waiting)
                        continue
                    recs, again = self._sync_owner(key, owner, pods, cluster, now)
                    out += recs
                    if again is not None:
                        self._defer(key, again)
                for key, owner in list(self._gone.items()):
                    pods = [p for p in cluster.owned.get(key, ())
                            if self._controlled(owner, p) and p.meta.deletion_timestamp is None]
                    if not pods:
                        del self._gone[key]
                    elif self._settled(key, now):
                        out += self._delete(key, [(p, f"its {self.what} is deleted") for p in pods],
                                            cluster.node_names, now)
            if now >= self._next_orphan_scan:
                out += self._collect_orphans(owners, now, cluster)
                self._next_orphan_scan = now + (ORPHAN_GRACE if self._orphaned_since else RESYNC_PERIOD)
            for key in [k for k in self._due_at if k not in owners]:
                del self._due_at[key]
            next_sync = min(self._next_full, self._next_orphan_scan, *self._due_at.values())
            for key in [k for k in self._expected
                        if k not in owners and k not in self._gone and k not in self._orphaned_since]:
                del self._expected[key]
        self._next_sync = next_sync
        return pod_batch_records(out, self.source)

    def _collect_orphans(self, owners: dict[str, object], now: float,
                         cluster: Optional[Cluster]) -> list[events_pb2.PodRecord]:
        """Delete the pods owners applied here made whose owner is gone unseen (see the module's
        docstring), once orphaned for ORPHAN_GRACE."""
        out: list[events_pb2.PodRecord] = []
        orphaned: dict[str, float] = {}
        owned = cluster.owned if cluster is not None else self._pods_by_owner()
        node_names = cluster.node_names if cluster is not None else {
            ni.node.name for ni in self.cache.snapshot.node_info_list if ni.node is not None}
        for key, pods in owned.items():
            if key in owners or key in self._gone:
                continue
            made_here = [p for p in pods if p.meta.deletion_timestamp is None and any(
                r.controller and self._owner_key(p.namespace, r) == key and r.uid == object_uid(r.kind, p.namespace,
                                                                                                 r.name)
                for r in p.meta.owner_references)]
            if not made_here:
                continue
            since = orphaned[key] = self._orphaned_since.get(key, now)
            if now - since >= ORPHAN_GRACE and self._settled(key, now):
                self.log.info("%s is gone (deleted while this controller was not running): deleting its pods",
                              self._what(key))
                out += self._delete(key, [(p, f"its {self.what} is deleted") for p in made_here], node_names, now)
        self._orphaned_since = orphaned
        return out

    def _pods_by_owner(self) -> dict[str, list[Pod]]:
        """Pods controlled by an owner of this kind, by its key."""
        out: dict[str, list[Pod]] = {}
        for p in self.cache.pods.values():
            for ref in p.meta.owner_references:
                if ref.controller:
                    key = self._owner_key(p.namespace, ref)
                    if key is not None:
                        out.setdefault(key, []).append(p)
        return out

    def _settled(self, key: str, now: float) -> bool:
        """Whether the cache shows everything the owner's last sync published (kube's
        SatisfiedExpectations), or it is given up on."""
        expected = self._expected.get(key)
        if expected is None:
            return True
        pods = self.cache.pods
        expected.created = {u for u in expected.created if u not in pods}
        expected.deleted = {u for u in expected.deleted if u in pods and pods[u].meta.deletion_timestamp is None}
        if (expected.created or expected.deleted) and now < expected.until:
            return False
        if expected.created or expected.deleted:
            self.log.warning("%s: %d creation(s) and %d deletion(s) not seen back after %.0f s; syncing again",
                             self._what(key), len(expected.created), len(expected.deleted), EXPECTATIONS_TIMEOUT)
        del self._expected[key]
        return True

    # ---- creating and deleting -----------------------------------------------------------------
    def _carry_out(self, key: str, create: Sequence[tuple[Pod, str]], delete: Sequence[tuple[Pod, str]],
                   node_names: set[str], now: float) -> list[events_pb2.PodRecord]:
        """Create the pods of `create` (each with why, for logs) that admission takes and delete
        those of `delete`, expected back."""
        out = []
        expected = Expected(until=now + EXPECTATIONS_TIMEOUT)
        made = 0
        for pod, why in create:
            if self._admitted(key, pod) is None:
                self._defer(key, now + REFUSED_RETRY)
                continue
            made += 1
            pod.meta.creation_timestamp = now + made * 1e-6  # one after another, as the API server creates them
            pod.meta.resource_version = f"{self.source}-{self._started_ns}-{next(self._versions)}"
            expected.created.add(pod.uid)
            self.log.info("%s: creating pod %s%s", self._what(key), pod.name, f" {why}" if why else "")
            out.append(pod_message(pod, source=self.source))
        out += self._delete(key, delete, node_names, now, expected)
        if out:
            self._expected[key] = expected
        return out

    def _delete(self, key: str, pods: Sequence[tuple[Pod, str]], node_names: set[str], now: float,
                expected: Optional[Expected] = None) -> list[events_pb2.PodRecord]:
        """The deletions of an owner's pods, expected back (a new expectation unless given)."""
        if expected is None and pods:
            expected = self._expected[key] = Expected(until=now + EXPECTATIONS_TIMEOUT)
        out = []
        for pod, why in pods:
            expected.deleted.add(pod.uid)
            self.log.info("%s: deleting pod %s on %s: %s", self._what(key), pod.name, pod.node_name or "no node", why)
            if pod.node_name and pod.node_name in node_names and not is_terminal(pod):
                out.append(deletion_update(pod, now, self.source))  # its kubelet agent ends it
            else:  # the API server removes an unbound or ended pod at once; PodGC one whose node is gone
                out.append(pod_message(pod, deleted=True, source=self.source))
        return out

    def _admitted(self, key: str, pod: Pod) -> Optional[Pod]:
        """The pod as kube-apiserver's admission leaves it (LimitRanger, Priority,
        DefaultTolerationSeconds, RuntimeClass), or None when refused (kube: a FailedCreate event;
        retried next sync)."""
        with self.cache.lock:
            objects = AdmissionObjects(dict(self.cache.priority_classes), dict(self.cache.runtime_classes),
                                       list(self.cache.limit_ranges.values()))
        try:
            admit_created_pod(pod, objects, refuse_unknown_runtime_class=False)
        except AdmissionError as e:
            if (key, str(e)) not in self._refused:
                self._refused.add((key, str(e)))
                self.log.warning("%s: cannot create a pod: %s", self._what(key), e)
            return None
        return pod
