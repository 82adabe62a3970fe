"""A pod's QoS class, as kube's `qos.ComputePodQOS` (pkg/apis/core/v1/helper/qos, v1.35) computes it.

Only cpu and memory count. With PodLevelResources (on by default in v1.35) a pod that sets
pod-level resources is classified by those alone; otherwise requests and limits of every
container and init container are summed. Zero quantities are ignored. Guaranteed needs both
cpu and memory limits (on every container, or at pod level) and requests equal to limits.
`status.qosClass` is not part of our object model, so the class is always computed.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Iterable, Mapping

from schedmesh.api.resources import CPU, MEMORY
from schedmesh.api.types import Pod

GUARANTEED = "Guaranteed"
BURSTABLE = "Burstable"
BEST_EFFORT = "BestEffort"

_QOS_RESOURCES = frozenset((CPU, MEMORY))


def _positive(resources: Mapping[str, Fraction]) -> dict[str, Fraction]:
    return {name: q for name, q in resources.items() if name in _QOS_RESOURCES and q > 0}


def _sum_into(total: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for name, q in more.items():
        total[name] = total.get(name, Fraction(0)) + q


def _has_cpu_and_memory(names: Iterable[str]) -> bool:
    return _QOS_RESOURCES <= set(names)


def qos_class(pod: Pod) -> str:
    """Guaranteed, Burstable or BestEffort."""
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    if pod.resource_requests or pod.resource_limits:
        requests = _positive(pod.resource_requests or {})
        if pod.resource_limits:
            limits = _positive(pod.resource_limits)
            guaranteed = _has_cpu_and_memory(limits)
    else:
        for container in (*pod.containers, *pod.init_containers):
            _sum_into(requests, _positive(container.requests))
            container_limits = _positive(container.limits)
            _sum_into(limits, container_limits)
            if not _has_cpu_and_memory(container_limits):
                guaranteed = False
    if not requests and not limits:
        return BEST_EFFORT
    if guaranteed and any(limits.get(name) != q for name, q in requests.items()):
        guaranteed = False
    return GUARANTEED if guaranteed and len(requests) == len(limits) else BURSTABLE
