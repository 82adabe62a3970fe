"""Terminal pods in the cluster cache: listed until deleted (kube keeps an evicted pod), but gone
from the snapshot and, for listeners, deleted (kube-scheduler's informer never sees them). Also the
name index, offsets waited for, and the pod controllers' selectors the cache keeps."""
from __future__ import annotations

import dataclasses

import pytest

from schedmesh.api.labels import LabelSelector
from schedmesh.api.types import Container, Node, ObjectMeta, Pod, PodDisruptionBudget, WorkloadSelector
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.plugins.pod_topology_spread import NotFound, WorkloadSelectorSources


def _apply(cache: ClusterCache, rec, offsets=[0]) -> None:  # noqa: B006 - a running offset is the point
    topic, _key, value = rec
    cache.apply(topic, value, offsets[0])
    offsets[0] += 1


def _pod(name: str, node: str = "n1") -> Pod:
    return Pod(meta=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"), node_name=node,
               containers=[Container("c", requests={"cpu": 1})], phase="Running")


def test_a_failed_pod_stays_listed_but_leaves_its_node():
    cache = ClusterCache()
    seen = []
    cache.listeners.append(lambda kind, old, new: seen.append((kind, old and old.name, new and new.name)))
    _apply(cache, records.node_record(Node(meta=ObjectMeta(name="n1"), allocatable={"cpu": 4, "pods": 10})))
    _apply(cache, records.pod_record(_pod("a")))
    _apply(cache, records.pod_record(_pod("b")))
    assert cache.snapshot.get("n1").requested.milli_cpu == 2000
    evicted = dataclasses.replace(_pod("a"), phase="Failed", status_reason="Evicted",
                                  status_message="The node was low on resource: memory. ")
    _apply(cache, records.pod_batch_record([records.status_update(evicted, "agent")], "agent"))
    ni = cache.snapshot.get("n1")
    assert ni.requested.milli_cpu == 1000 and [p.pod.name for p in ni.pods] == ["b"]
    listed = cache.pods["uid-a"]
    assert (listed.phase, listed.status_reason, listed.node_name) == ("Failed", "Evicted", "n1")
    assert cache.get_pod("default", "a") is listed
    assert cache.pending_pods() == []
    assert seen[-1] == ("pod", "a", None)  # to scheduling, it is deleted
    # a later delta (a deletion request) applies to the listed pod without bringing it back
    _apply(cache, records.pod_batch_record([records.deletion_update(listed, 5.0, "cli")], "cli"))
    assert cache.pods["uid-a"].meta.deletion_timestamp == 5.0 and cache.snapshot.get("n1").requested.milli_cpu == 1000
    n_events = len(seen)
    _apply(cache, records.pod_record(cache.pods["uid-a"], deleted=True, source="agent"))
    assert "uid-a" not in cache.pods and len(seen) == n_events  # listeners already saw it go


def test_waiting_for_offsets_not_read_wakes_the_followers():
    """A dozing CacheFollower fetches at once for a waiter (a BindBatch refusing a binding, the
    preemption service's and the shards' views) instead of at its next poll."""
    cache = ClusterCache()
    woken = []
    cache.wakers.append(lambda now: woken.append("woken" if now else "woken, paced"))
    _apply(cache, records.node_record(Node(meta=ObjectMeta(name="n1"), allocatable={"cpu": 4, "pods": 10})))
    (key, read), = cache.view_offsets().items()
    assert cache.wait_for({key: read}, timeout=0) and woken == []  # read already: nobody to wake
    assert not cache.wait_for({key: read + 1}, timeout=0.01)
    assert woken == ["woken"]
    cache.expect_records()  # another process answered that it published records
    cache.expect_records(now=False)  # ... records nobody waits for
    assert woken == ["woken", "woken", "woken, paced"]


def test_get_pod_finds_a_name_through_its_index_and_prefers_the_live_pod():
    """Apply looks its pods up by name (scanning every pod made a 10-pod Apply cost as much as
    scheduling them); an ended pod and its live successor share the name."""
    cache = ClusterCache()
    _apply(cache, records.node_record(Node(meta=ObjectMeta(name="n1"), allocatable={"cpu": 4, "pods": 10})))
    ended = dataclasses.replace(_pod("web"), phase="Failed")
    _apply(cache, records.pod_record(ended))
    assert cache.get_pod("default", "web") is cache.pods["uid-web"]
    successor = dataclasses.replace(_pod("web"), meta=ObjectMeta(name="web", namespace="default", uid="uid-web-2"))
    _apply(cache, records.pod_record(successor))
    assert cache.get_pod("default", "web").uid == "uid-web-2"
    assert cache.get_pod("other", "web") is None and cache.get_pod("default", "db") is None
    _apply(cache, records.pod_record(cache.pods["uid-web-2"], deleted=True))
    assert cache.get_pod("default", "web").uid == "uid-web"
    _apply(cache, records.pod_record(cache.pods["uid-web"], deleted=True))
    assert cache.get_pod("default", "web") is None and cache._uids_by_name == {}


