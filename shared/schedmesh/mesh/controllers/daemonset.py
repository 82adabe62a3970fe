"""The DaemonSet controller: each DaemonSet applied gets one pod on every node that should run it,
as kube's controller (pkg/controller/daemon) keeps it; the decisions are
schedmesh.workloads.daemonset's, this module publishes them through the pod control the workload
controller shares (podcontrol.py: admission, expectations, graceful deletion, the garbage
collector's part).

* Missing pods are created pending and admitted; the queue-manager schedules them like any pod
  (NodeAffinity's matchFields term keeps each to its node).
* Pods on nodes that should no longer run them, failed, succeeded and extra ones, and outdated
  ones under RollingUpdate (maxUnavailable at a time) are deleted: gracefully when bound to a
  live node (its kubelet agent ends it), at once when unbound, terminal or on a node that is
  gone (the pod garbage collector's part).
* A DaemonSet deleted has its pods deleted, also when this process never saw it go (see
  podcontrol.py: the pods a DaemonSet applied here made, orphaned for ORPHAN_GRACE).
"""
from __future__ import annotations

import logging
from typing import Optional

from schedmesh.api.types import DaemonSet, OwnerReference, Pod
from schedmesh.mesh.controllers.podcontrol import (EXPECTATIONS_TIMEOUT, ORPHAN_GRACE, RESYNC_PERIOD, Cluster,
                                                   PodControl)
from schedmesh.v1 import events_pb2
from schedmesh.workloads.daemonset import FailedPodBackoff, controlled_by, daemon_pod, daemon_pod_name, sync_plan

__all__ = ["DaemonSetController", "EXPECTATIONS_TIMEOUT", "ORPHAN_GRACE", "RESYNC_PERIOD"]

log = logging.getLogger("schedmesh.controllers.daemonset")


class DaemonSetController(PodControl):
    what = "daemonset"
    follows_nodes = True  # a node added, relabelled or tainted changes where its pods belong

    def __init__(self, cache, source: str = "", **kw) -> None:
        super().__init__(cache, source, log=log, **kw)
        self.backoff = FailedPodBackoff()

    def _owners(self) -> dict[str, object]:
        return dict(self.cache.daemon_sets)

    def _owner_key(self, namespace: str, ref: OwnerReference) -> Optional[str]:
        return f"{namespace}/{ref.name}" if ref.kind == "DaemonSet" else None

    def _controlled(self, owner: DaemonSet, pod: Pod) -> bool:
        return controlled_by(owner, pod)

    def _forget(self, live: dict[str, object]) -> None:
        self.backoff.keep_only(live)

    def _sync_owner(self, key: str, ds: DaemonSet, pods: list[Pod], cluster: Cluster,
                    now: float) -> tuple[list[events_pb2.PodRecord], Optional[float]]:
        plan = sync_plan(ds, cluster.nodes, pods, now, self.backoff)
        made: set[str] = set()
        create = []
        for node_name in plan.create_on:
            name = daemon_pod_name(ds, node_name, lambda n: n in made or self.cache.get_pod(ds.namespace, n) is not None)
            made.add(name)
            create.append((daemon_pod(ds, node_name, name, self.new_uid()), f"for node {node_name}"))
        return self._carry_out(key, create, plan.delete, cluster.node_names, now), plan.retry_at
