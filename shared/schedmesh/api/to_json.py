"""api.types objects back to Kubernetes JSON (the inverse of `schedmesh.api.load`).

Used where schedmesh must speak the Kubernetes wire format, e.g. the ExtenderArgs sent to HTTP
scheduler extenders. Field names and shapes are core/v1's; empty fields are omitted as Go's
`omitempty` would. Quantities are written as exact quantity strings (they parse back to the same
value, though not always in the API server's canonical spelling).
"""
from __future__ import annotations

import datetime as _dt
from fractions import Fraction
from typing import Any, Optional

from schedmesh.api.labels import LabelSelector
from schedmesh.api.quantity import format_exact
from schedmesh.api.types import (Affinity, Container, Node, NodeSelector, NodeSelectorRequirement,
                                 NodeSelectorTerm, ObjectMeta, Pod, PodAffinity, PodAffinityTerm,
                                 ResourceList, Toleration, TopologySpreadConstraint)

_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_SMALL_SUFFIXES = (("m", 10**3), ("u", 10**6), ("n", 10**9))


def quantity_string(q: Fraction) -> str:
    """A quantity string for an exact value: '1Gi', '500m', '2', '1.5' (only if no suffix fits)."""
    if q.denominator == 1:
        n = q.numerator
        for suffix, size in _BINARY_SUFFIXES:
            if n and n % size == 0:
                return f"{n // size}{suffix}"
        return str(n)
    for suffix, scale in _SMALL_SUFFIXES:
        scaled = q * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return format_exact(q)


