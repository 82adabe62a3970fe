"""NodeResourcesFit (kube-scheduler v1.35 noderesources/fit.go).

Filter: the node must have room for one more pod and, for every resource the pod requests
(cpu, memory, ephemeral-storage, then each scalar resource), allocatable - requested must cover
the request. Zero requests are not checked; extended resources listed in ignoredResources or
under an ignoredResourceGroups prefix are not checked; a resource the node does not list has
allocatable 0. All failures are reported at once ("Too many pods", "Insufficient cpu", ...); the
status is UnschedulableAndUnresolvable when some request exceeds the node's whole allocatable
(preemption could not help), else Unschedulable.
Score: the configured strategy over the pod's non-zero container requests (plus overhead; its
pod-level requests are ignored, as in v1.35) added to the node's non-zero requests.
DRA-backed extended resources (DRAExtendedResource, alpha, off) are not modelled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from schedmesh.api.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    Resource,
    is_extended_resource_name,
    is_scalar_resource_name,
    pod_requests,
)
from schedmesh.api.types import Node, Pod
from schedmesh.cache.node_info import NodeInfo
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from schedmesh.framework.interface import (
    Code,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    FilterVerdicts,
    Handle,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
    Status,
)
from schedmesh.plugins.node_resources.args import (
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    FitArgs,
    parse_fit_args,
)
from schedmesh.plugins.node_resources.requests import fit_request, max_resource, requests_nothing
from schedmesh.plugins.node_resources.resource_allocation import ResourceAllocationScorer
from schedmesh.plugins.node_resources.rows import Rows
from schedmesh.plugins.node_resources.scorers import LeastAllocated, MostAllocated, RequestedToCapacityRatio

NAME = "NodeResourcesFit"
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME

TOO_MANY_PODS = "Too many pods"

# Feature gates as v1.35.4 ships them (both GA and locked on).
ENABLE_IN_PLACE_POD_VERTICAL_SCALING = True
ENABLE_SCHEDULING_QUEUE_HINTS = True

# The bulk Filter packs one bit per check into an int64 key (pod count, each resource, and
# "unresolvable"), so it handles up to this many resource checks at once.
MAX_CHECKS = 61


@dataclass(frozen=True, slots=True)
class InsufficientResource:
    resource_name: str
    reason: str
    requested: int
    used: int
    capacity: int
    # The request exceeds the node's whole allocatable: removing pods (preemption) cannot help.
    unresolvable: bool = False


@dataclass(frozen=True, slots=True)
class ResourceCheck:
    """One resource the pod's request must fit: `requested <= allocatable - used`."""

    name: str
    reason: str
    requested: int


@dataclass(slots=True)
class PreFilterState:
    request: Resource
    checks: tuple[ResourceCheck, ...]

    def clone(self) -> "PreFilterState":
        return self  # never modified after PreFilter


@dataclass(slots=True)
class PreScoreState:
    pod_requests: list[int]

    def clone(self) -> "PreScoreState":
        return self


def resource_checks(request: Resource, ignored_resources: frozenset[str] = frozenset(),
                    ignored_groups: frozenset[str] = frozenset()) -> tuple[ResourceCheck, ...]:
    """The resources fitsRequest compares, in its order. kube walks the scalar resources in Go
    map order (random); they are sorted by name here so reasons come out in a stable order."""
    if requests_nothing(request):
        return ()
    checks = []
    if request.milli_cpu > 0:
        checks.append(ResourceCheck(CPU, "Insufficient cpu", request.milli_cpu))
    if request.memory > 0:
        checks.append(ResourceCheck(MEMORY, "Insufficient memory", request.memory))
    if request.ephemeral_storage > 0:
        checks.append(ResourceCheck(EPHEMERAL_STORAGE, "Insufficient ephemeral-storage", request.ephemeral_storage))
    for name in sorted(request.scalar):
        q = request.scalar[name]
        if q == 0:
            continue
        if is_extended_resource_name(name):
            # Extended resource names always carry a "/" (API validation).
            if name in ignored_resources or (ignored_groups and name.split("/")[0] in ignored_groups):
                continue
        checks.append(ResourceCheck(name, f"Insufficient {name}", q))
    return tuple(checks)


