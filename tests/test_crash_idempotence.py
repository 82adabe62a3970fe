"""The rules that make re-publication after a broker restart safe, in one process: an unbound copy
of a bound pod never unbinds it in a cache (a stale re-publication), while a deletion still
deletes; the binder refuses a second binding and names the node it knows, which it announces."""
from __future__ import annotations

import dataclasses

from schedmesh.api.load import load_text
from schedmesh.mesh import records
from schedmesh.mesh.binder import BindLedger, bound_pod
from schedmesh.mesh.cluster_cache import ClusterCache

MANIFEST = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {capacity: {cpu: "4", memory: 8Gi, pods: "10"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status: {capacity: {cpu: "4", memory: 8Gi, pods: "10"}}
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec: {containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]}
"""


def feed(cache: ClusterCache, recs) -> None:
    for offset, (topic, _key, value) in enumerate(recs):
        cache.apply(topic, value, offset)


def test_an_unbound_copy_never_unbinds_a_bound_pod_but_a_deletion_deletes() -> None:
    m = load_text(MANIFEST)
    (pending,) = m.pods
    running = dataclasses.replace(bound_pod(pending, "n1"), phase="Running")
    cache = ClusterCache()
    feed(cache, [records.node_record(n) for n in m.nodes] + [records.pod_record(running)])
    assert cache.snapshot.get("n1").requested.milli_cpu == 1000
    stale = dataclasses.replace(pending, meta=dataclasses.replace(pending.meta, labels={"new": "label"}))
    feed(cache, [records.pod_record(stale)])  # e.g. a scheduler's copy from before the binding
    pod = cache.pods[pending.uid]
    assert (pod.node_name, pod.phase) == ("n1", "Running")
    assert pod.meta.labels == {"new": "label"}, "the rest of the record is taken"
    assert cache.snapshot.get("n1").requested.milli_cpu == 1000, "counted once on its node"
    assert [p.uid for p in cache.pending_pods()] == []
    feed(cache, [records.pod_record(stale, deleted=True)])
    assert pending.uid not in cache.pods and cache.snapshot.get("n1").requested.milli_cpu == 0


def test_the_binder_refuses_a_second_binding_and_names_the_first() -> None:
    m = load_text(MANIFEST)
    (pod,) = m.pods
    cache = ClusterCache()
    feed(cache, [records.node_record(n) for n in m.nodes] + [records.pod_record(bound_pod(pod, "n1"))])
    ledger = BindLedger(cache)
    again = ledger.decide(pod, "n2")
    assert not again.bound and again.bound_elsewhere == "n1"
    assert again.reason == "pod default/p is already bound to n1"
    same = ledger.decide(pod, "n1")
    assert same.bound and same.publish is None, "the same binding again is a no-op"
