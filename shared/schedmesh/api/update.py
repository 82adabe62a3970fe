"""Updating an existing object as the API server does on `kubectl apply`: what an update may
change (kube's ValidatePodUpdate), whether anything changed at all ("unchanged"), and the
object that results (the applied fields over what the cluster already knows: a pod's binding
and status are never taken from a manifest that does not set them)."""
from __future__ import annotations

import dataclasses
from typing import Optional

from schedmesh.api.types import Pod

# kube v1.35 pkg/apis/core/validation: updatablePodSpecFields, joined with "," as in its message.
UPDATABLE_POD_SPEC_FIELDS = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)

# Written by the scheduler, binder and kubelet, never by a manifest that leaves them out.
_POD_STATUS_FIELDS = ("phase", "nominated_node_name", "start_time", "conditions", "status_reason",
                      "status_message")
_POD_SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(Pod) if f.name not in ("meta", *_POD_STATUS_FIELDS))


def merged_pod(applied: Pod, live: Pod) -> Pod:
    """The pod after applying `applied` to `live`: the manifest's metadata labels/annotations and
    spec; the live pod's identity, binding (unless the manifest sets spec.nodeName) and status."""
    meta = dataclasses.replace(live.meta, labels=dict(applied.meta.labels),
                               annotations=dict(applied.meta.annotations))
    spec = {f: getattr(applied, f) for f in _POD_SPEC_FIELDS}
    if not applied.node_name:
        spec["node_name"] = live.node_name
    return dataclasses.replace(live, meta=meta, **spec)


def as_applied(merged: Pod, applied: Pod) -> Pod:
    """The merged pod without what the cluster added to it (binding, status): what a user applied,
    as a local store keeps it to apply again after the cluster is gone."""
    return dataclasses.replace(merged, node_name=applied.node_name,
                               **{f: getattr(applied, f) for f in _POD_STATUS_FIELDS})


def pod_changed(merged: Pod, live: Pod) -> bool:
    """kubectl's "configured" (True) or "unchanged" (False)."""
    return (merged.meta.labels != live.meta.labels or merged.meta.annotations != live.meta.annotations
            or any(getattr(merged, f) != getattr(live, f) for f in _POD_SPEC_FIELDS))


def _tolerations_only_added(new: list, old: list) -> bool:
    """validateOnlyAddedTolerations: every old toleration is still there (tolerationSeconds aside)."""
    def key(t):
        return dataclasses.replace(t, toleration_seconds=None)
    remaining = [key(t) for t in new]
    return all(key(t) in remaining for t in old)


def pod_update_error(merged: Pod, live: Pod) -> Optional[str]:
    """The API server's refusal of an update of `live` to `merged`, or None when it is allowed.

    Allowed as in kube's ValidatePodUpdate: container and init container images, additions to
    tolerations, removal of scheduling gates, terminationGracePeriodSeconds from negative to 1,
    and (pods still gated) additions to nodeSelector. Anything else is Forbidden with kube's words;
    the fields that differ follow, as kube appends its diff."""
    name = live.meta.name
    for what, new_cs, old_cs in (("containers", merged.containers, live.containers),
                                 ("initContainers", merged.init_containers, live.init_containers)):
        if len(new_cs) != len(old_cs):
            return (f'Pod "{name}" is invalid: spec.{what}: Forbidden: pod updates may not add or remove '
                    "containers")
    if not _tolerations_only_added(merged.tolerations, live.tolerations):
        return (f'Pod "{name}" is invalid: spec.tolerations: Forbidden: existing toleration can not be '
                "modified except its tolerationSeconds")
    for i, gate in enumerate(merged.scheduling_gates):
        if gate not in live.scheduling_gates:
            return (f'Pod "{name}" is invalid: spec.schedulingGates[{i}].name: Forbidden: only deletion is '
                    f"allowed, but found new scheduling gate '{gate}'")
    munged = dataclasses.replace(
        merged,
        containers=[dataclasses.replace(c, image=o.image) for c, o in zip(merged.containers, live.containers)],
        init_containers=[dataclasses.replace(c, image=o.image)
                         for c, o in zip(merged.init_containers, live.init_containers)],
        tolerations=live.tolerations, scheduling_gates=live.scheduling_gates)
    if live.termination_grace_period_seconds < 0 and merged.termination_grace_period_seconds == 1:
        munged = dataclasses.replace(munged, termination_grace_period_seconds=live.termination_grace_period_seconds)
    if live.scheduling_gates and munged.node_selector != live.node_selector:
        # gated pods: additions to nodeSelector only (validateNodeSelectorMutation)
        if any(munged.node_selector.get(k) != v for k, v in live.node_selector.items()):
            return (f'Pod "{name}" is invalid: spec.nodeSelector: Invalid value: {munged.node_selector!r}: '
                    "only additions to spec.nodeSelector are allowed (no mutations or deletions)")
        munged = dataclasses.replace(munged, node_selector=live.node_selector)
    differing = [f for f in _POD_SPEC_FIELDS if getattr(munged, f) != getattr(live, f)]
    if not differing:
        return None
    return (f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields other than '
            f"{','.join(UPDATABLE_POD_SPEC_FIELDS)} (changed: {', '.join('spec.' + _camel(f) for f in differing)})")


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w.capitalize() for w in rest)
