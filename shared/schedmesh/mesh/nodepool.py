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
        # The simulated kubelet (all optional):
        inodes: 6553600                   # nodefs inodes (default: one per 16Ki of ephemeralStorage)
        maxPids: 4194304                  # the node's pid limit (pid.available's capacity)
        imagefs: {storage: 200Gi, inodes: 1000000}  # a dedicated image filesystem (default: images on nodefs)
        systemUsage:                      # what the node uses outside pods (daemons, kernel)
          memory: 1Gi
          ephemeral-storage: 5Gi
          inodes: 20000
          pids: 300
        kubeletConfiguration:             # KubeletConfiguration's own field names
          evictionHard: {memory.available: 500Mi, nodefs.available: "10%"}
          evictionSoft: {memory.available: 1Gi}
          evictionSoftGracePeriod: {memory.available: 1m30s}
          evictionMaxPodGracePeriod: 60
          evictionPressureTransitionPeriod: 30s
          evictionMinimumReclaim: {memory.available: 100Mi}
          systemReserved: {memory: 1Gi}
          kubeReserved: {cpu: 100m}

Every node gets the well-known labels a kubelet sets (kubernetes.io/hostname, kubernetes.io/os,
kubernetes.io/arch) and `schedmesh.io/pool`.

Allocatable: without a `kubeletConfiguration` block, allocatable == capacity (what earlier pool
files meant). With one, allocatable is what the kubelet computes (GetNodeAllocatableReservation):
capacity - systemReserved - kubeReserved - the hard eviction thresholds memory.available (for
memory) and nodefs.available (for ephemeral-storage), never below 0.

Usage: the node's own usage is `systemUsage` plus the images it holds (their sizeBytes, on the
imagefs or on nodefs); each pod adds its `schedmesh.io/simulated-usage` annotation
(schedmesh.eviction.usage). Eviction thresholds default as the kubelet's do (memory.available<100Mi,
nodefs.available<10%, nodefs.inodesFree<5%, imagefs.available<15%, imagefs.inodesFree<5%) whether
or not the block is given.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable

import yaml

from schedmesh.api.quantity import QuantityError, parse_quantity
from schedmesh.api.types import ContainerImage, Node, NodeCondition, ObjectMeta, ResourceList, Taint
from schedmesh.eviction.node_pressure import (MEMORY_AVAILABLE, NODEFS_AVAILABLE, EvictionConfig, EvictionConfigError,
                                              NodeCapacity, SystemUsage)

GPU = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
HOSTNAME_LABEL = "kubernetes.io/hostname"
POOL_LABEL = "schedmesh.io/pool"
AGENT_ANNOTATION = "schedmesh.io/agent"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

_POOL_KEYS = {"name", "count", "cpu", "memory", "pods", "ephemeralStorage", "gpus", "zones", "region", "labels",
              "taints", "images", "resources", "inodes", "maxPids", "imagefs", "systemUsage", "kubeletConfiguration"}

# The KubeletConfiguration fields the simulated kubelet honours; any other is refused by name.
KUBELET_CONFIGURATION_FIELDS = (
    "apiVersion", "kind", "evictionHard", "evictionSoft", "evictionSoftGracePeriod", "evictionMaxPodGracePeriod",
    "evictionPressureTransitionPeriod", "evictionMinimumReclaim", "mergeDefaultEvictionSettings",
    "enforceNodeAllocatable", "localStorageCapacityIsolation", "systemReserved", "kubeReserved")
_RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")
_SYSTEM_USAGE_KEYS = ("memory", "ephemeral-storage", "inodes", "pids")
_IMAGEFS_KEYS = ("storage", "inodes")
BYTES_PER_INODE = 16 * 1024  # mkfs.ext4's default inode ratio
DEFAULT_MAX_PIDS = 4194304  # kernel.pid_max on 64-bit Linux


