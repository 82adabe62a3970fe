"""The plugins' pod indexes (PodTopologySpread's label index, InterPodAffinity's groups) skip
what a binding or a kubelet's status report changes: the same pod on the same node, its
namespace, labels and terms as they were (same_but_status). Each pod's binding and Running
report used to make its node's row be read again. A change they do read (labels, a deletion,
a pod moving) still is."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from schedmesh.api.evolve import evolve
from schedmesh.api.labels import LabelSelector
from schedmesh.bench.workloads import make_node, make_pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.plugins.inter_pod_affinity import pod_index as affinity_index
from schedmesh.plugins.pod_topology_spread.pod_index import PodLabelIndex


def _snapshot():
    snap = Snapshot()
    for i in range(4):
        snap.add_node(make_node(i))
    names = [ni.name for ni in snap.node_info_list]
    pods = [make_pod(f"p{i}", labels={"app": "web" if i % 2 else "db"}, node_name=names[i % 4]) for i in range(8)]
    for p in pods:
        snap.add_pod(p)
    return snap, names, pods


def _web(index: PodLabelIndex) -> list[int]:
    return index.node_counts("default", LabelSelector(match_labels=(("app", "web"),))).tolist()


@pytest.fixture
def spread_reads(monkeypatch):
    rows = []
    real = PodLabelIndex._reindex_row
    monkeypatch.setattr(PodLabelIndex, "_reindex_row", lambda self, row, ni: (rows.append(row), real(self, row, ni)))
    return rows


def test_pod_topology_spread_index_skips_bindings_and_status_reports(spread_reads):
    snap, names, pods = _snapshot()
    index = PodLabelIndex().refresh(snap)
    before = _web(index)
    spread_reads.clear()
    # an assumed copy confirmed by its binding, then the kubelet's Running report
    assumed = replace(pods[1], node_name="")
    snap.remove_pod(pods[1])
    snap.add_pod(assumed, names[1])
    index.refresh(snap)
    assert spread_reads == [1]  # assuming it is a change (it left and came back)
    spread_reads.clear()
    snap.add_pod(pods[1])  # bound: spec.nodeName set
    snap.add_pod(evolve(pods[1], phase="Running", start_time=1.0))
    index.refresh(snap)
    assert spread_reads == [] and _web(index) == before
    # what the index reads still counts: a label change and a deletion request
    snap.add_pod(replace(pods[3], meta=replace(pods[3].meta, labels={"app": "db"})))
    index.refresh(snap)
    assert spread_reads == [3] and _web(index) == [0, before[1], 0, before[3] - 1]
    snap.add_pod(replace(pods[5], meta=replace(pods[5].meta, deletion_timestamp=5.0)))
    index.refresh(snap)
    assert spread_reads == [3, 1] and _web(index) == [0, before[1] - 1, 0, before[3] - 1]


def test_inter_pod_affinity_groups_skip_bindings_and_status_reports(monkeypatch):
    snap, names, pods = _snapshot()
    index = affinity_index.pod_index(snap, labels=True)
    reads = []
    real = affinity_index._Part._reread
    monkeypatch.setattr(affinity_index._Part, "_reread", lambda self, ni: (reads.append(ni.name), real(self, ni)))

    def web_nodes():
        groups = [g for g in index.by_labels.values() if g.sample.meta.labels.get("app") == "web"]
        out = np.zeros(len(names), np.int64)
        for g in groups:
            rows, counts = g.placement(index.token)
            np.add.at(out, rows, counts)
        return out.tolist()
    before = web_nodes()
    snap.add_pod(evolve(pods[1], phase="Running", start_time=1.0))
    snap.add_pod(evolve(pods[3], phase="Running", start_time=1.0, conditions=[]))
    affinity_index.pod_index(snap, labels=True)
    assert reads == [] and web_nodes() == before
    snap.add_pod(replace(pods[3], meta=replace(pods[3].meta, labels={"app": "db"})))
    affinity_index.pod_index(snap, labels=True)
    assert reads == [names[3]] * 2  # its label groups and its term groups
    assert web_nodes() == [0, before[1], 0, before[3] - 1]
