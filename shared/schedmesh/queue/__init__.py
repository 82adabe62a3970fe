"""kube-scheduler v1.35's scheduling queue: activeQ, backoffQ, unschedulable pods, queueing hints,
in-flight events, and the nominator. See scheduling_queue.py for how it is driven."""
from schedmesh.queue.active_queue import InFlightEvent
from schedmesh.queue.clock import Clock, FakeClock, RealClock
from schedmesh.queue.hints import (EVENT_ASSIGNED_POD_ADD, EVENT_ASSIGNED_POD_UPDATE, EVENT_UNSCHEDULED_POD_ADD,
                                   EVENT_UNSCHEDULED_POD_DELETE, EVENT_UNSCHEDULED_POD_UPDATE, QueueingHintFunction,
                                   QueueingHintMap, QueueingStrategy, build_queueing_hint_map, event_label,
                                   match_cluster_events, pod_scheduling_properties_change)
from schedmesh.queue.nominator import NominatingInfo, NominatingMode, Nominator
from schedmesh.queue.queued_pod_info import QueuedPodInfo
from schedmesh.queue.scheduling_queue import (ACTIVE_Q, BACKOFF_Q, GATED, UNSCHEDULABLE_Q, PendingPod, PriorityQueue,
                                              QueueError)

__all__ = [
    "ACTIVE_Q", "BACKOFF_Q", "GATED", "UNSCHEDULABLE_Q", "Clock", "EVENT_ASSIGNED_POD_ADD", "EVENT_ASSIGNED_POD_UPDATE",
    "EVENT_UNSCHEDULED_POD_ADD", "EVENT_UNSCHEDULED_POD_DELETE", "EVENT_UNSCHEDULED_POD_UPDATE", "FakeClock",
    "InFlightEvent", "NominatingInfo", "NominatingMode", "Nominator", "PendingPod", "PriorityQueue", "QueueError",
    "QueueingHintFunction", "QueueingHintMap", "QueueingStrategy", "QueuedPodInfo", "RealClock",
    "build_queueing_hint_map", "event_label", "match_cluster_events", "pod_scheduling_properties_change",
]
