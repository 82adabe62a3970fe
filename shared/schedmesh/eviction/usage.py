"""What a simulated pod uses: the `schedmesh.io/simulated-usage` annotation, parsed in one place.

There are no cgroups here, so the kubelet's pod stats (working set, disk, inodes, processes)
come from this annotation on the pod. Its value is either a JSON object or comma-separated
`key=quantity` pairs, with the same keys:

    schedmesh.io/simulated-usage: "memory=300Mi,ephemeral-storage=2Gi,pids=40"
    schedmesh.io/simulated-usage: '{"memory": "300Mi", "app.memory": "200Mi", "sidecar.memory": "100Mi"}'

* `memory`: working set bytes; `ephemeral-storage`: bytes on the node's filesystem (container
  writable layers, logs and local volumes); `pids`: processes; `inodes`: inodes used.
  Quantities as Kubernetes writes them (`300Mi`, `1.5Gi`, `40`); JSON numbers work too.
  Bytes are rounded up to whole bytes; `pids` and `inodes` must be whole numbers. None may be negative.
* `CONTAINER.memory` / `CONTAINER.ephemeral-storage` give one container's share (the kubelet
  blames containers by name in its eviction message). CONTAINER is a container or init
  container of the pod. `pids` and `inodes` are per pod only, as the kubelet measures them.
* The pod's total is the pod-level key when given, else the sum of its containers' keys.
  A pod-level value without container keys is all attributed to the pod's first container.
* A key may appear once. A pod without the annotation uses nothing.

Bad input raises `SimulatedUsageError` naming the pod, the annotation and the reason.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from schedmesh.api.quantity import QuantityError, parse_quantity
from schedmesh.api.types import Pod

SIMULATED_USAGE_ANNOTATION = "schedmesh.io/simulated-usage"

MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PIDS = "pids"
INODES = "inodes"

POD_KEYS = (MEMORY, EPHEMERAL_STORAGE, PIDS, INODES)
CONTAINER_KEYS = (MEMORY, EPHEMERAL_STORAGE)
_WHOLE_NUMBER_KEYS = (PIDS, INODES)


class SimulatedUsageError(ValueError):
    """The simulated-usage annotation does not parse."""


@dataclass(frozen=True)
class ContainerUsage:
    memory: int = 0
    ephemeral_storage: int = 0


@dataclass(frozen=True)
class PodUsage:
    """A pod's usage as the kubelet's stats summary would report it."""

    memory: int = 0
    ephemeral_storage: int = 0
    pids: int = 0
    inodes: int = 0
    containers: Mapping[str, ContainerUsage] = field(default_factory=dict)

    def get(self, resource: str) -> int:
        return {MEMORY: self.memory, EPHEMERAL_STORAGE: self.ephemeral_storage,
                PIDS: self.pids, INODES: self.inodes}[resource]


NO_USAGE = PodUsage()


class _JsonObject(list):
    """A JSON object's (key, value) pairs in order, duplicates kept."""


def _pairs(text: str, fail) -> list[tuple[str, Any]]:
    stripped = text.strip()
    if not stripped:
        raise fail("is empty")
    if stripped[0] in "{[":
        try:
            pairs = json.loads(stripped, object_pairs_hook=_JsonObject)
        except json.JSONDecodeError as e:
            raise fail(f"is not valid JSON: {e.msg} at character {e.pos}") from None
        if not isinstance(pairs, _JsonObject):
            raise fail("must be a JSON object")
        return pairs
    out = []
    for item in stripped.split(","):
        key, sep, val = item.partition("=")
        if not sep or not key.strip() or not val.strip():
            raise fail(f"{item.strip()!r} is not key=quantity")
        out.append((key.strip(), val.strip()))
    return out


def _amount(key: str, raw: Any, fail) -> int:
    try:
        q = parse_quantity(raw)
    except QuantityError:
        raise fail(f"{key}: {raw!r} is not a quantity") from None
    if q < 0:
        raise fail(f"{key}: {raw!r} must not be negative")
    resource = key.rpartition(".")[2]
    if resource in _WHOLE_NUMBER_KEYS and q.denominator != 1:
        raise fail(f"{key}: {raw!r} must be a whole number")
    return math.ceil(q)  # bytes round up, as Quantity.Value() does


def parse_simulated_usage(text: str, container_names: Sequence[str] = (),
                          first_container: Optional[str] = None, where: str = "") -> PodUsage:
    """Parse an annotation value. `container_names` (when given) are the names CONTAINER.key may
    use; `first_container` receives pod-level memory / ephemeral-storage that no container key
    claims; `where` prefixes error messages (e.g. "pod default/web-0: ")."""

    def fail(reason: str) -> SimulatedUsageError:
        return SimulatedUsageError(f"{where}annotation {SIMULATED_USAGE_ANNOTATION}: {reason}")

    pod_level: dict[str, int] = {}
    per_container: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    for key, raw in _pairs(text, fail):
        if not isinstance(key, str):
            raise fail(f"key {key!r} is not a string")
        if key in seen:
            raise fail(f"{key} is given twice")
        seen.add(key)
        container, dot, resource = key.rpartition(".")
        if not dot:
            if resource not in POD_KEYS:
                raise fail(f"unknown key {key!r} (expected {', '.join(POD_KEYS)}, or CONTAINER.memory / "
                           f"CONTAINER.ephemeral-storage)")
            pod_level[resource] = _amount(key, raw, fail)
            continue
        if resource not in CONTAINER_KEYS:
            if resource in POD_KEYS:
                raise fail(f"{key}: {resource} is counted per pod, not per container")
            raise fail(f"unknown key {key!r} (a container's keys are memory and ephemeral-storage)")
        if not container or (container_names and container not in container_names):
            raise fail(f"{key}: the pod has no container {container!r}")
        per_container.setdefault(container, {})[resource] = _amount(key, raw, fail)

    totals = dict(pod_level)
    for resource in CONTAINER_KEYS:
        claimed = [c[resource] for c in per_container.values() if resource in c]
        if resource not in totals and claimed:
            totals[resource] = sum(claimed)
        elif resource in totals and not claimed and first_container is not None:
            per_container.setdefault(first_container, {})[resource] = totals[resource]
    containers = {name: ContainerUsage(memory=c.get(MEMORY, 0), ephemeral_storage=c.get(EPHEMERAL_STORAGE, 0))
                  for name, c in per_container.items()}
    return PodUsage(memory=totals.get(MEMORY, 0), ephemeral_storage=totals.get(EPHEMERAL_STORAGE, 0),
                    pids=totals.get(PIDS, 0), inodes=totals.get(INODES, 0), containers=containers)


def pod_usage(pod: Pod) -> PodUsage:
    """The pod's simulated usage; nothing when it has no annotation."""
    text = pod.meta.annotations.get(SIMULATED_USAGE_ANNOTATION)
    if text is None:
        return NO_USAGE
    names = [c.name for c in (*pod.containers, *pod.init_containers)]
    return parse_simulated_usage(text, names, pod.containers[0].name if pod.containers else None,
                                 where=f"pod {pod.key}: ")
