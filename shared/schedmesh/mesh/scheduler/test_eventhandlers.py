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


def test_an_undecodable_event_record_is_logged_and_skipped(caplog):
    import logging
    import threading

    from schedmesh.bus import Record
    from schedmesh.mesh.scheduler.eventhandlers import EventHandlers
    from schedmesh.v1 import events_pb2

    handlers = EventHandlers()
    handlers.notes, handlers._notes_lock = {}, threading.Lock()
    with caplog.at_level(logging.WARNING, logger="schedmesh.queue_manager"):
        handlers._on_event_record(Record("schedmesh.events", 0, 41, b"k", b"\xff\xff not an event"))
    assert "cannot read event record schedmesh.events/0@41" in caplog.text and handlers.notes == {}
    good = events_pb2.Event(pod_uid="u", pod="default/p", reason="Scheduled", message="bound")
    handlers._on_event_record(Record("schedmesh.events", 0, 42, b"k", good.SerializeToString()))
    assert [e.reason for e in handlers.notes["u"].events] == ["Scheduled"]  # the reader goes on
