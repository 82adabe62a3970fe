"""Node health as kube-controller-manager's node lifecycle controller judges it
(pkg/controller/nodelifecycle/node_lifecycle_controller.go, v1.35: tryUpdateNodeHealth,
doNoScheduleTaintingPass, processTaintBaseEviction / doNoExecuteTaintingPass).

* A node whose kubelet has not been heard from for longer than node-monitor-grace-period
  (50 s by default since v1.32; node-startup-grace-period, 60 s, while it has never posted a
  Ready condition) gets Ready, MemoryPressure, DiskPressure and PIDPressure set to Unknown,
  reason NodeStatusUnknown, "Kubelet stopped posting node status." (a condition it never
  posted is added as Unknown, NodeStatusNeverUpdated, "Kubelet never posted node status.").
  NetworkUnavailable is left alone.
* TaintNodesByCondition: NoSchedule taints from the conditions: Ready False ->
  node.kubernetes.io/not-ready, Ready Unknown -> node.kubernetes.io/unreachable,
  MemoryPressure / DiskPressure / PIDPressure / NetworkUnavailable True -> memory-pressure /
  disk-pressure / pid-pressure / network-unavailable; spec.unschedulable ->
  node.kubernetes.io/unschedulable.
* NoExecute: Ready False -> not-ready:NoExecute, Ready Unknown -> unreachable:NoExecute (the two
  exclude each other), Ready True -> neither.
Taints the controller does not manage are kept in place; managed taints still wanted keep their
timeAdded; new ones are appended with timeAdded = now.

Not modelled: the per-zone rate limiting of NoExecute tainting and the "all nodes not ready"
disruption mode that suspends it, and leases (pass the lease's renew time as the heartbeat).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, Node, NodeCondition, Taint
from schedmesh.eviction.taint_eviction import (TAINT_NODE_DISK_PRESSURE, TAINT_NODE_MEMORY_PRESSURE,
                                               TAINT_NODE_NETWORK_UNAVAILABLE, TAINT_NODE_NOT_READY,
                                               TAINT_NODE_PID_PRESSURE, TAINT_NODE_UNREACHABLE)
from schedmesh.plugins.taint_toleration.tolerations import TAINT_NODE_UNSCHEDULABLE

DEFAULT_NODE_MONITOR_GRACE_PERIOD = 50.0
DEFAULT_NODE_STARTUP_GRACE_PERIOD = 60.0

READY = "Ready"
MEMORY_PRESSURE = "MemoryPressure"
DISK_PRESSURE = "DiskPressure"
PID_PRESSURE = "PIDPressure"
NETWORK_UNAVAILABLE = "NetworkUnavailable"

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"

REASON_NODE_STATUS_UNKNOWN = "NodeStatusUnknown"
MESSAGE_NODE_STATUS_UNKNOWN = "Kubelet stopped posting node status."
REASON_NODE_STATUS_NEVER_UPDATED = "NodeStatusNeverUpdated"
MESSAGE_NODE_STATUS_NEVER_UPDATED = "Kubelet never posted node status."

# The conditions the controller turns Unknown when the kubelet goes silent, in its order.
_MONITORED_CONDITIONS = (READY, MEMORY_PRESSURE, DISK_PRESSURE, PID_PRESSURE)

# nodeConditionToTaintKeyStatusMap
_CONDITION_TAINTS = {
    READY: {FALSE: TAINT_NODE_NOT_READY, UNKNOWN: TAINT_NODE_UNREACHABLE},
    MEMORY_PRESSURE: {TRUE: TAINT_NODE_MEMORY_PRESSURE},
    DISK_PRESSURE: {TRUE: TAINT_NODE_DISK_PRESSURE},
    NETWORK_UNAVAILABLE: {TRUE: TAINT_NODE_NETWORK_UNAVAILABLE},
    PID_PRESSURE: {TRUE: TAINT_NODE_PID_PRESSURE},
}
# Keys whose NoSchedule taints doNoScheduleTaintingPass owns.
_NO_SCHEDULE_KEYS = frozenset({TAINT_NODE_UNSCHEDULABLE, *(k for m in _CONDITION_TAINTS.values() for k in m.values())})
NOT_READY_NO_EXECUTE = Taint(TAINT_NODE_NOT_READY, NO_EXECUTE)
UNREACHABLE_NO_EXECUTE = Taint(TAINT_NODE_UNREACHABLE, NO_EXECUTE)


def find_condition(conditions: Sequence[NodeCondition], type_: str) -> Optional[NodeCondition]:
    return next((c for c in conditions if c.type == type_), None)


def ready_status(conditions: Sequence[NodeCondition]) -> str:
    """The Ready condition's status; Unknown when there is none."""
    c = find_condition(conditions, READY)
    return c.status if c is not None else UNKNOWN


