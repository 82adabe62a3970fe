"""DefaultPreemption's half of kube's preemption.Interface (plugins/defaultpreemption, v1.35):
who may preempt, how many nodes to dry-run, and which pods to evict on one node."""
from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from schedmesh.api.types import PREEMPT_NEVER, Pod, PodDisruptionBudget
from schedmesh.framework.interface import Code, CycleState, Status
from schedmesh.preemption.candidates import Candidate, Victims, more_important_pod, pod_priority
from schedmesh.preemption.gosort import go_sort_slice
from schedmesh.preemption.pdb import filter_pods_with_pdb_violation

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.cache.node_info import NodeInfo, PodInfo
    from schedmesh.framework.runtime import Framework

ERR_NO_VICTIMS = "No preemption victims found for incoming pod"
MSG_PREEMPTION_POLICY_NEVER = "not eligible due to preemptionPolicy=Never."
MSG_TERMINATING_ON_NOMINATED = "not eligible due to a terminating pod on the nominated node."
DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"

# IsEligiblePodFunc(node_info, victim, preemptor) and MoreImportantPodFunc(a, b): kube lets
# out-of-tree code replace both on the plugin; so do we.
IsEligiblePodFunc = Callable[["NodeInfo", "PodInfo", Pod], bool]
MoreImportantPodFunc = Callable[[Pod, Pod], bool]


