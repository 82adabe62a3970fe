"""Small builders for the eviction tests: objects as the API server would store them (requests
already defaulted from limits, priorities resolved), built directly from the object model."""
from __future__ import annotations

import json
from typing import Mapping, Optional, Sequence

from schedmesh.api.labels import LabelSelector, LabelSelectorRequirement
from schedmesh.api.quantity import parse_quantity
from schedmesh.api.types import (Container, Node, NodeCondition, ObjectMeta, OwnerReference, Pod, PodCondition,
                                 PodDisruptionBudget, ResourceList, Taint, Toleration)

T0 = 1_700_000_000.0  # a fixed "now" for the tests


def resources(d: Optional[Mapping[str, str]]) -> ResourceList:
    return {k: parse_quantity(v) for k, v in (d or {}).items()}


def container(name: str = "c", requests: Optional[Mapping[str, str]] = None,
              limits: Optional[Mapping[str, str]] = None, sidecar: bool = False) -> Container:
    lim = resources(limits)
    req = {**lim, **resources(requests)}  # the API server defaults requests to limits
    return Container(name, requests=req, limits=lim, restart_policy="Always" if sidecar else None)


def pod(name: str, namespace: str = "default", labels: Optional[Mapping[str, str]] = None,
        phase: str = "Running", ready: bool = True, priority: int = 0,
        requests: Optional[Mapping[str, str]] = None, limits: Optional[Mapping[str, str]] = None,
        containers: Optional[Sequence[Container]] = None, init_containers: Sequence[Container] = (),
        annotations: Optional[Mapping[str, str]] = None, usage: Optional[object] = None,
        tolerations: Sequence[Toleration] = (), terminating: bool = False, grace: int = 30,
        owner_kind: str = "", pod_requests: Optional[Mapping[str, str]] = None,
        pod_limits: Optional[Mapping[str, str]] = None, host_network: bool = False) -> Pod:
    """A pod; `usage` (a dict or a string) becomes its schedmesh.io/simulated-usage annotation."""
    ann = dict(annotations or {})
    if usage is not None:
        ann["schedmesh.io/simulated-usage"] = usage if isinstance(usage, str) else json.dumps(usage)
    owners = [OwnerReference(owner_kind, f"{name}-owner", controller=True)] if owner_kind else []
    meta = ObjectMeta(name=name, namespace=namespace, uid=f"uid-{name}", labels=dict(labels or {}), annotations=ann,
                      deletion_timestamp=T0 - 1 if terminating else None, owner_references=owners)
    return Pod(meta=meta, containers=list(containers) if containers is not None else [container("c", requests, limits)],
               init_containers=list(init_containers), priority=priority, tolerations=list(tolerations),
               termination_grace_period_seconds=grace, phase=phase, host_network=host_network,
               resource_requests=resources(pod_requests) if pod_requests else None,
               resource_limits=resources(pod_limits) if pod_limits else None,
               conditions=[PodCondition("Ready", "True" if ready else "False")])


def node(name: str = "n1", capacity: Optional[Mapping[str, str]] = None,
         allocatable: Optional[Mapping[str, str]] = None, conditions: Sequence[NodeCondition] = (),
         taints: Sequence[Taint] = (), unschedulable: bool = False, created: Optional[float] = None) -> Node:
    cap = resources(capacity)
    return Node(meta=ObjectMeta(name=name, uid=f"uid-{name}", creation_timestamp=created), unschedulable=unschedulable,
                taints=list(taints), capacity=cap, allocatable=resources(allocatable) if allocatable else dict(cap),
                conditions=list(conditions))


def pdb(name: str = "pdb", namespace: str = "default", match_labels: Optional[Mapping[str, str]] = None,
        selector: Optional[LabelSelector] = None, min_available: Optional[str] = None,
        max_unavailable: Optional[str] = None, disruptions_allowed: int = 0,
        disrupted_pods: Optional[Mapping[str, float]] = None) -> PodDisruptionBudget:
    if selector is None and match_labels is not None:
        selector = LabelSelector.of(match_labels)
    return PodDisruptionBudget(meta=ObjectMeta(name=name, namespace=namespace), selector=selector,
                               min_available=min_available, max_unavailable=max_unavailable,
                               disruptions_allowed=disruptions_allowed, disrupted_pods=dict(disrupted_pods or {}))


def requirement(key: str, op: str, *values: str) -> LabelSelectorRequirement:
    return LabelSelectorRequirement(key, op, tuple(values))
