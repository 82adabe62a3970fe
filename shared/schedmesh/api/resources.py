"""Resource accounting: what a pod requests and what a node offers, as kube-scheduler counts it.

Mirrors component-helpers' PodRequests (containers, restartable "sidecar" init containers,
init containers, pod-level resources, overhead) and the scheduler's Resource type
(cpu in millicores, everything else in whole units, both rounded up).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Mapping, Optional, TypeVar

from schedmesh.api.quantity import milli_value, value
from schedmesh.api.types import Pod, ResourceList

CPU, MEMORY, PODS, EPHEMERAL_STORAGE = "cpu", "memory", "pods", "ephemeral-storage"
HUGEPAGES_PREFIX = "hugepages-"
ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"
DEFAULT_NAMESPACE_PREFIX = "kubernetes.io/"
REQUESTS_PREFIX = "requests."
# Containers without a cpu / memory request count as this much when scoring (never when fitting).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_prefixed_native_resource(name: str) -> bool:
    return DEFAULT_NAMESPACE_PREFIX in name


def is_native_resource(name: str) -> bool:
    return "/" not in name or is_prefixed_native_resource(name)


def is_qualified_name(name: str) -> bool:
    """validation.IsQualifiedName: [prefix/]name, prefix a DNS subdomain, name <= 63 chars."""
    parts = name.split("/")
    if len(parts) == 1:
        local = parts[0]
    elif len(parts) == 2:
        prefix, local = parts
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return False
    else:
        return False
    return 0 < len(local) <= 63 and bool(_QUALIFIED_NAME_PART.match(local))


def is_extended_resource_name(name: str) -> bool:
    if is_native_resource(name) or name.startswith(REQUESTS_PREFIX):
        return False
    return is_qualified_name(REQUESTS_PREFIX + name)


def is_hugepage_resource_name(name: str) -> bool:
    return name.startswith(HUGEPAGES_PREFIX)


def is_scalar_resource_name(name: str) -> bool:
    """Resources the scheduler tracks besides cpu, memory, ephemeral-storage and pods."""
    return (is_extended_resource_name(name) or is_hugepage_resource_name(name)
            or is_prefixed_native_resource(name) or name.startswith(ATTACHABLE_VOLUMES_PREFIX))


def is_supported_pod_level_resource(name: str) -> bool:
    return name in (CPU, MEMORY) or name.startswith(HUGEPAGES_PREFIX)


@dataclass(slots=True)
class Resource:
    """kube-scheduler's framework.Resource: integers, cpu in millicores."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral_storage: int = 0
    allowed_pod_number: int = 0
    scalar: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def from_list(rl: Mapping[str, Fraction]) -> "Resource":
        r = Resource()
        r.add_list(rl)
        return r

    def add_list(self, rl: Mapping[str, Fraction]) -> None:
        for name, q in rl.items():
            if name == CPU:
                self.milli_cpu += milli_value(q)
            elif name == MEMORY:
                self.memory += value(q)
            elif name == PODS:
                self.allowed_pod_number += value(q)
            elif name == EPHEMERAL_STORAGE:
                self.ephemeral_storage += value(q)
            elif is_scalar_resource_name(name):
                self.scalar[name] = self.scalar.get(name, 0) + value(q)

    def get(self, name: str) -> int:
        if name == CPU:
            return self.milli_cpu
        if name == MEMORY:
            return self.memory
        if name == EPHEMERAL_STORAGE:
            return self.ephemeral_storage
        if name == PODS:
            return self.allowed_pod_number
        return self.scalar.get(name, 0)

    def clone(self) -> "Resource":
        return Resource(self.milli_cpu, self.memory, self.ephemeral_storage, self.allowed_pod_number,
                        dict(self.scalar))


@dataclass(slots=True, frozen=True)
class PodResource:
    """What a pod takes on a node: exact requests, plus the non-zero cpu/memory used by scoring."""

    requests: Resource
    non0_cpu: int
    non0_mem: int


