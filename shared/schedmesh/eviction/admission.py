"""The kubelet's pod admission (pkg/kubelet/lifecycle/predicate.go and the eviction manager's
Admit, v1.35): may a pod bound to this node run here?

Handlers run in the kubelet's order: the eviction admit handler first (under node pressure,
`EvictionManager.admit`), then the predicate admit handler: the `kubernetes.io/os` label, then
kube-scheduler's AdmissionCheck against the pods already admitted (NodeResourcesFit's Fits,
required node affinity, node name, host ports; every failure collected, the first one reported)
and untolerated NoExecute taints. A refused pod ends in phase Failed with the handler's reason
and "Pod was rejected: " + its message (kubelet.rejectPod), and a Warning event with the reason
and the message.

Extended resources the node does not have are not checked (removeMissingExtendedResources), as
in kube; static pods (kubernetes.io/config.source other than "api") skip the taint check.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from schedmesh.api.resources import Resource, is_extended_resource_name
from schedmesh.api.types import NO_EXECUTE, Pod
from schedmesh.cache.node_info import NodeInfo
from schedmesh.eviction.node_pressure import CONFIG_SOURCE_ANNOTATION, AdmitResult, EvictionManager
from schedmesh.plugins.node_affinity.matcher import required_node_affinity
from schedmesh.plugins.node_name.plugin import ERR_REASON as NODE_NAME_REASON, fits as node_name_fits
from schedmesh.plugins.node_ports.plugin import ERR_REASON as NODE_PORTS_REASON, fits as node_ports_fits
from schedmesh.plugins.node_resources.fit import fits_request
from schedmesh.plugins.node_resources.requests import fit_request
from schedmesh.plugins.taint_toleration.tolerations import find_matching_untolerated_taint

OS_LABEL = "kubernetes.io/os"
NODE_OS = "linux"  # the simulated kubelet's runtime.GOOS

POD_OS_SELECTOR_MISMATCH = "PodOSSelectorNodeLabelDoesNotMatch"
OUT_OF_PREFIX = "OutOf"  # OutOfcpu, OutOfmemory, OutOfephemeral-storage, OutOfpods, OutOf<extended resource>
REJECTED_PREFIX = "Pod was rejected: "

# Predicate names and reasons the kubelet reports (PredicateFailureError): "Predicate NAME failed: REASON".
NODE_AFFINITY, NODE_AFFINITY_REASON = "NodeAffinity", "node(s) didn't match Pod's node affinity/selector"
NODE_NAME, NODE_PORTS = "NodeName", "NodePorts"
TAINT_TOLERATION, TAINT_TOLERATION_REASON = "TaintToleration", "node(s) had taints that the pod didn't tolerate"


def _without_missing_extended(request: Resource, node_info: NodeInfo) -> Resource:
    """removeMissingExtendedResources: extended resources the node does not advertise are not
    the kubelet's to check (cluster-level resources)."""
    missing = [n for n in request.scalar if is_extended_resource_name(n) and n not in node_info.allocatable.scalar]
    if not missing:
        return request
    return dataclasses.replace(request, scalar={n: q for n, q in request.scalar.items() if n not in missing})


def _is_static(pod: Pod) -> bool:
    source = pod.meta.annotations.get(CONFIG_SOURCE_ANNOTATION)
    return source is not None and source != "api"


def predicate_admit(pod: Pod, node_info: NodeInfo) -> AdmitResult:
    """predicateAdmitHandler.Admit: `node_info` holds the node and the pods already admitted."""
    node = node_info.node
    if node is None:
        return AdmitResult(False, "InvalidNodeInfo", "Kubelet cannot get node info.")
    pod_os = pod.meta.labels.get(OS_LABEL)
    if pod_os is not None and pod_os != NODE_OS:
        return AdmitResult(False, POD_OS_SELECTOR_MISMATCH,
                           "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label")
    reasons: list[tuple[str, str]] = []  # (reason, message), kube's order
    for r in fits_request(_without_missing_extended(fit_request(pod), node_info), node_info):
        reasons.append((OUT_OF_PREFIX + r.resource_name,
                        f"Node didn't have enough resource: {r.resource_name}, requested: {r.requested}, "
                        f"used: {r.used}, capacity: {r.capacity}"))
    if not required_node_affinity(pod).match(node):
        reasons.append((NODE_AFFINITY, f"Predicate {NODE_AFFINITY} failed: {NODE_AFFINITY_REASON}"))
    if not node_name_fits(pod, node_info):
        reasons.append((NODE_NAME, f"Predicate {NODE_NAME} failed: {NODE_NAME_REASON}"))
    if not node_ports_fits(pod, node_info):
        reasons.append((NODE_PORTS, f"Predicate {NODE_PORTS} failed: {NODE_PORTS_REASON}"))
    if not _is_static(pod) and find_matching_untolerated_taint(node.taints, pod.tolerations,
                                                                lambda t: t.effect == NO_EXECUTE) is not None:
        reasons.append((TAINT_TOLERATION, f"Predicate {TAINT_TOLERATION} failed: {TAINT_TOLERATION_REASON}"))
    if reasons:
        return AdmitResult(False, *reasons[0])  # the kubelet reports the first failure only
    return AdmitResult(True)


def admit(pod: Pod, node_info: NodeInfo, eviction: Optional[EvictionManager] = None) -> AdmitResult:
    """canAdmitPod: the eviction admit handler, then the predicate admit handler."""
    if eviction is not None:
        verdict = eviction.admit(pod)
        if not verdict.admit:
            return verdict
    return predicate_admit(pod, node_info)


def rejection_message(verdict: AdmitResult) -> str:
    """status.message of a refused pod (kubelet.rejectPod)."""
    return REJECTED_PREFIX + verdict.message
