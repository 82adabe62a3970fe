"""Pod and node deltas as the cluster cache applies them."""
import pytest

from schedmesh.api.types import Node, NodeCondition, ObjectMeta, Pod, PodCondition, Taint
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.v1 import events_pb2


def _node(name="n1", **kw) -> Node:
    return Node(meta=ObjectMeta(name=name), allocatable={"cpu": 4000}, **kw)


def _apply(cache: ClusterCache, rec, offset: int) -> None:
    topic, _key, value = rec
    cache.apply(topic, value, offset)


def test_node_update_merges_conditions_by_type_and_keeps_other_fields():
    cache = ClusterCache()
    _apply(cache, records.node_record(_node(taints=[Taint("a", "NoSchedule")],
                                            conditions=[NodeCondition("Ready", "True")])), 0)
    _apply(cache, records.node_update("n1", conditions=[NodeCondition("MemoryPressure", "True", "KubeletHasInsufficientMemory")]), 1)
    node = cache.snapshot.get("n1").node
    assert {c.type: c.status for c in node.conditions} == {"Ready": "True", "MemoryPressure": "True"}
    assert [str(t) for t in node.taints] == ["a:NoSchedule"]  # untouched by a conditions-only delta
    assert node.unschedulable is False


def test_node_update_replaces_taints_and_sets_unschedulable():
    cache = ClusterCache()
    _apply(cache, records.node_record(_node(taints=[Taint("a", "NoSchedule")])), 0)
    _apply(cache, records.node_update("n1", taints=[Taint("node.kubernetes.io/unreachable", "NoExecute", time_added=5.0)]), 1)
    _apply(cache, records.node_update("n1", unschedulable=True), 2)
    node = cache.snapshot.get("n1").node
    assert [(t.key, t.effect, t.time_added) for t in node.taints] == [("node.kubernetes.io/unreachable", "NoExecute", 5.0)]
    assert node.unschedulable is True
    _apply(cache, records.node_update("n1", taints=[], unschedulable=False), 3)
    node = cache.snapshot.get("n1").node
    assert node.taints == [] and node.unschedulable is False


def test_node_update_for_an_unknown_node_is_ignored():
    cache = ClusterCache()
    _apply(cache, records.node_update("ghost", unschedulable=True), 0)
    assert cache.snapshot.get("ghost") is None


def test_pod_deltas_nomination_deletion_and_status_reason():
    pod = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1"))
    p = records.apply_update(pod, records.nomination_update(pod, "n1").update)
    assert p.nominated_node_name == "n1"
    p = records.apply_update(p, records.nomination_update(pod, "").update)
    assert p.nominated_node_name == ""
    p = records.apply_update(p, records.deletion_update(pod, 12.5).update)
    assert p.meta.deletion_timestamp == 12.5
    p = records.apply_update(p, records.deletion_update(pod, 99.0).update)
    assert p.meta.deletion_timestamp == 12.5  # the first request's time stays, as the API server keeps it
    u = events_pb2.PodUpdate(uid="u1", phase="Failed", status_reason="Evicted", status_message="The node was low on resource: memory.")
    p = records.apply_update(p, u)
    assert (p.phase, p.status_reason, p.status_message) == ("Failed", "Evicted", "The node was low on resource: memory.")


FAILED = PodCondition("PodScheduled", "False", "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.")


@pytest.mark.parametrize("conditions, nominated, nominated_after, conditions_after", [
    ([], None, "", [FAILED]),
    # podutil.UpdatePodCondition: replaced where it stands; other conditions untouched
    ([PodCondition("DisruptionTarget", "True", "PreemptionByScheduler"),
      PodCondition("PodScheduled", "False", "Unschedulable", "older")], "n2", "n2",
     [PodCondition("DisruptionTarget", "True", "PreemptionByScheduler"), FAILED]),
    ([PodCondition("PodScheduled", "False", "Unschedulable", "older")], "", "", [FAILED]),
], ids=["first-failure", "replaced-in-place-and-nominated", "nomination-cleared"])
def test_a_failed_attempts_patch_sets_its_condition_and_nomination(conditions, nominated, nominated_after,
                                                                    conditions_after):
    pod = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1"), conditions=conditions,
              nominated_node_name="n1" if nominated == "" else "")
    p = records.apply_update(pod, records.scheduling_failure_update(pod, FAILED, nominated).update)
    assert p.conditions == conditions_after and p.nominated_node_name == nominated_after


