"""NodeResourcesBalancedAllocation (kube-scheduler v1.35 noderesources/balanced_allocation.go).

Favours nodes whose requested fractions of the configured resources (default cpu and memory)
are even after placing the pod: score = int64((1 - std) * MaxNodeScore), std being the standard
deviation of requested/allocatable (each capped at 1) over the resources the node has
(|a - b| / 2 for two). It uses the plain requests, not the 100m / 200Mi non-zero defaults.
PreScore returns Skip when the pod requests none of the configured resources (every entry 0,
counting pod-level requests and overhead). A score-only plugin: no queueing events.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.cache.node_info import NodeInfo
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState, Handle, PreScorePlugin, ScorePlugin, Status
from schedmesh.plugins.node_resources.args import parse_balanced_allocation_args
from schedmesh.plugins.node_resources.resource_allocation import ResourceAllocationScorer
from schedmesh.plugins.node_resources.scorers import Balanced

NAME = "NodeResourcesBalancedAllocation"
PRE_SCORE_STATE_KEY = "PreScore" + NAME


@dataclass(slots=True)
class BalancedPreScoreState:
    pod_requests: list[int]

    def clone(self) -> "BalancedPreScoreState":
        return self


def _best_effort(pod_requests: list[int]) -> bool:
    return all(r == 0 for r in pod_requests)


class BalancedAllocation(PreScorePlugin, ScorePlugin):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # the requests of the node's own pods

    def __init__(self, args: Optional[dict] = None, handle: Optional[Handle] = None) -> None:
        super().__init__(args, handle)
        self.balanced_args = parse_balanced_allocation_args(args)
        self.allocation = ResourceAllocationScorer(self.balanced_args.resources, use_requested=True,
                                                   pod_level=True, scorer=Balanced())

    def pre_score(self, state: CycleState, pod: Pod, snapshot: Snapshot, nodes: np.ndarray) -> Optional[Status]:
        pod_requests = self.allocation.pod_requests(pod)
        if _best_effort(pod_requests):
            return Status.skip()
        state.write(PRE_SCORE_STATE_KEY, BalancedPreScoreState(pod_requests))
        return None

    def _pod_requests(self, state: CycleState, pod: Pod) -> Optional[list[int]]:
        """The pod's requests, or None when Score has nothing to do (kube scores 0 then)."""
        s = state.get(PRE_SCORE_STATE_KEY)
        if isinstance(s, BalancedPreScoreState):
            return s.pod_requests
        pod_requests = self.allocation.pod_requests(pod)
        return None if _best_effort(pod_requests) else pod_requests

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Optional[Status]]:
        pod_requests = self._pod_requests(state, pod)
        if pod_requests is None:
            return 0, None
        return self.allocation.score(node_info, pod_requests), None

    def score_nodes(self, state: CycleState, pod: Pod, snapshot: Snapshot, nodes: np.ndarray) -> np.ndarray:
        pod_requests = self._pod_requests(state, pod)
        if pod_requests is None:
            return np.zeros(len(nodes), np.int64)
        return self.allocation.score_rows(snapshot.cols, nodes, pod_requests)
