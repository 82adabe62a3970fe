"""Plugin arguments of NodeResourcesFit and NodeResourcesBalancedAllocation.

Parsed from the pluginConfig dict (kube's JSON field names), defaulted as
apis/config/v1/defaults.go does and validated as apis/config/validation/validation_pluginargs.go
does. Errors are ValueError("<field path>: <reason>") with kube's field paths and wording; several
errors are joined as kube's aggregate prints them ("[a, b]").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from schedmesh.api.resources import CPU, MEMORY, is_qualified_name

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
SUPPORTED_STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

# config.MaxCustomPriorityScore: shape scores are 0..10, scaled to 0..MaxNodeScore when used.
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int


@dataclass(frozen=True, slots=True)
class ShapePoint:
    utilization: int
    score: int


@dataclass(frozen=True, slots=True)
class ScoringStrategy:
    type: str
    resources: tuple[ResourceSpec, ...]
    shape: Optional[tuple[ShapePoint, ...]] = None  # requestedToCapacityRatio.shape


@dataclass(frozen=True, slots=True)
class FitArgs:
    ignored_resources: frozenset[str]
    ignored_resource_groups: frozenset[str]
    scoring_strategy: ScoringStrategy


@dataclass(frozen=True, slots=True)
class BalancedAllocationArgs:
    resources: tuple[ResourceSpec, ...]


DEFAULT_RESOURCES = (ResourceSpec(CPU, 1), ResourceSpec(MEMORY, 1))


def _go_value(v: Any) -> str:
    """How field.Error prints a bad value: strings quoted, numbers bare."""
    return f'"{v}"' if isinstance(v, str) else str(v)


def _invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {_go_value(value)}: {detail}"


def _raise(errors: list[str]) -> None:
    if len(errors) == 1:
        raise ValueError(errors[0])
    if errors:
        raise ValueError("[" + ", ".join(errors) + "]")


def _as_list(v: Any, path: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ValueError(f"{path}: must be a list")
    return v


def _as_int(v: Any, path: str, default: int = 0) -> int:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{path}: must be an integer")
    return v


def _resources(raw: Any, path: str) -> list[ResourceSpec]:
    """ResourceSpec list with the v1 defaulting of weight 0 (or unset) to 1."""
    out = []
    for i, r in enumerate(_as_list(raw, path)):
        if not isinstance(r, Mapping):
            raise ValueError(f"{path}[{i}]: must be an object")
        name = r.get("name", "")
        if not isinstance(name, str):
            raise ValueError(f"{path}[{i}].name: must be a string")
        weight = _as_int(r.get("weight"), f"{path}[{i}].weight")
        out.append(ResourceSpec(name, weight or 1))
    return out


def _validate_shape(shape: list[ShapePoint], path: str) -> list[str]:
    if not shape:
        return [f"{path}: Required value: at least one point must be specified"]
    errs = []
    for i in range(1, len(shape)):
        if shape[i - 1].utilization >= shape[i].utilization:
            errs.append(_invalid(f"{path}[{i}].utilization", shape[i].utilization,
                                 "values must be sorted in increasing order"))
            break
    for i, p in enumerate(shape):
        if not 0 <= p.utilization <= MAX_UTILIZATION:
            errs.append(_invalid(f"{path}[{i}].utilization", p.utilization,
                                 f"not in valid range [0, {MAX_UTILIZATION}]"))
        if not 0 <= p.score <= MAX_CUSTOM_PRIORITY_SCORE:
            errs.append(_invalid(f"{path}[{i}].score", p.score,
                                 f"not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"))
    return errs


def _label_name_errors(name: str, path: str) -> list[str]:
    """metav1validation.ValidateLabelName: a qualified name."""
    if is_qualified_name(name):
        return []
    return [_invalid(path, name, "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                                 "start and end with an alphanumeric character (with an optional DNS subdomain "
                                 "prefix and '/')")]


def parse_fit_args(args: Optional[Mapping[str, Any]]) -> FitArgs:
    """NodeResourcesFitArgs: defaults (LeastAllocated over cpu and memory, weight 1) then validation."""
    args = dict(args or {})
    errs: list[str] = []
    ignored = [str(x) for x in _as_list(args.get("ignoredResources"), "ignoredResources")]
    groups = [str(x) for x in _as_list(args.get("ignoredResourceGroups"), "ignoredResourceGroups")]
    for i, res in enumerate(ignored):
        errs += _label_name_errors(res, f"ignoredResources[{i}]")
    for i, group in enumerate(groups):
        if "/" in group:
            errs.append(_invalid(f"ignoredResourceGroups[{i}]", group, "resource group name can't contain '/'"))
        errs += _label_name_errors(group, f"ignoredResourceGroups[{i}]")

    raw = args.get("scoringStrategy")
    if raw is None:
        raw = {"type": LEAST_ALLOCATED}
    if not isinstance(raw, Mapping):
        raise ValueError("scoringStrategy: must be an object")
    stype = raw.get("type") or ""
    resources = _resources(raw.get("resources"), "scoringStrategy.resources") or list(DEFAULT_RESOURCES)
    if stype not in SUPPORTED_STRATEGIES:
        supported = ", ".join(f'"{s}"' for s in SUPPORTED_STRATEGIES)
        errs.append(f"scoringStrategy.type: Unsupported value: {_go_value(stype)}: supported values: {supported}")
    for i, r in enumerate(resources):
        if r.weight <= 0 or r.weight > 100:
            errs.append(_invalid(f"scoringStrategy.resources[{i}].weight", r.weight,
                                 f"resource weight of {r.name} not in valid range (0, 100]"))
    shape: Optional[list[ShapePoint]] = None
    rtcr = raw.get("requestedToCapacityRatio")
    if rtcr is not None:
        if not isinstance(rtcr, Mapping):
            raise ValueError("scoringStrategy.requestedToCapacityRatio: must be an object")
        shape = []
        for i, p in enumerate(_as_list(rtcr.get("shape"), "scoringStrategy.requestedToCapacityRatio.shape")):
            if not isinstance(p, Mapping):
                raise ValueError(f"scoringStrategy.requestedToCapacityRatio.shape[{i}]: must be an object")
            shape.append(ShapePoint(_as_int(p.get("utilization"), f"scoringStrategy.shape[{i}].utilization"),
                                    _as_int(p.get("score"), f"scoringStrategy.shape[{i}].score")))
        # kube validates the shape under this (shorter) path.
        errs += _validate_shape(shape, "scoringStrategy.shape")
    elif stype == REQUESTED_TO_CAPACITY_RATIO:
        # kube-scheduler dereferences the missing parameters and crashes; refuse the config instead.
        errs.append("scoringStrategy.requestedToCapacityRatio: Required value: "
                    "the RequestedToCapacityRatio strategy needs a shape")
    _raise(errs)
    return FitArgs(frozenset(ignored), frozenset(groups),
                   ScoringStrategy(stype, tuple(resources), tuple(shape) if shape is not None else None))


def parse_balanced_allocation_args(args: Optional[Mapping[str, Any]]) -> BalancedAllocationArgs:
    """NodeResourcesBalancedAllocationArgs: resources default to cpu and memory; each weight must be 1."""
    args = dict(args or {})
    resources = _resources(args.get("resources"), "resources") or list(DEFAULT_RESOURCES)
    errs: list[str] = []
    seen: set[str] = set()
    for i, r in enumerate(resources):
        if r.name in seen:
            errs.append(f"resources[{i}].name: Duplicate value: {_go_value(r.name)}")
        seen.add(r.name)
        if r.weight != 1:
            errs.append(_invalid(f"resources[{i}].weight", r.weight, "must be 1"))
    _raise(errs)
    return BalancedAllocationArgs(tuple(resources))
