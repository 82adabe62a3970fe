"""What the incoming pod asks for, in the two forms the NodeResources plugins use.

* Filter: component-helpers PodRequests (containers, sidecars, init containers, pod-level
  requests, overhead) folded into a Resource with SetMaxResource, as fit.go's
  computePodResourceRequest does.
* Scoring: resource_allocation.go's calculatePodResourceRequest, one int per configured
  resource, overhead included. NodeResourcesFit scores with the non-zero requests (a container
  that requests no cpu / memory counts as 100m / 200Mi) and WITHOUT pod-level requests: NewFit
  never passes the PodLevelResources gate to its resourceAllocationScorer, so v1.35 scores the
  incoming pod by its containers only (the node side, from NodeInfo, does count pod-level
  requests). BalancedAllocation gets the gate (pod-level requests override the container sums)
  and uses the plain requests.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from schedmesh.api.quantity import milli_value, value
from schedmesh.api.resources import (
    CPU,
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    EPHEMERAL_STORAGE,
    MEMORY,
    Resource,
    aggregate_container_requests,
    is_scalar_resource_name,
    pod_requests,
    remembered_for,
)
from schedmesh.api.types import Pod

# resource_allocation.go: NonMissingContainerRequests when scoring with non-zero requests.
NON_ZERO_DEFAULTS = {CPU: Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000), MEMORY: Fraction(DEFAULT_MEMORY_REQUEST)}


def max_resource(requests: dict[str, Fraction]) -> Resource:
    """framework.Resource.SetMaxResource on an empty Resource: the pods entry is ignored, a scalar
    requested at 0 is still listed (so the pod is not "requesting nothing")."""
    r = Resource()
    for name, q in requests.items():
        if name == CPU:
            r.milli_cpu = max(r.milli_cpu, milli_value(q))
        elif name == MEMORY:
            r.memory = max(r.memory, value(q))
        elif name == EPHEMERAL_STORAGE:
            r.ephemeral_storage = max(r.ephemeral_storage, value(q))
        elif is_scalar_resource_name(name):
            r.scalar[name] = max(r.scalar.get(name, 0), value(q))
    return r


# Every cycle asks for the incoming pod's requests (PreFilter, PreScore; the binder's ledger per
# binding), and summing Fractions was a tenth of a SchedulingBasic cycle: remembered per request
# shape (api.resources.resource_key) as the caches' pod_resource is. The values are shared: never
# modified.
_FIT_MEMO: dict[tuple, Resource] = {}
_SCORING_MEMO: dict[tuple, tuple[int, ...]] = {}


def fit_request(pod: Pod) -> Resource:
    """computePodResourceRequest with PodLevelResources on (shared: never modify it)."""
    return remembered_for(_FIT_MEMO, pod, lambda: max_resource(pod_requests(pod)))


def requests_nothing(r: Resource) -> bool:
    return r.milli_cpu == 0 and r.memory == 0 and r.ephemeral_storage == 0 and not r.scalar


def scoring_requests(pod: Pod, resource_names: Sequence[str], use_requested: bool,
                     pod_level: bool) -> tuple[int, ...]:
    """calculatePodResourceRequestList: the pod's request of each scored resource (0 when absent)."""
    return remembered_for(_SCORING_MEMO, pod,
                          lambda: tuple(_scoring_requests(pod, resource_names, use_requested, pod_level)),
                          (tuple(resource_names), use_requested, pod_level))


def _scoring_requests(pod: Pod, resource_names: Sequence[str], use_requested: bool, pod_level: bool) -> list[int]:
    non_missing = None if use_requested else NON_ZERO_DEFAULTS
    if pod_level:
        reqs = pod_requests(pod, non_missing)
    else:  # SkipPodLevelResources: containers, then overhead
        reqs = aggregate_container_requests(pod, non_missing)
        for name, q in pod.overhead.items():
            reqs[name] = reqs.get(name, Fraction(0)) + q
    out = []
    for name in resource_names:
        q = reqs.get(name)
        if q is None:
            out.append(0)
        elif name == CPU:
            out.append(milli_value(q))
        else:
            out.append(value(q))
    return out
