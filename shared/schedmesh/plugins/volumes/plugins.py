"""The four volume plugins of the default profile (see the package docstring for scope)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.framework.interface import (CycleState, FilterPlugin, FilterVerdicts, PreFilterPlugin,
                                           PreFilterResult, PreScorePlugin, ScorePlugin, Status)


def claim_names(pod: Pod) -> list[str]:
    """PVC names a pod's volumes need: explicit claims and generic ephemeral volumes' claims."""
    out = []
    for v in pod.volumes:
        if not isinstance(v, dict):
            continue
        pvc = v.get("persistentVolumeClaim")
        if isinstance(pvc, dict) and pvc.get("claimName"):
            out.append(str(pvc["claimName"]))
        elif v.get("ephemeral") is not None:
            out.append(f"{pod.meta.name}-{v.get('name', '')}")  # ephemeral.VolumeClaimName
    return out


class _NoVolumes(PreFilterPlugin, FilterPlugin):
    """Skips at PreFilter for pods without claims; never rejects a node."""

    def node_local(self, pod) -> bool:
        return True  # claims are refused at PreFilter; no other pod is read

    def pre_filter(self, state: CycleState, pod: Pod, snapshot) -> tuple[Optional[PreFilterResult], Optional[Status]]:
        return None, Status.skip()

    def filter(self, state: CycleState, pod: Pod, node_info) -> Optional[Status]:
        return None

    def filter_nodes(self, state, pod, snapshot, candidates: np.ndarray) -> FilterVerdicts:
        return FilterVerdicts.all_pass(len(candidates))


class VolumeRestrictions(_NoVolumes):
    name = "VolumeRestrictions"

    def pre_filter(self, state, pod, snapshot):
        claims = claim_names(pod)
        if claims:
            return None, Status.unresolvable(f'persistentvolumeclaim "{claims[0]}" not found')
        return None, Status.skip()


class NodeVolumeLimits(_NoVolumes):
    name = "NodeVolumeLimits"


class VolumeZone(_NoVolumes):
    name = "VolumeZone"


class VolumeBinding(_NoVolumes, PreScorePlugin, ScorePlugin):
    name = "VolumeBinding"

    def pre_score(self, state, pod, snapshot, nodes) -> Optional[Status]:
        return Status.skip()

    def score(self, state, pod, node_info):
        return 0, None

    def score_nodes(self, state, pod, snapshot, nodes):
        return np.zeros(len(nodes), np.int64)