def _add(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        # (a first quantity is taken as it is: 0 + v is v, and Fraction arithmetic is slow)
        into[k] = into[k] + v if k in into else v


def _max(into: dict[str, Fraction], more: Mapping[str, Fraction]) -> None:
    for k, v in more.items():
        if k not in into or v > into[k]:
            into[k] = v


def _with_non_missing(reqs: Mapping[str, Fraction], non_missing: Mapping[str, Fraction]) -> dict[str, Fraction]:
    out = dict(reqs)
    for k, v in non_missing.items():
        if k not in reqs:
            out[k] = v
    return out


def aggregate_container_requests(pod: Pod, non_missing: Optional[Mapping[str, Fraction]] = None) -> ResourceList:
    """Containers summed; init containers as a running maximum, sidecars counted in both."""
    reqs: dict[str, Fraction] = {}
    for c in pod.containers:
        _add(reqs, _with_non_missing(c.requests, non_missing) if non_missing else c.requests)
    sidecars: dict[str, Fraction] = {}
    init_max: dict[str, Fraction] = {}
    for c in pod.init_containers:
        creqs = _with_non_missing(c.requests, non_missing) if non_missing else c.requests
        if c.restart_policy == "Always":
            _add(reqs, creqs)
            _add(sidecars, creqs)
            use = dict(sidecars)
        else:
            use = dict(creqs)
            _add(use, sidecars)
        _max(init_max, use)
    _max(reqs, init_max)
    return reqs


def has_pod_level_requests(pod: Pod) -> bool:
    return bool(pod.resource_requests) and any(is_supported_pod_level_resource(k) for k in pod.resource_requests)


def pod_requests(pod: Pod, non_missing: Optional[Mapping[str, Fraction]] = None,
                 exclude_overhead: bool = False) -> ResourceList:
    """component-helpers resource.PodRequests with PodLevelResources enabled."""
    reqs = aggregate_container_requests(pod, non_missing)
    if has_pod_level_requests(pod):
        for k, q in pod.resource_requests.items():
            if is_supported_pod_level_resource(k):
                reqs[k] = q
    if not exclude_overhead and pod.overhead:
        _add(reqs, pod.overhead)
    return reqs


def _non_missing_defaults(pod: Pod, requests: Mapping[str, Fraction], pod_level_set: bool) -> dict[str, Fraction]:
    """The defaults the non-zero requests add: none when every container requests cpu and memory
    (summing the containers again would give the same)."""
    default_cpu = Fraction(DEFAULT_MILLI_CPU_REQUEST, 1000)
    default_mem = Fraction(DEFAULT_MEMORY_REQUEST)
    if not pod_level_set:
        if _every_container_requests_cpu_and_memory(pod):
            return {}
        return {CPU: default_cpu, MEMORY: default_mem}
    out: dict[str, Fraction] = {}
    if CPU not in requests:
        out[CPU] = default_cpu
    if MEMORY not in requests:
        out[MEMORY] = default_mem
    return out


def _every_container_requests_cpu_and_memory(pod: Pod) -> bool:
    return all(CPU in c.requests and MEMORY in c.requests for c in pod.containers) and \
        all(CPU in c.requests and MEMORY in c.requests for c in pod.init_containers)


def compute_pod_resource(pod: Pod) -> PodResource:
    """PodInfo.CalculateResource(): requests and the non-zero cpu/memory for scoring."""
    requests = pod_requests(pod)
    non_missing = _non_missing_defaults(pod, requests, has_pod_level_requests(pod))
    non0 = pod_requests(pod, non_missing) if non_missing else requests
    return PodResource(
        requests=Resource.from_list(requests),
        non0_cpu=milli_value(non0.get(CPU, Fraction(0))),
        non0_mem=value(non0.get(MEMORY, Fraction(0))),
    )


# Pods of a workload mostly share a few request shapes, and every cache of the mesh (each service
# keeps one) computes each bound pod's resources: keyed by everything pod_requests reads.
_RESOURCE_MEMO: dict[tuple, PodResource] = {}
_RESOURCE_MEMO_MAX = 4096
T = TypeVar("T")


def _exact(requests: Mapping[str, Fraction]) -> tuple:
    # A quantity as its numerator and denominator (a Fraction is kept in lowest terms, so equal
    # quantities give equal pairs): hashing a Fraction costs a modular inverse, and the key of a
    # pod of its own kind was hashed at 11 us, a third of working out its resources.
    return tuple((name, q.numerator, q.denominator) for name, q in requests.items())


def resource_key(pod: Pod) -> tuple:
    """Everything pod_requests reads: pods with equal keys request the same."""
    return (tuple(_exact(c.requests) for c in pod.containers),
            tuple((c.restart_policy, _exact(c.requests)) for c in pod.init_containers),
            _exact(pod.resource_requests) if pod.resource_requests else (),
            _exact(pod.overhead) if pod.overhead else ())


def same_request_inputs(a: Pod, b: Pod) -> bool:
    """Whether two copies of a pod share the very objects resource_key reads (a copy made by
    `evolve` for a binding or a status does): their requests are then the same. Identity, not
    equality: cheap, and a False only means "compare the long way"."""
    return (a.containers is b.containers and a.init_containers is b.init_containers
            and a.resource_requests is b.resource_requests and a.overhead is b.overhead)


def remembered(memo: dict, key, compute: Callable[[], T], limit: int = _RESOURCE_MEMO_MAX) -> T:
    """memo[key], computed once (the memo is emptied when it reaches `limit` entries)."""
    got = memo.get(key)
    if got is None:
        if len(memo) >= limit:
            memo.clear()
        got = memo[key] = compute()
    return got


class RequestShape:
    """A pod's resource_key, interned (equal keys: one object) with its hash remembered: the
    memos of a pod's resources are keyed by it, so a lookup hashes no Fraction (in Python, a
    modular inverse each: a twentieth of a SchedulingBasic cycle once went to hashing them)."""

    __slots__ = ("key", "_hash")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, RequestShape) and self._hash == other._hash
                                 and self.key == other.key)


