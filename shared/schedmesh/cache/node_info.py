"""NodeInfo and PodInfo: what the scheduler knows of a node and of each pod on it
(kube-scheduler's framework.NodeInfo / framework.PodInfo)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from schedmesh.api.labels import LabelSelector
from schedmesh.api.resources import PodResource, Resource, pod_resource, same_request_inputs
from schedmesh.api.types import Node, Pod, PodAffinityTerm, WeightedPodAffinityTerm

DEFAULT_BIND_ALL_HOST_IP = "0.0.0.0"


@dataclass(slots=True, frozen=True)
class AffinityTerm:
    """A parsed pod (anti-)affinity term: nil selectors match nothing, empty ones everything."""

    namespaces: frozenset[str]
    selector: Optional[LabelSelector]
    topology_key: str
    namespace_selector: Optional[LabelSelector]
    # Terms are dict keys of the affinity index (pod_index.py), hashed at every node re-read:
    # their hash is computed once, when first asked (the generated one walks the selectors each time).
    _hash: Optional[int] = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = hash((self.namespaces, self.selector, self.topology_key, self.namespace_selector))
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self):
        # Without the remembered hash: string hashes differ between processes.
        return AffinityTerm, (self.namespaces, self.selector, self.topology_key, self.namespace_selector)

    def matches(self, pod: Pod, ns_labels: Mapping[str, str]) -> bool:
        if pod.meta.namespace in self.namespaces or (
                self.namespace_selector is not None and self.namespace_selector.matches(ns_labels)):
            return self.selector is not None and self.selector.matches(pod.meta.labels)
        return False


@dataclass(slots=True, frozen=True)
class WeightedAffinityTerm:
    term: AffinityTerm
    weight: int
    _hash: Optional[int] = field(default=None, init=False, repr=False, compare=False)  # as AffinityTerm's

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = hash((self.term, self.weight))
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self):
        return WeightedAffinityTerm, (self.term, self.weight)


# Equal terms of different pods (a workload's replicas) are one object. The affinity index
# (pod_index.py) looks its keys up at every node re-read, and two equal but distinct terms were
# compared field by field, selectors walked, each time (a seventh of the cycle of
# SchedulingPreferredPodAffinity); the same object compares by identity. Bounded: past the limit
# the table starts over (terms made before it stay valid, merely not shared with later ones).
_INTERNED: dict = {}
_INTERNED_LIMIT = 1 << 16


def _interned(term):
    got = _INTERNED.get(term)
    if got is None:
        if len(_INTERNED) >= _INTERNED_LIMIT:
            _INTERNED.clear()
        got = _INTERNED[term] = term
    return got


def new_affinity_term(pod: Pod, t: PodAffinityTerm) -> AffinityTerm:
    if not t.namespaces and t.namespace_selector is None:
        namespaces = frozenset((pod.meta.namespace,))
    else:
        namespaces = frozenset(t.namespaces)
    return _interned(AffinityTerm(namespaces, t.label_selector, t.topology_key, t.namespace_selector))


def new_weighted_affinity_term(pod: Pod, w: WeightedPodAffinityTerm) -> WeightedAffinityTerm:
    return _interned(WeightedAffinityTerm(new_affinity_term(pod, w.term), w.weight))


class PodInfo:
    """A pod with its pre-parsed affinity terms and cached resource requests."""

    __slots__ = ("pod", "required_affinity_terms", "required_anti_affinity_terms",
                 "preferred_affinity_terms", "preferred_anti_affinity_terms", "_resource")

    def __init__(self, pod: Pod) -> None:
        self.pod = pod
        aff = pod.affinity
        pa = aff.pod_affinity if aff else None
        paa = aff.pod_anti_affinity if aff else None
        self.required_affinity_terms = [new_affinity_term(pod, t) for t in pa.required] if pa else []
        self.required_anti_affinity_terms = [new_affinity_term(pod, t) for t in paa.required] if paa else []
        self.preferred_affinity_terms = (
            [new_weighted_affinity_term(pod, w) for w in pa.preferred] if pa else [])
        self.preferred_anti_affinity_terms = (
            [new_weighted_affinity_term(pod, w) for w in paa.preferred] if paa else [])
        self._resource: Optional[PodResource] = None

    def with_pod(self, pod: Pod) -> "PodInfo":
        """This PodInfo for another copy of the same pod whose accounting inputs are the very
        objects of this one (same_accounting): its terms and resources are reused, not rebuilt."""
        pi = PodInfo.__new__(PodInfo)
        pi.pod = pod
        pi.required_affinity_terms = self.required_affinity_terms
        pi.required_anti_affinity_terms = self.required_anti_affinity_terms
        pi.preferred_affinity_terms = self.preferred_affinity_terms
        pi.preferred_anti_affinity_terms = self.preferred_anti_affinity_terms
        pi._resource = self._resource
        return pi

    @property
    def resource(self) -> PodResource:
        if self._resource is None:
            self._resource = pod_resource(self.pod)
        return self._resource

    def __repr__(self) -> str:
        return f"PodInfo({self.pod.key})"


def same_accounting(a: Pod, b: Pod) -> bool:
    """Whether a PodInfo of `a` holds for `b`: the fields its terms, requests and host ports are
    built from are the same objects (a copy made by evolve, e.g. a binding or a status update, shares
    them). Identity, not equality: cheap, and never wrong (unequal objects just take the slow path)."""
    return same_request_inputs(a, b) and a.affinity is b.affinity and a.meta.namespace == b.meta.namespace


def pod_with_affinity(pod: Pod) -> bool:
    a = pod.affinity
    return a is not None and (a.pod_affinity is not None or a.pod_anti_affinity is not None)


def pod_with_required_anti_affinity(pod: Pod) -> bool:
    a = pod.affinity
    return a is not None and a.pod_anti_affinity is not None and bool(a.pod_anti_affinity.required)


def host_ports(pod: Pod) -> list[tuple[str, str, int]]:
    """(hostIP, protocol, hostPort) claimed by the pod: sidecar init containers, then containers."""
    out = []
    for c in [ic for ic in pod.init_containers if ic.restart_policy == "Always"] + pod.containers:
        for p in c.ports:
            if p.host_port > 0:
                out.append((p.host_ip or DEFAULT_BIND_ALL_HOST_IP, p.protocol or "TCP", p.host_port))
    return out


class HostPortInfo:
    """Host ports in use on a node: ip -> {(protocol, port)} (a set, as in kube)."""

    __slots__ = ("_by_ip",)

    def __init__(self) -> None:
        self._by_ip: dict[str, set[tuple[str, int]]] = {}

    def add(self, ip: str, protocol: str, port: int) -> None:
        if port <= 0:
            return
        ip, protocol = ip or DEFAULT_BIND_ALL_HOST_IP, protocol or "TCP"
        self._by_ip.setdefault(ip, set()).add((protocol, port))

    def remove(self, ip: str, protocol: str, port: int) -> None:
        if port <= 0:
            return
        ip, protocol = ip or DEFAULT_BIND_ALL_HOST_IP, protocol or "TCP"
        m = self._by_ip.get(ip)
        if m is None:
            return
        m.discard((protocol, port))
        if not m:
            del self._by_ip[ip]

    def check_conflict(self, ip: str, protocol: str, port: int) -> bool:
        if port <= 0:
            return False
        ip, protocol = ip or DEFAULT_BIND_ALL_HOST_IP, protocol or "TCP"
        pp = (protocol, port)
        if ip == DEFAULT_BIND_ALL_HOST_IP:
            return any(pp in m for m in self._by_ip.values())
        return any(pp in self._by_ip.get(k, ()) for k in (DEFAULT_BIND_ALL_HOST_IP, ip))

    def __len__(self) -> int:
        return sum(len(m) for m in self._by_ip.values())

    def clone(self) -> "HostPortInfo":
        h = HostPortInfo()
        h._by_ip = {ip: set(m) for ip, m in self._by_ip.items()}
        return h


@dataclass(slots=True)
class ImageStateSummary:
    size: int
    num_nodes: int


class NodeInfo:
    """A node and the pods assigned (or assumed) to it, with running totals."""

    __slots__ = ("node", "pods", "pods_with_affinity", "pods_with_required_anti_affinity",
                 "requested", "non_zero_requested", "allocatable", "used_ports", "image_states",
                 "generation", "index")

    def __init__(self, node: Optional[Node] = None) -> None:
        self.node: Optional[Node] = None
        self.pods: list[PodInfo] = []
        self.pods_with_affinity: list[PodInfo] = []
        self.pods_with_required_anti_affinity: list[PodInfo] = []
        self.requested = Resource()
        self.non_zero_requested = Resource()
        self.allocatable = Resource()
        self.used_ports = HostPortInfo()
        self.image_states: dict[str, ImageStateSummary] = {}
        self.generation = 0
        self.index = -1  # position in the snapshot's node table
        if node is not None:
            self.set_node(node)

    @property
    def name(self) -> str:
        return self.node.meta.name if self.node else ""

    def set_node(self, node: Node) -> None:
        self.node = node
        self.allocatable = Resource.from_list(node.allocatable)
        self.generation += 1

    def add_pod_info(self, pi: PodInfo) -> None:
        self.pods.append(pi)
        if pod_with_affinity(pi.pod):
            self.pods_with_affinity.append(pi)
        if pod_with_required_anti_affinity(pi.pod):
            self.pods_with_required_anti_affinity.append(pi)
        self._update(pi, 1)

    def add_pod(self, pod: Pod) -> PodInfo:
        pi = PodInfo(pod)
        self.add_pod_info(pi)
        return pi

    def remove_pod(self, pod: Pod) -> PodInfo:
        uid = pod.meta.uid
        for lst in (self.pods_with_affinity, self.pods_with_required_anti_affinity):
            for i, p in enumerate(lst):
                if p.pod.meta.uid == uid:
                    lst[i] = lst[-1]
                    lst.pop()
                    break
        for i, p in enumerate(self.pods):
            if p.pod.meta.uid == uid:
                self.pods[i] = self.pods[-1]
                self.pods.pop()
                self._update(p, -1)
                return p
        raise KeyError(f"no pod {pod.key} on node {self.name}")

    def replace_pod(self, old: PodInfo, new: PodInfo) -> None:
        """remove_pod(old) then add_pod_info(new), for a copy whose accounting is the same
        (same_accounting): the lists end in the order those two leave them (the pod's slot takes
        the last pod, the pod goes last, as kube's cache updates a pod) and the generation moves
        as theirs do, but the totals are not taken out and put back."""
        for lst in (self.pods, self.pods_with_affinity, self.pods_with_required_anti_affinity):
            if lst is self.pods or old in lst:
                lst[lst.index(old)] = lst[-1]
                lst[-1] = new
        self.generation += 2

    def _update(self, pi: PodInfo, sign: int) -> None:
        res = pi.resource
        r = res.requests
        self.requested.milli_cpu += sign * r.milli_cpu
        self.requested.memory += sign * r.memory
        self.requested.ephemeral_storage += sign * r.ephemeral_storage
        for k, v in r.scalar.items():
            self.requested.scalar[k] = self.requested.scalar.get(k, 0) + sign * v
        self.non_zero_requested.milli_cpu += sign * res.non0_cpu
        self.non_zero_requested.memory += sign * res.non0_mem
        for ip, proto, port in host_ports(pi.pod):
            if sign > 0:
                self.used_ports.add(ip, proto, port)
            else:
                self.used_ports.remove(ip, proto, port)
        self.generation += 1

    def clone(self) -> "NodeInfo":
        c = NodeInfo.__new__(NodeInfo)
        c.node = self.node
        c.pods = list(self.pods)
        c.pods_with_affinity = list(self.pods_with_affinity)
        c.pods_with_required_anti_affinity = list(self.pods_with_required_anti_affinity)
        c.requested = self.requested.clone()
        c.non_zero_requested = self.non_zero_requested.clone()
        c.allocatable = self.allocatable
        c.used_ports = self.used_ports.clone()
        c.image_states = self.image_states
        c.generation = self.generation
        c.index = self.index
        return c

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}, pods={len(self.pods)})"
