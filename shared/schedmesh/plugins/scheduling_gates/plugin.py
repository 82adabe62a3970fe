"""SchedulingGates (pkg/scheduler/framework/plugins/schedulinggates, v1.35): a pod with
spec.schedulingGates stays out of the active queue until every gate is removed."""
from __future__ import annotations

from typing import Any, ClassVar, Optional

from schedmesh.api.types import Pod
from schedmesh.framework.events import (ActionType, ClusterEvent, ClusterEventWithHint, EventResource,
                                        QueueingHint)
from schedmesh.framework.interface import EnqueueExtensions, PreEnqueuePlugin, Status

NAME = "SchedulingGates"


def gates_message(gates: list[str]) -> str:
    # Go formats the []string with %v: "[a b]".
    return f"waiting for scheduling gates: [{' '.join(gates)}]"


class SchedulingGates(PreEnqueuePlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # the pod's own gates

    def pre_enqueue(self, pod: Pod) -> Optional[Status]:
        if not pod.scheduling_gates:
            return None
        return Status.unresolvable(gates_message(list(pod.scheduling_gates)))

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
                                     self.is_schedulable_after_scheduling_gates_eliminated)]

    def is_schedulable_after_scheduling_gates_eliminated(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """Only the gated pod's own update (its last gate removed) can release it."""
        if not isinstance(new_obj, Pod):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if new_obj.meta.uid == pod.meta.uid else QueueingHint.QUEUE_SKIP
