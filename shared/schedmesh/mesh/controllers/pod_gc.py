"""The pod garbage collector's orphaned pods (kube's podgc controller, gcOrphaned): a pod bound to
a node that no longer exists is, once the node has been gone for QUARANTINE_SECONDS (a node
deleted and applied again meanwhile keeps its pods), marked Failed with the DisruptionTarget
condition (DeletionByPodGC, "PodGC: node no longer exists") and deleted at once (grace period 0):
no kubelet is left to end it. Without this, `delete node` left the node's pods Running for good.
"""
from __future__ import annotations

import logging

from schedmesh.api.evolve import evolve
from schedmesh.api.types import PodCondition
from schedmesh.eviction.eviction_api import DISRUPTION_TARGET
from schedmesh.mesh.cluster_cache import ClusterCache, is_terminal
from schedmesh.mesh.controllers.podcontrol import EXPECTATIONS_TIMEOUT
from schedmesh.mesh.records import patched_conditions, pod_batch_records, pod_message, status_update

log = logging.getLogger("schedmesh.controllers.pod_gc")

QUARANTINE_SECONDS = 40.0  # kube's quarantineTime: how long a node is gone before its pods are collected
REASON_DELETION_BY_POD_GC = "DeletionByPodGC"
MESSAGE_NODE_GONE = "PodGC: node no longer exists"


class PodGCController:
    def __init__(self, cache: ClusterCache, source: str = "") -> None:
        self.cache, self.source = cache, source
        # node name -> when a sync first saw it gone (None: a deletion read since the last sync)
        self.gone_since: dict[str, float | None] = {}
        # uid -> when deleted here, until the cache shows it gone; deleted again if it does not
        # within EXPECTATIONS_TIMEOUT (the record lost with a memory broker that restarted)
        self.deleted: dict[str, float] = {}
        self._looked_at_start = False
        cache.listeners.append(self._on_change)

    def _on_change(self, kind: str, old: object, new: object) -> None:
        if kind != "node":
            return
        if new is None and old is not None:
            self.gone_since.setdefault(old.name, None)
        elif new is not None:
            self.gone_since.pop(new.name, None)  # back in time: its pods are its own again

    def _gone(self, node_name: str) -> bool:
        ni = self.cache.snapshot.get(node_name)  # (a removed node's pods are kept aside, node None)
        return ni is None or ni.node is None

    def sync(self, now: float) -> list[tuple[str, str, bytes]]:
        with self.cache.lock:
            if not self._looked_at_start:  # nodes gone before this process read the cluster
                self._looked_at_start = True
                for p in self.cache.pods.values():
                    if p.node_name and not is_terminal(p) and self._gone(p.node_name):
                        self.gone_since.setdefault(p.node_name, None)
            if not self.gone_since:
                return []
            for name, since in self.gone_since.items():
                if since is None:
                    self.gone_since[name] = now
            due = {name for name, since in self.gone_since.items()
                   if now - since >= QUARANTINE_SECONDS and self._gone(name)}
            self.deleted = {uid: at for uid, at in self.deleted.items() if uid in self.cache.pods}
            if not due:
                return []
            orphans = [p for p in self.cache.pods.values()
                       if p.node_name in due and not is_terminal(p)
                       and now - self.deleted.get(p.uid, float("-inf")) >= EXPECTATIONS_TIMEOUT]
            self.deleted.update((p.uid, now) for p in orphans)
            pending = {self.cache.pods[uid].node_name for uid in self.deleted}
            for name in due - pending:  # (a node stays while a deletion made here is on its way back)
                del self.gone_since[name]
        target = PodCondition(DISRUPTION_TARGET, "True", REASON_DELETION_BY_POD_GC, MESSAGE_NODE_GONE)
        items = []
        for pod in orphans:
            log.info("deleting orphaned pod %s: its node %s no longer exists", pod.key, pod.node_name)
            failed = evolve(pod, phase="Failed", conditions=patched_conditions(pod.conditions, [target]))
            items.append(status_update(failed, self.source))
            items.append(pod_message(pod, deleted=True, source=self.source))
        return pod_batch_records(items, self.source)
