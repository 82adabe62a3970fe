"""PodTopologySpreadArgs: parsed from the pluginConfig dict (kube's JSON names), defaulted as
apis/config/v1/defaults.go does (defaultingType "" -> System) and validated as
ValidatePodTopologySpreadArgs does. Errors are ValueError with kube's field paths and wording;
several are joined as kube's aggregate prints them ("[a, b]").
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from schedmesh.api.resources import is_qualified_name
from schedmesh.api.types import TopologySpreadConstraint
from schedmesh.plugins.pod_topology_spread.common import DO_NOT_SCHEDULE, SCHEDULE_ANYWAY

SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"


@dataclass(frozen=True, slots=True)
class PodTopologySpreadArgs:
    default_constraints: tuple[TopologySpreadConstraint, ...] = ()
    defaulting_type: str = SYSTEM_DEFAULTING


def _go_value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, str) else str(v)


def _raise(errors: list[str]) -> None:
    if len(errors) == 1:
        raise ValueError(errors[0])
    if errors:
        raise ValueError("[" + ", ".join(errors) + "]")


def _opt_str(d: Mapping, key: str, path: str) -> Optional[str]:
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise ValueError(f"{path}.{key}: must be a string")
    return v


def _parse_constraint(d: Any, path: str) -> tuple[TopologySpreadConstraint, bool]:
    """(constraint, whether it set a labelSelector, which the validation forbids)."""
    if not isinstance(d, Mapping):
        raise ValueError(f"{path}: must be an object")
    max_skew = d.get("maxSkew", 0)
    if isinstance(max_skew, bool) or not isinstance(max_skew, int):
        raise ValueError(f"{path}.maxSkew: must be an integer")
    min_domains = d.get("minDomains")
    if min_domains is not None and (isinstance(min_domains, bool) or not isinstance(min_domains, int)):
        raise ValueError(f"{path}.minDomains: must be an integer")
    mlk = d.get("matchLabelKeys") or []
    if not isinstance(mlk, list) or not all(isinstance(k, str) for k in mlk):
        raise ValueError(f"{path}.matchLabelKeys: must be a list of strings")
    c = TopologySpreadConstraint(
        max_skew=max_skew, topology_key=_opt_str(d, "topologyKey", path) or "",
        when_unsatisfiable=_opt_str(d, "whenUnsatisfiable", path) or "",
        label_selector=None, min_domains=min_domains,
        node_affinity_policy=_opt_str(d, "nodeAffinityPolicy", path),
        node_taints_policy=_opt_str(d, "nodeTaintsPolicy", path), match_label_keys=list(mlk))
    return c, d.get("labelSelector") is not None


def parse_args(args: Optional[Mapping[str, Any]]) -> PodTopologySpreadArgs:
    args = args or {}
    defaulting = args.get("defaultingType") or SYSTEM_DEFAULTING
    raw = args.get("defaultConstraints") or []
    if not isinstance(raw, list):
        raise ValueError("defaultConstraints: must be a list")
    parsed = [_parse_constraint(c, f"defaultConstraints[{i}]") for i, c in enumerate(raw)]
    constraints = tuple(c for c, _ in parsed)

    errors: list[str] = []
    if defaulting not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
        errors.append(f"defaultingType: Unsupported value: {_go_value(defaulting)}: supported values: "
                      f"\"{SYSTEM_DEFAULTING}\", \"{LIST_DEFAULTING}\"")
    elif defaulting == SYSTEM_DEFAULTING and constraints:
        errors.append(f"defaultingType: Invalid value: {_go_value(defaulting)}: when .defaultConstraints are not empty")
    for i, (c, has_selector) in enumerate(parsed):
        p = f"defaultConstraints[{i}]"
        if c.max_skew <= 0:
            errors.append(f"{p}.maxSkew: Invalid value: {c.max_skew}: not in valid range (0, inf)")
        if not c.topology_key:
            errors.append(f"{p}.topologyKey: Required value: can not be empty")
        elif not is_qualified_name(c.topology_key):
            errors.append(f"{p}.topologyKey: Invalid value: {_go_value(c.topology_key)}: name part must consist of "
                          "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
                          "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                          "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
        if not c.when_unsatisfiable:
            errors.append(f"{p}.whenUnsatisfiable: Required value: can not be empty")
        elif c.when_unsatisfiable not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            errors.append(f"{p}.whenUnsatisfiable: Unsupported value: {_go_value(c.when_unsatisfiable)}: "
                          f"supported values: \"{DO_NOT_SCHEDULE}\", \"{SCHEDULE_ANYWAY}\"")
        if has_selector:
            errors.append(f"{p}.labelSelector: Forbidden: constraint must not define a selector, "
                          "as they deduced for each pod")
        for j in range(i):
            other = constraints[j]
            if other.topology_key == c.topology_key and other.when_unsatisfiable == c.when_unsatisfiable:
                # validateConstraintNotRepeat names the list's path with the index.
                errors.append(f"defaultConstraints[{i}]: Duplicate value: "
                              f"\"{{{c.topology_key}, {c.when_unsatisfiable}}}\"")
                break
    _raise(errors)
    return PodTopologySpreadArgs(constraints, defaulting)