def test_workload_selectors_ride_the_pdb_topic_and_answer_the_spread_defaults():
    """A pod controller's selector (records.workload_record) is kept by (kind, namespace, name),
    beside the PDBs that share its topic, and dropped when deleted; the sources the mesh's
    PodTopologySpread reads see it at once."""
    cache = ClusterCache()
    sources = WorkloadSelectorSources(cache.workloads)
    rs = WorkloadSelector("ReplicaSet", "shop", "web-5d4f",
                          LabelSelector.of({"app": "web", "pod-template-hash": "5d4f"}))
    pdb = PodDisruptionBudget(ObjectMeta(name="web", namespace="shop"), LabelSelector.of({"app": "web"}), "1")
    for offset, (topic, key, value) in enumerate([records.workload_record(rs), records.pdb_record(pdb)]):
        cache.apply(topic, value, offset)
    assert records.workload_key(rs) == "workload/ReplicaSet/shop/web-5d4f"
    assert cache.workloads == {("ReplicaSet", "shop", "web-5d4f"): rs} and list(cache.pdbs) == ["shop/web"]
    assert sources.replica_set("shop", "web-5d4f") == rs.selector and list(sources.services("shop")) == []
    with pytest.raises(NotFound):
        sources.stateful_set("shop", "web-5d4f")
    topic, _key, value = records.workload_record(rs, deleted=True)
    cache.apply(topic, value, 2)
    assert cache.workloads == {} and list(cache.pdbs) == ["shop/web"] and cache.offsets[f"{topic}/0"] == 3
    with pytest.raises(NotFound):
        sources.replica_set("shop", "web-5d4f")


def test_a_service_deleted_stops_selecting_in_its_namespace():
    """WorkloadSelectors keeps the Services by namespace too; a deletion leaves that index too."""
    cache = ClusterCache()
    sources = WorkloadSelectorSources(cache.workloads)
    svc = WorkloadSelector("Service", "shop", "web", LabelSelector.of({"app": "web"}))
    for offset, deleted in enumerate((False, True)):
        topic, _key, value = records.workload_record(svc, deleted=deleted)
        cache.apply(topic, value, offset)
        assert list(sources.services("shop")) == ([] if deleted else [{"app": "web"}])
    assert list(sources.services("other")) == [] and not cache.workloads


def _requested(cache: ClusterCache, node: str) -> int:
    return cache.snapshot.get(node).requested.milli_cpu


@pytest.mark.parametrize("then, after, forgotten", [
    # (what the topic says next about the assumed pod, n1's milli-cpu after it, and after a forget)
    pytest.param("bound", 1000, 1000, id="bound-the-binding-replaces-the-assumption"),
    pytest.param("deleted", 0, 0, id="deleted-before-its-binding-frees-the-room"),
    pytest.param("updated-unbound", 1000, 0, id="an-unbound-update-keeps-the-assumption"),
    pytest.param("failed", 0, 0, id="ended-unbound-frees-the-room"),
])
def test_assume_and_forget_are_the_caches(then: str, after: int, forgotten: int):
    """kube's AssumePod/ForgetPod on the cache: an assumed pod counts on its node until its
    binding replaces it, its deletion or end frees the room, or its binding fails (forget)."""
    cache = ClusterCache()
    _apply(cache, records.node_record(Node(meta=ObjectMeta(name="n1"), allocatable={"cpu": 4, "pods": 10})))
    pending = _pod("a", node="")
    pending = dataclasses.replace(pending, phase="Pending")
    _apply(cache, records.pod_record(pending))
    assert _requested(cache, "n1") == 0
    cache.assume("qm", pending, "n1")
    assert _requested(cache, "n1") == 1000
    if then == "bound":
        _apply(cache, records.pod_record(dataclasses.replace(pending, node_name="n1", phase="Running")))
    elif then == "deleted":
        _apply(cache, records.pod_record(pending, deleted=True))
    elif then == "updated-unbound":
        _apply(cache, records.pod_record(dataclasses.replace(pending, nominated_node_name="n1")))
    else:
        _apply(cache, records.pod_record(dataclasses.replace(pending, phase="Failed")))
    assert _requested(cache, "n1") == after
    cache.forget("qm", "uid-a")
    assert _requested(cache, "n1") == forgotten
    cache.forget("qm", "uid-a")  # forgetting twice changes nothing
    assert _requested(cache, "n1") == forgotten


