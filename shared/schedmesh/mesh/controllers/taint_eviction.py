"""The taint-eviction controller: pods on nodes with NoExecute taints they do not tolerate are
deleted at once; those that tolerate them for tolerationSeconds, when that time is up
(schedmesh.eviction.taint_eviction.schedule_deletion decides). A deletion is graceful: the pod
gets the DisruptionTarget condition (DeletionByTaintManager) and metadata.deletionTimestamp in
one delta, its kubelet agent ends it, and the Event "TaintManagerEviction: Marking for deletion
Pod NS/NAME" says why (kube's words); a pending deletion that no longer applies is cancelled with
"Cancelling deletion of Pod NS/NAME".

A node applied as an object (no kubelet agent heartbeats for it) keeps the pods it was applied
with under the NoExecute taints it was applied with, as the recorded cluster it comes from had
them; a NoExecute taint added to it later, with `schedmesh taint` (a node delta), evicts as on
any node: a user tainting a node of their own YAML expects kube's taint manager.
"""
from __future__ import annotations

import logging
from typing import Callable

from schedmesh.api.types import NO_EXECUTE, Node, Pod, PodCondition, Taint
from schedmesh.eviction.eviction_api import DISRUPTION_TARGET
from schedmesh.eviction.taint_eviction import (EVENT_REASON_TAINT_MANAGER_EVICTION, MESSAGE_DELETION_BY_TAINT_MANAGER,
                                               REASON_DELETION_BY_TAINT_MANAGER, ScheduledDeletion,
                                               cancelling_deletion_message, marking_for_deletion_message,
                                               no_execute_taints, schedule_deletion)
from schedmesh.mesh.cluster_cache import ClusterCache, is_terminal
from schedmesh.mesh.controllers.podcontrol import EXPECTATIONS_TIMEOUT
from schedmesh.mesh.records import deletion_update, event_batch_records, pod_batch_records
from schedmesh.telemetry import metrics
from schedmesh.v1 import events_pb2
from schedmesh.v1.events_pb2 import NodeRecord

log = logging.getLogger("schedmesh.controllers.taint_eviction")


def event(pod: Pod, reason: str, message: str, source: str, now: float, type_: str = "Normal") -> events_pb2.Event:
    return events_pb2.Event(pod_uid=pod.uid, pod=pod.key, type=type_, reason=reason, message=message,
                            source=source, timestamp=now)


