"""kube's isPodUpdated for a pending pod's update: a status report is not an update of the pod
(the queue's Update is not called for it), any change of its spec or metadata is."""
from __future__ import annotations

import dataclasses

from schedmesh.api.evolve import evolve
from schedmesh.api.types import Container, ObjectMeta, Pod, PodCondition
from schedmesh.mesh.scheduler.eventhandlers import _spec_changed


def _pod() -> Pod:
    return Pod(meta=ObjectMeta(name="p", namespace="default", uid="u", labels={"app": "a"}, resource_version="1"),
               containers=[Container("c", requests={"cpu": 1})])


def test_status_and_resource_version_are_not_an_update():
    old = _pod()
    reported = evolve(old, phase="Pending", conditions=[PodCondition("PodScheduled", "False", "Unschedulable", "0/3")],
                      status_reason="", meta=evolve(old.meta, resource_version="2"))
    assert not _spec_changed(old, reported)
    assert not _spec_changed(old, evolve(old, start_time=5.0, status_message="m"))


def test_a_spec_or_metadata_change_is_an_update():
    old = _pod()
    assert _spec_changed(old, evolve(old, meta=evolve(old.meta, labels={"app": "b"})))
    assert _spec_changed(old, evolve(old, scheduling_gates=["gate"]))
    assert _spec_changed(old, evolve(old, containers=[Container("c", requests={"cpu": 2})]))
    assert _spec_changed(old, dataclasses.replace(old, meta=dataclasses.replace(old.meta, deletion_timestamp=3.0)))