def test_a_disruption_target_is_patched_onto_the_conditions_its_writer_has_not_read():
    """An eviction's or a preemption's DisruptionTarget, written from a copy older than the
    kubelet's Ready report: Ready (which the PDBs count) stays; a DisruptionTarget there is replaced
    where it stands."""
    copy = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1"), node_name="n1")
    target = PodCondition("DisruptionTarget", "True", "PreemptionByScheduler", "by p-high")
    delta = records.deletion_update(copy, 7.0, "preemption", target).update
    reported = Pod(meta=copy.meta, node_name="n1", phase="Running",
                   conditions=[PodCondition("PodScheduled", "True"), PodCondition("Ready", "True")])
    p = records.apply_update(reported, delta)
    assert p.conditions == [PodCondition("PodScheduled", "True"), PodCondition("Ready", "True"), target]
    assert p.meta.deletion_timestamp == 7.0 and p.phase == "Running"
    earlier = PodCondition("DisruptionTarget", "True", "EvictionByEvictionAPI", "")
    p = records.apply_update(Pod(meta=copy.meta, node_name="n1", conditions=[earlier, PodCondition("Ready", "True")]),
                             delta)
    assert p.conditions == [target, PodCondition("Ready", "True")]


def test_a_kubelet_report_keeps_a_condition_it_has_not_read():
    """The agent's Running report, from its copy taken before a preemption's DisruptionTarget
    landed: the report's conditions are merged by type, the DisruptionTarget stays."""
    copy = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1"), node_name="n1",
               conditions=[PodCondition("PodScheduled", "True")])
    target = PodCondition("DisruptionTarget", "True", "PreemptionByScheduler", "by p-high")
    marked = records.apply_update(copy, records.deletion_update(copy, 7.0, "preemption", target).update)
    report = Pod(meta=copy.meta, node_name="n1", phase="Running",
                 conditions=[PodCondition("PodScheduled", "True"), PodCondition("Ready", "True")])
    p = records.apply_update(marked, records.status_update(report, "agent").update)
    assert p.phase == "Running" and p.meta.deletion_timestamp == 7.0
    assert p.conditions == [PodCondition("PodScheduled", "True"), target, PodCondition("Ready", "True")]


def test_a_failed_attempts_patch_leaves_alone_what_landed_before_it():
    """Published from the scheduler's copy of the pod, the patch must not undo a deletion, an
    Apply's label change or a binding that reached the topic first (a whole copy did all three)."""
    cache = ClusterCache()
    pod = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1", labels={"app": "a"}))
    stale = records.scheduling_failure_update(pod, FAILED, "n1")

    _apply(cache, records.pod_record(pod), 0)
    _apply(cache, records.pod_record(pod, deleted=True), 1)
    _apply(cache, records.pod_batch_record([stale]), 2)
    assert cache.pods == {}, "a deleted pod came back"

    _apply(cache, records.pod_record(pod), 3)
    relabelled = Pod(meta=ObjectMeta(name="p", namespace="default", uid="u1", labels={"app": "b"}))
    _apply(cache, records.pod_record(relabelled), 4)
    _apply(cache, records.pod_batch_record([stale]), 5)
    p = cache.pods["u1"]
    assert p.meta.labels == {"app": "b"} and p.conditions == [FAILED] and p.nominated_node_name == "n1"

    _apply(cache, records.pod_batch_record([records.binding_update(p, "n2")]), 6)
    _apply(cache, records.pod_batch_record([stale]), 7)
    p = cache.pods["u1"]
    assert p.node_name == "n2" and [(c.type, c.status) for c in p.conditions] == [("PodScheduled", "True")]
    assert p.nominated_node_name == "n1"  # the binding does not clear it (kube's binder neither); the patch is moot


