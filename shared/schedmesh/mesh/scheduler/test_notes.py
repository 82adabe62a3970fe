"""Notes about pods (events, last FailedScheduling message, trace id): those about pods gone are
kept until their last event is older than kube's event TTL (`get events` lists a deleted pod's
events meanwhile), at most MAX_DELETED_NOTES deleted pods' worth."""
from __future__ import annotations

import collections
import threading

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.scheduler.eventhandlers import EventHandlers
from schedmesh.mesh.scheduler import eventhandlers
from schedmesh.mesh.scheduler.state import NOTES_TTL_SECONDS, PodNotes
from schedmesh.v1 import events_pb2


class Handlers(EventHandlers):
    """Just what the notes need."""

    def __init__(self) -> None:
        self.cache = ClusterCache()
        self.notes: dict[str, PodNotes] = {}
        self._deleted_notes: collections.deque[str] = collections.deque()
        self._notes_lock = threading.Lock()
        self._assumed_lock = threading.Lock()
        self.assumed: dict = {}

    def _mine(self, pod: Pod) -> bool:
        return False  # (not this queue-manager's profile: nothing to take out of its queue)


def _notes(*timestamps: float) -> PodNotes:
    return PodNotes(events=[events_pb2.Event(reason="Scheduled", timestamp=t) for t in timestamps])


def test_notes_about_pods_gone_are_dropped_after_the_event_ttl_and_live_ones_kept() -> None:
    h = Handlers()
    now = 100_000.0
    h.cache.pods["live"] = Pod(ObjectMeta(name="live", namespace="default", uid="live"))
    h.notes = {"live": _notes(now - 2 * NOTES_TTL_SECONDS),           # the cache holds it: kept
               "gone": _notes(now - NOTES_TTL_SECONDS - 1),            # deleted long ago: dropped
               "early": _notes(now - 5),                               # its record not read yet: kept
               "bare": PodNotes(message="0/3 nodes are available")}    # no event, pod gone: dropped
    assert h._prune_notes(now) == 2
    assert sorted(h.notes) == ["early", "live"]


def test_a_deleted_pods_notes_stay_for_the_ttl_and_the_oldest_go_past_the_cap(monkeypatch) -> None:
    """A deleted pod's events (its Preempted or TaintManagerEviction, say) stay for `get events`
    until the TTL prunes them; of more deleted pods than MAX_DELETED_NOTES, the oldest go at once
    (an ended pod, still listed, is not counted)."""
    monkeypatch.setattr(eventhandlers, "MAX_DELETED_NOTES", 2)
    h = Handlers()
    ended = Pod(ObjectMeta(name="e", namespace="default", uid="u-e"), phase="Failed")
    h.cache.pods["u-e"] = ended
    h.notes = {u: _notes(1.0) for u in ("u-a", "u-b", "u-c", "u-e")}
    h._on_pod(Pod(ObjectMeta(name="e", namespace="default", uid="u-e")), None)
    for u in ("u-a", "u-b"):
        h._on_pod(Pod(ObjectMeta(name=u, namespace="default", uid=u)), None)
    assert sorted(h.notes) == ["u-a", "u-b", "u-c", "u-e"]  # deleted, their events still listed
    h._on_pod(Pod(ObjectMeta(name="u-c", namespace="default", uid="u-c")), None)
    assert sorted(h.notes) == ["u-b", "u-c", "u-e"]  # the oldest deleted one past the cap
    assert h._prune_notes(1.0 + NOTES_TTL_SECONDS + 1) == 2  # the TTL: the deleted ones go
    assert list(h.notes) == ["u-e"]
