"""Which potential victims would violate a PodDisruptionBudget (defaultpreemption's
filterPodsWithPDBViolation)."""
from __future__ import annotations

from typing import Optional, Sequence, TypeVar

from schedmesh.api.labels import DOES_NOT_EXIST, EXISTS, IN, NOT_IN, LabelSelector
from schedmesh.api.types import Pod, PodDisruptionBudget
from schedmesh.cache.node_info import PodInfo

P = TypeVar("P", Pod, PodInfo)


def pdb_selector(pdb: PodDisruptionBudget) -> Optional[LabelSelector]:
    """The PDB's selector as metav1.LabelSelectorAsSelector sees it, or None when it selects
    nothing: a nil or empty selector, or one that does not convert (In/NotIn without values,
    Exists/DoesNotExist with values)."""
    sel = pdb.selector
    if sel is None or sel.is_empty():
        return None
    for r in sel.match_expressions:
        if r.operator in (IN, NOT_IN) and not r.values:
            return None
        if r.operator in (EXISTS, DOES_NOT_EXIST) and r.values:
            return None
        if r.operator not in (IN, NOT_IN, EXISTS, DOES_NOT_EXIST):
            return None
    return sel


def _disrupted_pods(pdb: PodDisruptionBudget) -> dict[str, float]:
    # status.disruptedPods: pod name -> when its eviction was processed.
    return pdb.disrupted_pods


def filter_pods_with_pdb_violation(items: Sequence[P], pdbs: Sequence[PodDisruptionBudget]
                                   ) -> tuple[list[P], list[P]]:
    """Split pods (or PodInfos) into (violating, non_violating), keeping their order.

    Each matching PDB's status.disruptionsAllowed is spent pod by pod, in the given order; a pod
    violates when some matching PDB's budget goes below zero. A pod listed in a PDB's
    status.disruptedPods was already counted by the API server and spends nothing."""
    allowed = [pdb.disruptions_allowed for pdb in pdbs]
    selectors = [pdb_selector(pdb) for pdb in pdbs]
    violating: list[P] = []
    non_violating: list[P] = []
    for item in items:
        pod = item.pod if isinstance(item, PodInfo) else item
        violated = False
        if pod.meta.labels:  # a pod without labels matches no PDB
            for i, pdb in enumerate(pdbs):
                sel = selectors[i]
                if pdb.meta.namespace != pod.meta.namespace or sel is None or not sel.matches(pod.meta.labels):
                    continue
                if pod.meta.name in _disrupted_pods(pdb):
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else non_violating).append(item)
    return violating, non_violating
