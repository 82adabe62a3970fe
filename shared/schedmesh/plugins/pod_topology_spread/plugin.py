"""PodTopologySpread (pkg/scheduler/framework/plugins/podtopologyspread, v1.35): spreads pods
matching a constraint's selector across topology domains. DoNotSchedule constraints filter
(PreFilter/Filter, with AddPod/RemovePod for preemption), ScheduleAnyway ones score.

A pod without constraints gets the default constraints (System: hostname maxSkew 3 and zone
maxSkew 5, ScheduleAnyway), whose selector comes from the Services / controllers that select the
pod. Those objects are looked up through a pluggable `SelectorSources` (the handle's
`spread_selector_sources`, else none known, so the defaults select nothing).
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional

import numpy as np

from schedmesh.api.types import Node, Pod
from schedmesh.framework.events import (ActionType, ClusterEvent, ClusterEventWithHint, EventResource,
                                        QueueingHint)
from schedmesh.framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterVerdicts,
                                           PluginError, PreFilterExtensions, PreFilterPlugin, PreFilterResult,
                                           PreScorePlugin, ScorePlugin, Status)
from schedmesh.plugins.pod_topology_spread.args import SYSTEM_DEFAULTING, PodTopologySpreadArgs, parse_args
from schedmesh.plugins.pod_topology_spread.common import (DO_NOT_SCHEDULE, HONOR, NO_SELECTOR_SOURCES,
                                                          SCHEDULE_ANYWAY, SELECTOR_SOURCES_SERVICE,
                                                          SYSTEM_DEFAULT_CONSTRAINTS, SelectorSources, SpreadConstraint,
                                                          build_default_constraints, default_selector, filter_constraints,
                                                          node_labels_match_constraints,
                                                          pod_labels_match_constraints, selector_matches)
from schedmesh.plugins.pod_topology_spread.filtering import (ERR_REASON_CONSTRAINTS_NOT_MATCH,
                                                             ERR_REASON_NODE_LABEL_NOT_MATCH, PRE_FILTER_STATE_KEY,
                                                             PreFilterState, compute_pre_filter_state, filter_node,
                                                             filter_rows)
from schedmesh.plugins.pod_topology_spread.pod_index import PodIndexCache
from schedmesh.plugins.pod_topology_spread.scoring import (PRE_SCORE_STATE_KEY, PreScoreState,
                                                           compute_pre_score_state, normalize, score_node,
                                                           score_rows)

NAME = "PodTopologySpread"
# Cycle-state key marking that the pod index was brought up to date for this cycle's snapshot
# (the snapshot does not change within a cycle, so PreScore need not rescan it).
_INDEX_FRESH_KEY = "PodTopologySpread/indexFresh"


class PodTopologySpread(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME
    has_normalize: ClassVar[bool] = True

    def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
        args = dict(args or {})
        # Not a kube field: lets an embedding pass the selector sources with the args.
        sources = args.pop("selectorSources", None)
        super().__init__(args, handle)
        self.config: PodTopologySpreadArgs = parse_args(args)
        self.system_defaulted = self.config.defaulting_type == SYSTEM_DEFAULTING
        self.default_constraints = (SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted
                                    else self.config.default_constraints)
        if sources is None and handle is not None:
            sources = handle.services.get(SELECTOR_SOURCES_SERVICE)
        self.selector_sources: SelectorSources = sources or NO_SELECTOR_SOURCES
        self._indexes = PodIndexCache()
        self._extensions = _Extensions()
        self._label_missing = Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
        self._skewed = Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)

    def warm(self, snapshot) -> None:
        # The node label columns of the default constraints' keys, read by every pod they apply to.
        for c in self.default_constraints:
            snapshot.cols.label(c.topology_key)

    # ---- constraints ----------------------------------------------------------------------------
    def constraints_for(self, pod: Pod, action: str) -> list[SpreadConstraint]:
        """The pod's own constraints for `action`, or the default ones when it has none."""
        if pod.topology_spread_constraints:
            return filter_constraints(pod.topology_spread_constraints, pod.meta.labels, action)
        return build_default_constraints(self.default_constraints, pod, action, self.selector_sources)

    def node_local(self, pod: Pod) -> bool:
        # Spreading counts pods across a whole domain; a pod with no constraint (own or
        # default) has nothing to count.
        if pod.topology_spread_constraints:
            return not self.constraints_for(pod, DO_NOT_SCHEDULE) and not self.constraints_for(pod, SCHEDULE_ANYWAY)
        # Default constraints apply, for either action, exactly when some exist and the
        # selector deduced for the pod is not empty: one selector instead of two.
        return not self.default_constraints or default_selector(pod, self.selector_sources).is_empty()

    def get_constraints(self, pod: Pod) -> list[SpreadConstraint]:
        """getConstraints: the hard (DoNotSchedule) ones."""
        return self.constraints_for(pod, DO_NOT_SCHEDULE)

    def _index(self, state: CycleState, snapshot):
        fresh = state.get(_INDEX_FRESH_KEY)
        if fresh is not None and fresh[0] is snapshot:
            return fresh[1]
        index = self._indexes.get(snapshot)
        state.write(_INDEX_FRESH_KEY, (snapshot, index))
        return index

    # ---- PreFilter / Filter ---------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod, snapshot) -> tuple[Optional[PreFilterResult], Optional[Status]]:
        constraints = self.get_constraints(pod)
        if not constraints:
            return None, Status.skip()
        s = compute_pre_filter_state(constraints, pod, snapshot, self._index(state, snapshot))
        state.write(PRE_FILTER_STATE_KEY, s)
        return None, None

    def pre_filter_extensions(self) -> PreFilterExtensions:
        return self._extensions

    def filter(self, state: CycleState, pod: Pod, node_info) -> Optional[Status]:
        s, err = _read(state, PRE_FILTER_STATE_KEY, PreFilterState)
        if err is not None:
            return err
        if not s.constraints:
            return None
        failure = filter_node(s, pod, node_info.node)
        if failure is None:
            return None
        return self._label_missing if failure[1] else self._skewed

    def filter_nodes(self, state: CycleState, pod: Pod, snapshot, candidates: np.ndarray) -> FilterVerdicts:
        s, err = _read(state, PRE_FILTER_STATE_KEY, PreFilterState)
        if err is not None:
            return FilterVerdicts(np.zeros(len(candidates), np.int32), [err])
        if not s.constraints:
            return FilterVerdicts.all_pass(len(candidates))
        verdict = filter_rows(s, pod, snapshot.cols, np.asarray(candidates, dtype=np.int64))
        # verdict: 0 fits, 1 missing label, 2 skew -> index into statuses
        failed = verdict.astype(np.int32) - 1
        return FilterVerdicts(failed, [self._label_missing, self._skewed])

    # ---- PreScore / Score -----------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: Pod, snapshot, nodes: np.ndarray) -> Optional[Status]:
        if snapshot.num_nodes() == 0:
            return Status.skip()
        # Only the pod's own constraints (or List defaults) require every key on a node; that
        # lets nodes without a zone still be spread by hostname under system defaulting.
        require_all = bool(pod.topology_spread_constraints) or not self.system_defaulted
        constraints = self.constraints_for(pod, SCHEDULE_ANYWAY)
        if not constraints:
            return Status.skip()
        s = compute_pre_score_state(constraints, pod, snapshot, nodes, require_all, self._index(state, snapshot))
        state.write(PRE_SCORE_STATE_KEY, s)
        return None

    def score(self, state: CycleState, pod: Pod, node_info) -> tuple[int, Optional[Status]]:
        s, err = _read(state, PRE_SCORE_STATE_KEY, PreScoreState)
        if err is not None:
            return 0, err
        return score_node(s, node_info), None

    def score_nodes(self, state: CycleState, pod: Pod, snapshot, nodes: np.ndarray) -> np.ndarray:
        s, err = _read(state, PRE_SCORE_STATE_KEY, PreScoreState)
        if err is not None:
            raise PluginError(err.with_plugin(self.name))
        nodes = np.asarray(nodes, dtype=np.int64)
        s.score_order = nodes
        return score_rows(s, nodes)

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Optional[Status]:
        """`scores` follow the order of the nodes PreScore was given (all feasible nodes, however
        their raw scores were computed), else of the last bulk Score call."""
        s, err = _read(state, PRE_SCORE_STATE_KEY, PreScoreState)
        if err is not None:
            return err
        for order in (s.nodes, s.score_order):
            if len(scores) == len(order):
                normalize(scores, s.ignored_rows[order])
                return None
        return Status.as_error(f"PodTopologySpread: {len(scores)} scores for {len(s.nodes)} pre-scored nodes")

    # ---- queueing hints -------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        # SchedulerQueueingHints is GA in v1.35, so Pod/UpdatePodToleration is registered too.
        pod_actions = ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.UPDATE_POD_TOLERATION | ActionType.DELETE
        node_actions = ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, pod_actions), self.is_schedulable_after_pod_change),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, node_actions), self.is_schedulable_after_node_change),
        ]

    def is_schedulable_after_pod_change(self, pod: Pod, old: Optional[Pod], new: Optional[Pod]) -> QueueingHint:
        if (new is not None and not _involved_in_spreading(new, pod)) or (
                old is not None and not _involved_in_spreading(old, pod)):
            return QueueingHint.QUEUE_SKIP
        constraints = self.get_constraints(pod)
        if new is not None and old is not None:
            if (pod.meta.uid == new.meta.uid and new.tolerations != old.tolerations
                    and any(c.node_taints_policy == HONOR for c in constraints)):
                return QueueingHint.QUEUE  # a new toleration may let more nodes count
            if new.meta.labels == old.meta.labels:
                return QueueingHint.QUEUE_SKIP
            for c in constraints:
                if selector_matches(c.selector, old.meta.labels) != selector_matches(c.selector, new.meta.labels):
                    return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        changed = new if new is not None else old
        if changed is not None and pod_labels_match_constraints(constraints, changed.meta.labels):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def is_schedulable_after_node_change(self, pod: Pod, old: Optional[Node], new: Optional[Node]) -> QueueingHint:
        constraints = self.get_constraints(pod)
        old_matching = old is not None and node_labels_match_constraints(old.meta.labels, constraints)
        new_matching = new is not None and node_labels_match_constraints(new.meta.labels, constraints)
        if old is not None and new is not None:
            if old_matching != new_matching:
                return QueueingHint.QUEUE
            if new_matching and (_topology_labels_changed(old.meta.labels, new.meta.labels, constraints)
                                 or old.taints != new.taints):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        if new is not None:
            return QueueingHint.QUEUE if new_matching else QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE if old_matching else QueueingHint.QUEUE_SKIP