class StrictClock:
    """time.Now() as kube's GetPodStartTime calls it for a pod that has not started: a fresh
    reading at every call, so of two such pods the one asked about first looks older. Readings
    strictly increase so that this holds here too."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = 0.0

    def __call__(self) -> float:
        t = time.time()
        if t <= self._last:
            t = self._last + 1e-6
        self._last = t
        return t


def pod_terminating_by_preemption(pod: Pod) -> bool:
    """Being deleted, and its first DisruptionTarget condition says the scheduler preempted it."""
    if pod.meta.deletion_timestamp is None:
        return False
    for c in pod.conditions:
        if c.type == DISRUPTION_TARGET:
            return c.status == "True" and c.reason == REASON_PREEMPTION_BY_SCHEDULER
    return False


class _ExtensionError(Exception):
    def __init__(self, status: Status) -> None:
        super().__init__(status.message())
        self.status = status


class DefaultPreemptionPolicy:
    """The methods the Evaluator asks of its plugin (kube's preemption.Interface)."""

    def __init__(self, fw: "Framework", min_candidate_nodes_percentage: int = 10,
                 min_candidate_nodes_absolute: int = 100, rng: Optional[random.Random] = None,
                 clock: Optional[Callable[[], float]] = None) -> None:
        self.fw = fw
        self.min_candidate_nodes_percentage = min_candidate_nodes_percentage
        self.min_candidate_nodes_absolute = min_candidate_nodes_absolute
        self.rng = rng or random.Random()
        self.clock: Callable[[], float] = clock or StrictClock()
        self.is_eligible_pod: IsEligiblePodFunc = lambda node_info, victim, preemptor: True
        self.more_important_pod: MoreImportantPodFunc = self._default_more_important_pod

    def _default_more_important_pod(self, a: Pod, b: Pod) -> bool:
        return more_important_pod(a, b, self.clock)

    # ---- how many nodes to dry-run ----------------------------------------------------------
    def calculate_num_candidates(self, num_nodes: int) -> int:
        n = num_nodes * self.min_candidate_nodes_percentage // 100
        if n < self.min_candidate_nodes_absolute:
            n = self.min_candidate_nodes_absolute
        return min(n, num_nodes)

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]:
        """A random start among the potential nodes (rand.Int31n) and how many candidates to find."""
        return self.rng.randrange(num_nodes), self.calculate_num_candidates(num_nodes)

    def candidates_to_victims_map(self, candidates: Sequence[Candidate]) -> dict[str, Victims]:
        return {c.name: c.victims for c in candidates}

    def ordered_score_funcs(self, nodes_to_victims: dict[str, Victims]) -> Optional[list]:
        return None  # kube's default criteria

    # ---- who may preempt --------------------------------------------------------------------
    def is_preemption_allowed(self, node_info: "NodeInfo", victim: "PodInfo", preemptor: Pod) -> bool:
        return pod_priority(victim.pod) < pod_priority(preemptor) and self.is_eligible_pod(node_info, victim, preemptor)

    def has_potential_victims(self, node_info: "NodeInfo", preemptor: Pod) -> bool:
        """Cheap pre-check: select_victims_on_node fails at once with ERR_NO_VICTIMS otherwise."""
        return any(self.is_preemption_allowed(node_info, pi, preemptor) for pi in node_info.pods)

    def pod_eligible_to_preempt_others(self, pod: Pod, nominated_node_status: Optional[Status]
                                       ) -> tuple[bool, str]:
        if pod.preemption_policy == PREEMPT_NEVER:
            return False, MSG_PREEMPTION_POLICY_NEVER
        nominated = pod.nominated_node_name
        if nominated:
            # A nominated node the filters now call unresolvable: preempt elsewhere.
            if nominated_node_status is not None and nominated_node_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return True, ""
            ni = self.fw.snapshot().get(nominated)
            if ni is not None:
                for pi in ni.pods:
                    if self.is_preemption_allowed(ni, pi, pod) and pod_terminating_by_preemption(pi.pod):
                        return False, MSG_TERMINATING_ON_NOMINATED
        return True, ""

    # ---- the dry run on one node ------------------------------------------------------------
    def select_victims_on_node(self, state: CycleState, pod: Pod, node_info: "NodeInfo",
                               pdbs: Sequence[PodDisruptionBudget]) -> tuple[list[Pod], int, Status]:
        """The fewest pods to evict from `node_info` so `pod` fits. `state` and `node_info` are
        the caller's copies and are modified.

        Every lower-priority pod is removed; if the pod then fits, pods are put back one at a
        time, most important first (those whose PDB would be violated before the others), and
        each stays if the pod still fits. The rest are the victims."""
        fw = self.fw
        nominator = fw.services.get("nominator")
        try:
            potential: list["PodInfo"] = []
            # The pods in their order on the node; removing swaps the last pod into the hole, but
            # kube iterates over the slice as it was, which visits them in this same order.
            for pi in list(node_info.pods):
                if self.is_preemption_allowed(node_info, pi, pod):
                    potential.append(pi)
                    self._remove(state, pod, pi, node_info)
            if not potential:
                return [], 0, Status.unresolvable(ERR_NO_VICTIMS)

            # Still no fit with every lower-priority pod gone: preemption cannot help here
            # (victims the pod has affinity to are deliberately not considered).
            st = fw.run_filter_with_nominated_pods(state, pod, node_info, nominator)
            if st is not None and not st.is_success():
                return [], 0, st

            self._sort_by_importance(potential)
            violating, non_violating = filter_pods_with_pdb_violation(potential, pdbs)
            victims: list["PodInfo"] = []

            def reprieve(pi: "PodInfo") -> bool:
                self._add(state, pod, pi, node_info)
                st = fw.run_filter_with_nominated_pods(state, pod, node_info, nominator)
                fits = st is None or st.is_success()
                if not fits:
                    self._remove(state, pod, pi, node_info)
                    victims.append(pi)
                return fits

            num_violating = 0
            for pi in violating:
                if not reprieve(pi):
                    num_violating += 1
            for pi in non_violating:
                reprieve(pi)
            # Each group was reprieved in importance order; interleave them back.
            if violating and non_violating:
                self._sort_by_importance(victims)
            return [pi.pod for pi in victims], num_violating, Status(Code.SUCCESS)
        except _ExtensionError as e:
            return [], 0, Status(Code.ERROR, e.status.reasons, e.status.plugin, e)

    def _sort_by_importance(self, pis: list["PodInfo"]) -> None:
        """Most important first, in exactly the order Go's sort.Slice gives. With the default
        order and every pod started, a key sort gives that order when it is unique, or when Go
        insertion-sorts (up to 12 pods, stable like Python's sort); otherwise run Go's algorithm."""
        if self.more_important_pod == self._default_more_important_pod and all(
                pi.pod.start_time is not None for pi in pis):
            keys = [(-pod_priority(pi.pod), pi.pod.start_time) for pi in pis]
            if len(pis) <= 12 or len(set(keys)) == len(keys):
                order = sorted(range(len(pis)), key=keys.__getitem__)
                pis[:] = [pis[i] for i in order]
                return
        go_sort_slice(pis, lambda a, b: self.more_important_pod(a.pod, b.pod))

    def _remove(self, state: CycleState, pod: Pod, pi: "PodInfo", node_info: "NodeInfo") -> None:
        try:
            node_info.remove_pod(pi.pod)
        except KeyError as e:
            raise _ExtensionError(Status.as_error(str(e.args[0]))) from None
        st = self.fw.run_pre_filter_extension_remove_pod(state, pod, pi, node_info)
        if st is not None and not st.is_success():
            raise _ExtensionError(st)

    def _add(self, state: CycleState, pod: Pod, pi: "PodInfo", node_info: "NodeInfo") -> None:
        node_info.add_pod_info(pi)
        st = self.fw.run_pre_filter_extension_add_pod(state, pod, pi, node_info)
        if st is not None and not st.is_success():
            raise _ExtensionError(st)


__all__ = ["DefaultPreemptionPolicy", "StrictClock", "pod_terminating_by_preemption", "ERR_NO_VICTIMS",
           "MSG_PREEMPTION_POLICY_NEVER", "MSG_TERMINATING_ON_NOMINATED"]