_SHAPES: dict[RequestShape, RequestShape] = {}
# The same request objects (a replica's, a copy's made by `evolve`) are asked about again and
# again: their shape is found by identity first. Entries keep their objects alive, so an id is
# never reused while its entry stands.
_SHAPE_OF_INPUTS: dict[tuple, tuple] = {}


def request_shape(pod: Pod) -> RequestShape:
    """The interned shape of what pod_requests reads; resource_key computed once per set of
    request objects (each memo used to compute it again for a pod it had not seen)."""
    inputs = (pod.containers, pod.init_containers, pod.resource_requests, pod.overhead)
    ident = (id(inputs[0]), id(inputs[1]), id(inputs[2]), id(inputs[3]))
    got = _SHAPE_OF_INPUTS.get(ident)
    if got is not None:
        return got[1]
    shape = RequestShape(resource_key(pod))
    shape = remembered(_SHAPES, shape, lambda: shape)
    if len(_SHAPE_OF_INPUTS) >= _RESOURCE_MEMO_MAX:
        _SHAPE_OF_INPUTS.clear()
    _SHAPE_OF_INPUTS[ident] = (inputs, shape)
    return shape


def remembered_for(memo: dict, pod: Pod, compute: Callable[[], T], extra: tuple = ()) -> T:
    """memo[(request_shape(pod), *extra)] (the shape alone without `extra`), computed once."""
    shape = request_shape(pod)
    return remembered(memo, (shape, *extra) if extra else shape, compute)


def pod_resource(pod: Pod) -> PodResource:
    """compute_pod_resource, remembered per request shape (PodResource is never modified)."""
    return remembered_for(_RESOURCE_MEMO, pod, lambda: compute_pod_resource(pod))