def test_node_batches_keep_order_and_stay_under_the_record_size():
    from schedmesh.mesh.records import BATCH_RECORD_BYTES, expand, node_batch_records
    labels = {f"label-{i}": "x" * 200 for i in range(20)}  # about 4.5 KB a node
    nodes = [Node(ObjectMeta(name=f"n-{i:03d}", labels=labels)) for i in range(150)]
    recs = node_batch_records(nodes, source="agent-0")
    assert len(recs) > 1 and all(len(v) <= BATCH_RECORD_BYTES + 16 for _t, _k, v in recs)
    names = [n.node.metadata.name for _t, _k, v in recs for n in expand(events_pb2.NodeRecord.FromString(v))]
    assert names == [n.name for n in nodes]
    assert node_batch_records([], source="agent-0") == []


def test_a_large_apply_is_published_in_records_the_bus_takes():
    """A Deployment of 6,000 replicas was one 3.4 MB record: aiokafka refused it (1 MB at most)."""
    from schedmesh.api.load import Manifests
    from schedmesh.api.types import Container
    from schedmesh.mesh.records import BATCH_RECORD_BYTES, manifest_records
    pods = [Pod(ObjectMeta(name=f"big-{i}", namespace="default", uid=f"uid-{i:05d}",
                           labels={"app": "big", "team": "platform-engineering"}),
                containers=[Container(name="c", image="registry.example.com/platform/app:1.2.3")])
            for i in range(6000)]
    recs = manifest_records(Manifests(nodes=[_node("n1")], pods=pods), source="queue-manager")
    assert recs[0][0] == records.TOPIC_NODES and all(t == records.TOPIC_PODS for t, _k, _v in recs[1:])
    assert len(recs) > 3 and all(len(v) <= BATCH_RECORD_BYTES for _t, _k, v in recs)
    uids = [p.pod.metadata.uid for _t, _k, v in recs[1:] for p in records.expand(events_pb2.PodRecord.FromString(v))]
    assert uids == [p.uid for p in pods]


def test_an_item_larger_than_a_batch_goes_alone():
    from schedmesh.mesh.records import in_batches
    small, big = events_pb2.Event(message="x"), events_pb2.Event(message="y" * 5000)
    runs = in_batches([small, big, small], lambda run: ("t", "k", bytes(len(run))), limit=1000)
    assert [len(v) for _t, _k, v in runs] == [1, 1, 1]
    assert [len(v) for _t, _k, v in in_batches([small] * 5, lambda run: ("t", "k", bytes(len(run))))] == [5]


def test_an_applys_pods_are_encoded_as_one_by_one_whatever_they_share():
    """Replicas sharing every field but their metadata are encoded past it once; a pod that differs
    in any one field (another object there) is encoded on its own. Every record is the message
    pod_message makes."""
    import dataclasses
    from schedmesh.api.load import Manifests
    from schedmesh.bench.workloads import make_pod

    base = make_pod("r0")
    base.meta.labels = {"app": "web"}
    pods = [dataclasses.replace(base, meta=dataclasses.replace(base.meta, name=f"r{i}", uid=f"u{i}",
                                                               labels={"app": "web", "i": str(i)}))
            for i in range(5)]
    changed = {"containers": [dataclasses.replace(base.containers[0], requests={"cpu": 3})],
               "node_name": "n1", "priority": 7, "tolerations": [], "phase": "Running",
               "conditions": [PodCondition("Ready", "True")], "scheduler_name": "other",
               "start_time": 12.5, "node_selector": {"zone": "a"}, "host_network": True}
    for i, (name, value) in enumerate(changed.items()):
        pods.append(dataclasses.replace(pods[0], meta=dataclasses.replace(base.meta, name=f"c{i}", uid=f"c{i}"),
                                        **{name: value}))
    pods.append(dataclasses.replace(pods[0], meta=dataclasses.replace(base.meta, name="last", uid="last")))
    recs = records.manifest_records(Manifests(pods=pods), source="apply", updated_pods=frozenset({"u3"}))
    got = [item for _t, _k, v in recs for item in records.expand(events_pb2.PodRecord.FromString(v))]
    want = [records.pod_message(p, source="apply", spec_update=p.uid == "u3") for p in pods]
    assert got == want
