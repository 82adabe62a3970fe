"""DefaultPreemption (pkg/scheduler/framework/plugins/defaultpreemption, v1.35).

PostFilter: when no node fits, find the node where evicting the fewest / least important
lower-priority pods makes room, and nominate the pod there. The decision is the preemption
Evaluator's (schedmesh.preemption); carrying it out is the job of the optional
"preemption_executor" service. With SchedulerAsyncPreemption (on by default since 1.33) the
plugin is also a PreEnqueue plugin that holds a pod back while its preemption is under way.
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional

from schedmesh.api.types import Pod
from schedmesh.framework.events import ActionType, ClusterEvent, ClusterEventWithHint, EventResource, QueueingHint
from schedmesh.framework.interface import (CycleState, EnqueueExtensions, NodeToStatus, PostFilterPlugin,
                                           PostFilterResult, PreEnqueuePlugin, Status)
from schedmesh.plugins.default_preemption.args import DefaultPreemptionArgs
from schedmesh.preemption.default_policy import DefaultPreemptionPolicy
from schedmesh.preemption.evaluator import Evaluator, PreemptionOutcome
from schedmesh.preemption.executor import SERVICE_KEY as EXECUTOR_SERVICE

NAME = "DefaultPreemption"
MSG_PREFIX = "preemption: "
MSG_WAITING_FOR_PREEMPTION = "waiting for the preemption for this pod to be finished"


class DefaultPreemption(PostFilterPlugin, PreEnqueuePlugin, EnqueueExtensions):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # PostFilter; a nomination it makes ends a batch (schedmesh.mesh.batch)

    def __init__(self, args: Optional[dict] = None, handle: Any = None,
                 enable_async_preemption: bool = True) -> None:
        super().__init__(args, handle)
        self.parsed_args = DefaultPreemptionArgs.from_dict(args)
        self.enable_async_preemption = enable_async_preemption
        self.policy = DefaultPreemptionPolicy(handle, self.parsed_args.min_candidate_nodes_percentage,
                                              self.parsed_args.min_candidate_nodes_absolute)
        self.evaluator = Evaluator(NAME, handle, self.policy)
        # The last decision, for callers that want the victims as objects (the service).
        self.last_outcome: Optional[PreemptionOutcome] = None

    def _services(self) -> dict:
        return self.handle.services if self.handle is not None else {}

    # ---- PostFilter ---------------------------------------------------------------------------
    def post_filter(self, state: CycleState, pod: Pod, node_to_status: NodeToStatus
                    ) -> tuple[Optional[PostFilterResult], Optional[Status]]:
        outcome = self.evaluator.preempt(state, pod, node_to_status)
        self.last_outcome = outcome
        result, status = outcome.result, outcome.status
        executor = self._services().get(EXECUTOR_SERVICE)
        if status.is_success() and outcome.decision is not None and executor is not None:
            st = executor.prepare_candidate(pod, outcome.decision, NAME)
            if st is not None and not st.is_success():
                result, status = None, st
        msg = status.message()
        if msg:
            return result, Status(status.code, (MSG_PREFIX + msg,), error=status.error)
        return result, status

    # ---- PreEnqueue (async preemption) --------------------------------------------------------
    def pre_enqueue(self, pod: Pod) -> Optional[Status]:
        if not self.enable_async_preemption:
            return None
        executor = self._services().get(EXECUTOR_SERVICE)
        running = getattr(executor, "is_pod_running_preemption", None)
        if running is not None and running(pod.meta.uid):
            return Status.unresolvable(MSG_WAITING_FOR_PREEMPTION)
        return None

    # ---- EnqueueExtensions --------------------------------------------------------------------
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Only PreEnqueue can reject (async preemption); a pod deletion never requeues on this
        plugin's account: the plugins whose failures preemption resolves do that."""
        if not self.enable_async_preemption:
            return []
        return [ClusterEventWithHint(ClusterEvent(EventResource.POD, ActionType.DELETE),
                                     self.is_pod_schedulable_after_pod_deletion)]

    def is_pod_schedulable_after_pod_deletion(self, pod: Pod, old_obj: Any, new_obj: Any) -> QueueingHint:
        return QueueingHint.QUEUE_SKIP
