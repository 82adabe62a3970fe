"""Cluster events and queueing hints (kube-scheduler's ClusterEvent / QueueingHintFn).

A plugin that rejected a pod registers the events that might make it schedulable, each with
an optional hint function; the queue moves a pod out of the unschedulable pods only when an
event one of its rejecting plugins registered arrives and the hint says Queue.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Optional


class ActionType(enum.IntFlag):
    NONE = 0
    ADD = 1 << 0
    DELETE = 1 << 1
    UPDATE_NODE_ALLOCATABLE = 1 << 2
    UPDATE_NODE_LABEL = 1 << 3
    UPDATE_NODE_TAINT = 1 << 4
    UPDATE_NODE_CONDITION = 1 << 5
    UPDATE_NODE_ANNOTATION = 1 << 6
    UPDATE_NODE_DECLARED_FEATURE = 1 << 7
    UPDATE_POD_LABEL = 1 << 8
    UPDATE_POD_SCALE_DOWN = 1 << 9
    UPDATE_POD_TOLERATION = 1 << 10
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 1 << 11
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 1 << 12
    ALL = (1 << 13) - 1
    UPDATE = ALL & ~(ADD | DELETE)


class EventResource(str, enum.Enum):
    POD = "Pod"
    # Kube splits pod events by whether the pod is assigned; the queue uses these two.
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnscheduledPod"
    NODE = "Node"
    WILDCARD = "*"


class QueueingHint(enum.IntEnum):
    QUEUE_SKIP = 0
    QUEUE = 1


# hint(pod, old_obj, new_obj) -> QueueingHint; old_obj is None on Add, new_obj None on Delete.
QueueingHintFn = Callable[[Any, Any, Any], QueueingHint]


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    resource: EventResource
    action: ActionType
    custom_label: str = ""

    def label(self) -> str:
        return self.custom_label or f"{self.resource.value}{self.action.name}"

    def is_wildcard(self) -> bool:
        return self.resource == EventResource.WILDCARD and self.action == ActionType.ALL

    def matches(self, incoming: "ClusterEvent") -> bool:
        """Does this registered event cover the incoming one?"""
        if self.is_wildcard():
            return True
        if not (self.action & incoming.action):
            return False
        # An incoming event wider than the registration (e.g. a generic Node/Update against a
        # Node/UpdateNodeLabel registration) does not match, as in kube's MatchClusterEvents.
        if int(incoming.action) > int(self.action):
            return False
        r, i = self.resource, incoming.resource
        if r == EventResource.WILDCARD or r == i:
            return True
        # A registration for Pod covers both assigned and unscheduled pods.
        return r == EventResource.POD and i in (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD)


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    event: ClusterEvent
    hint: Optional[QueueingHintFn] = None


# Events the queue itself generates.
EVENT_UNSCHEDULABLE_TIMEOUT = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, "UnschedulableTimeout")
EVENT_FORCE_ACTIVATE = ClusterEvent(EventResource.WILDCARD, ActionType.ALL, "ForceActivate")
EVENT_ASSIGNED_POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE)
EVENT_NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD)
