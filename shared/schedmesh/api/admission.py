"""kube-apiserver's admission of a pod being created, as every part of schedmesh that creates
pods runs it (the queue-manager's Apply, the DaemonSet and workload controllers, explain).

The plugins run in kube's default order: all mutating phases first (LimitRanger's defaults,
Priority, DefaultTolerationSeconds, RuntimeClass), then the validating ones (LimitRanger's
limits; RuntimeClass's own check runs with its mutation, so a pod both plugins refuse is named
by RuntimeClass's message). Then the API server's own validation of the defaulted containers
(a request above its limit), which kube runs before the validating admission; the refusal is the
same either way."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from schedmesh.api import limit_range
from schedmesh.api.load import AdmissionError, admit_pod
from schedmesh.api.quantity import BINARY_SI, DECIMAL_SI, quantity_string
from schedmesh.api.resources import CPU
from schedmesh.api.runtime_class import admit_runtime_class
from schedmesh.api.types import LimitRange, Pod, PriorityClass, RuntimeClass
from schedmesh.eviction.taint_eviction import default_toleration_seconds


@dataclass(frozen=True)
class AdmissionObjects:
    """The objects admission reads: what exists in the cluster (and in the request being applied)."""

    priority_classes: Mapping[str, PriorityClass] = field(default_factory=dict)
    runtime_classes: Mapping[str, RuntimeClass] = field(default_factory=dict)
    limit_ranges: Sequence[LimitRange] = ()


def _requests_within_limits(pod: Pod) -> None:
    """ValidatePod's check of each container after defaulting: a LimitRange's default limit below
    a request the container sets makes the pod invalid, as in kube."""
    for what, containers in (("containers", pod.containers), ("initContainers", pod.init_containers)):
        for i, c in enumerate(containers):
            for k, q in c.requests.items():
                if k in c.limits and q > c.limits[k]:
                    fmt = DECIMAL_SI if k == CPU else BINARY_SI  # the values' text is not kept: kube's usual forms
                    raise AdmissionError(f"Pod {pod.key}", f"spec.{what}[{i}].resources.requests",
                                         f'Pod "{pod.name}" is invalid: Invalid value: "{quantity_string(q, fmt)}": '
                                         f"must be less than or equal to {k} limit of "
                                         f"{quantity_string(c.limits[k], fmt)}")


def admit_created_pod(pod: Pod, objects: AdmissionObjects, *, default_tolerations: bool = True,
                      runtime_class: bool = True, refuse_unknown_runtime_class: bool = True) -> list[str]:
    """Admit `pod` (changed in place) as kube-apiserver admits a pod it creates. Raises
    AdmissionError with kube's message; returns warnings.

    default_tolerations=False leaves out DefaultTolerationSeconds and runtime_class=False
    RuntimeClass: explain places recorded pods as kube-scheduler was given them, where the
    recordings never ran those two. refuse_unknown_runtime_class as for admit_runtime_class."""
    # (most namespaces have no LimitRange: then LimitRanger has nothing to do, and the manifest's
    # own requests were checked against its limits when it was read)
    ranges = limit_range.in_namespace(objects.limit_ranges, pod.namespace) if objects.limit_ranges else []
    if ranges:
        limit_range.set_default_resources(pod, ranges)
    admit_pod(pod, dict(objects.priority_classes))
    if default_tolerations:
        pod.tolerations = default_toleration_seconds(pod.tolerations)
    warnings: list[str] = []
    if runtime_class:
        warnings = admit_runtime_class(pod, objects.runtime_classes, refuse_unknown=refuse_unknown_runtime_class)
    if not ranges:
        return warnings
    _requests_within_limits(pod)
    refusal = limit_range.first_refusal(pod, ranges)
    if refusal is not None:
        path, message = refusal
        raise AdmissionError(f"Pod {pod.key}", path, f'pods "{pod.name}" is forbidden: {message}')
    return warnings
