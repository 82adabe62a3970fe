"""The hook through which a preemption decision is carried out (kube's prepareCandidate /
prepareCandidateAsync and IsPodRunningPreemption). The preemption service implements it and
puts it in the framework's services as "preemption_executor"; without one, DefaultPreemption
only decides (explain, tests)."""
from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

from schedmesh.api.types import Pod
from schedmesh.framework.interface import Status
from schedmesh.preemption.evaluator import PreemptionDecision

SERVICE_KEY = "preemption_executor"


@runtime_checkable
class PreemptionExecutor(Protocol):
    def prepare_candidate(self, preemptor: Pod, decision: PreemptionDecision, plugin_name: str) -> Optional[Status]:
        """Evict decision.victims (a victim already being deleted needs no call; a pod waiting
        at Permit is rejected instead), then clear nominatedNodeName of
        decision.nominated_pods_to_clear. Synchronously: return an Error status on failure and
        the preemptor stays unnominated. Asynchronously (kube's default): start the work,
        return None, and report the pod as running preemption until the last victim is gone."""
        ...

    def is_pod_running_preemption(self, pod_uid: str) -> bool:
        """True while an asynchronous preemption for this preemptor is still under way."""
        ...
