"""Cluster events and queueing hints as the scheduling queue uses them.

* `match_cluster_events` is kube's framework.MatchClusterEvents: a registered event covers an
  incoming one when the resources match and the incoming action is the same or MORE specific
  (Node/Update covers Node/UpdateNodeLabel; Node/UpdateNodeLabel does not cover Node/Update).
* `build_queueing_hint_map` is kube's buildQueueingHintMap over one framework.
* `pod_scheduling_properties_change` is kube's PodSchedulingPropertiesChange (which UpdatePodXYZ
  events a pod update amounts to).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from schedmesh.api.quantity import milli_value
from schedmesh.api.resources import pod_requests, same_request_inputs
from schedmesh.api.types import Pod
from schedmesh.framework.events import ActionType, ClusterEvent, EventResource, QueueingHint, QueueingHintFn
from schedmesh.framework.interface import (EnqueueExtensions, FilterPlugin, PermitPlugin, PreEnqueuePlugin,
                                           PreFilterPlugin, ReservePlugin)

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.framework.runtime import Framework

# Events the queue raises itself or is told about (kube's framework.Event*); the wildcard ones
# (EVENT_UNSCHEDULABLE_TIMEOUT, EVENT_FORCE_ACTIVATE) and EVENT_ASSIGNED_POD_DELETE come from framework.events.
EVENT_ASSIGNED_POD_ADD = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD)
EVENT_ASSIGNED_POD_UPDATE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.UPDATE)
EVENT_UNSCHEDULED_POD_ADD = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.ADD)
EVENT_UNSCHEDULED_POD_UPDATE = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.UPDATE)
EVENT_UNSCHEDULED_POD_DELETE = ClusterEvent(EventResource.UNSCHEDULED_POD, ActionType.DELETE)

# Why a pod moved between queues (metric/log labels, as kube names them).
SCHEDULE_ATTEMPT_FAILURE = "ScheduleAttemptFailure"
BACKOFF_COMPLETE = "BackoffComplete"
POP_FROM_BACKOFF_Q = "PopFromBackoffQ"
FORCE_ACTIVATE = "ForceActivate"
UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"

# Plugins able to reject a pod, hence expected to say which events may make it schedulable.
_REJECTING_PLUGIN_TYPES = (PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, ReservePlugin, PermitPlugin)


class QueueingStrategy(enum.IntEnum):
    """Where an event sends a pod out of the unschedulable pool (kube's queueingStrategy)."""

    QUEUE_SKIP = 0  # stay in unschedulablePods
    QUEUE_AFTER_BACKOFF = 1  # backoffQ, or activeQ if its backoff is already over
    QUEUE_IMMEDIATELY = 2  # activeQ, skipping backoff (a Pending plugin said Queue)


@dataclass(frozen=True, slots=True)
class QueueingHintFunction:
    plugin_name: str
    fn: QueueingHintFn


# Registered event -> the hint functions of the plugins that registered it, in registration order.
QueueingHintMap = dict[ClusterEvent, list[QueueingHintFunction]]


def default_queueing_hint(pod: object, old_obj: object, new_obj: object) -> QueueingHint:
    return QueueingHint.QUEUE


def is_wildcard(ev: ClusterEvent) -> bool:
    return ev.resource == EventResource.WILDCARD and ev.action == ActionType.ALL


def _match_resources(registered: EventResource, incoming: EventResource) -> bool:
    return (registered == EventResource.WILDCARD or registered == incoming
            or (registered == EventResource.POD
                and incoming in (EventResource.ASSIGNED_POD, EventResource.UNSCHEDULED_POD)))


def match_cluster_events(registered: ClusterEvent, incoming: ClusterEvent) -> bool:
    """Does the registered event cover the incoming one? (kube's MatchClusterEvents)"""
    if is_wildcard(registered):
        return True
    return (_match_resources(registered.resource, incoming.resource)
            and bool(registered.action & incoming.action)
            and int(incoming.action) <= int(registered.action))


def match_any_cluster_event(incoming: ClusterEvent, registered: Iterable[ClusterEvent]) -> bool:
    return any(match_cluster_events(r, incoming) for r in registered)


def unrolled_wildcard_events() -> list[ClusterEvent]:
    """Every resource with All actions: what a rejecting plugin without EnqueueExtensions gets."""
    return [ClusterEvent(EventResource.POD, ActionType.ALL), ClusterEvent(EventResource.NODE, ActionType.ALL)]


def build_queueing_hint_map(framework: "Framework") -> QueueingHintMap:
    """kube's buildQueueingHintMap over the framework's rejecting plugins (fillEnqueueExtensions)."""
    hints: QueueingHintMap = {}
    for name, plugin in framework.plugins.items():
        if not isinstance(plugin, _REJECTING_PLUGIN_TYPES):
            continue
        if isinstance(plugin, EnqueueExtensions):
            registered = [(e.event, e.hint) for e in plugin.events_to_register()]
        else:
            # No EnqueueExtensions: any event may make the pod schedulable.
            registered = [(ev, None) for ev in unrolled_wildcard_events()]
        if not registered:
            # Only the pod's own update can help (e.g. SchedulingGates without hints).
            continue
        node_added = node_taint_updated = False
        for ev, fn in registered:
            if ev.resource == EventResource.NODE:
                node_added |= bool(ev.action & ActionType.ADD)
                node_taint_updated |= bool(ev.action & ActionType.UPDATE_NODE_TAINT)
            hints.setdefault(ev, []).append(QueueingHintFunction(name, fn or default_queueing_hint))
        if node_added and not node_taint_updated:
            # kube #109437: a node that becomes schedulable by losing a taint is reported as
            # Node/UpdateNodeTaint, so plugins interested in NodeAdd get that event too.
            ev = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT)
            hints.setdefault(ev, []).append(QueueingHintFunction(name, default_queueing_hint))
    return hints


