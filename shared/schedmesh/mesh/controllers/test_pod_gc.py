"""The pod garbage collector's orphaned pods: a node deleted for QUARANTINE_SECONDS has its pods
marked Failed (DisruptionTarget: DeletionByPodGC) and deleted at once; a node applied again in
time keeps them; pods that ended are left alone."""
from __future__ import annotations

import dataclasses

from schedmesh.eviction.testkit import T0, node, pod
from schedmesh.mesh.controllers.pod_gc import QUARANTINE_SECONDS, PodGCController
from schedmesh.mesh.controllers.testkit import FedCache
from schedmesh.mesh.records import expand, node_record
from schedmesh.v1 import events_pb2


def bound(name: str, node_name: str, phase: str = "Running"):
    return dataclasses.replace(pod(name, phase=phase), node_name=node_name)


def records_of(recs) -> list[events_pb2.PodRecord]:
    return [r for _t, _k, v in recs for r in expand(events_pb2.PodRecord.FromString(v))]


def setup():
    fed = FedCache()
    fed.add(node("n1"), node("n2"), bound("a", "n1"), bound("b", "n1"), bound("done", "n1", phase="Succeeded"),
            bound("c", "n2"))
    return fed, PodGCController(fed.cache, "cm")


def test_the_pods_of_a_node_gone_for_the_quarantine_are_failed_and_deleted():
    fed, gc = setup()
    assert gc.sync(T0) == []
    fed.apply([node_record(node("n1"), deleted=True)])
    assert gc.sync(T0 + 1) == []  # the quarantine starts
    assert gc.sync(T0 + QUARANTINE_SECONDS) == []
    sent = gc.sync(T0 + 1 + QUARANTINE_SECONDS)
    recs = records_of(sent)
    failed = {r.update.uid: r.update for r in recs if r.HasField("update")}
    deleted = [r.pod.metadata.name for r in recs if r.deleted]
    assert sorted(deleted) == ["a", "b"] and set(failed) == {"uid-a", "uid-b"}
    assert all(u.phase == "Failed" and [(c.type, c.reason, c.message) for c in u.conditions
                                        if c.type == "DisruptionTarget"]
               == [("DisruptionTarget", "DeletionByPodGC", "PodGC: node no longer exists")] for u in failed.values())
    assert gc.sync(T0 + 2 + QUARANTINE_SECONDS) == []  # on their way back: not sent twice
    fed.apply(sent)  # read back from the broker
    assert gc.sync(T0 + 3 + QUARANTINE_SECONDS) == [] and gc.gone_since == {}
    assert sorted(fed.cache.pods) == ["uid-c", "uid-done"]


def test_a_node_applied_again_within_the_quarantine_keeps_its_pods():
    fed, gc = setup()
    fed.apply([node_record(node("n1"), deleted=True)])
    assert gc.sync(T0) == []
    fed.apply([node_record(node("n1"))])
    assert gc.sync(T0 + 2 * QUARANTINE_SECONDS) == [] and gc.gone_since == {}


def test_pods_bound_to_a_node_gone_before_the_controller_started_are_collected():
    fed = FedCache()
    fed.add(node("n2"), bound("a", "n1"), bound("c", "n2"))
    gc = PodGCController(fed.cache, "cm")
    assert gc.sync(T0) == []
    assert [r.pod.metadata.name for r in records_of(gc.sync(T0 + QUARANTINE_SECONDS)) if r.deleted] == ["a"]


def test_a_deletion_not_seen_back_is_sent_again_after_the_expectations_timeout():
    """The deletion's record lost with a memory broker that restarted: the orphan is deleted again
    once EXPECTATIONS_TIMEOUT has passed, not before (and the node stays watched meanwhile)."""
    from schedmesh.mesh.controllers.podcontrol import EXPECTATIONS_TIMEOUT
    fed = FedCache()
    fed.add(node("n1"), bound("a", "n1"))
    gc = PodGCController(fed.cache, "cm")
    fed.apply([node_record(node("n1"), deleted=True)])
    gc.sync(T0)
    lost = gc.sync(T0 + QUARANTINE_SECONDS)  # never applied to the cache
    assert [r.pod.metadata.name for r in records_of(lost) if r.deleted] == ["a"]
    assert gc.sync(T0 + QUARANTINE_SECONDS + EXPECTATIONS_TIMEOUT - 1) == []
    again = gc.sync(T0 + QUARANTINE_SECONDS + EXPECTATIONS_TIMEOUT)
    assert [r.pod.metadata.name for r in records_of(again) if r.deleted] == ["a"]
    fed.apply(again)
    assert "uid-a" not in fed.cache.pods and gc.sync(T0 + QUARANTINE_SECONDS + 3 * EXPECTATIONS_TIMEOUT) == []
