"""TaintToleration (pkg/scheduler/framework/plugins/tainttoleration, v1.35).

Filter: a node with a NoSchedule/NoExecute taint the pod does not tolerate is
UnschedulableAndUnresolvable. Score: the number of PreferNoSchedule taints not tolerated by the
pod's PreferNoSchedule/empty-effect tolerations, normalised in reverse (fewer is better).
Both bulk forms evaluate once per distinct taint list (Columns.taint_groups).
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional

import numpy as np

from schedmesh.api.types import Node, Pod, Toleration
from schedmesh.framework.events import (ActionType, ClusterEvent, ClusterEventWithHint, EventResource,
                                        QueueingHint)
from schedmesh.framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterVerdicts,
                                           PluginError, PreScorePlugin, ScorePlugin, Status)
from schedmesh.plugins.helper.normalize import default_normalize_score
from schedmesh.plugins.taint_toleration.tolerations import (
    DEFAULT_ENABLE_COMPARISON_OPERATORS, count_intolerable_prefer_no_schedule, do_not_schedule_taints_filter,
    find_matching_untolerated_taint, intolerable_prefer_no_schedule_per_group, prefer_no_schedule_tolerations,
    untolerated_groups)

NAME = "TaintToleration"
ERR_REASON_UNTOLERATED = "node(s) had untolerated taint(s)"
PRE_SCORE_STATE_KEY = "PreScore" + NAME


class _PreScoreState:
    """The pod's tolerations that matter for PreferNoSchedule taints."""

    __slots__ = ("tolerations_prefer_no_schedule",)

    def __init__(self, tolerations: list[Toleration]) -> None:
        self.tolerations_prefer_no_schedule = tolerations

    def clone(self) -> "_PreScoreState":
        return self  # immutable once written, as in kube


class TaintToleration(FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME
    has_normalize: ClassVar[bool] = True

    def node_local(self, pod) -> bool:
        return True  # node taints only

    def __init__(self, args: Optional[dict] = None, handle: Any = None,
                 enable_comparison_operators: bool = DEFAULT_ENABLE_COMPARISON_OPERATORS) -> None:
        super().__init__(args, handle)
        self.enable_comparison_operators = enable_comparison_operators
        # One shared Status object for every rejected node (FilterVerdicts shares statuses).
        self._untolerated = Status.unresolvable(ERR_REASON_UNTOLERATED)

    # ---- Filter ------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: Pod, node_info) -> Optional[Status]:
        taint = find_matching_untolerated_taint(node_info.node.taints, pod.tolerations,
                                                do_not_schedule_taints_filter, self.enable_comparison_operators)
        return None if taint is None else self._untolerated

    def filter_nodes(self, state: CycleState, pod: Pod, snapshot, candidates: np.ndarray) -> FilterVerdicts:
        cols = snapshot.cols
        bad_group = untolerated_groups(cols.taint_groups, pod.tolerations, do_not_schedule_taints_filter,
                                       self.enable_comparison_operators)
        if not bad_group.any():
            return FilterVerdicts.all_pass(len(candidates))
        passed = ~bad_group[cols.taint_group[candidates]]
        return FilterVerdicts.from_mask(passed, self._untolerated)

    # ---- PreScore / Score ----------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: Pod, snapshot, nodes: np.ndarray) -> Optional[Status]:
        # Never Skip: every node gets a score (MaxNodeScore when nothing is intolerable).
        state.write(PRE_SCORE_STATE_KEY, _PreScoreState(prefer_no_schedule_tolerations(pod.tolerations)))
        return None

    def _tolerations(self, state: CycleState) -> list[Toleration]:
        s = state.get(PRE_SCORE_STATE_KEY)
        if s is None:
            raise KeyError(f"failed to read {PRE_SCORE_STATE_KEY!r} from cycleState: not found")
        return s.tolerations_prefer_no_schedule

    def score(self, state: CycleState, pod: Pod, node_info) -> tuple[int, Optional[Status]]:
        try:
            tolerations = self._tolerations(state)
        except KeyError as e:
            return 0, Status.as_error(e.args[0])
        return count_intolerable_prefer_no_schedule(node_info.node.taints, tolerations,
                                                    self.enable_comparison_operators), None

    def score_nodes(self, state: CycleState, pod: Pod, snapshot, nodes: np.ndarray) -> np.ndarray:
        cols = snapshot.cols
        try:
            tolerations = self._tolerations(state)
        except KeyError as e:
            raise PluginError(Status.as_error(e.args[0]).with_plugin(NAME)) from None
        per_group = intolerable_prefer_no_schedule_per_group(cols.taint_groups, tolerations,
                                                              self.enable_comparison_operators)
        return per_group[cols.taint_group[nodes]]

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Optional[Status]:
        default_normalize_score(scores, reverse=True)
        return None

    # ---- queueing hints --------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        # QueueingHints are GA in v1.35: Node Add|UpdateNodeTaint and Pod UpdatePodToleration.
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                                 self.is_schedulable_after_node_change),
            ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.UPDATE_POD_TOLERATION),
                                 self.is_schedulable_after_pod_toleration_change),
        ]

    def is_schedulable_after_node_change(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """Queue only when the node goes from having an untolerated NoSchedule/NoExecute taint
        (or not existing) to having none."""
        if not isinstance(new_obj, Node) or (old_obj is not None and not isinstance(old_obj, Node)):
            return QueueingHint.QUEUE  # kube: unexpected objects => Queue (with an error)
        was_untolerated = True
        if old_obj is not None:
            was_untolerated = find_matching_untolerated_taint(
                old_obj.taints, pod.tolerations, do_not_schedule_taints_filter,
                self.enable_comparison_operators) is not None
        is_untolerated = find_matching_untolerated_taint(
            new_obj.taints, pod.tolerations, do_not_schedule_taints_filter,
            self.enable_comparison_operators) is not None
        return QueueingHint.QUEUE if was_untolerated and not is_untolerated else QueueingHint.QUEUE_SKIP

    def is_schedulable_after_pod_toleration_change(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """Any toleration change of the rejected pod itself may help; other pods' never do."""
        if not isinstance(new_obj, Pod):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if new_obj.meta.uid == pod.meta.uid else QueueingHint.QUEUE_SKIP