@dataclass(frozen=True)
class KubeletModel:
    """What a simulated kubelet knows of its node beyond the Node object: its eviction
    configuration, the capacities its signals are measured against, and its own usage."""

    eviction: EvictionConfig
    capacity: NodeCapacity
    system: SystemUsage


@dataclass(frozen=True)
class SimulatedNode:
    node: Node
    kubelet: KubeletModel


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


def _whole(v: Any, path: str) -> int:
    q = _quantity(v, path)
    if q.denominator != 1:
        raise PoolError(f"{path}: must be a whole number")
    return int(q)


def _resource_map(v: Any, path: str, allowed: tuple[str, ...]) -> dict[str, Fraction]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise PoolError(f"{path}: must be a map")
    out = {}
    for k, q in v.items():
        if k not in allowed:
            raise PoolError(f"{path}.{k}: unknown resource (expected one of {', '.join(allowed)})")
        out[k] = _quantity(q, f"{path}.{k}")
    return out


def _kubelet_configuration(v: Any, path: str) -> tuple[EvictionConfig, dict[str, Fraction]]:
    """The eviction configuration and the reserved resources (systemReserved + kubeReserved)."""
    if v is None:
        return EvictionConfig.from_kubelet_configuration(), {}
    if not isinstance(v, dict):
        raise PoolError(f"{path}: must be a map of KubeletConfiguration fields")
    for k in v:
        if k not in KUBELET_CONFIGURATION_FIELDS:
            raise PoolError(f"{path}.{k}: not a KubeletConfiguration field the simulated kubelet supports "
                            f"(supported: {', '.join(KUBELET_CONFIGURATION_FIELDS[2:])})")
    try:
        eviction = EvictionConfig.from_kubelet_configuration(
            {k: x for k, x in v.items() if k not in ("apiVersion", "systemReserved", "kubeReserved")})
    except EvictionConfigError as e:
        raise PoolError(f"{path}: {e}") from None
    reserved: dict[str, Fraction] = {}
    for name in ("systemReserved", "kubeReserved"):
        for k, q in _resource_map(v.get(name), f"{path}.{name}", _RESERVABLE).items():
            reserved[k] = reserved.get(k, Fraction(0)) + q
    return eviction, reserved


def _allocatable(capacity: ResourceList, reserved: dict[str, Fraction], eviction: EvictionConfig) -> ResourceList:
    """capacity - reservation, as the kubelet's GetNodeAllocatableReservation computes it: the
    reserved resources plus the hard memory.available and nodefs.available thresholds."""
    reservation = {k: q for k, q in reserved.items() if k != "pid"}
    for t in eviction.thresholds:
        resource = {MEMORY_AVAILABLE: "memory", NODEFS_AVAILABLE: "ephemeral-storage"}.get(t.signal)
        if resource is None or not t.hard or resource not in capacity:
            continue
        amount, _fmt = t.value.resolve(math.ceil(capacity[resource]))
        reservation[resource] = reservation.get(resource, Fraction(0)) + amount
    return {k: max(q - reservation.get(k, 0), Fraction(0)) for k, q in capacity.items()}


