"""kube-apiserver's RuntimeClass admission plugin (plugin/pkg/admission/runtimeclass, v1.35) for
the pods `apply` creates: the RuntimeClass named by spec.runtimeClassName must exist; its
overhead.podFixed becomes the pod's spec.overhead (a different overhead written in the pod is
refused, and so is an overhead no class defines); its scheduling.nodeSelector is merged into
spec.nodeSelector (a key with another value is refused) and its tolerations into spec.tolerations.
Refusals carry kube's words.

kube runs the plugin on create only: an update keeps what admission set when the pod was made.
`admit_runtime_class(..., live=...)` gives an update that result for an unchanged manifest (which
never sets what admission adds) so a re-apply is "unchanged"."""
from __future__ import annotations

from typing import Mapping, Optional

from schedmesh.api.load import AdmissionError
from schedmesh.api.types import Pod, RuntimeClass, Toleration


def _forbidden(pod: Pod, path: str, reason: str) -> AdmissionError:
    """admission.NewForbidden's text: `pods "NAME" is forbidden: REASON`."""
    return AdmissionError(f"Pod {pod.key}", path, f'pods "{pod.name}" is forbidden: {reason}')


def merge_tolerations(pod_tolerations: list[Toleration], class_tolerations: list[Toleration]) -> list[Toleration]:
    """kube's tolerations.MergeTolerations(pod's, class's): the class's tolerations, then the pod's
    whose key and effect no class toleration has. Like kube it keys the pod's by key and effect,
    so of two pod tolerations with the same key and effect only the last is kept. (kube appends
    the pod's in Go map order, i.e. at random; here in the pod's order.)"""
    taken = {(t.key, t.effect) for t in class_tolerations}
    pods: dict[tuple[str, str], Toleration] = {}
    for t in pod_tolerations:
        pods[(t.key, t.effect)] = t
    return list(class_tolerations) + [t for k, t in pods.items() if k not in taken]


def _set_scheduling(pod: Pod, rc: RuntimeClass) -> None:
    if rc.scheduling is None:
        return
    selector = dict(pod.node_selector)
    for key, value in rc.scheduling.node_selector.items():
        if key in selector and selector[key] != value:
            raise _forbidden(pod, "spec.nodeSelector",
                             f"conflict: runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                             f"pod.spec.nodeSelector[{key}] = {selector[key]}")
        selector[key] = value
    pod.node_selector = selector
    pod.tolerations = merge_tolerations(pod.tolerations, rc.scheduling.tolerations)


def admit_runtime_class(pod: Pod, classes: Mapping[str, RuntimeClass], *, live: Optional[Pod] = None,
                        refuse_unknown: bool = True) -> list[str]:
    """Admit `pod` (changed in place) against the RuntimeClasses by name; `live` is the pod it
    updates, if any. Raises AdmissionError with kube's message; returns warnings.

    refuse_unknown=False admits a pod naming a class that does not exist as written, with a
    warning: recorded scenarios carry spec.overhead with a runtimeClassName and no class."""
    if live is not None:
        # An update: spec.overhead is immutable and admission does not run again in kube, so the
        # manifest's missing overhead means the pod's own; the class's scheduling is merged again,
        # which is what admission merged at creation while the class is unchanged.
        if not pod.overhead:
            pod.overhead = dict(live.overhead)
        rc = classes.get(pod.runtime_class_name) if pod.runtime_class_name else None
        if rc is not None:
            _set_scheduling(pod, rc)
        return []
    rc = None
    if pod.runtime_class_name:
        rc = classes.get(pod.runtime_class_name)
        if rc is None:
            reason = f'pod rejected: RuntimeClass "{pod.runtime_class_name}" not found'
            if refuse_unknown:
                raise _forbidden(pod, "spec.runtimeClassName", reason)
            return [f"pod/{pod.key}: spec.runtimeClassName: {reason} (a Kubernetes API server refuses the pod; "
                    "accepted here as written, --strict-admission refuses it)"]
    # Admit (mutating), then Validate, as the plugin's two phases run.
    if rc is not None and rc.overhead is not None:
        if pod.overhead and pod.overhead != rc.overhead:
            raise _forbidden(pod, "spec.overhead",
                             "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
        pod.overhead = dict(rc.overhead)
    if rc is not None:
        _set_scheduling(pod, rc)
    if pod.overhead and (rc is None or rc.overhead is None):
        raise _forbidden(pod, "spec.overhead",
                         "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead")
    return []
