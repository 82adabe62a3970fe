"""NodeName (pkg/scheduler/framework/plugins/nodename, v1.35): a pod naming a node in
spec.nodeName fits only that node."""
from __future__ import annotations

from typing import ClassVar, Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource
from schedmesh.framework.interface import CycleState, EnqueueExtensions, FilterPlugin, FilterVerdicts, Status

NAME = "NodeName"
ERR_REASON = "node(s) didn't match the requested node name"


def fits(pod: Pod, node_info) -> bool:
    """nodename.Fits: no requested node, or the node is the requested one."""
    return not pod.node_name or pod.node_name == node_info.node.meta.name


class NodeName(FilterPlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # the node name only

    def __init__(self, args: Optional[dict] = None, handle=None) -> None:
        super().__init__(args, handle)
        self._mismatch = Status.unresolvable(ERR_REASON)

    def filter(self, state: CycleState, pod: Pod, node_info) -> Optional[Status]:
        return None if fits(pod, node_info) else self._mismatch

    def filter_nodes(self, state: CycleState, pod: Pod, snapshot, candidates: np.ndarray) -> FilterVerdicts:
        if not pod.node_name:
            return FilterVerdicts.all_pass(len(candidates))
        # index_of gives -1 for an unknown node, which no candidate row equals.
        return FilterVerdicts.from_mask(candidates == snapshot.cols.index_of(pod.node_name), self._mismatch)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        # Only a new node can help; no hint function, i.e. always Queue.
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD))]
