"""The unschedulable pod pool (kube's unschedulablePods): pods that were tried and rejected, and
pods gated by a PreEnqueue plugin, waiting for an event that may help them."""
from __future__ import annotations

from typing import Iterator, Optional

from schedmesh.api.types import Pod
from schedmesh.queue.queued_pod_info import QueuedPodInfo


class UnschedulablePods:
    __slots__ = ("_pods",)

    def __init__(self) -> None:
        # Keyed by namespace/name; insertion-ordered (kube's map is unordered).
        self._pods: dict[str, QueuedPodInfo] = {}

    def add_or_update(self, pinfo: QueuedPodInfo) -> None:
        self._pods[pinfo.key] = pinfo

    def delete(self, pod: Pod) -> None:
        self._pods.pop(pod.key, None)

    def get(self, pod: Pod) -> Optional[QueuedPodInfo]:
        return self._pods.get(pod.key)

    def get_by_key(self, key: str) -> Optional[QueuedPodInfo]:
        return self._pods.get(key)

    def clear(self) -> None:
        self._pods.clear()

    def values(self) -> list[QueuedPodInfo]:
        return list(self._pods.values())

    def num_gated(self) -> int:
        return sum(1 for p in self._pods.values() if p.gated)

    def __len__(self) -> int:
        return len(self._pods)

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        return iter(list(self._pods.values()))