class _Extensions(PreFilterExtensions):
    """AddPod / RemovePod: update the PreFilter counts as if the pod were added / removed."""

    def add_pod(self, state: CycleState, pod_to_schedule: Pod, pod_info_to_add, node_info) -> Optional[Status]:
        return self._update(state, pod_to_schedule, pod_info_to_add, node_info, 1)

    def remove_pod(self, state: CycleState, pod_to_schedule: Pod, pod_info_to_remove, node_info) -> Optional[Status]:
        return self._update(state, pod_to_schedule, pod_info_to_remove, node_info, -1)

    @staticmethod
    def _update(state: CycleState, pod_to_schedule: Pod, pod_info, node_info, delta: int) -> Optional[Status]:
        s, err = _read(state, PRE_FILTER_STATE_KEY, PreFilterState)
        if err is not None:
            return err
        s.update_with_pod(pod_info.pod, pod_to_schedule, node_info.node, delta)
        return None


def _read(state: CycleState, key: str, kind: type):
    """getPreFilterState / getPreScoreState: (state, None) or (None, an Error status)."""
    try:
        s = state.read(key)
    except KeyError as e:
        return None, Status.as_error(f"reading {key!r} from cycleState: {e}")
    if not isinstance(s, kind):
        return None, Status.as_error(f"{s!r} convert to podtopologyspread.{kind.__name__} error")
    return s, None


def _involved_in_spreading(incoming: Pod, pod_with_spreading: Pod) -> bool:
    """involvedInTopologySpreading: the pod itself, or an assigned pod of its namespace."""
    return incoming.meta.uid == pod_with_spreading.meta.uid or (
        bool(incoming.node_name) and incoming.meta.namespace == pod_with_spreading.meta.namespace)


def _topology_labels_changed(old: dict, new: dict, constraints: list[SpreadConstraint]) -> bool:
    return any(old.get(c.topology_key, "") != new.get(c.topology_key, "") for c in constraints)