def rfc3339(t: Optional[float]) -> Optional[str]:
    """metav1.Time's JSON form (second precision, UTC)."""
    if t is None:
        return None
    return _dt.datetime.fromtimestamp(int(t), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _put(d: dict, key: str, value: Any) -> None:
    """Set unless empty, as `omitempty` does (0 and False included)."""
    if value is None or value == "" or value == [] or value == {} or value is False:
        return
    d[key] = value


def resource_list(rl: ResourceList) -> dict[str, str]:
    return {k: quantity_string(v) for k, v in rl.items()}


def object_meta(m: ObjectMeta) -> dict[str, Any]:
    out: dict[str, Any] = {"name": m.name}
    _put(out, "namespace", m.namespace)
    _put(out, "uid", m.uid)
    _put(out, "resourceVersion", m.resource_version)
    _put(out, "creationTimestamp", rfc3339(m.creation_timestamp))
    _put(out, "deletionTimestamp", rfc3339(m.deletion_timestamp))
    _put(out, "labels", dict(m.labels))
    _put(out, "annotations", dict(m.annotations))
    owners = []
    for o in m.owner_references:
        od: dict[str, Any] = {"apiVersion": o.api_version, "kind": o.kind, "name": o.name, "uid": o.uid}
        _put(od, "controller", o.controller)
        owners.append(od)
    _put(out, "ownerReferences", owners)
    return out


def label_selector(s: Optional[LabelSelector]) -> Optional[dict[str, Any]]:
    if s is None:
        return None
    out: dict[str, Any] = {}
    _put(out, "matchLabels", dict(s.match_labels))
    _put(out, "matchExpressions", [
        _without_empty({"key": r.key, "operator": r.operator, "values": list(r.values)}) for r in s.match_expressions])
    return out


def _without_empty(d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        _put(out, k, v)
    return out


def _node_selector_requirement(r: NodeSelectorRequirement) -> dict[str, Any]:
    return _without_empty({"key": r.key, "operator": r.operator, "values": list(r.values)})


def _node_selector_term(t: NodeSelectorTerm) -> dict[str, Any]:
    return _without_empty({"matchExpressions": [_node_selector_requirement(r) for r in t.match_expressions],
                           "matchFields": [_node_selector_requirement(r) for r in t.match_fields]})


def node_selector(s: Optional[NodeSelector]) -> Optional[dict[str, Any]]:
    if s is None:
        return None
    return {"nodeSelectorTerms": [_node_selector_term(t) for t in s.terms]}


def _pod_affinity_term(t: PodAffinityTerm) -> dict[str, Any]:
    out: dict[str, Any] = {"topologyKey": t.topology_key}
    _put(out, "labelSelector", label_selector(t.label_selector))
    _put(out, "namespaces", list(t.namespaces))
    if t.namespace_selector is not None:  # {} (all namespaces) differs from absent
        out["namespaceSelector"] = label_selector(t.namespace_selector)
    _put(out, "matchLabelKeys", list(t.match_label_keys))
    _put(out, "mismatchLabelKeys", list(t.mismatch_label_keys))
    return out


def _pod_affinity(a: Optional[PodAffinity]) -> Optional[dict[str, Any]]:
    if a is None:
        return None
    return _without_empty({
        "requiredDuringSchedulingIgnoredDuringExecution": [_pod_affinity_term(t) for t in a.required],
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": w.weight, "podAffinityTerm": _pod_affinity_term(w.term)} for w in a.preferred],
    })


def affinity(a: Optional[Affinity]) -> Optional[dict[str, Any]]:
    if a is None:
        return None
    out: dict[str, Any] = {}
    if a.node_affinity is not None:
        na: dict[str, Any] = {}
        _put(na, "requiredDuringSchedulingIgnoredDuringExecution", node_selector(a.node_affinity.required))
        _put(na, "preferredDuringSchedulingIgnoredDuringExecution", [
            {"weight": p.weight, "preference": _node_selector_term(p.preference)} for p in a.node_affinity.preferred])
        out["nodeAffinity"] = na
    if a.pod_affinity is not None:
        out["podAffinity"] = _pod_affinity(a.pod_affinity)
    if a.pod_anti_affinity is not None:
        out["podAntiAffinity"] = _pod_affinity(a.pod_anti_affinity)
    return out


def toleration(t: Toleration) -> dict[str, Any]:
    out = _without_empty({"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect})
    if t.toleration_seconds is not None:
        out["tolerationSeconds"] = t.toleration_seconds
    return out


def _spread(c: TopologySpreadConstraint) -> dict[str, Any]:
    out: dict[str, Any] = {"maxSkew": c.max_skew, "topologyKey": c.topology_key,
                           "whenUnsatisfiable": c.when_unsatisfiable}
    _put(out, "labelSelector", label_selector(c.label_selector))
    if c.min_domains is not None:
        out["minDomains"] = c.min_domains
    _put(out, "nodeAffinityPolicy", c.node_affinity_policy)
    _put(out, "nodeTaintsPolicy", c.node_taints_policy)
    _put(out, "matchLabelKeys", list(c.match_label_keys))
    return out


def container(c: Container) -> dict[str, Any]:
    out: dict[str, Any] = {"name": c.name}
    _put(out, "image", c.image)
    res = _without_empty({"requests": resource_list(c.requests), "limits": resource_list(c.limits)})
    out["resources"] = res
    _put(out, "ports", [_without_empty({"containerPort": p.container_port, "hostPort": p.host_port,
                                        "protocol": p.protocol, "hostIP": p.host_ip, "name": p.name})
                        for p in c.ports])
    _put(out, "restartPolicy", c.restart_policy)
    return out


def pod_to_json(p: Pod) -> dict[str, Any]:
    """A v1 Pod as the API server would return it (the fields schedmesh keeps)."""
    spec: dict[str, Any] = {"containers": [container(c) for c in p.containers]}
    _put(spec, "initContainers", [container(c) for c in p.init_containers])
    _put(spec, "nodeName", p.node_name)
    _put(spec, "nodeSelector", dict(p.node_selector))
    _put(spec, "affinity", affinity(p.affinity))
    _put(spec, "tolerations", [toleration(t) for t in p.tolerations])
    _put(spec, "topologySpreadConstraints", [_spread(c) for c in p.topology_spread_constraints])
    _put(spec, "schedulerName", p.scheduler_name)
    _put(spec, "priorityClassName", p.priority_class_name)
    if p.priority is not None:
        spec["priority"] = p.priority
    _put(spec, "preemptionPolicy", p.preemption_policy)
    _put(spec, "overhead", resource_list(p.overhead))
    if p.resource_requests is not None or p.resource_limits is not None:
        spec["resources"] = _without_empty({"requests": resource_list(p.resource_requests or {}),
                                            "limits": resource_list(p.resource_limits or {})})
    _put(spec, "schedulingGates", [{"name": g} for g in p.scheduling_gates])
    spec["terminationGracePeriodSeconds"] = p.termination_grace_period_seconds
    _put(spec, "runtimeClassName", p.runtime_class_name)
    _put(spec, "hostNetwork", p.host_network)
    _put(spec, "volumes", list(p.volumes))
    status: dict[str, Any] = {}
    _put(status, "phase", p.phase)
    _put(status, "nominatedNodeName", p.nominated_node_name)
    _put(status, "reason", p.status_reason)
    _put(status, "message", p.status_message)
    _put(status, "startTime", rfc3339(p.start_time))
    from schedmesh.eviction.qos import qos_class  # the API server sets it on every pod
    status["qosClass"] = qos_class(p)
    _put(status, "conditions", [_without_empty({"type": c.type, "status": c.status, "reason": c.reason,
                                                "message": c.message}) for c in p.conditions])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": object_meta(p.meta), "spec": spec, "status": status}


def node_to_json(n: Node) -> dict[str, Any]:
    """A v1 Node as the API server would return it (the fields schedmesh keeps)."""
    spec: dict[str, Any] = {}
    _put(spec, "unschedulable", n.unschedulable)
    _put(spec, "taints", [_without_empty({"key": t.key, "value": t.value, "effect": t.effect,
                                          "timeAdded": rfc3339(t.time_added)}) for t in n.taints])
    status: dict[str, Any] = {}
    _put(status, "capacity", resource_list(n.capacity))
    _put(status, "allocatable", resource_list(n.allocatable))
    _put(status, "conditions", [_without_empty({"type": c.type, "status": c.status, "reason": c.reason,
                                                "message": c.message,
                                                "lastHeartbeatTime": rfc3339(c.last_heartbeat_time)})
                                for c in n.conditions])
    _put(status, "images", [_without_empty({"names": list(i.names), "sizeBytes": i.size_bytes}) for i in n.images])
    return {"apiVersion": "v1", "kind": "Node", "metadata": object_meta(n.meta), "spec": spec, "status": status}
