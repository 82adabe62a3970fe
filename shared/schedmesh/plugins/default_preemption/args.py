"""DefaultPreemptionArgs: defaults (apis/config/v1/defaults.go SetDefaults_DefaultPreemptionArgs)
and validation (apis/config/validation ValidateDefaultPreemptionArgs), with kube's field paths
and wording. Several errors are joined as kube's aggregate prints them ("[a, b]")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE = 10
DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE = 100
PERCENTAGE = "minCandidateNodesPercentage"
ABSOLUTE = "minCandidateNodesAbsolute"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True, slots=True)
class DefaultPreemptionArgs:
    # At least this share of the potential nodes is dry-run...
    min_candidate_nodes_percentage: int = DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE
    # ...and at least this many (capped at the number of potential nodes).
    min_candidate_nodes_absolute: int = DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE

    @staticmethod
    def from_dict(d: Optional[Mapping[str, Any]]) -> "DefaultPreemptionArgs":
        d = d or {}
        unknown = sorted(k for k in d if k not in (PERCENTAGE, ABSOLUTE, "kind", "apiVersion"))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown field")
        pct = _int32(d.get(PERCENTAGE), PERCENTAGE, DEFAULT_MIN_CANDIDATE_NODES_PERCENTAGE)
        absolute = _int32(d.get(ABSOLUTE), ABSOLUTE, DEFAULT_MIN_CANDIDATE_NODES_ABSOLUTE)
        args = DefaultPreemptionArgs(pct, absolute)
        args.validate()
        return args

    def validate(self) -> None:
        errors: list[str] = []
        pct, absolute = self.min_candidate_nodes_percentage, self.min_candidate_nodes_absolute
        if pct < 0 or pct > 100:
            errors.append(f"{PERCENTAGE}: Invalid value: {pct}: not in valid range [0, 100]")
        if absolute < 0:
            errors.append(f"{ABSOLUTE}: Invalid value: {absolute}: not in valid range [0, inf)")
        if pct == 0 and absolute == 0:
            errors.append(f"{PERCENTAGE}: Invalid value: 0: cannot be zero at the same time as {ABSOLUTE}")
            errors.append(f"{ABSOLUTE}: Invalid value: 0: cannot be zero at the same time as {PERCENTAGE}")
        if len(errors) == 1:
            raise ValueError(errors[0])
        if errors:
            raise ValueError("[" + ", ".join(errors) + "]")


def _int32(v: Any, path: str, default: int) -> int:
    if v is None:  # a missing (nil) field takes the default; an explicit 0 stays 0
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{path}: must be an integer")
    if not INT32_MIN <= v <= INT32_MAX:
        raise ValueError(f"{path}: {v} does not fit in int32")
    return v
