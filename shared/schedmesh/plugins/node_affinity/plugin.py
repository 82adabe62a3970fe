"""NodeAffinity (pkg/scheduler/framework/plugins/nodeaffinity, v1.35).

PreFilter: Skip when the pod has no nodeSelector, no required node affinity and the profile no
addedAffinity; narrows the nodes to the names of `matchFields metadata.name In` terms (when
every term has one); contradictory names -> UnschedulableAndUnresolvable.
Filter: scheduler-enforced addedAffinity first, then the pod's nodeSelector + required affinity.
PreScore: Skip without preferred terms (pod's or added). Score: sum of the weights of the
matching preferred terms; NormalizeScore: default (not reversed).
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional

import numpy as np

from schedmesh.api.types import Node, Pod
from schedmesh.framework.events import (ActionType, ClusterEvent, ClusterEventWithHint, EventResource,
                                        QueueingHint)
from schedmesh.framework.interface import (CycleState, EnqueueExtensions, FilterPlugin, FilterVerdicts,
                                           PluginError, PreFilterPlugin, PreFilterResult, PreScorePlugin,
                                           ScorePlugin, Status)
from schedmesh.plugins.node_affinity.args import parse_args
from schedmesh.plugins.node_affinity.matcher import (OBJECT_NAME_FIELD, OP_IN, PreferredTerms, RequiredNodeAffinity,
                                                     pod_preferred_terms, required_node_affinity)
from schedmesh.plugins.helper.normalize import default_normalize_score

NAME = "NodeAffinity"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME
ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_REASON_CONFLICT = "pod affinity terms conflict"


class _PreFilterState:
    __slots__ = ("required",)

    def __init__(self, required: RequiredNodeAffinity) -> None:
        self.required = required

    def clone(self) -> "_PreFilterState":
        return self  # not affected by adding or removing pods


class _PreScoreState:
    __slots__ = ("preferred",)

    def __init__(self, preferred: Optional[PreferredTerms]) -> None:
        self.preferred = preferred

    def clone(self) -> "_PreScoreState":
        return self


def _join_errors(errors: list[str]) -> str:
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _no_required_affinity(pod: Pod) -> bool:
    a = pod.affinity
    return a is None or a.node_affinity is None or a.node_affinity.required is None


def node_names_from_match_fields(pod: Pod) -> Optional[set[str]]:
    """The node names every required term pins with `matchFields: metadata.name In`, or None when
    some term does not pin names (terms are ORed, so then any node may match). An empty set
    means the pins contradict each other."""
    terms = pod.affinity.node_affinity.required.terms  # type: ignore[union-attr]
    node_names: Optional[set[str]] = None
    for t in terms:
        term_names: Optional[set[str]] = None
        for r in t.match_fields:
            if r.key == OBJECT_NAME_FIELD and r.operator == OP_IN:
                s = set(r.values)  # the raw values, as kube reads them here (even if invalid)
                term_names = s if term_names is None else term_names & s
        if term_names is None:
            return None
        node_names = term_names if node_names is None else node_names | term_names
    return node_names


class NodeAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME
    has_normalize: ClassVar[bool] = True

    def node_local(self, pod) -> bool:
        return True  # node labels and fields only

    def __init__(self, args: Optional[dict] = None, handle: Any = None) -> None:
        super().__init__(args, handle)
        parsed = parse_args(args)
        self.added_node_selector = parsed.added_node_selector
        self.added_preferred = parsed.added_preferred
        self._enforced = Status.unresolvable(ERR_REASON_ENFORCED)
        self._pod_mismatch = Status.unresolvable(ERR_REASON_POD)

    # ---- PreFilter -------------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod, snapshot) -> tuple[Optional[PreFilterResult], Optional[Status]]:
        no_affinity = _no_required_affinity(pod)
        if no_affinity and self.added_node_selector is None and not pod.node_selector:
            return None, Status.skip()
        state.write(PRE_FILTER_STATE_KEY, _PreFilterState(required_node_affinity(pod)))
        if no_affinity or not pod.affinity.node_affinity.required.terms:  # type: ignore[union-attr]
            return None, None
        names = node_names_from_match_fields(pod)
        if names is None:
            return None, None
        if not names:
            return None, Status.unresolvable(ERR_REASON_CONFLICT)
        return PreFilterResult(frozenset(names)), None

    def pre_filter_extensions(self):
        return None  # the state does not depend on other pods

    def _required(self, state: CycleState, pod: Pod) -> RequiredNodeAffinity:
        s = state.get(PRE_FILTER_STATE_KEY)
        # Without PreFilter state (PreFilter disabled) kube computes it here.
        return s.required if s is not None else required_node_affinity(pod)

    # ---- Filter ------------------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: Pod, node_info) -> Optional[Status]:
        node = node_info.node
        if self.added_node_selector is not None and not self.added_node_selector.match(node):
            return self._enforced
        if not self._required(state, pod).match(node):  # parse errors just mean "no match"
            return self._pod_mismatch
        return None

    def filter_nodes(self, state: CycleState, pod: Pod, snapshot, candidates: np.ndarray) -> FilterVerdicts:
        cols = snapshot.cols
        failed = np.full(len(candidates), -1, dtype=np.int32)
        statuses: list[Status] = []
        enforced_ok = None
        if self.added_node_selector is not None:
            enforced_ok = self.added_node_selector.match_columns(cols)[candidates]
            if not enforced_ok.all():
                failed[~enforced_ok] = len(statuses)
                statuses.append(self._enforced)
        required = self._required(state, pod)
        if not required.is_trivial():
            pod_bad = ~required.match_columns(cols)[candidates]
            if enforced_ok is not None:
                pod_bad &= enforced_ok
            if pod_bad.any():
                failed[pod_bad] = len(statuses)
                statuses.append(self._pod_mismatch)
        return FilterVerdicts(failed, statuses)

    # ---- PreScore / Score ----------------------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: Pod, snapshot, nodes: np.ndarray) -> Optional[Status]:
        preferred = pod_preferred_terms(pod)
        if preferred is not None and preferred.errors:
            return Status.as_error(_join_errors(list(preferred.errors)))
        if preferred is None and self.added_preferred is None:
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, _PreScoreState(preferred))
        return None

    def _preferred(self, state: CycleState, pod: Pod) -> Optional[PreferredTerms]:
        s = state.get(PRE_SCORE_STATE_KEY)
        if s is not None:
            return s.preferred
        preferred = pod_preferred_terms(pod)  # PreScore disabled: compute here, as kube does
        if preferred is not None and preferred.errors:
            raise PluginError(Status.as_error(_join_errors(list(preferred.errors))).with_plugin(NAME))
        return preferred

    def score(self, state: CycleState, pod: Pod, node_info) -> tuple[int, Optional[Status]]:
        node = node_info.node
        count = self.added_preferred.score(node) if self.added_preferred is not None else 0
        try:
            preferred = self._preferred(state, pod)
        except PluginError as e:
            return 0, Status(e.status.code, e.status.reasons, "", e.status.error)
        if preferred is not None:
            count += preferred.score(node)
        return count, None

    def score_nodes(self, state: CycleState, pod: Pod, snapshot, nodes: np.ndarray) -> np.ndarray:
        cols = snapshot.cols
        total = np.zeros(cols.n, dtype=np.int64)
        if self.added_preferred is not None:
            total += self.added_preferred.score_columns(cols)
        preferred = self._preferred(state, pod)
        if preferred is not None:
            total += preferred.score_columns(cols)
        return total[nodes]

    def normalize_score(self, state: CycleState, pod: Pod, scores: np.ndarray) -> Optional[Status]:
        default_normalize_score(scores, reverse=False)
        return None

    # ---- queueing hints ------------------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                                     self.is_schedulable_after_node_change)]

    def is_schedulable_after_node_change(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """Queue when an added node matches, or an updated node goes from not matching to matching
        (the pod's required affinity; the enforced affinity must match too)."""
        if not isinstance(new_obj, Node) or (old_obj is not None and not isinstance(old_obj, Node)):
            return QueueingHint.QUEUE
        if self.added_node_selector is not None and not self.added_node_selector.match(new_obj):
            return QueueingHint.QUEUE_SKIP
        required = required_node_affinity(pod)
        matched, errors = required.match_lazy(new_obj)
        if errors:
            return QueueingHint.QUEUE  # kube returns Queue with the parse error
        if not matched:
            return QueueingHint.QUEUE_SKIP
        if old_obj is None:
            return QueueingHint.QUEUE
        was_matched, errors = required.match_lazy(old_obj)
        if errors:
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP if was_matched else QueueingHint.QUEUE
