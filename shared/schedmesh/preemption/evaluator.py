"""The preemption Evaluator (kube-scheduler v1.35 framework/preemption/preemption.go).

`Evaluator.preempt` decides; it never evicts. It returns the PostFilter result and status kube's
Preempt returns, plus a `PreemptionDecision` (node, victims, lower-priority pods whose nomination
must be cleared) that the caller hands to whatever acts on the cluster.

What it reads from `fw.services` (all optional):
  "pdbs"                       list[PodDisruptionBudget]
  "nominator"                  runtime.Nominator (pods nominated to nodes)
  "extenders"                  objects with supports_preemption() / process_preemption(pod, {node: Victims})
                               (and is_interested(pod), is_ignorable(), name when they have them)
  "preemption_all_candidates"  True: dry-run every potential node from offset 0, instead of kube's
                               random offset and minCandidateNodes* sample (explain, goldens)
"""
from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence

from schedmesh.api.types import Pod, PodDisruptionBudget
from schedmesh.framework.interface import Code, CycleState, NodeToStatus, PostFilterResult, Status
from schedmesh.preemption.candidates import Candidate, Victims, pick_one_node_for_preemption, pod_priority
from schedmesh.preemption.default_policy import ERR_NO_VICTIMS
from schedmesh.scheduling.cycle import Diagnosis, FitError

if TYPE_CHECKING:  # pragma: no cover
    from schedmesh.cache.node_info import NodeInfo
    from schedmesh.framework.runtime import Framework

MSG_NOT_HELPFUL = "Preemption is not helpful for scheduling"
MSG_NO_CANDIDATE = "no candidate node for preemption"


class PreemptionPolicy(Protocol):
    """What the Evaluator asks of the preemption plugin (kube's preemption.Interface)."""

    def get_offset_and_num_candidates(self, num_nodes: int) -> tuple[int, int]: ...

    def candidates_to_victims_map(self, candidates: Sequence[Candidate]) -> dict[str, Victims]: ...

    def pod_eligible_to_preempt_others(self, pod: Pod, nominated_node_status: Optional[Status]
                                       ) -> tuple[bool, str]: ...

    def select_victims_on_node(self, state: CycleState, pod: Pod, node_info: "NodeInfo",
                               pdbs: Sequence[PodDisruptionBudget]) -> tuple[list[Pod], int, Status]: ...

    def ordered_score_funcs(self, nodes_to_victims: dict[str, Victims]) -> Optional[list]: ...


@dataclass(slots=True)
class PreemptionDecision:
    """What must happen for the preemptor to be nominated to `node_name`."""

    node_name: str
    victims: list[Pod]  # most important first
    num_pdb_violations: int = 0
    # Lower-priority pods nominated to the same node: they may no longer fit, so their
    # nominatedNodeName is to be cleared.
    nominated_pods_to_clear: list[Pod] = field(default_factory=list)


@dataclass(slots=True)
class PreemptionOutcome:
    """kube's (PostFilterResult, Status) of Preempt, plus the decision on success.

    result None keeps the pod's nominatedNodeName; a result with an empty name clears it."""

    result: Optional[PostFilterResult]
    status: Status
    decision: Optional[PreemptionDecision] = None


@dataclass(slots=True)
class DryRunResult:
    candidates: list[Candidate]
    node_to_status: NodeToStatus  # nodes that were tried and are no candidate
    errors: list[str] = field(default_factory=list)

    def error_message(self) -> str:
        """utilerrors.NewAggregate(errs).Error(): one error as is, several de-duplicated in []."""
        seen: list[str] = []
        for e in self.errors:
            if e not in seen:
                seen.append(e)
        if len(self.errors) == 1 or len(seen) == 1:
            return seen[0]
        return "[" + ", ".join(seen) + "]"