def expand_pool_simulated(pool: dict, path: str = "pools[0]", agent: str = "") -> list[SimulatedNode]:
    """The nodes of one pool entry with their simulated kubelets."""
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
    eviction, reserved = _kubelet_configuration(pool.get("kubeletConfiguration"), f"{path}.kubeletConfiguration")
    allocatable = (_allocatable(resources, reserved, eviction) if pool.get("kubeletConfiguration") is not None
                   else dict(resources))
    storage = math.ceil(resources["ephemeral-storage"])
    inodes = _whole(pool["inodes"], f"{path}.inodes") if "inodes" in pool else storage // BYTES_PER_INODE
    max_pids = _whole(pool.get("maxPids", DEFAULT_MAX_PIDS), f"{path}.maxPids")
    imagefs = pool.get("imagefs")
    if imagefs is not None:
        if not isinstance(imagefs, dict) or "storage" not in imagefs:
            raise PoolError(f"{path}.imagefs.storage: required (the image filesystem's size)")
        for k in imagefs:
            if k not in _IMAGEFS_KEYS:
                raise PoolError(f"{path}.imagefs.{k}: unknown field (expected storage, inodes)")
    imagefs_bytes = _whole(imagefs["storage"], f"{path}.imagefs.storage") if imagefs else None
    imagefs_inodes = None
    if imagefs:
        imagefs_inodes = (_whole(imagefs["inodes"], f"{path}.imagefs.inodes") if "inodes" in imagefs
                          else imagefs_bytes // BYTES_PER_INODE)
    sys_usage = _resource_map(pool.get("systemUsage"), f"{path}.systemUsage", _SYSTEM_USAGE_KEYS)
    for k in ("inodes", "pids"):
        if k in sys_usage and sys_usage[k].denominator != 1:
            raise PoolError(f"{path}.systemUsage.{k}: must be a whole number")
    images_bytes = sum(im.size_bytes for im in images)
    system = SystemUsage(memory=math.ceil(sys_usage.get("memory", 0)),
                         nodefs_bytes=math.ceil(sys_usage.get("ephemeral-storage", 0)),
                         nodefs_inodes=int(sys_usage.get("inodes", 0)), imagefs_bytes=images_bytes,
                         pids=int(sys_usage.get("pids", 0)))
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
        node = Node(meta=meta, taints=list(taints), allocatable=dict(allocatable), capacity=dict(resources),
                    images=[ContainerImage(list(im.names), im.size_bytes) for im in images])
        capacity = NodeCapacity.from_node(node, nodefs_inodes=inodes, max_pids=max_pids, imagefs_bytes=imagefs_bytes,
                                          imagefs_inodes=imagefs_inodes)
        nodes.append(SimulatedNode(node, KubeletModel(eviction, capacity, system)))
    return nodes


def load_pools(data: Any, agent: str = "") -> list[Node]:
    """Nodes of every pool in `data` (the parsed YAML: a list of pools or {pools: [...]})."""
    return [s.node for s in load_pools_simulated(data, agent)]


def load_pools_simulated(data: Any, agent: str = "") -> list[SimulatedNode]:
    """Nodes of every pool in `data` with their simulated kubelets."""
    if isinstance(data, dict) and "pools" in data:
        data = data["pools"]
    pools = _list(data, "pools")
    nodes: list[SimulatedNode] = []
    seen: set[str] = set()
    for i, pool in enumerate(pools):
        try:
            expanded = expand_pool_simulated(pool, f"pools[{i}]", agent)
        except PoolError as e:
            named = isinstance(pool, dict) and isinstance(pool.get("name"), str) and pool["name"]
            raise PoolError(f"{e} (pool {pool['name']!r})" if named else str(e)) from None
        for s in expanded:
            if s.node.name in seen:
                raise PoolError(f"pools[{i}]: node name {s.node.name!r} is used twice")
            seen.add(s.node.name)
            nodes.append(s)
    return nodes


def load_pool_file(path: str | Path, agent: str = "") -> list[Node]:
    return [s.node for s in load_pool_file_simulated(path, agent)]


def load_pool_file_simulated(path: str | Path, agent: str = "") -> list[SimulatedNode]:
    text = Path(path).read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PoolError(f"{path}: {e}") from None
    try:
        return load_pools_simulated(data, agent)
    except PoolError as e:
        raise PoolError(f"{path}: {e}") from None


def ready_condition(now: float) -> NodeCondition:
    """Ready=True as a kubelet posts it, heartbeat `now`."""
    return NodeCondition("Ready", "True", "KubeletReady", "kubelet is posting ready status", now)


def zones_of(nodes: Iterable[Node]) -> list[str]:
    return sorted({n.labels.get(ZONE_LABEL, "") for n in nodes} - {""})
