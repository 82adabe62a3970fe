"""QueuedPodInfo: a pod plus what the scheduling queue knows about its attempts
(kube-scheduler's framework.QueuedPodInfo)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from schedmesh.api.types import Pod
from schedmesh.cache.node_info import PodInfo
from schedmesh.framework.events import ClusterEvent


@dataclass(eq=False, slots=True)
class QueuedPodInfo:
    pod_info: PodInfo
    # When the pod was (re-)added to the queue; the QueueSort plugin orders ties by it.
    timestamp: float = 0.0
    # Scheduling attempts so far (incremented by every Pop).
    attempts: int = 0
    # When the pod completes its backoff, cached; None until computed. kube's zero time is -inf.
    backoff_expiration: Optional[float] = None
    # Attempts that ended rejected by plugins; drives the backoff.
    unschedulable_count: int = 0
    # Attempts in a row that ended with an Error status; drives the (separate) error backoff.
    consecutive_errors_count: int = 0
    # First time the pod entered activeQ; never changes afterwards.
    initial_attempt_timestamp: Optional[float] = None
    # Plugins that rejected the pod (Unschedulable / UnschedulableAndUnresolvable) in its last attempt,
    # or the PreEnqueue plugin that gated it.
    unschedulable_plugins: set[str] = field(default_factory=set)
    # Plugins that returned Pending in the last attempt.
    pending_plugins: set[str] = field(default_factory=set)
    # The PreEnqueue plugin gating the pod ("" when not gated) and the events it registered.
    gating_plugin: str = ""
    gating_plugin_events: list[ClusterEvent] = field(default_factory=list)

    @staticmethod
    def of(pod: Pod, *unschedulable_plugins: str, timestamp: float = 0.0) -> "QueuedPodInfo":
        return QueuedPodInfo(PodInfo(pod), timestamp=timestamp, unschedulable_plugins=set(unschedulable_plugins))

    @property
    def pod(self) -> Pod:
        return self.pod_info.pod

    @property
    def key(self) -> str:
        """namespace/name: how the queue identifies a pod."""
        return self.pod_info.pod.key

    @property
    def gated(self) -> bool:
        return self.gating_plugin != ""

    def update(self, pod: Pod) -> None:
        """PodInfo.Update: take the newer pod object (derived terms are rebuilt from it)."""
        if pod is not self.pod_info.pod:
            self.pod_info = PodInfo(pod)

    def __repr__(self) -> str:
        return (f"QueuedPodInfo({self.key}, attempts={self.attempts}, unschedulable={sorted(self.unschedulable_plugins)}"
                f"{', gated by ' + self.gating_plugin if self.gating_plugin else ''})")


def pod_key(pod: Pod) -> str:
    return pod.key
