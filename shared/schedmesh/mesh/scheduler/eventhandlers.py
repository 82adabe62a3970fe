"""Cluster events -> the scheduling queue, as kube-scheduler's eventhandlers.go: pod and node
changes applied to the cluster cache move pods between the queue's sub-queues through the
queueing hints (schedmesh.queue.hints)."""
from __future__ import annotations

import logging
from typing import Any, Optional

from opentelemetry import trace

from schedmesh.api.types import Node, Pod, same_but_status
from schedmesh.bus import Record
from schedmesh.framework.events import (EVENT_ASSIGNED_POD_DELETE, EVENT_NODE_ADD, ActionType, ClusterEvent,
                                        EventResource)
from schedmesh.mesh import records
from schedmesh.queue.hints import EVENT_ASSIGNED_POD_ADD, pod_scheduling_properties_change
from schedmesh.queue.scheduling_queue import QueueError
from schedmesh.v1 import events_pb2
from schedmesh.mesh.scheduler.state import MAX_DELETED_NOTES, MAX_EVENTS_PER_POD, NOTES_TTL_SECONDS, PodNotes

log = logging.getLogger("schedmesh.queue_manager")
tracer = trace.get_tracer("schedmesh.queue_manager")

def _spec_changed(old: Pod, new: Pod) -> bool:
    """kube's isPodUpdated: a change other than the status or the resourceVersion. Compared field
    by field, shared objects by identity first (each of an unschedulable pod's status reports
    encoded both copies whole before)."""
    return not same_but_status(old, new)


def _node_events(old: Node, new: Node) -> list[ClusterEvent]:
    """kube's nodeSchedulingPropertiesChange."""
    acts = []
    if old.unschedulable != new.unschedulable:
        acts.append(ActionType.UPDATE_NODE_TAINT)
    if old.allocatable != new.allocatable:
        acts.append(ActionType.UPDATE_NODE_ALLOCATABLE)
    if old.meta.labels != new.meta.labels:
        acts.append(ActionType.UPDATE_NODE_LABEL)
    if old.taints != new.taints and ActionType.UPDATE_NODE_TAINT not in acts:
        acts.append(ActionType.UPDATE_NODE_TAINT)
    if [(c.type, c.status) for c in old.conditions] != [(c.type, c.status) for c in new.conditions]:
        acts.append(ActionType.UPDATE_NODE_CONDITION)
    if old.meta.annotations != new.meta.annotations:
        acts.append(ActionType.UPDATE_NODE_ANNOTATION)
    return [ClusterEvent(EventResource.NODE, a) for a in acts]


class EventHandlers:
    """Methods of QueueManager (kube: methods of *Scheduler in eventhandlers.go); called under cache.lock."""

    def _mine(self, pod: Optional[Pod]) -> bool:
        return pod is not None and pod.scheduler_name in self.frameworks

    def _on_change(self, kind: str, old: Any, new: Any) -> None:
        try:
            if kind == "pod":
                self._on_pod(old, new)
            elif kind == "node":
                self._on_node(old, new)
        except QueueError as e:
            log.debug("queue: %s", e)
        except Exception:
            log.exception("cluster event handler failed")

    def _on_pod(self, old: Optional[Pod], new: Optional[Pod]) -> None:
        old_bound = old is not None and bool(old.node_name)
        new_bound = new is not None and bool(new.node_name)
        if new is not None and new_bound:
            with self._assumed_lock:
                self.assumed.pop(new.uid, None)
            self._publish_unpublished(new.uid)
        if new is None:  # deleted
            if old is None:
                return
            if old.uid not in self.cache.pods:  # deleted, not ended (an ended pod stays listed, events too)
                # Its events stay listed (`get events`) until they are NOTES_TTL_SECONDS old, as kube
                # keeps events; of many pods deleted in that time, the last MAX_DELETED_NOTES.
                with self._notes_lock:
                    if old.uid in self.notes:
                        self._deleted_notes.append(old.uid)
                        while len(self._deleted_notes) > MAX_DELETED_NOTES:
                            uid = self._deleted_notes.popleft()
                            if uid not in self.cache.pods:  # (not created again meanwhile)
                                self.notes.pop(uid, None)
            with self._assumed_lock:  # (the cache ended its assumption: ClusterCache._apply_pod)
                self.assumed.pop(old.uid, None)
            if old_bound:
                self.queue.move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_DELETE, old, None)
            elif self._mine(old):
                self.queue.delete(old)
                # kube's deletePodFromSchedulingQueue: a pod held by Permit is rejected ("removed"),
                # and the room it was assumed to take frees pods as an assigned pod's deletion.
                if self.waiting_pods.reject_waiting_pod(old.uid):
                    self.queue.move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_DELETE, old, None)
            return
        if new_bound:
            if old is None or not old_bound:
                if old is not None and self._mine(old):
                    self.queue.delete(old)  # bound by someone: no longer ours to schedule
                self.queue.move_all_to_active_or_backoff_queue(EVENT_ASSIGNED_POD_ADD, None, new)
            else:
                for ev in pod_scheduling_properties_change(new, old):
                    self.queue.move_all_to_active_or_backoff_queue(ev, old, new)
            return
        if not self._mine(new):
            return
        if new.meta.deletion_timestamp is not None:
            self.queue.delete(new)
            return
        if old is None:
            self.queue.add(new)
        elif _spec_changed(old, new) or old.nominated_node_name != new.nominated_node_name:
            # A nomination set or cleared by preemption goes through the queue's Update as in
            # kube (its nominator follows, and the queued pod carries the node to try first).
            with self._assumed_lock:
                if new.uid in self.assumed:
                    return
            self.queue.update(old, new)

    def _on_node(self, old: Optional[Node], new: Optional[Node]) -> None:
        if new is None:
            return  # kube: a node deletion makes no pod schedulable
        if old is None:
            self.queue.move_all_to_active_or_backoff_queue(EVENT_NODE_ADD, None, new)
            return
        for ev in _node_events(old, new):
            self.queue.move_all_to_active_or_backoff_queue(ev, old, new)

    def _prune_notes(self, now: float) -> int:
        """Drop the notes about pods the cache does not hold whose last event is older than
        NOTES_TTL_SECONDS (events of a pod already deleted); returns how many."""
        with self.cache.lock:
            live = set(self.cache.pods)
        with self._notes_lock:
            stale = [uid for uid, n in self.notes.items()
                     if uid not in live and (not n.events or n.events[-1].timestamp < now - NOTES_TTL_SECONDS)]
            for uid in stale:
                del self.notes[uid]
        return len(stale)

    def _on_event_record(self, r: Record) -> None:
        if r.value is None:
            return
        try:
            batch = records.expand(events_pb2.Event.FromString(r.value))
        except Exception:  # a bad record must not stop the reader; said, as the cache follower does
            log.warning("cannot read event record %s/%d@%d", r.topic, r.partition, r.offset, exc_info=True)
            return
        with self._notes_lock:
            for ev in batch:
                n = self.notes.setdefault(ev.pod_uid, PodNotes())
                n.events.append(ev)
                del n.events[:-MAX_EVENTS_PER_POD]
                if ev.reason == "FailedScheduling":
                    n.message = ev.message
                if ev.trace_id:
                    n.trace_id = ev.trace_id

