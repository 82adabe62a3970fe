"""AppliedStore: the journal keeps the last record per object, forgets deleted ones, survives a
torn last line, and compacts to what is live."""
from __future__ import annotations

from schedmesh.api.load import load_text
from schedmesh.mesh import records
from schedmesh.mesh.applied_store import AppliedStore
from schedmesh.mesh.cluster_cache import TOPIC_PODS, TOPIC_PRIORITY_CLASSES
from schedmesh.v1 import events_pb2

MANIFEST = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: v1
kind: Pod
metadata: {name: a}
spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b}
spec: {containers: [{name: c, image: x}]}
"""


def pod_names(store: AppliedStore) -> list[str]:
    return sorted(events_pb2.PodRecord.FromString(v).pod.metadata.name for t, _k, v in store.records() if t == TOPIC_PODS)


def test_journal_keeps_last_versions_and_forgets_deletions(tmp_path) -> None:
    m = load_text(MANIFEST)
    store = AppliedStore(tmp_path)
    store.write(records.manifest_records(m))  # pods as one batch record: stored one per pod
    assert pod_names(store) == ["a", "b"]
    assert [t for t, _k, _v in store.records()][0] == TOPIC_PRIORITY_CLASSES, "classes before the pods using them"
    a, b = m.pods
    a.meta.labels["v"] = "2"
    store.write([records.pod_record(a)])
    store.write([records.pod_record(b, deleted=True)])
    assert pod_names(store) == ["a"]
    (stored_a,) = [events_pb2.PodRecord.FromString(v) for t, _k, v in store.records() if t == TOPIC_PODS]
    assert stored_a.pod.metadata.labels["v"] == "2"
    store.forget(TOPIC_PODS, [a.uid])
    assert pod_names(AppliedStore(tmp_path)) == [], "a new reader sees the same state"


def test_torn_last_line_is_skipped_and_compaction_keeps_what_is_live(tmp_path) -> None:
    m = load_text(MANIFEST)
    store = AppliedStore(tmp_path)
    store.write(records.manifest_records(m))
    store.write([records.pod_record(m.pods[1], deleted=True)])
    with open(store.path, "a") as f:
        f.write('{"topic": "schedmesh.pods", "key": "x", "val')  # a crash while writing
    assert pod_names(store) == ["a"]
    lines_before = store.path.read_text().count("\n")
    store.compact()
    assert store.path.read_text().count("\n") == 2 < lines_before  # the class and pod a
    assert pod_names(AppliedStore(tmp_path)) == ["a"]


def test_a_batch_is_journalled_as_published_and_read_per_object(tmp_path) -> None:
    """One line per batch record (nothing decoded on the Apply path), one entry per pod when
    read: a later line for one pod replaces or deletes that pod only; deltas are not kept."""
    m = load_text(MANIFEST)
    a, b = m.pods
    store = AppliedStore(tmp_path)
    batch = records.pod_batch_records([records.pod_message(a), records.pod_message(b),
                                       records.binding_update(b, "n1")], source="qm")
    assert len(batch) == 1 and batch[0][1].startswith("batch/")
    store.write(batch)
    assert store.path.read_text().count("\n") == 1
    assert pod_names(store) == ["a", "b"]
    assert all(not events_pb2.PodRecord.FromString(v).HasField("update") for _t, _k, v in store.records())
    store.write(records.pod_batch_records([records.pod_message(a, deleted=True), records.pod_message(b)], source="qm"))
    assert pod_names(store) == ["b"]
    with open(store.path, "a") as f:  # a batch line whose record cannot be read
        f.write('{"topic": "schedmesh.pods", "key": "batch/qm", "value": "AAAA"}\n')
    assert pod_names(store) == ["b"]
    store.compact()
    assert store.path.read_text().count("\n") == 1 and pod_names(AppliedStore(tmp_path)) == ["b"]


def test_a_workload_s_controller_is_journalled_and_comes_back(tmp_path) -> None:
    """The selector of an applied Deployment's ReplicaSet is kept with what was applied (the
    queue-manager's store, restored at `up --restore`): replayed, a cache has it again."""
    from schedmesh.mesh.cluster_cache import ClusterCache
    m = load_text("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c}]}
""")
    store = AppliedStore(tmp_path)
    store.write(records.manifest_records(m, source="qm"))
    replayed = ClusterCache()
    for offset, (topic, _key, value) in enumerate(store.records()):
        replayed.apply(topic, value, offset)
    assert list(replayed.workloads.values()) == m.workloads and len(replayed.pods) == 1
