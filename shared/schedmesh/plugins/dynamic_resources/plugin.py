"""DynamicResources (pkg/scheduler/framework/plugins/dynamicresources, v1.35), reduced to what a
cluster without ResourceClaims sees.

OUT OF SCOPE: ResourceClaims, DeviceClasses, ResourceSlices and DRA-backed extended resources
(DRAExtendedResource is off by default in v1.35). schedmesh's Pod carries no
spec.resourceClaims, so every pod is a pod without claims, and this plugin reproduces exactly
what v1.35 does for such a pod (the feature gate DynamicResourceAllocation is GA and on):

* PreEnqueue: nothing to wait for.
* PreFilter: writes an empty state, then returns Skip, so Filter is skipped for the pod.
* Filter (when called anyway): success with the state, Error "not found" without it.
* No PreScore at all, so Score runs for every pod and gives 0 on every node; NormalizeScore is
  the default one (all zeros stay 0). This is why DynamicResources appears with 0 (weight 2) in
  every scores dict.
* PostFilter: Unschedulable "no new claims to deallocate"; if PreFilter never ran (an earlier
  PreFilter plugin rejected the pod) the state is missing and it fails with Error "not found",
  which stops PostFilter (DefaultPreemption does not run).
* Reserve/Unreserve/PreBind: nothing to do (Error "not found" without state, as kube).
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.framework.events import (ActionType, ClusterEvent, ClusterEventWithHint, EventResource,
                                        QueueingHint)
from schedmesh.framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterVerdicts,
                                           PluginError, PostFilterPlugin, PostFilterResult, PreBindPlugin,
                                           PreEnqueuePlugin, PreFilterPlugin, PreFilterResult, ReservePlugin,
                                           ScorePlugin, Status)
from schedmesh.plugins.helper.normalize import default_normalize_score

NAME = "DynamicResources"
STATE_KEY = NAME
NOT_FOUND = "not found"  # kube-scheduler's framework.ErrNotFound text
MSG_NO_CLAIMS = "no new claims to deallocate"


class _StateData:
    """The pod's claims; always empty here (no ResourceClaims in schedmesh)."""

    __slots__ = ("claims",)

    def __init__(self) -> None:
        self.claims: tuple = ()

    def clone(self) -> "_StateData":
        return self  # kube shares it between clones too


class DynamicResources(PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, PostFilterPlugin, ScorePlugin,
                       ReservePlugin, PreBindPlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME
    has_normalize: ClassVar[bool] = True

    def node_local(self, pod) -> bool:
        return True  # no claims are modelled

    def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        # DynamicResourcesArgs (filterTimeout, bindingTimeout) only matter with claims.

    @staticmethod
    def _state(state: CycleState) -> Optional[_StateData]:
        return state.get(STATE_KEY)

    @staticmethod
    def _not_found() -> Status:
        return Status.as_error(NOT_FOUND)

    def pre_enqueue(self, pod: Pod) -> Optional[Status]:
        return None

    def pre_filter(self, state: CycleState, pod: Pod, snapshot) -> tuple[Optional[PreFilterResult], Optional[Status]]:
        state.write(STATE_KEY, _StateData())  # written before the Skip, PostFilter relies on it
        return None, Status.skip()

    def pre_filter_extensions(self):
        return None

    def filter(self, state: CycleState, pod: Pod, node_info) -> Optional[Status]:
        return None if self._state(state) is not None else self._not_found()

    def filter_nodes(self, state: CycleState, pod: Pod, snapshot, candidates: np.ndarray) -> FilterVerdicts:
        if self._state(state) is not None:
            return FilterVerdicts.all_pass(len(candidates))
        return FilterVerdicts.from_mask(np.zeros(len(candidates), dtype=bool), self._not_found())

    def post_filter(self, state: CycleState, pod: Pod, node_to_status) -> tuple[Optional[PostFilterResult], Optional[Status]]:
        if self._state(state) is None:
            return None, self._not_found()
        return None, Status.unschedulable(MSG_NO_CLAIMS)

    def score(self, state: CycleState, pod: Pod, node_info) -> tuple[int, Optional[Status]]:
        if self._state(state) is None:
            return 0, self._not_found()
        return 0, None

    def score_nodes(self, state: CycleState, pod: Pod, snapshot, nodes: np.ndarray) -> np.ndarray:
        if self._state(state) is None:
            raise PluginError(self._not_found().with_plugin(NAME))
        return np.zeros(len(nodes), dtype=np.int64)

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Optional[Status]:
        default_normalize_score(scores, reverse=False)
        return None

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Optional[Status]:
        return None if self._state(state) is not None else self._not_found()

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        return None

    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Optional[Status]:
        return None if self._state(state) is not None else self._not_found()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        # kube also registers ResourceClaim, DeviceClass and ResourceSlice events; schedmesh has
        # no such resources, so only the node and pod events remain.
        node_actions = ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_ALLOCATABLE
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, node_actions)),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM),
                                 self.is_schedulable_after_pod_change),
        ]

    def is_schedulable_after_pod_change(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """The pod's own update may have generated its claims (none to check here): Queue."""
        if not isinstance(new_obj, Pod):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if new_obj.meta.uid == pod.meta.uid else QueueingHint.QUEUE_SKIP
