"""Tiny builders of Kubernetes manifests (as dicts) for the InterPodAffinity tests.

Objects go through `schedmesh.api.load`, so tests see what real YAML would produce.
"""
from __future__ import annotations

import itertools
import json
from typing import Any, Optional

from schedmesh.api.load import load_text
from schedmesh.api.types import Node, Pod
from schedmesh.cache.snapshot import Snapshot

_names = itertools.count()

Sel = Optional[dict]


def expr(key: str, op: str, *values: str) -> dict:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def sel(*exprs: dict, **match_labels: str) -> dict:
    """A label selector; sel() is the empty selector {} (matches everything)."""
    d: dict[str, Any] = {}
    if match_labels:
        d["matchLabels"] = dict(match_labels)
    if exprs:
        d["matchExpressions"] = list(exprs)
    return d


def In(key: str, *values: str) -> dict:
    return sel(expr(key, "In", *values))


def NotIn(key: str, *values: str) -> dict:
    return sel(expr(key, "NotIn", *values))


def Exists(key: str) -> dict:
    return sel(expr(key, "Exists"))


NIL = object()  # a term without labelSelector


def term(topology_key: str, selector: Any = NIL, namespaces: Optional[list[str]] = None,
         ns_selector: Sel = None) -> dict:
    t: dict[str, Any] = {"topologyKey": topology_key}
    if selector is not NIL:
        t["labelSelector"] = selector
    if namespaces is not None:
        t["namespaces"] = list(namespaces)
    if ns_selector is not None:
        t["namespaceSelector"] = ns_selector
    return t


def weighted(weight: int, t: dict) -> dict:
    return {"weight": weight, "podAffinityTerm": t}


def pod(name: Optional[str] = None, ns: str = "default", labels: Optional[dict] = None, node: str = "",
        affinity: Optional[list] = None, anti: Optional[list] = None, pref_affinity: Optional[list] = None,
        pref_anti: Optional[list] = None) -> dict:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    aff: dict[str, Any] = {}
    for field, req, pref in (("podAffinity", affinity, pref_affinity), ("podAntiAffinity", anti, pref_anti)):
        if req is not None or pref is not None:
            aff[field] = {}
            if req is not None:
                aff[field]["requiredDuringSchedulingIgnoredDuringExecution"] = req
            if pref is not None:
                aff[field]["preferredDuringSchedulingIgnoredDuringExecution"] = pref
    if aff:
        spec["affinity"] = aff
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name or f"p{next(_names)}", "namespace": ns, "labels": labels or {}},
            "spec": spec}


def node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def namespace(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def parse(*objs: dict):
    return load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def the_pod(d: dict) -> Pod:
    return parse(d).pods[0]


def cluster(nodes: list[dict], pods: list[dict] = (), namespaces: list[dict] = ()) -> Snapshot:
    m = parse(*nodes, *pods, *namespaces)
    return Snapshot(m.nodes, m.pods, {n.name: n.labels for n in m.namespaces})


def the_node(d: dict) -> Node:
    return parse(d).nodes[0]