def test_daemon_sets_are_kept_beside_the_pdbs_and_dropped_when_deleted():
    """A DaemonSet rides the PDBs' topic (records.daemon_set_record) and comes back whole, its
    template's unset priority still unset (Priority admission runs when its pods are made)."""
    from schedmesh.api.load import load_text
    (ds,) = load_text("""
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: infra}
spec:
  selector: {matchLabels: {app: agent}}
  updateStrategy: {rollingUpdate: {maxUnavailable: 20%}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: c, image: agent}]}
""").daemon_sets
    cache = ClusterCache()
    _apply(cache, records.daemon_set_record(ds))
    _apply(cache, records.pdb_record(PodDisruptionBudget(ObjectMeta("agent", "infra"), LabelSelector.of({"a": "b"}))))
    kept = cache.daemon_sets["infra/agent"]
    assert (kept.template_hash, kept.max_unavailable, kept.selector, kept.template.priority) == (
        ds.template_hash, "20%", ds.selector, None)
    assert list(cache.pdbs) == ["infra/agent"]  # a PDB of the same name is its own object
    _apply(cache, records.daemon_set_record(ds, deleted=True))
    assert cache.daemon_sets == {} and list(cache.pdbs) == ["infra/agent"]


def test_limit_ranges_are_kept_beside_the_pdbs_and_dropped_when_deleted():
    """A LimitRange rides the PDBs' topic (records.limit_range_record) and comes back as read."""
    from schedmesh.api.load import load_text
    (lr,) = load_text("""
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: shop}
spec:
  limits:
  - {type: Container, max: {cpu: "2", memory: 1Gi}, min: {cpu: 100m}}
  - {type: Pod, maxLimitRequestRatio: {cpu: "4"}}
""").limit_ranges
    cache = ClusterCache()
    _apply(cache, records.limit_range_record(lr))
    assert cache.limit_ranges == {"shop/defaults": lr} and cache.pdbs == {}
    _apply(cache, records.limit_range_record(lr, deleted=True))
    assert cache.limit_ranges == {}


def test_deleted_uids_are_remembered_until_the_pod_is_created_again():
    """`was_deleted`: a tombstone's uid, until a whole record of that uid comes after it (the pod
    created again); only the latest `remember_deletions` of them, and none unless asked."""
    off = ClusterCache()
    _apply(off, records.pod_record(_pod("a", node=""), deleted=True))
    assert not off.was_deleted("uid-a")
    cache = ClusterCache(remember_deletions=2)
    _apply(cache, records.pod_record(_pod("a", node="")))
    assert not cache.was_deleted("uid-a")
    _apply(cache, records.pod_record(_pod("a", node=""), deleted=True))
    assert cache.was_deleted("uid-a") and "uid-a" not in cache.pods
    _apply(cache, records.pod_batch_record([records.deletion_update(_pod("a"), 1.0, "x")], "x"))  # a late delta
    assert cache.was_deleted("uid-a")
    _apply(cache, records.pod_record(_pod("a", node="")))
    assert not cache.was_deleted("uid-a")
    for name in ("b", "c", "d"):
        _apply(cache, records.pod_record(_pod(name, node=""), deleted=True))
    assert [cache.was_deleted(f"uid-{n}") for n in "bcd"] == [False, True, True]


def test_a_pod_read_from_its_record_is_kept_as_the_record_encoded_it():
    """encoded_pod: the very object a record was read into (decoded, or this process's own
    expected copy) has the record's bytes; a copy made since (a binding applied) has none."""
    from schedmesh.api import convert
    from schedmesh.v1 import objects_pb2

    cache = ClusterCache(keep_encoded=2)
    pending = dataclasses.replace(_pod("a", node=""), phase="Pending")
    _apply(cache, records.pod_record(pending))
    read = cache.pods["uid-a"]
    assert objects_pb2.Pod.FromString(cache.encoded_pod(read)) == convert.pod_to_proto(pending)
    assert cache.encoded_pod(pending) is None  # an equal pod, but not the object read

    mine = dataclasses.replace(_pod("b", node=""), phase="Pending")
    cache.expect([mine])
    _apply(cache, records.pod_record(mine))
    assert cache.pods["uid-b"] is mine and cache.encoded_pod(mine) == records.pod_message(mine).pod.SerializeToString()

    topic, key, value = records.pod_batch_record([records.binding_update(read, "n1")])
    cache.apply(topic, value, 100)
    bound = cache.pods["uid-a"]
    assert bound.node_name == "n1" and cache.encoded_pod(bound) is None
    # ... but the record differs from it in its binding only: a shard's feed may carry it
    assert cache.encoded_spec(bound) == cache.encoded_spec(read) == cache.encoded_pod(read)
    assert cache.encoded_spec(dataclasses.replace(bound, priority=5)) is None  # a spec changed

    _apply(cache, records.pod_record(_pod("c")))  # a third pod: the two kept are let go
    assert cache.encoded_pod(mine) is None and cache.encoded_pod(cache.pods["uid-c"]) is not None
    assert ClusterCache().encoded_pod(mine) is None  # nothing kept unless asked