def plugin_to_events(hint_maps: Iterable[QueueingHintMap]) -> dict[str, list[ClusterEvent]]:
    """Which events each plugin registered, over all profiles (kube's buildEventMap)."""
    out: dict[str, list[ClusterEvent]] = {}
    for m in hint_maps:
        for ev, fns in m.items():
            for f in fns:
                out.setdefault(f.plugin_name, []).append(ev)
    return out


# ---- what a pod update amounts to ---------------------------------------------------------------

def _labels_changed(new: Pod, old: Pod) -> ActionType:
    # Semantic.DeepEqual: a nil map equals an empty one, as dicts do.
    return ActionType.UPDATE_POD_LABEL if new.meta.labels != old.meta.labels else ActionType.NONE


def _scaled_down(new: Pod, old: Pod) -> ActionType:
    if same_request_inputs(new, old):
        return ActionType.NONE  # a copy sharing what requests are made of (a status update): unchanged
    new_reqs, old_reqs = pod_requests(new), pod_requests(old)
    for name, old_q in old_reqs.items():
        new_q = new_reqs.get(name)
        if new_q is None or milli_value(old_q) > milli_value(new_q):
            return ActionType.UPDATE_POD_SCALE_DOWN
    return ActionType.NONE


def _gates_eliminated(new: Pod, old: Pod) -> ActionType:
    if not new.scheduling_gates and old.scheduling_gates:
        return ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    return ActionType.NONE


def _tolerations_changed(new: Pod, old: Pod) -> ActionType:
    # The API only allows adding tolerations, so a length change is every change.
    return ActionType.UPDATE_POD_TOLERATION if len(new.tolerations) != len(old.tolerations) else ActionType.NONE


_POD_CHANGE_EXTRACTORS = (_labels_changed, _scaled_down, _gates_eliminated, _tolerations_changed)


def pod_scheduling_properties_change(new: Pod, old: Pod) -> list[ClusterEvent]:
    """The specific UpdatePodXYZ events of an update, or the generic Update when none applies.

    (UpdatePodGeneratedResourceClaim never fires: the pod model keeps no resourceClaimStatuses.)
    """
    resource = EventResource.ASSIGNED_POD if new.node_name else EventResource.UNSCHEDULED_POD
    events = [ClusterEvent(resource, a) for fn in _POD_CHANGE_EXTRACTORS if (a := fn(new, old)) != ActionType.NONE]
    return events or [ClusterEvent(resource, ActionType.UPDATE)]


def event_label(ev: ClusterEvent) -> str:
    """kube's ClusterEvent.Label(): custom label, else resource + action (e.g. "NodeAdd")."""
    if ev.custom_label:
        return ev.custom_label
    return f"{_RESOURCE_LABEL.get(ev.resource, ev.resource.value)}{_action_label(ev.action)}"


_RESOURCE_LABEL = {EventResource.UNSCHEDULED_POD: "UnschedulablePod"}
_ACTION_LABEL = {
    ActionType.ADD: "Add", ActionType.DELETE: "Delete", ActionType.UPDATE_NODE_ALLOCATABLE: "UpdateNodeAllocatable",
    ActionType.UPDATE_NODE_LABEL: "UpdateNodeLabel", ActionType.UPDATE_NODE_TAINT: "UpdateNodeTaint",
    ActionType.UPDATE_NODE_CONDITION: "UpdateNodeCondition", ActionType.UPDATE_NODE_ANNOTATION: "UpdateNodeAnnotation",
    ActionType.UPDATE_NODE_DECLARED_FEATURE: "UpdateNodeDeclaredFeature", ActionType.UPDATE_POD_LABEL: "UpdatePodLabel",
    ActionType.UPDATE_POD_SCALE_DOWN: "UpdatePodScaleDown", ActionType.UPDATE_POD_TOLERATION: "UpdatePodToleration",
    ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED: "UpdatePodSchedulingGatesEliminated",
    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM: "UpdatePodGeneratedResourceClaim",
    ActionType.ALL: "All", ActionType.UPDATE: "Update",
}


def _action_label(a: ActionType) -> str:
    return _ACTION_LABEL.get(ActionType(a), "")

