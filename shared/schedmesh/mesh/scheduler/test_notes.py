"""Notes about pods (events, last FailedScheduling message, trace id) are shown only about live
pods; those about pods gone are dropped, at their deletion or, for events that came after it,
once their last event is older than kube's event TTL."""
from __future__ import annotations

import threading

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.scheduler.eventhandlers import EventHandlers
from schedmesh.mesh.scheduler.state import NOTES_TTL_SECONDS, PodNotes
from schedmesh.v1 import events_pb2


class Handlers(EventHandlers):
    """Just what the notes need."""

    def __init__(self) -> None:
        self.cache = ClusterCache()
        self.notes: dict[str, PodNotes] = {}
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


def test_a_deleted_pods_notes_go_with_it_an_ended_pods_stay() -> None:
    """An ended pod (Failed: evicted, say) stays listed, as does its Evicted event; the cache
    tells listeners it is gone from the snapshot just as for a deletion."""
    h = Handlers()
    pod = Pod(ObjectMeta(name="p", namespace="default", uid="u-p"))
    ended = Pod(ObjectMeta(name="e", namespace="default", uid="u-e"), phase="Failed")
    h.cache.pods["u-e"] = ended
    h.notes = {"u-p": _notes(1.0), "u-e": _notes(1.0)}
    h._on_pod(pod, None)
    h._on_pod(Pod(ObjectMeta(name="e", namespace="default", uid="u-e")), None)
    assert list(h.notes) == ["u-e"]
