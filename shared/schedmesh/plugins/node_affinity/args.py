"""NodeAffinityArgs: `addedAffinity` (a v1.NodeAffinity) applied to every pod of the profile.

Read from the pluginConfig dict with kube's JSON names and validated like
ValidateNodeAffinityArgs: the required selector and the preferred terms must parse
(NewNodeSelector / NewPreferredSchedulingTerms); problems raise ValueError("<path>: <reason>").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from schedmesh.api.types import (NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
                                 PreferredSchedulingTerm)
from schedmesh.plugins.node_affinity.matcher import (NodeSelectorMatcher, PreferredTerms, compile_node_selector,
                                                     compile_preferred_terms)

ADDED = "addedAffinity"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    added_node_selector: Optional[NodeSelectorMatcher] = None
    added_preferred: Optional[PreferredTerms] = None


def _obj(v: Any, path: str) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{path}: expected an object, got {type(v).__name__}")
    return v


def _list(v: Any, path: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ValueError(f"{path}: expected a list, got {type(v).__name__}")
    return v


def _str(v: Any, path: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ValueError(f"{path}: expected a string, got {type(v).__name__}")
    return v


def _requirements(v: Any, path: str) -> list[NodeSelectorRequirement]:
    out = []
    for i, r in enumerate(_list(v, path)):
        p = f"{path}[{i}]"
        r = _obj(r, p)
        out.append(NodeSelectorRequirement(_str(r.get("key"), f"{p}.key"), _str(r.get("operator"), f"{p}.operator"),
                                           [_str(x, f"{p}.values[{j}]") for j, x in enumerate(_list(r.get("values"), f"{p}.values"))]))
    return out


def _term(v: Any, path: str) -> NodeSelectorTerm:
    d = _obj(v, path)
    return NodeSelectorTerm(_requirements(d.get("matchExpressions"), f"{path}.matchExpressions"),
                            _requirements(d.get("matchFields"), f"{path}.matchFields"))


def parse_node_affinity(v: Any, path: str) -> NodeAffinity:
    """A v1.NodeAffinity from its JSON form (no validation beyond types)."""
    d = _obj(v, path)
    required = None
    if d.get(REQUIRED) is not None:
        rp = f"{path}.{REQUIRED}"
        rd = _obj(d[REQUIRED], rp)
        required = NodeSelector([_term(t, f"{rp}.nodeSelectorTerms[{i}]")
                                 for i, t in enumerate(_list(rd.get("nodeSelectorTerms"), f"{rp}.nodeSelectorTerms"))])
    preferred = []
    pp = f"{path}.{PREFERRED}"
    for i, w in enumerate(_list(d.get(PREFERRED), pp)):
        w = _obj(w, f"{pp}[{i}]")
        weight = w.get("weight", 0)
        if not isinstance(weight, int) or isinstance(weight, bool):
            raise ValueError(f"{pp}[{i}].weight: expected an integer")
        preferred.append(PreferredSchedulingTerm(weight, _term(w.get("preference"), f"{pp}[{i}].preference")))
    return NodeAffinity(required, preferred)


def parse_args(args: Optional[dict]) -> NodeAffinityArgs:
    """Compile and validate NodeAffinityArgs (a NodeAffinity instance is accepted as addedAffinity too)."""
    added = (args or {}).get(ADDED)
    if added is None:
        return NodeAffinityArgs()
    na = added if isinstance(added, NodeAffinity) else parse_node_affinity(added, ADDED)
    selector = preferred = None
    errors: list[str] = []
    if na.required is not None:
        selector = compile_node_selector(na.required, f"{ADDED}.{REQUIRED}")
        errors.extend(selector.errors)
    if na.preferred:
        preferred = compile_preferred_terms(na.preferred, f"{ADDED}.{PREFERRED}")
        errors.extend(preferred.errors)
    if errors:
        raise ValueError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return NodeAffinityArgs(selector, preferred)