def _allocatable_and_used(ni: NodeInfo, name: str) -> tuple[int, int]:
    if name == CPU:
        return ni.allocatable.milli_cpu, ni.requested.milli_cpu
    if name == MEMORY:
        return ni.allocatable.memory, ni.requested.memory
    if name == EPHEMERAL_STORAGE:
        return ni.allocatable.ephemeral_storage, ni.requested.ephemeral_storage
    return ni.allocatable.scalar.get(name, 0), ni.requested.scalar.get(name, 0)


def fits_checks(checks: Sequence[ResourceCheck], ni: NodeInfo) -> list[InsufficientResource]:
    """fitsRequest on one node, given the pod's checks."""
    out = []
    allowed = ni.allocatable.allowed_pod_number
    if len(ni.pods) + 1 > allowed:
        out.append(InsufficientResource("pods", TOO_MANY_PODS, 1, len(ni.pods), allowed))
    for c in checks:
        alloc, used = _allocatable_and_used(ni, c.name)
        if c.requested > alloc - used:
            out.append(InsufficientResource(c.name, c.reason, c.requested, used, alloc, c.requested > alloc))
    return out


def fits_request(request: Resource, ni: NodeInfo, ignored_resources: frozenset[str] = frozenset(),
                 ignored_groups: frozenset[str] = frozenset()) -> list[InsufficientResource]:
    return fits_checks(resource_checks(request, ignored_resources, ignored_groups), ni)


def fits(pod: Pod, ni: NodeInfo) -> list[InsufficientResource]:
    """kube's exported Fits (no ignored resources), as the kubelet and queueing hints use it."""
    return fits_request(fit_request(pod), ni)


def insufficient_status(insufficient: Sequence[InsufficientResource]) -> Optional[Status]:
    if not insufficient:
        return None
    code = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE if any(r.unresolvable for r in insufficient)
            else Code.UNSCHEDULABLE)
    return Status.of(code, *(r.reason for r in insufficient))


def is_fit(pod: Pod, node: Optional[Node]) -> bool:
    if node is None:
        return False
    return not fits(pod, NodeInfo(node))


def have_any_requested_resources_increased(pod: Pod, original: Node, modified: Node) -> bool:
    """Did the node's allocatable grow for the pod count or for something the pod requests?"""
    request = fit_request(pod)
    old, new = NodeInfo(original).allocatable, NodeInfo(modified).allocatable
    if new.allowed_pod_number > old.allowed_pod_number:
        return True
    if requests_nothing(request):
        return False
    if ((request.milli_cpu > 0 and new.milli_cpu > old.milli_cpu)
            or (request.memory > 0 and new.memory > old.memory)
            or (request.ephemeral_storage > 0 and new.ephemeral_storage > old.ephemeral_storage)):
        return True
    return any(q != 0 and new.scalar.get(name, 0) > old.scalar.get(name, 0) for name, q in request.scalar.items())


def _scorer_for(args: FitArgs) -> ResourceAllocationScorer:
    strategy = args.scoring_strategy
    weights = [r.weight for r in strategy.resources]
    if strategy.type == LEAST_ALLOCATED:
        scorer = LeastAllocated(weights)
    elif strategy.type == MOST_ALLOCATED:
        scorer = MostAllocated(weights)
    else:
        scorer = RequestedToCapacityRatio(weights, strategy.shape or ())
    # Fit scores cpu and memory with the non-zero requests, and (v1.35 quirk: the scorer is built
    # without the PodLevelResources gate) ignores the incoming pod's pod-level requests.
    return ResourceAllocationScorer(strategy.resources, use_requested=False, pod_level=False, scorer=scorer)


