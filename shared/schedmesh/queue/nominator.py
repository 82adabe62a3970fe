"""Pods nominated to nodes by preemption (kube-scheduler's backend/queue nominator).

The nominator keeps references (namespace, name, uid) per node, in insertion order; the
PriorityQueue turns them back into PodInfos from its queues when asked.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Callable, Optional

from schedmesh.api.types import Pod

log = logging.getLogger("schedmesh.queue")

# (namespace, name) -> the current pod object, or None when it no longer exists (kube's podLister).
PodLister = Callable[[str, str], Optional[Pod]]


class NominatingMode(enum.IntEnum):
    NOOP = 0  # keep what the pod object says (.status.nominatedNodeName)
    OVERRIDE = 1  # use NominatingInfo.nominated_node_name


@dataclass(frozen=True, slots=True)
class NominatingInfo:
    nominated_node_name: str = ""
    mode: NominatingMode = NominatingMode.OVERRIDE

    @staticmethod
    def mode_of(info: Optional["NominatingInfo"]) -> NominatingMode:
        return NominatingMode.NOOP if info is None else info.mode


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @staticmethod
    def of(pod: Pod) -> "PodRef":
        return PodRef(pod.meta.namespace, pod.meta.name, pod.meta.uid)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Nominator:
    """nominatedPods: node -> [PodRef] (insertion order); nominated_pod_to_node: uid -> node."""

    __slots__ = ("_pod_lister", "nominated_pods", "nominated_pod_to_node")

    def __init__(self, pod_lister: Optional[PodLister] = None) -> None:
        self._pod_lister = pod_lister
        self.nominated_pods: dict[str, list[PodRef]] = {}
        self.nominated_pod_to_node: dict[str, str] = {}

    def add_nominated_pod(self, pod: Pod, nominating_info: Optional[NominatingInfo]) -> None:
        # Never keep two entries for one pod.
        self.delete(pod)
        mode = NominatingInfo.mode_of(nominating_info)
        if mode == NominatingMode.OVERRIDE:
            node = nominating_info.nominated_node_name  # type: ignore[union-attr]
        else:
            if not pod.nominated_node_name:
                return
            node = pod.nominated_node_name
        if self._pod_lister is not None:
            current = self._pod_lister(pod.meta.namespace, pod.meta.name)
            if current is None:
                log.debug("pod %s doesn't exist, not adding it to the nominator", pod.key, extra={"pod": pod})
                return
            if current.node_name:
                log.debug("pod %s is already scheduled to %s, not nominating it", pod.key, current.node_name,
                          extra={"pod": pod})
                return
        self.nominated_pod_to_node[pod.meta.uid] = node
        refs = self.nominated_pods.setdefault(node, [])
        if any(r.uid == pod.meta.uid for r in refs):
            return
        refs.append(PodRef.of(pod))

    def update_nominated_pod(self, old_pod: Pod, new_pod: Pod) -> None:
        # An update without any nominatedNodeName that arrives right after this scheduler
        # nominated the pod in memory must keep that nomination.
        info: Optional[NominatingInfo] = None
        if not old_pod.nominated_node_name and not new_pod.nominated_node_name:
            node = self.nominated_pod_to_node.get(old_pod.meta.uid)
            if node is not None:
                info = NominatingInfo(node, NominatingMode.OVERRIDE)
        self.delete(old_pod)
        self.add_nominated_pod(new_pod, info)

    def delete(self, pod: Pod) -> None:
        node = self.nominated_pod_to_node.pop(pod.meta.uid, None)
        if node is None:
            return
        refs = self.nominated_pods.get(node, [])
        for i, r in enumerate(refs):
            if r.uid == pod.meta.uid:
                del refs[i]
                break
        if not refs:
            self.nominated_pods.pop(node, None)

    def nominated_refs_for_node(self, node_name: str) -> list[PodRef]:
        return list(self.nominated_pods.get(node_name, ()))

    def node_names(self) -> list[str]:
        return [n for n in self.nominated_pods if n]