class Evaluator:
    def __init__(self, plugin_name: str, fw: "Framework", policy: PreemptionPolicy,
                 clock: Callable[[], float] = time.time) -> None:
        self.plugin_name = plugin_name
        self.fw = fw
        self.policy = policy
        self.clock = clock

    # ---- Preempt ----------------------------------------------------------------------------
    def preempt(self, state: CycleState, pod: Pod, node_to_status: NodeToStatus) -> PreemptionOutcome:
        # 1) May this pod preempt at all?
        ok, msg = self.policy.pod_eligible_to_preempt_others(pod, node_to_status.get(pod.nominated_node_name))
        if not ok:
            return PreemptionOutcome(None, Status.unschedulable(msg))

        # 2) Candidates from a dry run on every node where removing pods might help.
        all_nodes = self.fw.snapshot().node_info_list
        if not all_nodes:
            return PreemptionOutcome(None, Status.as_error("no nodes available"))
        dry = self.find_candidates(state, all_nodes, pod, node_to_status)
        if dry.errors and not dry.candidates:
            return PreemptionOutcome(None, Status.as_error(dry.error_message()))
        if not dry.candidates:
            return PreemptionOutcome(PostFilterResult(""),
                                     Status.unschedulable(self.no_candidate_message(pod, len(all_nodes), dry)))

        # 3) Extenders that support preemption may drop candidates or change victims.
        candidates, st = self.call_extenders(pod, dry.candidates)
        if st is not None and not st.is_success():
            return PreemptionOutcome(None, st)

        # 4) The best candidate.
        best = self.select_candidate(candidates)
        if best is None or not best.name:
            return PreemptionOutcome(None, Status.unschedulable(MSG_NO_CANDIDATE))

        decision = PreemptionDecision(best.name, list(best.victims.pods), best.victims.num_pdb_violations,
                                      self.lower_priority_nominated_pods(pod, best.name))
        result = PostFilterResult(best.name, victims=[v.key for v in decision.victims])
        return PreemptionOutcome(result, Status(Code.SUCCESS), decision)

    @staticmethod
    def no_candidate_message(pod: Pod, num_all_nodes: int, dry: DryRunResult) -> str:
        """kube's FitError text over the dry run's statuses; nodes not tried count as
        "Preemption is not helpful for scheduling"."""
        nts = dry.node_to_status
        nts.absent = Status.unresolvable(MSG_NOT_HELPFUL)
        return FitError(pod, num_all_nodes, Diagnosis(node_to_status=nts)).message()

    # ---- candidates -------------------------------------------------------------------------
    def nodes_where_preemption_might_help(self, all_nodes: Sequence["NodeInfo"], node_to_status: NodeToStatus
                                          ) -> list["NodeInfo"]:
        """Nodes whose filter status is Unschedulable (not UnschedulableAndUnresolvable), in
        snapshot order. Absent nodes take the map's absent status."""
        return [ni for ni in all_nodes if node_to_status.get(ni.name).code == Code.UNSCHEDULABLE]

    def find_candidates(self, state: CycleState, all_nodes: Sequence["NodeInfo"], pod: Pod,
                        node_to_status: NodeToStatus) -> DryRunResult:
        potential = self.nodes_where_preemption_might_help(all_nodes, node_to_status)
        if not potential:
            return DryRunResult([], NodeToStatus())
        pdbs = self.fw.services.get("pdbs") or []
        if self.fw.services.get("preemption_all_candidates"):
            offset, num = 0, len(potential)
        else:
            offset, num = self.policy.get_offset_and_num_candidates(len(potential))
        return self.dry_run_preemption(state, pod, potential, pdbs, offset, num)

    def dry_run_preemption(self, state: CycleState, pod: Pod, potential: Sequence["NodeInfo"],
                           pdbs: Sequence[PodDisruptionBudget], offset: int, num_candidates: int) -> DryRunResult:
        """Try nodes from `offset` round the list until `num_candidates` are found, at least one
        of them violating no PDB (kube does this in parallel and cancels; we go in order, as kube
        with parallelism 1). Candidates violating no PDB come first."""
        non_violating: list[Candidate] = []
        violating: list[Candidate] = []
        statuses = NodeToStatus()
        errors: list[str] = []
        n = len(potential)
        has_victims = getattr(self.policy, "has_potential_victims", None)
        for i in range(n):
            ni = potential[(offset + i) % n]
            if has_victims is not None and not has_victims(ni, pod):
                # Same outcome as select_victims_on_node, without copying state and node.
                statuses.set(ni.name, Status.unresolvable(ERR_NO_VICTIMS))
                continue
            victims, num_violations, st = self._select_victims(state, pod, ni, pdbs)
            if st.is_success() and victims:
                c = Candidate(ni.name, Victims(victims, num_violations))
                group = non_violating if num_violations == 0 else violating
                if len(group) < num_candidates:  # kube's candidate lists have that capacity
                    group.append(c)
                if non_violating and len(non_violating) + len(violating) >= num_candidates:
                    break
                continue
            if st.is_success():
                st = Status.as_error(f'expected at least one victim pod on node "{ni.name}"')
            if st.code == Code.ERROR:
                errors.append(st.message())
            statuses.set(ni.name, st)
        return DryRunResult(non_violating + violating, statuses, errors)

    def _select_victims(self, state: CycleState, pod: Pod, ni: "NodeInfo", pdbs: Sequence[PodDisruptionBudget]
                        ) -> tuple[list[Pod], int, Status]:
        try:
            return self.policy.select_victims_on_node(state.clone(), pod, ni.clone(), pdbs)
        except Exception as e:  # a plugin failing on one node fails that node, as an Error status
            return [], 0, Status.as_error(e)

    # ---- extenders --------------------------------------------------------------------------
    def call_extenders(self, pod: Pod, candidates: list[Candidate]) -> tuple[list[Candidate], Optional[Status]]:
        extenders = self.fw.services.get("extenders") or []
        if not extenders:
            return candidates, None
        victims_map = self.policy.candidates_to_victims_map(candidates)
        if not victims_map:
            return candidates, None
        for ext in extenders:
            if not _call(ext, "supports_preemption", False) or not _call(ext, "is_interested", True, pod):
                continue
            ignorable = bool(_call(ext, "is_ignorable", False))
            try:
                returned = dict(_process_preemption(ext, pod, victims_map, self.fw.snapshot()))
            except Exception as e:
                if ignorable:
                    continue
                return [], Status.as_error(e)
            for node in list(returned):
                v = returned[node]
                if v is None or not v.pods:
                    if ignorable:
                        del returned[node]
                        continue
                    return [], Status.as_error(f'expected at least one victim pod on node "{node}"')
            victims_map = returned
            if not victims_map:
                break
        return [Candidate(name, v) for name, v in victims_map.items()], None

    # ---- choosing ---------------------------------------------------------------------------
    def select_candidate(self, candidates: Sequence[Candidate]) -> Optional[Candidate]:
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        victims_map = self.policy.candidates_to_victims_map(candidates)
        funcs = self.policy.ordered_score_funcs(victims_map)
        node = pick_one_node_for_preemption(victims_map, funcs, now=self.clock())
        victims = victims_map.get(node)
        if victims is not None:
            return Candidate(node, victims)
        return candidates[0]

    def lower_priority_nominated_pods(self, pod: Pod, node_name: str) -> list[Pod]:
        nominator = self.fw.services.get("nominator")
        if nominator is None:
            return []
        return [pi.pod for pi in nominator.nominated_pods_for_node(node_name) if pod_priority(pi.pod) < pod_priority(pod)]


def _process_preemption(ext: Any, pod: Pod, victims_map: dict[str, Victims], snapshot: Any) -> dict:
    """ProcessPreemption(pod, victims, nodeLister): the snapshot is passed to extenders whose
    method takes it (to resolve the pods they answer with)."""
    f = ext.process_preemption
    try:
        takes_nodes = len(inspect.signature(f).parameters) >= 3
    except (TypeError, ValueError):
        takes_nodes = False
    return f(pod, victims_map, snapshot) if takes_nodes else f(pod, victims_map)


def _call(obj: Any, method: str, default: Any, *args: Any) -> Any:
    f = getattr(obj, method, None)
    return default if f is None else f(*args)