class Fit(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # the requests of the node's own pods

    def __init__(self, args: Optional[dict] = None, handle: Optional[Handle] = None) -> None:
        super().__init__(args, handle)
        self.fit_args = parse_fit_args(args)
        self.allocation = _scorer_for(self.fit_args)

    # ---- PreFilter / Filter --------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod, snapshot: Snapshot
                   ) -> tuple[Optional[PreFilterResult], Optional[Status]]:
        # SidecarContainers is GA, so restartable init containers are never rejected here.
        request = fit_request(pod)
        checks = resource_checks(request, self.fit_args.ignored_resources, self.fit_args.ignored_resource_groups)
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(request, checks))
        return None, None

    def _pre_filter_state(self, state: CycleState) -> PreFilterState | Status:
        s = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(s, PreFilterState):
            return Status.as_error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState: not found')
        return s

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Optional[Status]:
        s = self._pre_filter_state(state)
        if isinstance(s, Status):
            return s
        return insufficient_status(fits_checks(s.checks, node_info))

    def filter_nodes(self, state: CycleState, pod: Pod, snapshot: Snapshot,
                     candidates: np.ndarray) -> FilterVerdicts:
        s = self._pre_filter_state(state)
        if isinstance(s, Status):
            return FilterVerdicts(np.zeros(len(candidates), np.int32), [s])
        if len(s.checks) > MAX_CHECKS:  # more distinct resources than key bits: per node
            return super().filter_nodes(state, pod, snapshot, candidates)
        cols = snapshot.cols
        rows = Rows(candidates, cols.n)
        # One bit per failed check: bit 0 the pod count, bit i the i-th resource check, and the
        # bit after them when some failed request exceeds the node's whole allocatable.
        key = (rows.of(cols.num_pods) >= rows.of(cols.alloc_pods)).astype(np.int64)
        unresolvable = None
        for bit, c in enumerate(s.checks, start=1):
            if c.name == CPU:
                alloc, used = cols.alloc_cpu, cols.req_cpu
            elif c.name == MEMORY:
                alloc, used = cols.alloc_mem, cols.req_mem
            elif c.name == EPHEMERAL_STORAGE:
                alloc, used = cols.alloc_eph, cols.req_eph
            else:
                alloc, used = cols.scalar_alloc(c.name), cols.scalar_req(c.name)
            a = rows.of(alloc)
            short = c.requested > a - rows.of(used)
            key |= short.astype(np.int64) << bit
            over = short & (c.requested > a)
            unresolvable = over if unresolvable is None else unresolvable | over
        failing = key != 0
        n_failing = int(np.count_nonzero(failing))
        if n_failing == 0:
            return FilterVerdicts.all_pass(len(candidates))
        unresolvable_bit = len(s.checks) + 1
        if unresolvable is not None:
            key |= unresolvable.astype(np.int64) << unresolvable_bit
        failed_keys = key[failing] if n_failing < len(key) else key
        if unresolvable_bit < 16:  # small key space: a lookup table beats sorting
            present = np.bincount(failed_keys, minlength=1 << (unresolvable_bit + 1))
            distinct = np.flatnonzero(present)
            index_of = np.zeros(len(present), np.int32)
            index_of[distinct] = np.arange(len(distinct), dtype=np.int32)
            which = index_of[failed_keys]
        else:
            distinct, which = np.unique(failed_keys, return_inverse=True)
        failed = np.full(len(candidates), -1, np.int32)
        failed[failing] = which
        statuses = [self._status_of_key(int(k), s.checks, unresolvable_bit) for k in distinct]
        return FilterVerdicts(failed, statuses)

    @staticmethod
    def _status_of_key(key: int, checks: Sequence[ResourceCheck], unresolvable_bit: int) -> Status:
        reasons = [TOO_MANY_PODS] if key & 1 else []
        reasons += [c.reason for bit, c in enumerate(checks, start=1) if key >> bit & 1]
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if key >> unresolvable_bit & 1 else Code.UNSCHEDULABLE
        return Status.of(code, *reasons)

    # ---- PreScore / Score ----------------------------------------------------------------
    def pre_score(self, state: CycleState, pod: Pod, snapshot: Snapshot, nodes: np.ndarray) -> Optional[Status]:
        state.write(PRE_SCORE_STATE_KEY, PreScoreState(self.allocation.pod_requests(pod)))
        return None

    def _pod_requests(self, state: CycleState, pod: Pod) -> list[int]:
        s = state.get(PRE_SCORE_STATE_KEY)
        # Without PreScore (e.g. a caller scoring directly), compute them as kube does.
        return s.pod_requests if isinstance(s, PreScoreState) else self.allocation.pod_requests(pod)

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Optional[Status]]:
        return self.allocation.score(node_info, self._pod_requests(state, pod)), None

    def score_nodes(self, state: CycleState, pod: Pod, snapshot: Snapshot, nodes: np.ndarray) -> np.ndarray:
        return self.allocation.score_rows(snapshot.cols, nodes, self._pod_requests(state, pod))

    # ---- queueing hints ------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        pod_actions = ActionType.DELETE
        if ENABLE_IN_PLACE_POD_VERTICAL_SCALING:
            pod_actions |= ActionType.UPDATE_POD_SCALE_DOWN
        node_actions = ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
        if not ENABLE_SCHEDULING_QUEUE_HINTS:
            # Without hints, node events can be lost to the pre-check, hence label / taint too.
            node_actions |= ActionType.UPDATE_NODE_TAINT | ActionType.UPDATE_NODE_LABEL
        return [
            ClusterEventWithHint(ClusterEvent(EventResource.POD, pod_actions), self.is_schedulable_after_pod_event),
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, node_actions), self.is_schedulable_after_node_change),
        ]

    def is_schedulable_after_pod_event(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """A deleted assigned (or nominated) pod, or a pod whose requests shrank, may free room."""
        if (old_obj is not None and not isinstance(old_obj, Pod)) or (
                new_obj is not None and not isinstance(new_obj, Pod)):
            return QueueingHint.QUEUE  # kube: type error -> Queue
        if new_obj is None:
            if old_obj is None or (not old_obj.node_name and not old_obj.nominated_node_name):
                return QueueingHint.QUEUE_SKIP
            return QueueingHint.QUEUE
        if not ENABLE_IN_PLACE_POD_VERTICAL_SCALING:
            return QueueingHint.QUEUE_SKIP
        if old_obj is None:
            return QueueingHint.QUEUE  # not an update: nothing to compare, stay on the safe side
        return QueueingHint.QUEUE if self._scaled_down_for(pod, old_obj, new_obj) else QueueingHint.QUEUE_SKIP

    @staticmethod
    def _scaled_down_for(target: Pod, original: Pod, modified: Pod) -> bool:
        """isSchedulableAfterPodScaleDown."""
        if modified.meta.uid == target.meta.uid:
            return True
        if not modified.node_name:
            return False
        before, after = max_resource(pod_requests(original)), max_resource(pod_requests(modified))
        for name, q in pod_requests(target).items():
            if q == 0:
                continue
            if name == CPU:
                if before.milli_cpu > after.milli_cpu:
                    return True
            elif name == MEMORY:
                if before.memory > after.memory:
                    return True
            elif name == EPHEMERAL_STORAGE:
                if before.ephemeral_storage > after.ephemeral_storage:
                    return True
            elif is_scalar_resource_name(name) and before.scalar.get(name, 0) > after.scalar.get(name, 0):
                return True
        return False

    def is_schedulable_after_node_change(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        """A new node the pod fits, or a node whose allocatable grew for what the pod requests."""
        if (new_obj is not None and not isinstance(new_obj, Node)) or (
                old_obj is not None and not isinstance(old_obj, Node)):
            return QueueingHint.QUEUE  # kube: type error -> Queue
        if not is_fit(pod, new_obj):  # also false without a new node
            return QueueingHint.QUEUE_SKIP
        if old_obj is None:
            return QueueingHint.QUEUE
        if not have_any_requested_resources_increased(pod, old_obj, new_obj):
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
