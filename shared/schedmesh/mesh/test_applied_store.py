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
