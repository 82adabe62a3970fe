"""The DaemonSet controller: each DaemonSet applied gets one pod on every node that should run it,
as kube's controller (pkg/controller/daemon) keeps it; the decisions are
schedmesh.workloads.daemonset's, this module publishes them.

* Missing pods are created pending, admitted as kube-apiserver admits a pod (Priority,
  DefaultTolerationSeconds, RuntimeClass), with a creation time, a resource version and this
  controller as their source; the queue-manager schedules them like any pod (NodeAffinity's
  matchFields term keeps each to its node).
* Pods on nodes that should no longer run them, failed, succeeded and extra ones, and outdated
  ones under RollingUpdate (maxUnavailable at a time) are deleted: gracefully when bound to a
  live node (its kubelet agent ends it), at once when unbound, terminal or on a node that is
  gone (the pod garbage collector's part).
* A DaemonSet deleted has its pods deleted (the garbage collector's part): those of the
  DaemonSets this process saw go, and, found at a resync, the pods a DaemonSet applied here made
  (their controller reference carries the uid schedmesh gives a DaemonSet of that name) whose
  DaemonSet is gone although this process never saw it go (deleted while it was down), once
  they have stayed so for ORPHAN_GRACE. Pods recorded from a real cluster name real uids and
  are never taken for orphans.

Level-triggered, as the other controllers: a sync runs when the pods, nodes or DaemonSets changed
(their topics' offsets moved) or a backed-off deletion falls due, else every RESYNC_PERIOD. What
one sync published is expected back (kube's expectations): the DaemonSet is not synced again
until the cache shows every pod created and every deletion, or EXPECTATIONS_TIMEOUT passed
(a record lost with the broker), so nothing is sent twice while on its way.
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
from schedmesh.api.types import DaemonSet, Pod
from schedmesh.bus.topics import NODES, PDBS, PODS
from schedmesh.mesh.cluster_cache import ClusterCache, is_terminal
from schedmesh.mesh.records import deletion_update, pod_batch_records, pod_message
from schedmesh.v1 import events_pb2
from schedmesh.workloads.daemonset import (DaemonSetPlan, FailedPodBackoff, controlled_by, daemon_pod,
                                           daemon_pod_name, sync_plan)

log = logging.getLogger("schedmesh.controllers.daemonset")

# A sync's pods not seen back within this long are given up on and decided again (kube: 5 min).
EXPECTATIONS_TIMEOUT = 30.0
# Every DaemonSet is synced at least this often even when nothing changed.
RESYNC_PERIOD = 30.0
# Pods of a DaemonSet gone are deleted only after this long without it: a cache being filled
# again (a broker restart's re-publication) may show pods before their DaemonSet.
ORPHAN_GRACE = 10.0


@dataclass
class _Expected:
    """What one sync of a DaemonSet published and the cache has not shown yet."""
    created: set[str] = field(default_factory=set)  # pod uids
    deleted: set[str] = field(default_factory=set)  # pod uids still live, not yet marked for deletion
    until: float = 0.0


class DaemonSetController:
    def __init__(self, cache: ClusterCache, source: str = "",
                 new_uid: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self.cache, self.source, self.new_uid = cache, source, new_uid
        self.backoff = FailedPodBackoff()
        self._expected: dict[str, _Expected] = {}  # DaemonSet key -> its sync's records on their way
        self._known: dict[str, DaemonSet] = {}     # the DaemonSets of the last sync
        self._gone: dict[str, DaemonSet] = {}      # deleted ones whose pods are being deleted
        self._versions = itertools.count(1)
        self._started_ns = time.time_ns()
        self._refused: set[tuple[str, str]] = set()  # (DaemonSet, admission error) already logged
        self._last_offsets: dict[str, int] = {}
        self._next_sync = 0.0
        self._orphaned_since: dict[str, float] = {}  # DaemonSet key -> when its pods were first found without it
        self._next_orphan_scan = 0.0

    def _due(self, now: float) -> bool:
        offsets = {k: v for k, v in self.cache.view_offsets().items() if k.split("/", 1)[0] in (PODS, NODES, PDBS)}
        if offsets != self._last_offsets or now >= self._next_sync:
            self._last_offsets = offsets
            return True
        return False

    def sync(self, now: float) -> list[tuple[str, str, bytes]]:
        """The records of one pass over every DaemonSet (call under the controller lock)."""
        if not self._due(now):
            return []
        out: list[events_pb2.PodRecord] = []
        next_sync = now + RESYNC_PERIOD
        with self.cache.lock:
            daemon_sets = dict(self.cache.daemon_sets)
            for key in [k for k in self._known if k not in daemon_sets]:
                self._gone[key] = self._known[key]
                log.info("daemonset %s deleted: deleting its pods", key)
            for key in [k for k in self._gone if k in daemon_sets]:  # applied again: its pods are its own again
                del self._gone[key]
            self._known = daemon_sets
            self.backoff.keep_only(daemon_sets)
            if daemon_sets or self._gone:
                nodes = [ni.node for ni in self.cache.snapshot.node_info_list if ni.node is not None]
                node_names = {n.name for n in nodes}
                owned = self._pods_by_owner()
                for key, ds in daemon_sets.items():
                    pods = [p for p in owned.get(key, ()) if controlled_by(ds, p)]
                    if not self._settled(key, now):
                        next_sync = min(next_sync, self._expected[key].until)
                        continue
                    plan = sync_plan(ds, nodes, pods, now, self.backoff)
                    if plan.retry_at is not None:
                        next_sync = min(next_sync, plan.retry_at)
                    out += self._carry_out(ds, plan, node_names, now)
                for key, ds in list(self._gone.items()):
                    pods = [p for p in owned.get(key, ()) if controlled_by(ds, p) and p.meta.deletion_timestamp is None]
                    if not pods:
                        del self._gone[key]
                    elif self._settled(key, now):
                        out += self._carry_out(ds, DaemonSetPlan(delete=[(p, "its DaemonSet is deleted")
                                                                         for p in pods]), node_names, now)
            if now >= self._next_orphan_scan:
                out += self._collect_orphans(daemon_sets, now)
                self._next_orphan_scan = now + (ORPHAN_GRACE if self._orphaned_since else RESYNC_PERIOD)
            next_sync = min(next_sync, self._next_orphan_scan)
            for key in [k for k in self._expected
                        if k not in daemon_sets and k not in self._gone and k not in self._orphaned_since]:
                del self._expected[key]
        self._next_sync = next_sync
        return pod_batch_records(out, self.source)

    def _collect_orphans(self, daemon_sets: dict[str, DaemonSet], now: float) -> list[events_pb2.PodRecord]:
        """Delete the pods DaemonSets applied here made whose DaemonSet is gone unseen (see the
        module's docstring), once orphaned for ORPHAN_GRACE."""
        out: list[events_pb2.PodRecord] = []
        orphaned: dict[str, float] = {}
        node_names = {ni.node.name for ni in self.cache.snapshot.node_info_list if ni.node is not None}
        for key, pods in self._pods_by_owner().items():
            if key in daemon_sets or key in self._gone:
                continue
            namespace, name = key.split("/", 1)
            uid = object_uid("DaemonSet", namespace, name)
            made_here = [p for p in pods if p.meta.deletion_timestamp is None and any(
                r.controller and r.kind == "DaemonSet" and r.name == name and r.uid == uid
                for r in p.meta.owner_references)]
            if not made_here:
                continue
            since = orphaned[key] = self._orphaned_since.get(key, now)
            if now - since >= ORPHAN_GRACE and self._settled(key, now):
                log.info("daemonset %s is gone (deleted while this controller was not running): deleting its pods", key)
                out += self._delete(key, [(p, "its DaemonSet is deleted") for p in made_here], node_names, now)
        self._orphaned_since = orphaned
        return out

    def _pods_by_owner(self) -> dict[str, list[Pod]]:
        """Pods controlled by a DaemonSet, by its key (namespace/name)."""
        out: dict[str, list[Pod]] = {}
        for p in self.cache.pods.values():
            for ref in p.meta.owner_references:
                if ref.controller and ref.kind == "DaemonSet":
                    out.setdefault(f"{p.namespace}/{ref.name}", []).append(p)
        return out

    def _settled(self, key: str, now: float) -> bool:
        """Whether the cache shows everything the DaemonSet's last sync published (kube's
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
            log.warning("daemonset %s: %d creation(s) and %d deletion(s) not seen back after %.0f s; syncing again",
                        key, len(expected.created), len(expected.deleted), EXPECTATIONS_TIMEOUT)
        del self._expected[key]
        return True

    def _carry_out(self, ds: DaemonSet, plan: DaemonSetPlan, node_names: set[str],
                   now: float) -> list[events_pb2.PodRecord]:
        out = []
        expected = _Expected(until=now + EXPECTATIONS_TIMEOUT)
        made: set[str] = set()
        for node_name in plan.create_on:
            name = daemon_pod_name(ds, node_name, lambda n: n in made or self.cache.get_pod(ds.namespace, n) is not None)
            pod = self._admitted(daemon_pod(ds, node_name, name, self.new_uid()))
            if pod is None:
                continue
            made.add(name)
            pod.meta.creation_timestamp = now + len(made) * 1e-6  # one after another, as the API server creates them
            pod.meta.resource_version = f"{self.source}-{self._started_ns}-{next(self._versions)}"
            expected.created.add(pod.uid)
            log.info("daemonset %s: creating pod %s for node %s", ds.key, name, node_name)
            out.append(pod_message(pod, source=self.source))
        out += self._delete(ds.key, plan.delete, node_names, now, expected)
        if out:
            self._expected[ds.key] = expected
        return out

    def _delete(self, key: str, pods: Sequence[tuple[Pod, str]], node_names: set[str], now: float,
                expected: Optional[_Expected] = None) -> list[events_pb2.PodRecord]:
        """The deletions of a DaemonSet's pods, expected back (a new expectation unless given)."""
        if expected is None and pods:
            expected = self._expected[key] = _Expected(until=now + EXPECTATIONS_TIMEOUT)
        out = []
        for pod, why in pods:
            expected.deleted.add(pod.uid)
            log.info("daemonset %s: deleting pod %s on %s: %s", key, pod.name, pod.node_name or "no node", why)
            if pod.node_name and pod.node_name in node_names and not is_terminal(pod):
                out.append(deletion_update(pod, now, self.source))  # its kubelet agent ends it
            else:  # the API server removes an unbound or ended pod at once; PodGC one whose node is gone
                out.append(pod_message(pod, deleted=True, source=self.source))
        return out

    def _admitted(self, pod: Pod) -> Optional[Pod]:
        """The pod as kube-apiserver's admission leaves it (LimitRanger, Priority,
        DefaultTolerationSeconds, RuntimeClass), or None when refused (kube: a FailedCreate event;
        retried next sync)."""
        with self.cache.lock:
            objects = AdmissionObjects(dict(self.cache.priority_classes), dict(self.cache.runtime_classes),
                                       list(self.cache.limit_ranges.values()))
        try:
            admit_created_pod(pod, objects, refuse_unknown_runtime_class=False)
        except AdmissionError as e:
            owner = pod.meta.owner_references[0].name
            if (owner, str(e)) not in self._refused:
                self._refused.add((owner, str(e)))
                log.warning("daemonset %s/%s: cannot create a pod: %s", pod.namespace, owner, e)
            return None
        return pod
