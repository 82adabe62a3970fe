"""PrioritySort (pkg/scheduler/framework/plugins/queuesort, v1.35): the active queue pops the
highest-priority pod first, and among equal priorities the one queued earliest."""
from __future__ import annotations

from typing import Any, ClassVar

from schedmesh.api.types import Pod
from schedmesh.framework.interface import QueueSortPlugin

NAME = "PrioritySort"


def pod_priority(pod: Pod) -> int:
    """corev1helpers.PodPriority: spec.priority, or 0 when unset."""
    return pod.priority if pod.priority is not None else 0


class PrioritySort(QueueSortPlugin):
    name: ClassVar[str] = NAME

    def node_local(self, pod) -> bool:
        return True  # queue order only

    def less(self, a: Any, b: Any) -> bool:
        """a and b are queued pod infos with `.pod` and `.timestamp` (when they were queued)."""
        p1, p2 = pod_priority(a.pod), pod_priority(b.pod)
        return p1 > p2 or (p1 == p2 and a.timestamp < b.timestamp)

    def sort_key(self, a: Any) -> tuple:
        """less as a key: higher priority first, then the earlier queued (less(a, b) exactly when
        sort_key(a) < sort_key(b); equal keys are neither less, as in less)."""
        return -pod_priority(a.pod), a.timestamp
