"""Taint/toleration matching exactly as core/v1 Toleration.ToleratesTaint and component-helpers'
TolerationsTolerateTaint / FindMatchingUntoleratedTaint define it (v1.35).

Plain functions over `schedmesh.api.types` objects, reused by TaintToleration,
NodeUnschedulable, PodTopologySpread's nodeTaintsPolicy and the eviction agent. The per-group
helpers at the end evaluate a pod once per distinct taint list (`snapshot.cols.taint_groups`),
which is how the bulk Filter/Score stay O(groups) instead of O(nodes).
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, Taint, Toleration

TOLERATION_OP_EQUAL = "Equal"
TOLERATION_OP_EXISTS = "Exists"
TOLERATION_OP_LT = "Lt"
TOLERATION_OP_GT = "Gt"

# node.kubernetes.io/unschedulable:NoSchedule, the taint NodeUnschedulable checks tolerations against.
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
UNSCHEDULABLE_TAINT = Taint(TAINT_NODE_UNSCHEDULABLE, NO_SCHEDULE)

# TaintTolerationComparisonOperators is alpha and off by default in v1.35: Lt/Gt never match.
DEFAULT_ENABLE_COMPARISON_OPERATORS = False

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

TaintFilter = Callable[[Taint], bool]


def _canonical_int64(s: str) -> Optional[int]:
    """content.IsDecimalInteger then strconv.ParseInt(s, 10, 64): optional '-', no leading
    zeros (except "0" itself), no '+', within int64. None when either check fails."""
    if not s:
        return None
    i = 1 if s[0] == "-" else 0
    if i == len(s):
        return None
    if s[i] == "0":
        return 0 if len(s) == 1 else None  # "-0" and "007" are not canonical
    if not s[i:].isascii() or not s[i:].isdigit():
        return None
    v = int(s)
    return v if _INT64_MIN <= v <= _INT64_MAX else None


def _compare_numeric(toleration_value: str, taint_value: str, op: str) -> bool:
    tv = _canonical_int64(toleration_value)
    if tv is None:
        return False
    nv = _canonical_int64(taint_value)
    if nv is None:
        return False
    if op == TOLERATION_OP_LT:
        return nv < tv
    if op == TOLERATION_OP_GT:
        return nv > tv
    return False


def toleration_tolerates_taint(toleration: Toleration, taint: Taint,
                               enable_comparison_operators: bool = DEFAULT_ENABLE_COMPARISON_OPERATORS) -> bool:
    """Toleration.ToleratesTaint: empty effect matches every effect, empty key matches every key
    (the API only allows it with Exists), Exists matches any value, "" / Equal compare values."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    op = toleration.operator
    if op in ("", TOLERATION_OP_EQUAL):
        return toleration.value == taint.value
    if op == TOLERATION_OP_EXISTS:
        return True
    if op in (TOLERATION_OP_LT, TOLERATION_OP_GT):
        return enable_comparison_operators and _compare_numeric(toleration.value, taint.value, op)
    return False


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint,
                               enable_comparison_operators: bool = DEFAULT_ENABLE_COMPARISON_OPERATORS) -> bool:
    """TolerationsTolerateTaint: does any toleration tolerate the taint?"""
    return any(toleration_tolerates_taint(t, taint, enable_comparison_operators) for t in tolerations)


def do_not_schedule_taints_filter(taint: Taint) -> bool:
    """helper.DoNotScheduleTaintsFilterFunc: only NoSchedule and NoExecute taints block scheduling."""
    return taint.effect == NO_SCHEDULE or taint.effect == NO_EXECUTE


def find_matching_untolerated_taint(taints: Iterable[Taint], tolerations: Sequence[Toleration],
                                    inclusion_filter: Optional[TaintFilter] = None,
                                    enable_comparison_operators: bool = DEFAULT_ENABLE_COMPARISON_OPERATORS,
                                    ) -> Optional[Taint]:
    """FindMatchingUntoleratedTaint: the first taint (passing `inclusion_filter`, all when None)
    that no toleration tolerates, or None when every such taint is tolerated."""
    for taint in taints:
        if inclusion_filter is not None and not inclusion_filter(taint):
            continue
        if not tolerations_tolerate_taint(tolerations, taint, enable_comparison_operators):
            return taint
    return None


def prefer_no_schedule_tolerations(tolerations: Iterable[Toleration]) -> list[Toleration]:
    """The tolerations that can tolerate a PreferNoSchedule taint: effect PreferNoSchedule or empty."""
    return [t for t in tolerations if not t.effect or t.effect == PREFER_NO_SCHEDULE]


def count_intolerable_prefer_no_schedule(taints: Iterable[Taint], tolerations: Sequence[Toleration],
                                         enable_comparison_operators: bool = DEFAULT_ENABLE_COMPARISON_OPERATORS,
                                         ) -> int:
    """TaintToleration's score input: PreferNoSchedule taints that no toleration tolerates."""
    return sum(1 for taint in taints
               if taint.effect == PREFER_NO_SCHEDULE
               and not tolerations_tolerate_taint(tolerations, taint, enable_comparison_operators))


# ---- per taint group (Columns.taint_groups / taint_group) ----------------------------------

def untolerated_groups(taint_groups: Sequence[Sequence[Taint]], tolerations: Sequence[Toleration],
                       inclusion_filter: Optional[TaintFilter] = do_not_schedule_taints_filter,
                       enable_comparison_operators: bool = DEFAULT_ENABLE_COMPARISON_OPERATORS) -> np.ndarray:
    """bool per taint group: True where the group has a taint (passing the filter) the pod does
    not tolerate. Index the result with `cols.taint_group[rows]` to get a per-node mask."""
    out = np.zeros(len(taint_groups), dtype=bool)
    for g, taints in enumerate(taint_groups):
        if taints and find_matching_untolerated_taint(taints, tolerations, inclusion_filter,
                                                      enable_comparison_operators) is not None:
            out[g] = True
    return out


def intolerable_prefer_no_schedule_per_group(taint_groups: Sequence[Sequence[Taint]],
                                             tolerations: Sequence[Toleration],
                                             enable_comparison_operators: bool = DEFAULT_ENABLE_COMPARISON_OPERATORS,
                                             ) -> np.ndarray:
    """int64 per taint group: count_intolerable_prefer_no_schedule for that group's taints."""
    return np.fromiter((count_intolerable_prefer_no_schedule(t, tolerations, enable_comparison_operators) if t else 0
                        for t in taint_groups), dtype=np.int64, count=len(taint_groups))