def updated_conditions(node: Node, now: float, last_heartbeat: Optional[float] = None,
                       grace_period: float = DEFAULT_NODE_MONITOR_GRACE_PERIOD,
                       startup_grace_period: float = DEFAULT_NODE_STARTUP_GRACE_PERIOD) -> list[NodeCondition]:
    """The node's conditions after tryUpdateNodeHealth. `last_heartbeat` is when the controller
    last saw the kubelet's status or lease change; by default the Ready condition's
    lastHeartbeatTime, or the node's creation time while it has no Ready condition."""
    conditions = [replace(c) for c in node.conditions]
    ready = find_condition(conditions, READY)
    if ready is None:
        grace = startup_grace_period
        probe = last_heartbeat if last_heartbeat is not None else node.meta.creation_timestamp
    else:
        grace = grace_period
        probe = last_heartbeat if last_heartbeat is not None else ready.last_heartbeat_time
    if probe is None:
        probe = now  # "Missing timestamp for Node. Assuming now as a timestamp"
    if not now > probe + grace:
        return conditions
    for type_ in _MONITORED_CONDITIONS:
        current = find_condition(conditions, type_)
        if current is None:
            conditions.append(NodeCondition(type_, UNKNOWN, REASON_NODE_STATUS_NEVER_UPDATED,
                                            MESSAGE_NODE_STATUS_NEVER_UPDATED,
                                            last_heartbeat_time=node.meta.creation_timestamp))
        elif current.status != UNKNOWN:
            current.status = UNKNOWN
            current.reason = REASON_NODE_STATUS_UNKNOWN
            current.message = MESSAGE_NODE_STATUS_UNKNOWN
    return conditions


def no_schedule_taints(conditions: Sequence[NodeCondition], unschedulable: bool = False) -> list[Taint]:
    """TaintNodesByCondition: the NoSchedule taints the conditions (and spec.unschedulable) call for."""
    taints = []
    for c in conditions:
        key = _CONDITION_TAINTS.get(c.type, {}).get(c.status)
        if key is not None:
            taints.append(Taint(key, NO_SCHEDULE))
    if unschedulable:
        taints.append(Taint(TAINT_NODE_UNSCHEDULABLE, NO_SCHEDULE))
    return taints


def no_execute_taint(conditions: Sequence[NodeCondition]) -> Optional[Taint]:
    """The NoExecute taint the Ready condition calls for: not-ready for False, unreachable for
    Unknown, none for True or while there is no Ready condition (kube retries until there is)."""
    ready = find_condition(conditions, READY)
    if ready is None:
        return None
    if ready.status == FALSE:
        return NOT_READY_NO_EXECUTE
    if ready.status == UNKNOWN:
        return UNREACHABLE_NO_EXECUTE
    return None


def _managed(taint: Taint) -> bool:
    if taint.effect == NO_SCHEDULE:
        return taint.key in _NO_SCHEDULE_KEYS
    return taint.effect == NO_EXECUTE and taint.key in (TAINT_NODE_NOT_READY, TAINT_NODE_UNREACHABLE)


def desired_taints(node: Node, conditions: Sequence[NodeCondition], now: float) -> list[Taint]:
    """The node's taints once the controller has caught up with `conditions`."""
    wanted = no_schedule_taints(conditions, node.unschedulable)
    ne = no_execute_taint(conditions)
    if ne is not None:
        wanted.append(ne)
    wanted_ids = {(t.key, t.effect) for t in wanted}
    kept = [t for t in node.taints if not _managed(t) or (t.key, t.effect) in wanted_ids]
    have = {(t.key, t.effect) for t in kept}
    added = [replace(t, time_added=now) for t in wanted if (t.key, t.effect) not in have]
    return kept + added


@dataclass(frozen=True)
class NodeHealth:
    conditions: tuple[NodeCondition, ...]
    taints: tuple[Taint, ...]
    ready: str  # True | False | Unknown

    def changed(self, node: Node) -> bool:
        return list(self.conditions) != list(node.conditions) or list(self.taints) != list(node.taints)


def node_health(node: Node, now: float, last_heartbeat: Optional[float] = None,
                grace_period: float = DEFAULT_NODE_MONITOR_GRACE_PERIOD,
                startup_grace_period: float = DEFAULT_NODE_STARTUP_GRACE_PERIOD) -> NodeHealth:
    """Conditions and taints the node should have at `now`."""
    conditions = updated_conditions(node, now, last_heartbeat, grace_period, startup_grace_period)
    return NodeHealth(tuple(conditions), tuple(desired_taints(node, conditions, now)), ready_status(conditions))
