"""A failed attempt's status write (kube's updatePod): FailedScheduling, and PodScheduled=False
with the nomination as a patch of the pod, never the scheduler's whole copy of it."""
from __future__ import annotations

import threading
from types import SimpleNamespace

from schedmesh.api.types import ObjectMeta, Pod, PodCondition
from schedmesh.bus.topics import EVENTS, PODS
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.scheduler.schedule_one import ScheduleOne
from schedmesh.queue.nominator import NominatingInfo, NominatingMode
from schedmesh.v1 import events_pb2


class Harness(ScheduleOne):
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.cfg = SimpleNamespace(client_id="qm")
        self._notes_lock = threading.Lock()
        self.notes = {}
        self.published: list[tuple[str, str, bytes]] = []

    def _publish_sync(self, recs, timeout=15.0) -> None:
        self.published += recs

    def _event_record(self, pod, type_, reason, message, trace_id=""):
        return EVENTS, pod.uid, reason.encode()


def _pod_items(published) -> list[events_pb2.PodRecord]:
    return [item for topic, _key, value in published if topic == PODS
            for item in records.expand(events_pb2.PodRecord.FromString(value))]


def test_the_status_is_a_patch_written_once_per_change():
    cache = ClusterCache()
    pod = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1", labels={"app": "a"}))
    cache.apply(*records.pod_record(pod)[::2], 0)
    h = Harness(cache)
    h._publish_failed(pod, "0/3 nodes are available.", "t1", NominatingInfo("n1"))
    items = _pod_items(h.published)
    assert len(items) == 1 and items[0].HasField("update"), "the whole pod was published"
    assert items[0].update.pod_scheduled.message == "0/3 nodes are available."
    assert items[0].update.nominated_node_name == "n1"
    cache.apply(*h.published[1][::2], 1)
    assert cache.pods["u1"].conditions == [PodCondition("PodScheduled", "False", "Unschedulable",
                                                        "0/3 nodes are available.")]

    h.published.clear()  # the same failure again, the nomination kept (NOOP) or the same: the event alone
    h._publish_failed(pod, "0/3 nodes are available.", "t2", NominatingInfo("", NominatingMode.NOOP))
    h._publish_failed(pod, "0/3 nodes are available.", "t3", NominatingInfo("n1"))
    assert _pod_items(h.published) == [] and len(h.published) == 2


def test_a_pod_deleted_before_the_patch_lands_stays_deleted():
    cache = ClusterCache()
    pod = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1"))
    cache.apply(*records.pod_record(pod)[::2], 0)
    h = Harness(cache)
    h._publish_failed(pod, "0/3 nodes are available.", "t1")
    cache.apply(*records.pod_record(pod, deleted=True)[::2], 1)  # the Delete's tombstone lands first
    for offset, (topic, _key, value) in enumerate(h.published, start=2):
        if topic == PODS:
            cache.apply(topic, value, offset)
    assert cache.pods == {}
