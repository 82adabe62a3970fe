"""Small builders for the NodeResources tests: real Kubernetes manifests parsed by load_text."""
from __future__ import annotations

import itertools
import json
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from schedmesh.api.load import load_text
from schedmesh.api.types import Node, Pod
from schedmesh.cache.snapshot import Snapshot

_names = itertools.count()

Requests = Mapping[str, Any]


def sidecar(requests: Optional[Requests] = None) -> dict:
    """An init container with restartPolicy Always (a sidecar)."""
    return {"_sidecar": True, **(requests or {})}


def _container(name: str, requests: Optional[Requests]) -> dict:
    requests = dict(requests or {})
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    if requests.pop("_sidecar", False):
        c["restartPolicy"] = "Always"
    if requests:
        c["resources"] = {"requests": {k: str(v) for k, v in requests.items()}}
    return c


def make_pod(*containers: Optional[Requests], init: Sequence[Requests] = (), overhead: Optional[Requests] = None,
             pod_requests: Optional[Requests] = None, node: str = "", name: str = "", uid: str = "",
             nominated: str = "") -> Pod:
    """A pod with one container per `containers` entry (requests dicts); no entry means a pod
    without containers, as kube's st.MakePod().Obj() (the API would refuse it; tests need it)."""
    name = name or f"pod-{next(_names)}"
    spec: dict[str, Any] = {"containers": [_container(f"c{i}", r) for i, r in enumerate(containers)] or
                            [_container("placeholder", None)]}
    if init:
        spec["initContainers"] = [_container(f"i{i}", r) for i, r in enumerate(init)]
    if overhead:
        spec["overhead"] = {k: str(v) for k, v in overhead.items()}
    if pod_requests:
        spec["resources"] = {"requests": {k: str(v) for k, v in pod_requests.items()}}
    if node:
        spec["nodeName"] = node
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                           "spec": spec}
    if nominated:
        doc["status"] = {"nominatedNodeName": nominated}
    pod = load_text(json.dumps(doc)).pods[0]
    if not containers:
        pod.containers = []
    if uid:
        pod.meta.uid = uid
    return pod


def make_node(name: str, allocatable: Optional[Requests] = None) -> Node:
    """A node whose capacity and allocatable are `allocatable` (quantities as strings or ints)."""
    alloc = {k: str(v) for k, v in (allocatable or {}).items()}
    doc = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
           "status": {"capacity": alloc, "allocatable": alloc}}
    return load_text(json.dumps(doc)).nodes[0]


def snapshot(nodes: Iterable[Node], pods: Iterable[Pod] = ()) -> Snapshot:
    return Snapshot(list(nodes), list(pods))


def rows_by_name(snap: Snapshot, names: Sequence[str]) -> np.ndarray:
    cols = snap.cols
    return np.array([cols.index_of(n) for n in names], np.int64)
