"""The unschedulable pod pool (kube's unschedulablePods): pods that were tried and rejected, and
pods gated by a PreEnqueue plugin, waiting for an event that may help them."""
from __future__ import annotations

from typing import Iterator, Optional

from schedmesh.api.types import Pod
from schedmesh.queue.queued_pod_info import QueuedPodInfo


class UnschedulablePods:
    __slots__ = ("_pods", "_rejectors")

    def __init__(self) -> None:
        # Keyed by namespace/name; insertion-ordered (kube's map is unordered).
        self._pods: dict[str, QueuedPodInfo] = {}
        # profile -> (every plugin that rejected one of its pods, whether one was rejected by
        # none); rebuilt after a change. Every cluster event is checked against the pool, and
        # with 1,000 pods waiting on plugins the event cannot help, asking each pod cost more
        # than scheduling (the Unschedulable workload).
        self._rejectors: Optional[dict[str, tuple[frozenset, bool]]] = None

    def add_or_update(self, pinfo: QueuedPodInfo) -> None:
        self._pods[pinfo.key] = pinfo
        self._rejectors = None

    def delete(self, pod: Pod) -> None:
        if self._pods.pop(pod.key, None) is not None:
            self._rejectors = None

    def invalidate(self) -> None:
        """A pooled pod's rejecting plugins or profile changed in place."""
        self._rejectors = None

    def rejectors_by_profile(self) -> dict[str, tuple[frozenset, bool]]:
        """profile -> (the union of its pods' rejecting plugins, whether a pod has none)."""
        got = self._rejectors
        if got is None:
            union: dict[str, set[str]] = {}
            unrejected: set[str] = set()
            for p in self._pods.values():
                profile = p.pod_info.pod.scheduler_name
                plugins = union.setdefault(profile, set())
                if p.unschedulable_plugins or p.pending_plugins:
                    plugins |= p.unschedulable_plugins
                    plugins |= p.pending_plugins
                else:
                    unrejected.add(profile)
            got = self._rejectors = {prof: (frozenset(plugins), prof in unrejected)
                                     for prof, plugins in union.items()}
        return got

    def get(self, pod: Pod) -> Optional[QueuedPodInfo]:
        return self._pods.get(pod.key)

    def get_by_key(self, key: str) -> Optional[QueuedPodInfo]:
        return self._pods.get(key)

    def clear(self) -> None:
        self._pods.clear()
        self._rejectors = None

    def values(self) -> list[QueuedPodInfo]:
        return list(self._pods.values())

    def num_gated(self) -> int:
        return sum(1 for p in self._pods.values() if p.gated)

    def __len__(self) -> int:
        return len(self._pods)

    def __iter__(self) -> Iterator[QueuedPodInfo]:
        return iter(list(self._pods.values()))