class TaintEvictionController:
    """`monitored(node)`: whether the node has a kubelet (the node-lifecycle controller receives
    its heartbeats); nodes applied as objects have none: only the NoExecute taints added to them
    after they were applied count there (the module's docstring)."""

    def __init__(self, cache: ClusterCache, source: str = "",
                 monitored: Callable[[str], bool] = lambda node: True) -> None:
        self.cache, self.monitored = cache, monitored
        self.source = source
        self.scheduled: dict[str, ScheduledDeletion] = {}  # pod uid -> its pending deletion
        # uid -> when marked for deletion, until the cache shows it; marked again if it does not
        # within EXPECTATIONS_TIMEOUT (the record lost with a memory broker that restarted, or
        # overtaken by its owner's re-publication), as the pod controllers' expectations expire
        self.deleted: dict[str, float] = {}
        # Nodes with a NoExecute taint, kept by a cache listener: sync looks at no node while
        # there is none (a pass over 5,000 nodes every 0.5 s was a third of an idle
        # controller manager's CPU).
        self._tainted: set[str] = set()
        # By node: the (key, effect) of NoExecute taints node deltas added since its last whole
        # record (Apply, or its agent's registration). Read from the log, so a restarted
        # controller-manager finds the same.
        self._added_live: dict[str, set[tuple[str, str]]] = {}
        with cache.lock:
            for ni in cache.snapshot.node_info_list:
                if ni.node is not None and no_execute_taints(ni.node.taints):
                    self._tainted.add(ni.node.name)
            cache.listeners.append(self._on_change)
            cache.node_record_hooks.append(self._on_node_record)

    def _on_node_record(self, rec: NodeRecord) -> None:
        if not rec.HasField("update"):
            self._added_live.pop(rec.node.metadata.name, None)  # the node as applied (or gone)
            return
        u = rec.update
        live = self._added_live.get(u.name, set())
        if u.set_taints:
            live &= {(t.key, t.effect) for t in u.taints}
        live = {(k, e) for k, e in live
                if not any(r.key == k and (not r.effect or r.effect == e) for r in u.remove_taints)}
        live |= {(t.key, t.effect) for t in u.add_taints if t.effect == NO_EXECUTE}
        if live:
            self._added_live[u.name] = live
        else:
            self._added_live.pop(u.name, None)

    def _evicting_taints(self, node: Node) -> list[Taint]:
        """The node's NoExecute taints that evict: all of them where a kubelet runs the node,
        those added since it was applied on a node applied as an object."""
        taints = no_execute_taints(node.taints)
        if self.monitored(node.name):
            return taints
        live = self._added_live.get(node.name, ())
        return [t for t in taints if (t.key, t.effect) in live]

    def _on_change(self, kind: str, old: object, new: object) -> None:
        if kind != "node":
            return
        if new is not None and no_execute_taints(new.taints):
            self._tainted.add(new.name)
        else:
            self._tainted.discard((new if new is not None else old).name)

    def sync(self, now: float) -> list[tuple[str, str, bytes]]:
        updates, events = [], []
        seen: set[str] = set()
        with self.cache.lock:
            tainted = self._tainted
            for ni in self.cache.snapshot.node_info_list if tainted else ():
                if ni.node is None or ni.node.name not in tainted:
                    continue
                taints = self._evicting_taints(ni.node)
                if not taints:
                    continue
                for info in ni.pods:
                    pod = self.cache.pods.get(info.pod.uid, info.pod)
                    uid = pod.uid
                    if pod.meta.deletion_timestamp is not None or is_terminal(pod):
                        self.deleted.pop(uid, None)
                        continue
                    seen.add(uid)
                    marked = self.deleted.get(uid)
                    if marked is not None and now - marked < EXPECTATIONS_TIMEOUT:
                        continue  # marked; its deletion is on its way back from the broker
                    if marked is None:
                        deletion = schedule_deletion(pod, taints, now, self.scheduled.get(uid))
                        if deletion is None:
                            if self.scheduled.pop(uid, None) is not None:
                                events.append(event(pod, EVENT_REASON_TAINT_MANAGER_EVICTION,
                                                    cancelling_deletion_message(pod), self.source, now))
                            continue
                        self.scheduled[uid] = deletion
                        if not deletion.due(now):
                            continue
                        del self.scheduled[uid]
                        why = (f"untolerated taint {deletion.untolerated_taint}" if deletion.untolerated_taint
                               else f"tolerationSeconds ended ({now - deletion.created_at:.1f}s)")
                    elif schedule_deletion(pod, taints, now, None) is None:  # the node's taints changed
                        del self.deleted[uid]
                        continue
                    else:  # its time had come: marked again at once
                        why = f"its deletion, marked {now - marked:.0f}s ago, was not seen back; marked again"
                    self.deleted[uid] = now
                    log.info("node %s: deleting pod %s: %s", ni.node.name, pod.key, why)
                    target = PodCondition(DISRUPTION_TARGET, "True", REASON_DELETION_BY_TAINT_MANAGER,
                                          MESSAGE_DELETION_BY_TAINT_MANAGER)
                    updates.append(deletion_update(pod, now, self.source, target))
                    events.append(event(pod, EVENT_REASON_TAINT_MANAGER_EVICTION,
                                        marking_for_deletion_message(pod), self.source, now))
                    metrics.observe_eviction(EVENT_REASON_TAINT_MANAGER_EVICTION)
            for uid in [u for u in self.scheduled if u not in seen]:  # taint gone, pod gone or moved
                pod = self.cache.pods.get(uid)
                del self.scheduled[uid]
                if pod is not None and not is_terminal(pod) and pod.meta.deletion_timestamp is None:
                    events.append(event(pod, EVENT_REASON_TAINT_MANAGER_EVICTION,
                                        cancelling_deletion_message(pod), self.source, now))
            # (a pod gone, or on a node no longer tainted: a taint added again starts afresh)
            self.deleted = {u: at for u, at in self.deleted.items() if u in seen}
        return [*pod_batch_records(updates, self.source), *event_batch_records(events)]
