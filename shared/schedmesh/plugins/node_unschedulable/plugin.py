"""NodeUnschedulable (pkg/scheduler/framework/plugins/nodeunschedulable, v1.35).

A node with spec.unschedulable is UnschedulableAndUnresolvable unless the pod tolerates the
taint node.kubernetes.io/unschedulable:NoSchedule (the taint the node lifecycle controller puts
on cordoned nodes).
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional

import numpy as np

from schedmesh.api.types import Node, Pod
from schedmesh.framework.events import (ActionType, ClusterEvent, ClusterEventWithHint, EventResource,
                                        QueueingHint)
from schedmesh.framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterVerdicts, Status
from schedmesh.plugins.taint_toleration.tolerations import (DEFAULT_ENABLE_COMPARISON_OPERATORS,
                                                            UNSCHEDULABLE_TAINT, tolerations_tolerate_taint)

NAME = "NodeUnschedulable"
ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
ERR_REASON_UNKNOWN_CONDITION = "node(s) had unknown conditions"  # declared by kube, unused by Filter


class NodeUnschedulable(FilterPlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # node facts only

    def __init__(self, args: Optional[dict] = None, handle: Any = None,
                 enable_comparison_operators: bool = DEFAULT_ENABLE_COMPARISON_OPERATORS) -> None:
        super().__init__(args, handle)
        self.enable_comparison_operators = enable_comparison_operators
        self._unschedulable = Status.unresolvable(ERR_REASON_UNSCHEDULABLE)

    def _tolerates_unschedulable(self, pod: Pod) -> bool:
        return tolerations_tolerate_taint(pod.tolerations, UNSCHEDULABLE_TAINT, self.enable_comparison_operators)

    def filter(self, state: CycleState, pod: Pod, node_info) -> Optional[Status]:
        if not node_info.node.unschedulable or self._tolerates_unschedulable(pod):
            return None
        return self._unschedulable

    def filter_nodes(self, state: CycleState, pod: Pod, snapshot, candidates: np.ndarray) -> FilterVerdicts:
        unschedulable = snapshot.cols.unschedulable[candidates]
        if not unschedulable.any() or self._tolerates_unschedulable(pod):
            return FilterVerdicts.all_pass(len(candidates))
        return FilterVerdicts.from_mask(~unschedulable, self._unschedulable)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                                 self.is_schedulable_after_node_change),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION),
                                 self.is_schedulable_after_pod_toleration_change),
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """Queue when a schedulable node is added, or a node goes unschedulable -> schedulable."""
        if not isinstance(new_obj, Node) or (old_obj is not None and not isinstance(old_obj, Node)):
            return QueueingHint.QUEUE
        if old_obj is None:
            return QueueingHint.QUEUE if not new_obj.unschedulable else QueueingHint.QUEUE_SKIP
        if old_obj.unschedulable and not new_obj.unschedulable:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_pod_toleration_change(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """Queue when the rejected pod itself now tolerates the unschedulable taint."""
        if not isinstance(new_obj, Pod):
            return QueueingHint.QUEUE
        if new_obj.meta.uid == pod.meta.uid and self._tolerates_unschedulable(new_obj):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
