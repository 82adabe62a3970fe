"""Reading Kubernetes manifests as users write them, the way the API server would.

Multi-document YAML, JSON, `kind: List`; v1 Pod, Node, Namespace, scheduling.k8s.io/v1
PriorityClass, policy/v1 PodDisruptionBudget, apps/v1 Deployment (expanded to its pods) and
kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration (kept as a dict for
`schedmesh.framework.config`). Defaults are applied as the API server applies them
(namespace, requests from limits, pod-level requests, matchLabelKeys merged into
affinity selectors). Every error names the document, the field path and the reason.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import yaml

from schedmesh.api.labels import (LABEL_SELECTOR_OPERATORS, IN, NOT_IN, LabelSelector,
                                  LabelSelectorRequirement)
from schedmesh.api.quantity import QuantityError, parse_quantity
from schedmesh.api.resources import (aggregate_container_requests, is_hugepage_resource_name,
                                     is_supported_pod_level_resource)
from schedmesh.api.types import (DEFAULT_NAMESPACE, NO_EXECUTE, NO_SCHEDULE, PREEMPT_LOWER_PRIORITY,
                                 PREEMPT_NEVER, PREFER_NO_SCHEDULE, SYSTEM_PRIORITY_CLASSES, Affinity,
                                 Container, ContainerImage, ContainerPort, Namespace, Node, NodeAffinity,
                                 NodeCondition, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
                                 ObjectMeta, OwnerReference, Pod, PodAffinity, PodAffinityTerm,
                                 PodCondition, PodDisruptionBudget, PreferredSchedulingTerm, PriorityClass,
                                 ResourceList, Taint, Toleration, TopologySpreadConstraint,
                                 WeightedPodAffinityTerm)


class ManifestError(ValueError):
    """A manifest that cannot be read: names where (document, field path) and why."""

    def __init__(self, where: str, path: str, reason: str) -> None:
        self.where, self.path, self.reason = where, path, reason
        super().__init__(f"{where}: {path}: {reason}" if path else f"{where}: {reason}")


@dataclass
class Manifests:
    """Everything read from one or more files, in order."""

    nodes: list[Node] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    namespaces: list[Namespace] = field(default_factory=list)
    scheduler_configs: list[dict] = field(default_factory=list)

    def extend(self, other: "Manifests") -> "Manifests":
        for f in ("nodes", "pods", "priority_classes", "pdbs", "namespaces", "scheduler_configs"):
            getattr(self, f).extend(getattr(other, f))
        return self


class _Doc:
    """Field access with paths for error messages."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, path: str, reason: str) -> ManifestError:
        return ManifestError(self.where, path, reason)

    def obj(self, d: Any, path: str) -> dict:
        if d is None:
            return {}
        if not isinstance(d, dict):
            raise self.fail(path, f"expected an object, got {_kind(d)}")
        return d

    def lst(self, d: Any, path: str) -> list:
        if d is None:
            return []
        if not isinstance(d, list):
            raise self.fail(path, f"expected a list, got {_kind(d)}")
        return d

    def str_(self, d: Any, path: str, default: str = "") -> str:
        if d is None:
            return default
        if not isinstance(d, str):
            raise self.fail(path, f"expected a string, got {_kind(d)}")
        return d

    def int_(self, d: Any, path: str, default: Optional[int] = 0) -> Optional[int]:
        if d is None:
            return default
        if isinstance(d, bool) or not isinstance(d, int):
            if isinstance(d, float) and d.is_integer():
                return int(d)
            raise self.fail(path, f"expected an integer, got {_kind(d)} {d!r}")
        return d

    def bool_(self, d: Any, path: str, default: bool = False) -> bool:
        if d is None:
            return default
        if not isinstance(d, bool):
            raise self.fail(path, f"expected true or false, got {_kind(d)} {d!r}")
        return d

    def str_map(self, d: Any, path: str) -> dict[str, str]:
        out = {}
        for k, v in self.obj(d, path).items():
            if not isinstance(v, str):
                raise self.fail(f"{path}.{k}", f"expected a string value, got {_kind(v)} {v!r}")
            out[str(k)] = v
        return out

    def quantities(self, d: Any, path: str) -> ResourceList:
        out: ResourceList = {}
        for k, v in self.obj(d, path).items():
            try:
                q = parse_quantity(v)
            except QuantityError:
                raise self.fail(f"{path}.{k}", f"{json.dumps(v)} is not a quantity") from None
            if q < 0:
                raise self.fail(f"{path}.{k}", f"{json.dumps(v)} must be greater than or equal to 0")
            out[str(k)] = q
        return out

    def time(self, d: Any, path: str) -> Optional[float]:
        if d is None:
            return None
        if isinstance(d, _dt.datetime):  # YAML parses unquoted timestamps
            t = d if d.tzinfo else d.replace(tzinfo=_dt.timezone.utc)
            return t.timestamp()
        if not isinstance(d, str):
            raise self.fail(path, f"expected an RFC 3339 time, got {_kind(d)}")
        try:
            return _dt.datetime.fromisoformat(d.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise self.fail(path, f"{d!r} is not an RFC 3339 time") from None


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _uid_for(kind: str, namespace: str, name: str) -> str:
    return str(uuid.UUID(bytes=hashlib.sha1(f"{kind}/{namespace}/{name}".encode()).digest()[:16], version=5))


# ---------------------------------------------------------------------------------------------
# metadata, selectors, affinity
# ---------------------------------------------------------------------------------------------

def _meta(doc: _Doc, d: Any, kind: str, namespaced: bool) -> ObjectMeta:
    m = doc.obj(d, "metadata")
    name = doc.str_(m.get("name"), "metadata.name")
    if not name:
        if m.get("generateName"):
            name = doc.str_(m.get("generateName"), "metadata.generateName") + uuid.uuid4().hex[:5]
        else:
            raise doc.fail("metadata.name", "is required")
    ns = doc.str_(m.get("namespace"), "metadata.namespace", DEFAULT_NAMESPACE) if namespaced else ""
    owners = []
    for i, o in enumerate(doc.lst(m.get("ownerReferences"), "metadata.ownerReferences")):
        p = f"metadata.ownerReferences[{i}]"
        o = doc.obj(o, p)
        owners.append(OwnerReference(kind=doc.str_(o.get("kind"), f"{p}.kind"),
                                     name=doc.str_(o.get("name"), f"{p}.name"),
                                     uid=doc.str_(o.get("uid"), f"{p}.uid"),
                                     api_version=doc.str_(o.get("apiVersion"), f"{p}.apiVersion"),
                                     controller=doc.bool_(o.get("controller"), f"{p}.controller")))
    return ObjectMeta(
        name=name, namespace=ns,
        uid=doc.str_(m.get("uid"), "metadata.uid") or _uid_for(kind, ns, name),
        labels=doc.str_map(m.get("labels"), "metadata.labels"),
        annotations=doc.str_map(m.get("annotations"), "metadata.annotations"),
        creation_timestamp=doc.time(m.get("creationTimestamp"), "metadata.creationTimestamp"),
        deletion_timestamp=doc.time(m.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        owner_references=owners,
        resource_version=str(m.get("resourceVersion") or ""),
    )


def parse_label_selector(doc: _Doc, d: Any, path: str) -> Optional[LabelSelector]:
    if d is None:
        return None
    d = doc.obj(d, path)
    reqs = []
    for i, e in enumerate(doc.lst(d.get("matchExpressions"), f"{path}.matchExpressions")):
        p = f"{path}.matchExpressions[{i}]"
        e = doc.obj(e, p)
        op = doc.str_(e.get("operator"), f"{p}.operator")
        if op not in LABEL_SELECTOR_OPERATORS:
            raise doc.fail(f"{p}.operator", f"{op!r} is not a valid label selector operator "
                                            f"(one of {', '.join(LABEL_SELECTOR_OPERATORS)})")
        values = tuple(doc.str_(v, f"{p}.values[{j}]") for j, v in enumerate(doc.lst(e.get("values"), f"{p}.values")))
        if op in (IN, NOT_IN) and not values:
            raise doc.fail(f"{p}.values", f"must be specified when operator is {op}")
        if op not in (IN, NOT_IN) and values:
            raise doc.fail(f"{p}.values", f"may not be specified when operator is {op}")
        key = doc.str_(e.get("key"), f"{p}.key")
        if not key:
            raise doc.fail(f"{p}.key", "is required")
        reqs.append(LabelSelectorRequirement(key, op, values))
    return LabelSelector.of(doc.str_map(d.get("matchLabels"), f"{path}.matchLabels"), reqs)


_NODE_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _node_selector_reqs(doc: _Doc, d: Any, path: str, fields: bool) -> list[NodeSelectorRequirement]:
    out = []
    for i, e in enumerate(doc.lst(d, path)):
        p = f"{path}[{i}]"
        e = doc.obj(e, p)
        op = doc.str_(e.get("operator"), f"{p}.operator")
        if op not in _NODE_SELECTOR_OPS:
            raise doc.fail(f"{p}.operator", f"{op!r} is not a valid node selector operator "
                                            f"(one of {', '.join(_NODE_SELECTOR_OPS)})")
        values = [doc.str_(v, f"{p}.values[{j}]") for j, v in enumerate(doc.lst(e.get("values"), f"{p}.values"))]
        if op in ("Gt", "Lt"):
            if len(values) != 1:
                raise doc.fail(f"{p}.values", f"must be a single element for operator {op}")
        key = doc.str_(e.get("key"), f"{p}.key")
        if fields and key != "metadata.name":
            raise doc.fail(f"{p}.key", f"{key!r} is not a supported field selector (only metadata.name)")
        out.append(NodeSelectorRequirement(key, op, values))
    return out


def _node_selector_term(doc: _Doc, d: Any, path: str) -> NodeSelectorTerm:
    d = doc.obj(d, path)
    return NodeSelectorTerm(
        match_expressions=_node_selector_reqs(doc, d.get("matchExpressions"), f"{path}.matchExpressions", False),
        match_fields=_node_selector_reqs(doc, d.get("matchFields"), f"{path}.matchFields", True))


def parse_node_selector(doc: _Doc, d: Any, path: str) -> Optional[NodeSelector]:
    if d is None:
        return None
    d = doc.obj(d, path)
    return NodeSelector([_node_selector_term(doc, t, f"{path}.nodeSelectorTerms[{i}]")
                         for i, t in enumerate(doc.lst(d.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms"))])


def _pod_affinity_term(doc: _Doc, d: Any, path: str, pod_labels: dict[str, str]) -> PodAffinityTerm:
    d = doc.obj(d, path)
    tk = doc.str_(d.get("topologyKey"), f"{path}.topologyKey")
    if not tk:
        raise doc.fail(f"{path}.topologyKey", "can not be empty")
    sel = parse_label_selector(doc, d.get("labelSelector"), f"{path}.labelSelector")
    mlk = [doc.str_(v, f"{path}.matchLabelKeys[{i}]") for i, v in enumerate(doc.lst(d.get("matchLabelKeys"), f"{path}.matchLabelKeys"))]
    mmlk = [doc.str_(v, f"{path}.mismatchLabelKeys[{i}]") for i, v in enumerate(doc.lst(d.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys"))]
    # The API server merges matchLabelKeys / mismatchLabelKeys into the label selector at
    # creation (only for keys the pod has, and only when a labelSelector is set).
    if sel is not None and (mlk or mmlk):
        extra = [LabelSelectorRequirement(k, IN, (pod_labels[k],)) for k in mlk if k in pod_labels]
        extra += [LabelSelectorRequirement(k, NOT_IN, (pod_labels[k],)) for k in mmlk if k in pod_labels]
        sel = sel.with_requirements(extra)
    return PodAffinityTerm(
        topology_key=tk, label_selector=sel,
        namespaces=[doc.str_(v, f"{path}.namespaces[{i}]") for i, v in enumerate(doc.lst(d.get("namespaces"), f"{path}.namespaces"))],
        namespace_selector=parse_label_selector(doc, d.get("namespaceSelector"), f"{path}.namespaceSelector"),
        match_label_keys=mlk, mismatch_label_keys=mmlk)


def _pod_affinity(doc: _Doc, d: Any, path: str, pod_labels: dict[str, str]) -> Optional[PodAffinity]:
    if d is None:
        return None
    d = doc.obj(d, path)
    rp = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    pp = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    required = [_pod_affinity_term(doc, t, f"{rp}[{i}]", pod_labels) for i, t in enumerate(doc.lst(d.get(rp.rsplit('.', 1)[1]), rp))]
    preferred = []
    for i, w in enumerate(doc.lst(d.get(pp.rsplit('.', 1)[1]), pp)):
        w = doc.obj(w, f"{pp}[{i}]")
        weight = doc.int_(w.get("weight"), f"{pp}[{i}].weight")
        if not 1 <= weight <= 100:
            raise doc.fail(f"{pp}[{i}].weight", f"{weight} must be in the range 1-100")
        preferred.append(WeightedPodAffinityTerm(weight, _pod_affinity_term(doc, w.get("podAffinityTerm"), f"{pp}[{i}].podAffinityTerm", pod_labels)))
    return PodAffinity(required, preferred)


def _affinity(doc: _Doc, d: Any, path: str, pod_labels: dict[str, str]) -> Optional[Affinity]:
    if d is None:
        return None
    d = doc.obj(d, path)
    na = None
    if d.get("nodeAffinity") is not None:
        p = f"{path}.nodeAffinity"
        n = doc.obj(d["nodeAffinity"], p)
        preferred = []
        pp = f"{p}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, w in enumerate(doc.lst(n.get("preferredDuringSchedulingIgnoredDuringExecution"), pp)):
            w = doc.obj(w, f"{pp}[{i}]")
            weight = doc.int_(w.get("weight"), f"{pp}[{i}].weight")
            if not 1 <= weight <= 100:
                raise doc.fail(f"{pp}[{i}].weight", f"{weight} must be in the range 1-100")
            preferred.append(PreferredSchedulingTerm(weight, _node_selector_term(doc, w.get("preference"), f"{pp}[{i}].preference")))
        na = NodeAffinity(parse_node_selector(doc, n.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                              f"{p}.requiredDuringSchedulingIgnoredDuringExecution"), preferred)
    return Affinity(na, _pod_affinity(doc, d.get("podAffinity"), f"{path}.podAffinity", pod_labels),
                    _pod_affinity(doc, d.get("podAntiAffinity"), f"{path}.podAntiAffinity", pod_labels))


# ---------------------------------------------------------------------------------------------
# Pod
# ---------------------------------------------------------------------------------------------

def _container(doc: _Doc, d: Any, path: str, init: bool) -> Container:
    d = doc.obj(d, path)
    res = doc.obj(d.get("resources"), f"{path}.resources")
    requests = doc.quantities(res.get("requests"), f"{path}.resources.requests")
    limits = doc.quantities(res.get("limits"), f"{path}.resources.limits")
    for k, v in limits.items():  # the API server defaults requests to limits
        requests.setdefault(k, v)
    for k, v in requests.items():
        if k in limits and v > limits[k]:
            raise doc.fail(f"{path}.resources.requests.{k}", f"must be less than or equal to {k} limit")
    ports = []
    for i, p in enumerate(doc.lst(d.get("ports"), f"{path}.ports")):
        pp = f"{path}.ports[{i}]"
        p = doc.obj(p, pp)
        cport = doc.int_(p.get("containerPort"), f"{pp}.containerPort")
        hport = doc.int_(p.get("hostPort"), f"{pp}.hostPort")
        if not 0 <= hport <= 65535:
            raise doc.fail(f"{pp}.hostPort", f"{hport} must be between 0 and 65535")
        proto = doc.str_(p.get("protocol"), f"{pp}.protocol", "TCP")
        if proto not in ("TCP", "UDP", "SCTP"):
            raise doc.fail(f"{pp}.protocol", f"{proto!r} is not one of TCP, UDP, SCTP")
        ports.append(ContainerPort(cport, hport, proto, doc.str_(p.get("hostIP"), f"{pp}.hostIP"),
                                   doc.str_(p.get("name"), f"{pp}.name")))
    rp = doc.str_(d.get("restartPolicy"), f"{path}.restartPolicy") or None
    if rp is not None and (not init or rp != "Always"):
        raise doc.fail(f"{path}.restartPolicy", "only 'Always' is allowed, and only for init containers")
    return Container(name=doc.str_(d.get("name"), f"{path}.name"), image=doc.str_(d.get("image"), f"{path}.image"),
                     requests=requests, limits=limits, ports=ports, restart_policy=rp)


_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)


def _toleration(doc: _Doc, d: Any, path: str) -> Toleration:
    d = doc.obj(d, path)
    op = doc.str_(d.get("operator"), f"{path}.operator", "Equal") or "Equal"
    if op not in ("Equal", "Exists"):
        raise doc.fail(f"{path}.operator", f"{op!r} is not one of Equal, Exists")
    effect = doc.str_(d.get("effect"), f"{path}.effect")
    if effect and effect not in _EFFECTS:
        raise doc.fail(f"{path}.effect", f"{effect!r} is not one of {', '.join(_EFFECTS)}")
    value = doc.str_(d.get("value"), f"{path}.value")
    if op == "Exists" and value:
        raise doc.fail(f"{path}.value", "must be empty when operator is Exists")
    ts = d.get("tolerationSeconds")
    return Toleration(key=doc.str_(d.get("key"), f"{path}.key"), operator=op, value=value, effect=effect,
                      toleration_seconds=None if ts is None else doc.int_(ts, f"{path}.tolerationSeconds"))


def _spread(doc: _Doc, d: Any, path: str, pod_labels: dict[str, str]) -> TopologySpreadConstraint:
    d = doc.obj(d, path)
    max_skew = doc.int_(d.get("maxSkew"), f"{path}.maxSkew", None)
    if max_skew is None or max_skew < 1:
        raise doc.fail(f"{path}.maxSkew", "must be greater than zero")
    tk = doc.str_(d.get("topologyKey"), f"{path}.topologyKey")
    if not tk:
        raise doc.fail(f"{path}.topologyKey", "can not be empty")
    wu = doc.str_(d.get("whenUnsatisfiable"), f"{path}.whenUnsatisfiable")
    if wu not in ("DoNotSchedule", "ScheduleAnyway"):
        raise doc.fail(f"{path}.whenUnsatisfiable", f"{wu!r} is not one of DoNotSchedule, ScheduleAnyway")
    md = d.get("minDomains")
    if md is not None:
        md = doc.int_(md, f"{path}.minDomains")
        if md < 1:
            raise doc.fail(f"{path}.minDomains", "must be greater than zero")
        if wu != "DoNotSchedule":
            raise doc.fail(f"{path}.minDomains", "can only use minDomains if whenUnsatisfiable=DoNotSchedule")
    policies = {}
    for f in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        v = doc.str_(d.get(f), f"{path}.{f}") or None
        if v is not None and v not in ("Honor", "Ignore"):
            raise doc.fail(f"{path}.{f}", f"{v!r} is not one of Honor, Ignore")
        policies[f] = v
    sel = parse_label_selector(doc, d.get("labelSelector"), f"{path}.labelSelector")
    mlk = [doc.str_(v, f"{path}.matchLabelKeys[{i}]") for i, v in enumerate(doc.lst(d.get("matchLabelKeys"), f"{path}.matchLabelKeys"))]
    return TopologySpreadConstraint(max_skew=max_skew, topology_key=tk, when_unsatisfiable=wu, label_selector=sel,
                                    min_domains=md, node_affinity_policy=policies["nodeAffinityPolicy"],
                                    node_taints_policy=policies["nodeTaintsPolicy"], match_label_keys=mlk)


def _aggregate_limits(pod: Pod) -> ResourceList:
    shadow = Pod(meta=pod.meta,
                 containers=[Container(c.name, requests=c.limits) for c in pod.containers],
                 init_containers=[Container(c.name, requests=c.limits, restart_policy=c.restart_policy)
                                  for c in pod.init_containers])
    return aggregate_container_requests(shadow)


def _default_pod_level_resources(pod: Pod) -> None:
    """defaultHugePagePodLimits + defaultPodRequests of the API server (PodLevelResources)."""
    if pod.resource_requests is None and pod.resource_limits is None:
        return
    reqs = dict(pod.resource_requests or {})
    lims = dict(pod.resource_limits or {})
    if reqs or lims:
        for k, v in _aggregate_limits(pod).items():
            if is_supported_pod_level_resource(k) and is_hugepage_resource_name(k) and k not in reqs:
                lims.setdefault(k, v)
    if lims:
        for k, v in aggregate_container_requests(pod).items():
            if k not in reqs and is_supported_pod_level_resource(k) and not is_hugepage_resource_name(k):
                reqs[k] = v
        for k, v in lims.items():
            if k not in reqs and is_supported_pod_level_resource(k):
                reqs[k] = v
    pod.resource_requests = reqs or pod.resource_requests
    pod.resource_limits = lims or pod.resource_limits


def parse_pod(doc: _Doc, d: dict) -> Pod:
    meta = _meta(doc, d.get("metadata"), "Pod", True)
    spec = doc.obj(d.get("spec"), "spec")
    status = doc.obj(d.get("status"), "status")
    containers = [_container(doc, c, f"spec.containers[{i}]", False) for i, c in enumerate(doc.lst(spec.get("containers"), "spec.containers"))]
    if not containers:
        raise doc.fail("spec.containers", "must have at least one container")
    init = [_container(doc, c, f"spec.initContainers[{i}]", True) for i, c in enumerate(doc.lst(spec.get("initContainers"), "spec.initContainers"))]
    res = doc.obj(spec.get("resources"), "spec.resources")
    pod = Pod(
        meta=meta, containers=containers, init_containers=init,
        node_name=doc.str_(spec.get("nodeName"), "spec.nodeName"),
        node_selector=doc.str_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        affinity=_affinity(doc, spec.get("affinity"), "spec.affinity", meta.labels),
        tolerations=[_toleration(doc, t, f"spec.tolerations[{i}]") for i, t in enumerate(doc.lst(spec.get("tolerations"), "spec.tolerations"))],
        topology_spread_constraints=[_spread(doc, t, f"spec.topologySpreadConstraints[{i}]", meta.labels)
                                     for i, t in enumerate(doc.lst(spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints"))],
        scheduler_name=doc.str_(spec.get("schedulerName"), "spec.schedulerName") or "default-scheduler",
        priority_class_name=doc.str_(spec.get("priorityClassName"), "spec.priorityClassName"),
        priority=doc.int_(spec.get("priority"), "spec.priority", None),
        preemption_policy=doc.str_(spec.get("preemptionPolicy"), "spec.preemptionPolicy"),
        overhead=doc.quantities(spec.get("overhead"), "spec.overhead"),
        resource_requests=doc.quantities(res["requests"], "spec.resources.requests") if res.get("requests") else None,
        resource_limits=doc.quantities(res["limits"], "spec.resources.limits") if res.get("limits") else None,
        scheduling_gates=[doc.str_(doc.obj(g, f"spec.schedulingGates[{i}]").get("name"), f"spec.schedulingGates[{i}].name")
                          for i, g in enumerate(doc.lst(spec.get("schedulingGates"), "spec.schedulingGates"))],
        termination_grace_period_seconds=doc.int_(spec.get("terminationGracePeriodSeconds"), "spec.terminationGracePeriodSeconds", 30),
        runtime_class_name=doc.str_(spec.get("runtimeClassName"), "spec.runtimeClassName"),
        host_network=doc.bool_(spec.get("hostNetwork"), "spec.hostNetwork"),
        volumes=doc.lst(spec.get("volumes"), "spec.volumes"),
        phase=doc.str_(status.get("phase"), "status.phase", "Pending") or "Pending",
        nominated_node_name=doc.str_(status.get("nominatedNodeName"), "status.nominatedNodeName"),
        start_time=doc.time(status.get("startTime"), "status.startTime"),
        conditions=[PodCondition(type=str(c.get("type", "")), status=str(c.get("status", "")),
                                 reason=str(c.get("reason", "")), message=str(c.get("message", "")))
                    for c in doc.lst(status.get("conditions"), "status.conditions") if isinstance(c, dict)],
    )
    if pod.preemption_policy and pod.preemption_policy not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        raise doc.fail("spec.preemptionPolicy", f"{pod.preemption_policy!r} is not one of PreemptLowerPriority, Never")
    if pod.host_network:  # the API server defaults hostPort to containerPort on the host network
        for c in pod.containers + pod.init_containers:
            for p in c.ports:
                if p.host_port == 0:
                    p.host_port = p.container_port
    _default_pod_level_resources(pod)
    return pod


# ---------------------------------------------------------------------------------------------
# Node, PriorityClass, PDB, Namespace
# ---------------------------------------------------------------------------------------------

def parse_node(doc: _Doc, d: dict) -> Node:
    meta = _meta(doc, d.get("metadata"), "Node", False)
    spec = doc.obj(d.get("spec"), "spec")
    status = doc.obj(d.get("status"), "status")
    taints = []
    for i, t in enumerate(doc.lst(spec.get("taints"), "spec.taints")):
        p = f"spec.taints[{i}]"
        t = doc.obj(t, p)
        effect = doc.str_(t.get("effect"), f"{p}.effect")
        if effect not in _EFFECTS:
            raise doc.fail(f"{p}.effect", f"{effect!r} is not one of {', '.join(_EFFECTS)}")
        key = doc.str_(t.get("key"), f"{p}.key")
        if not key:
            raise doc.fail(f"{p}.key", "is required")
        taints.append(Taint(key, effect, doc.str_(t.get("value"), f"{p}.value"), doc.time(t.get("timeAdded"), f"{p}.timeAdded")))
    capacity = doc.quantities(status.get("capacity"), "status.capacity")
    allocatable = doc.quantities(status.get("allocatable"), "status.allocatable") if "allocatable" in status else dict(capacity)
    images = []
    for i, im in enumerate(doc.lst(status.get("images"), "status.images")):
        im = doc.obj(im, f"status.images[{i}]")
        images.append(ContainerImage([doc.str_(n, f"status.images[{i}].names[{j}]") for j, n in enumerate(doc.lst(im.get("names"), f"status.images[{i}].names"))],
                                     doc.int_(im.get("sizeBytes"), f"status.images[{i}].sizeBytes")))
    conditions = [NodeCondition(type=str(c.get("type", "")), status=str(c.get("status", "")),
                                reason=str(c.get("reason", "")), message=str(c.get("message", "")))
                  for c in doc.lst(status.get("conditions"), "status.conditions") if isinstance(c, dict)]
    return Node(meta=meta, unschedulable=doc.bool_(spec.get("unschedulable"), "spec.unschedulable"), taints=taints,
                allocatable=allocatable, capacity=capacity, images=images, conditions=conditions)


def parse_priority_class(doc: _Doc, d: dict) -> PriorityClass:
    meta = _meta(doc, d.get("metadata"), "PriorityClass", False)
    if "value" not in d:
        raise doc.fail("value", "is required")
    value = doc.int_(d.get("value"), "value")
    if value > 1_000_000_000 and not meta.name.startswith("system-"):
        raise doc.fail("value", f"{value} must not be greater than 1000000000 (reserved for system classes)")
    pp = doc.str_(d.get("preemptionPolicy"), "preemptionPolicy") or PREEMPT_LOWER_PRIORITY
    if pp not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        raise doc.fail("preemptionPolicy", f"{pp!r} is not one of PreemptLowerPriority, Never")
    return PriorityClass(meta.name, value, doc.bool_(d.get("globalDefault"), "globalDefault"), pp,
                         doc.str_(d.get("description"), "description"))


def parse_pdb(doc: _Doc, d: dict) -> PodDisruptionBudget:
    meta = _meta(doc, d.get("metadata"), "PodDisruptionBudget", True)
    spec = doc.obj(d.get("spec"), "spec")
    status = doc.obj(d.get("status"), "status")

    def int_or_percent(v: Any, path: str) -> Optional[str]:
        if v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        if isinstance(v, str) and v.endswith("%") and v[:-1].isdigit():
            return v
        raise doc.fail(path, f"{v!r} is not an integer or a percentage")

    return PodDisruptionBudget(meta=meta, selector=parse_label_selector(doc, spec.get("selector"), "spec.selector"),
                               min_available=int_or_percent(spec.get("minAvailable"), "spec.minAvailable"),
                               max_unavailable=int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable"),
                               disruptions_allowed=doc.int_(status.get("disruptionsAllowed"), "status.disruptionsAllowed"),
                               disrupted_pods={str(k): doc.time(v, f"status.disruptedPods.{k}") or 0.0
                                               for k, v in doc.obj(status.get("disruptedPods"), "status.disruptedPods").items()})


def parse_namespace(doc: _Doc, d: dict) -> Namespace:
    meta = _meta(doc, d.get("metadata"), "Namespace", False)
    labels = dict(meta.labels)
    labels["kubernetes.io/metadata.name"] = meta.name
    return Namespace(meta.name, labels)


def expand_deployment(doc: _Doc, d: dict) -> list[Pod]:
    """apps/v1 Deployment (or ReplicaSet/StatefulSet) -> its replicas as pods, named as their controller would."""
    meta = _meta(doc, d.get("metadata"), d.get("kind", "Deployment"), True)
    spec = doc.obj(d.get("spec"), "spec")
    replicas = doc.int_(spec.get("replicas"), "spec.replicas", 1)
    if replicas < 0:
        raise doc.fail("spec.replicas", "must be greater than or equal to 0")
    template = doc.obj(spec.get("template"), "spec.template")
    tmeta = doc.obj(template.get("metadata"), "spec.template.metadata")
    sel = parse_label_selector(doc, spec.get("selector"), "spec.selector")
    tlabels = doc.str_map(tmeta.get("labels"), "spec.template.metadata.labels")
    if sel is not None and not sel.matches(tlabels):
        raise doc.fail("spec.template.metadata.labels", "`selector` does not match template `labels`")
    kind = d.get("kind", "Deployment")
    h = hashlib.sha1(json.dumps(template, sort_keys=True, default=str).encode()).hexdigest()[:10]
    pods = []
    for i in range(replicas):
        name = f"{meta.name}-{i}" if kind == "StatefulSet" else f"{meta.name}-{h[:5]}-{hashlib.sha1(f'{i}'.encode()).hexdigest()[:5]}"
        pm = dict(tmeta)
        pm.update({"name": name, "namespace": meta.namespace,
                   "labels": dict(tlabels, **({"pod-template-hash": h} if kind == "Deployment" else {})),
                   "ownerReferences": [{"kind": "ReplicaSet" if kind == "Deployment" else kind,
                                        "name": f"{meta.name}-{h}" if kind == "Deployment" else meta.name,
                                        "controller": True}]})
        sub = _Doc(f"{doc.where} (replica {i})")
        try:
            pods.append(parse_pod(sub, {"metadata": pm, "spec": template.get("spec")}))
        except ManifestError as e:
            raise doc.fail(f"spec.template.{e.path}", e.reason) from None
    return pods


_PARSERS: dict[tuple[str, str], Callable[[_Doc, dict], Any]] = {
    ("v1", "Pod"): parse_pod,
    ("v1", "Node"): parse_node,
    ("v1", "Namespace"): parse_namespace,
    ("scheduling.k8s.io/v1", "PriorityClass"): parse_priority_class,
    ("policy/v1", "PodDisruptionBudget"): parse_pdb,
}
_WORKLOADS = {("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet")}
_CONFIG = ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration")


def _add_object(out: Manifests, d: Any, where: str) -> None:
    doc = _Doc(where)
    if not isinstance(d, dict):
        raise doc.fail("", f"expected a Kubernetes object, got {_kind(d)}")
    api, kind = d.get("apiVersion"), d.get("kind")
    if not kind:
        raise doc.fail("kind", "is required")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in d):
        for i, item in enumerate(doc.lst(d.get("items"), "items")):
            name = item.get("metadata", {}).get("name") if isinstance(item, dict) else None
            _add_object(out, item, f"{where}: items[{i}]" + (f" ({item.get('kind')} {name})" if name else ""))
        return
    if not api:
        raise doc.fail("apiVersion", "is required")
    if (api, kind) == _CONFIG:
        out.scheduler_configs.append(d)
        return
    if (api, kind) in _WORKLOADS:
        out.pods.extend(expand_deployment(doc, d))
        return
    parser = _PARSERS.get((api, kind))
    if parser is None:
        known = ", ".join(sorted(f"{a} {k}" for a, k in list(_PARSERS) + list(_WORKLOADS) + [_CONFIG]))
        raise doc.fail("kind", f"{api} {kind} is not supported here (supported: {known})")
    obj = parser(doc, d)
    {Pod: out.pods, Node: out.nodes, Namespace: out.namespaces, PriorityClass: out.priority_classes,
     PodDisruptionBudget: out.pdbs}[type(obj)].append(obj)


def load_text(text: str, source: str = "<input>") -> Manifests:
    """Parse YAML (one or more documents) or JSON text."""
    out = Manifests()
    try:
        if text.lstrip()[:1] in ("{", "["):  # JSON: the C parser is ~100x faster than PyYAML
            try:
                docs = [json.loads(text)]
            except ValueError:
                docs = list(yaml.safe_load_all(text))
        else:
            docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise ManifestError(source, "", f"not valid YAML or JSON at {at}: {getattr(e, 'problem', e)}") from None
    n = sum(1 for d in docs if d is not None)
    i = 0
    for d in docs:
        if d is None:
            continue
        i += 1
        name = d.get("metadata", {}).get("name") if isinstance(d, dict) and isinstance(d.get("metadata"), dict) else None
        where = source if n == 1 else f"{source}: document {i}"
        if name and isinstance(d, dict):
            where += f" ({d.get('kind')} {name})"
        _add_object(out, d, where)
    return out


def load_files(paths: Iterable[str | Path]) -> Manifests:
    out = Manifests()
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json"))
        else:
            files = [p]
        for f in files:
            try:
                text = f.read_text() if str(f) != "-" else __import__("sys").stdin.read()
            except OSError as e:
                raise ManifestError(str(f), "", f"cannot be read: {e.strerror}") from None
            out.extend(load_text(text, str(f)))
    return out


# ---------------------------------------------------------------------------------------------
# Admission: priority from PriorityClass
# ---------------------------------------------------------------------------------------------

class AdmissionError(ManifestError):
    pass


def admit_pod(pod: Pod, classes: dict[str, PriorityClass]) -> Pod:
    """The Priority admission plugin: resolve spec.priority and preemptionPolicy from the class."""
    if pod.priority_class_name:
        pc = classes.get(pod.priority_class_name) or SYSTEM_PRIORITY_CLASSES.get(pod.priority_class_name)
        if pc is None:
            raise AdmissionError(f"Pod {pod.key}", "spec.priorityClassName",
                                 f"no PriorityClass with name {pod.priority_class_name} was found")
    else:
        pc = next((c for c in classes.values() if c.global_default), None)
        if pc is not None:
            pod.priority_class_name = pc.name
    if pc is not None:
        if pod.priority is not None and pod.priority != pc.value:
            raise AdmissionError(f"Pod {pod.key}", "spec.priority",
                                 f"the integer value of priority ({pod.priority}) must not be provided in pod spec; "
                                 f"priority admission controller computed {pc.value} from the given PriorityClass name")
        pod.priority = pc.value
        if not pod.preemption_policy:
            pod.preemption_policy = pc.preemption_policy
    if pod.priority is None:
        pod.priority = 0
    if not pod.preemption_policy:
        pod.preemption_policy = PREEMPT_LOWER_PRIORITY
    return pod


def admit_all(m: Manifests, extra_classes: Iterable[PriorityClass] = ()) -> Manifests:
    classes = {c.name: c for c in list(extra_classes) + m.priority_classes}
    defaults = [c.name for c in classes.values() if c.global_default]
    if len(defaults) > 1:
        raise AdmissionError("PriorityClasses", "globalDefault", f"more than one global default: {', '.join(defaults)}")
    for p in m.pods:
        admit_pod(p, classes)
    return m
