"""Simulated node pools for the kubelet agent: a YAML file describing groups of identical
nodes (like KWOK's node templates), expanded into Node objects.

    pools:                                # or just the list itself at the top level
      - name: general                     # node names: general-0, general-1, ...
        count: 6
        cpu: "8"                          # quantities as Kubernetes writes them
        memory: 32Gi
        pods: 110                         # optional, default 110
        ephemeralStorage: 100Gi           # optional, default 100Gi
        gpus: 0                           # optional: nvidia.com/gpu
        zones: [zone-a, zone-b, zone-c]   # optional: nodes spread round-robin (topology.kubernetes.io/zone)
        region: demo-1                    # optional: topology.kubernetes.io/region
        labels: {node.kubernetes.io/instance-type: m6i.2xlarge}
        taints: [{key: dedicated, value: batch, effect: NoSchedule}]
        images: [{names: [registry.k8s.io/pause:3.10], sizeBytes: 300000}]
        resources: {example.com/fpga: 2}  # optional: any other extended resources

Every node gets the well-known labels a kubelet sets (kubernetes.io/hostname, kubernetes.io/os,
kubernetes.io/arch), `schedmesh.io/pool`, and capacity == allocatable.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

from schedmesh.api.quantity import QuantityError, parse_quantity
from schedmesh.api.types import ContainerImage, Node, NodeCondition, ObjectMeta, ResourceList, Taint

GPU = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
HOSTNAME_LABEL = "kubernetes.io/hostname"
POOL_LABEL = "schedmesh.io/pool"
AGENT_ANNOTATION = "schedmesh.io/agent"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_POOL_KEYS = {"name", "count", "cpu", "memory", "pods", "ephemeralStorage", "gpus", "zones", "region", "labels",
              "taints", "images", "resources"}


class PoolError(ValueError):
    """The node-pool file is not valid (the message names the field)."""


def _quantity(v: Any, path: str):
    if v is None or isinstance(v, bool):
        raise PoolError(f"{path}: a quantity is required")
    try:
        q = parse_quantity(v)
    except (QuantityError, ValueError, TypeError) as e:
        raise PoolError(f"{path}: {e}") from None
    if q < 0:
        raise PoolError(f"{path}: must not be negative")
    return q


def _str_map(v: Any, path: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise PoolError(f"{path}: must be a map")
    return {str(k): "" if x is None else str(x) for k, x in v.items()}


def _list(v: Any, path: str) -> list:
    if v is None:
        return []
    if not isinstance(v, list):
        raise PoolError(f"{path}: must be a list")
    return v


def _taints(v: Any, path: str) -> list[Taint]:
    out = []
    for i, t in enumerate(_list(v, path)):
        p = f"{path}[{i}]"
        if not isinstance(t, dict) or not t.get("key"):
            raise PoolError(f"{p}.key: required")
        effect = t.get("effect", "")
        if effect not in TAINT_EFFECTS:
            raise PoolError(f"{p}.effect: must be one of {', '.join(TAINT_EFFECTS)}")
        out.append(Taint(str(t["key"]), effect, str(t.get("value", "") or "")))
    return out


def _images(v: Any, path: str) -> list[ContainerImage]:
    out = []
    for i, im in enumerate(_list(v, path)):
        p = f"{path}[{i}]"
        if isinstance(im, str):
            out.append(ContainerImage([im]))
            continue
        if not isinstance(im, dict) or not im.get("names"):
            raise PoolError(f"{p}.names: required")
        out.append(ContainerImage([str(n) for n in _list(im["names"], f"{p}.names")],
                                  int(im.get("sizeBytes", 0) or 0)))
    return out


def expand_pool(pool: dict, path: str = "pools[0]", agent: str = "") -> list[Node]:
    """The nodes of one pool entry."""
    if not isinstance(pool, dict):
        raise PoolError(f"{path}: must be a map")
    unknown = sorted(set(pool) - _POOL_KEYS)
    if unknown:
        raise PoolError(f"{path}: unknown field(s) {', '.join(unknown)}")
    prefix = pool.get("name")
    if not prefix or not isinstance(prefix, str):
        raise PoolError(f"{path}.name: required")
    count = pool.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise PoolError(f"{path}.count: must be a non-negative integer")
    resources: ResourceList = {
        "cpu": _quantity(pool.get("cpu"), f"{path}.cpu"),
        "memory": _quantity(pool.get("memory"), f"{path}.memory"),
        "pods": _quantity(pool.get("pods", 110), f"{path}.pods"),
        "ephemeral-storage": _quantity(pool.get("ephemeralStorage", "100Gi"), f"{path}.ephemeralStorage"),
    }
    gpus = _quantity(pool.get("gpus", 0), f"{path}.gpus")
    if gpus:
        resources[GPU] = gpus
    for k, q in _str_map(pool.get("resources"), f"{path}.resources").items():
        resources[k] = _quantity(q, f"{path}.resources[{k}]")
    zones = [str(z) for z in _list(pool.get("zones"), f"{path}.zones")]
    region = pool.get("region")
    labels = _str_map(pool.get("labels"), f"{path}.labels")
    taints = _taints(pool.get("taints"), f"{path}.taints")
    images = _images(pool.get("images"), f"{path}.images")
    nodes = []
    for i in range(count):
        name = f"{prefix}-{i}"
        node_labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", POOL_LABEL: prefix}
        if region:
            node_labels[REGION_LABEL] = str(region)
        if zones:
            node_labels[ZONE_LABEL] = zones[i % len(zones)]
        node_labels.update(labels)
        node_labels[HOSTNAME_LABEL] = name
        meta = ObjectMeta(name=name, uid=f"node-{name}", labels=node_labels,
                          annotations={AGENT_ANNOTATION: agent} if agent else {})
        nodes.append(Node(meta=meta, taints=list(taints), allocatable=dict(resources), capacity=dict(resources),
                          images=[ContainerImage(list(im.names), im.size_bytes) for im in images]))
    return nodes


def load_pools(data: Any, agent: str = "") -> list[Node]:
    """Nodes of every pool in `data` (the parsed YAML: a list of pools or {pools: [...]})."""
    if isinstance(data, dict) and "pools" in data:
        data = data["pools"]
    pools = _list(data, "pools")
    nodes: list[Node] = []
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        for n in expand_pool(pool, f"pools[{i}]", agent):
            if n.name in seen:
                raise PoolError(f"pools[{i}]: node name {n.name!r} is used twice")
            seen.add(n.name)
            nodes.append(n)
    return nodes


def load_pool_file(path: str | Path, agent: str = "") -> list[Node]:
    text = Path(path).read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PoolError(f"{path}: {e}") from None
    try:
        return load_pools(data, agent)
    except PoolError as e:
        raise PoolError(f"{path}: {e}") from None


def ready_condition(now: float, ready: bool = True, message: Optional[str] = None) -> NodeCondition:
    return NodeCondition("Ready", "True" if ready else "False", "KubeletReady" if ready else "KubeletNotReady",
                         message or ("kubelet is posting ready status" if ready else "kubelet is not ready"), now)


def zones_of(nodes: Iterable[Node]) -> list[str]:
    return sorted({n.labels.get(ZONE_LABEL, "") for n in nodes} - {""})
