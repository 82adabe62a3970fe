"""Shard batches: who may join one, the wire encodings, and when a batch stops answering.

Decisions through real shards, pod for pod against the in-process cycle, are checked in
tests/test_mesh_sampling.py; these are the pieces."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from schedmesh.api.types import Affinity, PodAffinity, PodAffinityTerm
from schedmesh.bench.workloads import make_pod, scheduling_basic
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState, FilterPlugin, Plugin
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework
from schedmesh.mesh import answers as A
from schedmesh.mesh import batch as B
from schedmesh.scheduling.cycle import Diagnosis, SchedulingAlgorithm
from schedmesh.v1 import scheduling_pb2 as spb


def _framework(snapshot: Snapshot) -> Framework:
    return Framework(default_profile(), snapshot_fn=lambda: snapshot)


def test_node_local_pods_join_a_batch_and_others_do_not() -> None:
    fw = _framework(Snapshot())
    plain = make_pod("plain")
    assert A.batchable(fw, plain)
    anti = make_pod("anti")
    anti.affinity = Affinity(pod_anti_affinity=PodAffinity(required=[PodAffinityTerm(
        topology_key="kubernetes.io/hostname")]))
    assert not A.batchable(fw, anti)  # its placement changes verdicts on a whole domain
    from schedmesh.api.load import load_text
    spread = load_text("""
apiVersion: v1
kind: Pod
metadata: {name: spread, labels: {app: x}}
spec:
  containers: [{name: c, image: i}]
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: x}}}
""").pods[0]
    assert not A.batchable(fw, spread)
    nominated = make_pod("nominated")
    nominated.nominated_node_name = "node-1"
    assert not A.batchable(fw, nominated)  # kube tries its nominated node alone first


def test_a_plugin_that_does_not_say_keeps_its_pods_one_by_one() -> None:
    class Unknown(FilterPlugin):
        name = "Unknown"

        def filter(self, state, pod, node_info):
            return None
    assert Plugin().node_local(make_pod("p")) is False
    fw = _framework(Snapshot())
    assert A.batchable(fw, make_pod("p"))
    fw.plugins["Unknown"] = Unknown()  # as an out-of-tree plugin enabled in the profile would be
    assert not A.batchable(fw, make_pod("p"))


@pytest.mark.parametrize("values", [[7, 7, 7], [0, -3, 2 ** 31 - 1], [1, 2 ** 40, -(2 ** 40)], []])
def test_raw_scores_survive_their_encoding(values: list[int]) -> None:
    msg = spb.PodScoreResult()
    B.encode_raw(msg.scores, "P", np.array(values, np.int64))
    (ps,) = msg.scores
    assert B.decode_raw(ps, len(values)).tolist() == values
    assert ps.width == (0 if len(set(values)) <= 1 else 4 if values[1] < 2 ** 31 else 8)


def _walk_reference(status: np.ndarray, s: int, to_find: int) -> tuple[int, list[int]]:
    """kube's search over one answers array, spelled out: the evaluated rows rotated to start
    at position `s`, up to the (to_find+1)-th feasible row."""
    rows = np.flatnonzero(status != A.NOT_EVALUATED)
    ordered = np.concatenate((rows[s:], rows[:s]))
    feasible = np.flatnonzero(status[ordered] == A.FEASIBLE)
    if not len(feasible):
        processed = len(ordered)
    elif to_find < len(ordered) and len(feasible) > to_find:
        processed = int(feasible[to_find])
    else:
        processed = len(ordered)
    return processed, ordered[feasible[:to_find]].tolist()


def test_the_walk_of_a_templates_answers_is_kubes_search_from_every_start() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        status = rng.choice([A.FEASIBLE, A.NOT_EVALUATED, 0, 1], size=n, p=[0.5, 0.2, 0.2, 0.1]).astype(np.int32)
        walk = B._Walk(status)
        if not len(walk.rows):
            continue
        for s in range(len(walk.rows)):
            for to_find in (1, 2, 3, len(walk.rows) // 2 or 1, len(walk.rows), len(walk.rows) + 1):
                processed, window = walk.from_start(s, to_find)
                want_processed, want_rows = _walk_reference(status, s, to_find)
                assert (processed, window.tolist()) == (want_processed, sorted(want_rows)), (status, s, to_find)


def test_row_bitmaps_round_trip() -> None:
    rows = np.array([0, 3, 8, 4999], np.int64)
    assert B.bitmap_rows(B.bitmap_bytes(rows, 5000), 5000).tolist() == rows.tolist()
    assert len(B.bitmap_bytes(rows, 5000)) == 625


def _answered_batch(snapshot: Snapshot, fw: Framework, pods, seal: bool = True) -> B.ShardBatch:
    """A batch answered as one shard owning every node would answer it (and sealed)."""
    batch = B.ShardBatch(snapshot, snapshot.watch_changes(), frozenset())
    resp = spb.FilterBatchResponse()
    algo = SchedulingAlgorithm()
    rows = snapshot.all_indices()
    for pod in pods:
        state = CycleState()
        fw.run_pre_filter(state, pod, snapshot)
        _, rejected, statuses = algo.filter_rows(fw, state, pod, snapshot, rows, None)
        r = resp.results.add(evaluated=B.bitmap_bytes(rows, snapshot.cols.n))
        for row, st in zip(rejected.tolist(), statuses):
            r.failures.add(code=int(st.code), plugin=st.plugin, reasons=st.reasons, rows=B.rows_bytes([row]))
    B.filter_answers(batch, pods, [resp])
    if seal:
        items = [(fw, p) for p in pods]
        batch.seal(items, B.templates_of(items), threading.RLock())
    return batch


def test_a_row_changed_before_the_batch_is_sealed_is_filtered_and_scored_again() -> None:
    """The next run is answered while the one before is decided: rows those pods take between
    the batch's view and its seal are corrected like rows changed later."""
    nodes, init, pods = scheduling_basic(20, 0, 3)
    snapshot = Snapshot(nodes, init)
    fw = _framework(snapshot)
    algo = SchedulingAlgorithm()
    batch = _answered_batch(snapshot, fw, pods, seal=False)
    items = [(fw, p) for p in pods]
    rows = snapshot.all_indices()
    at_view = CycleState()
    fw.run_pre_filter(at_view, pods[0], snapshot)
    fw.run_pre_score(at_view, pods[0], snapshot, rows)
    first = batch.answers[pods[0].meta.uid]
    first.window, first.raw = rows, fw.run_raw_score(at_view, pods[0], snapshot, rows)
    B.share_answers(batch, items, B.templates_of(items), scores=True)
    snapshot.add_pod(make_pod("full", cpu="4"), nodes[0].meta.name)  # node-0's every cpu
    snapshot.add_pod(make_pod("half", cpu="2"), nodes[1].meta.name)  # node-1's scores move
    batch.seal(items, B.templates_of(items), threading.RLock())
    ordered = snapshot.all_indices()
    got, want = Diagnosis(), Diagnosis()
    state = CycleState()
    fw.run_pre_filter(state, pods[0], snapshot)
    found = batch.filter(algo, fw, state, pods[0], snapshot, ordered, len(ordered), got, None)
    alone = CycleState()
    fw.run_pre_filter(alone, pods[0], snapshot)
    assert found.tolist() == algo.filter_in_order(fw, alone, pods[0], snapshot, ordered, len(ordered), want,
                                                  None).tolist()
    assert nodes[0].meta.name in dict(got.node_to_status.items())
    assert dict(got.node_to_status.items()) == dict(want.node_to_status.items())
    fw.run_pre_score(state, pods[0], snapshot, found)
    fw.run_pre_score(alone, pods[0], snapshot, found)
    scores, expected = batch.raw_scores(fw, state, pods[0], snapshot, found), fw.run_raw_score(alone, pods[0],
                                                                                               snapshot, found)
    assert {p: v.tolist() for p, v in scores.items()} == {p: v.tolist() for p, v in expected.items()}
    assert any(v[0] != first.raw[p][1] for p, v in fw.run_raw_score(alone, pods[0], snapshot, rows[1:2]).items())
    batch.close()


def test_a_change_beyond_single_nodes_ends_the_batch() -> None:
    nodes, init, pods = scheduling_basic(200, 0, 4)
    snapshot = Snapshot(nodes, init)
    fw = _framework(snapshot)
    batch = _answered_batch(snapshot, fw, pods)
    algo = SchedulingAlgorithm()

    def answered(pod) -> bool:
        state = CycleState()
        fw.run_pre_filter(state, pod, snapshot)
        ordered = snapshot.all_indices()
        return batch.filter(algo, fw, state, pod, snapshot, ordered, len(ordered), Diagnosis(), None) is not None

    assert answered(pods[0])
    snapshot.add_pod(pods[0], nodes[0].meta.name)  # a node-local change: corrected, still answered
    assert batch.changes.rows == {snapshot.get(nodes[0].meta.name).index}
    assert answered(pods[1])
    anti = make_pod("anti")
    anti.affinity = Affinity(pod_anti_affinity=PodAffinity(required=[PodAffinityTerm(
        topology_key="kubernetes.io/hostname")]))
    snapshot.add_pod(anti, nodes[1].meta.name)  # reaches beyond its node: the rest go pod by pod
    assert not answered(pods[2]) and not answered(pods[3])
    batch.close()
    snapshot.add_pod(make_pod("later"), nodes[2].meta.name)
    assert len(batch.changes.rows) == 2  # no longer watching


def test_a_node_removed_before_the_batch_is_sealed_ends_it_and_leaves_no_change_log() -> None:
    """The cache follower removes a node while the shards answer (the rows renumbered): sealing
    builds nothing on the old rows (it raised IndexError, and the batch's change logs were never
    closed), no pod is answered from it, and closing it stops every change log it started."""
    nodes, init, pods = scheduling_basic(20, 0, 3)
    snapshot = Snapshot(nodes, init)
    fw = _framework(snapshot)
    watching = len(snapshot._watchers)
    batch = _answered_batch(snapshot, fw, pods, seal=False)
    items = [(fw, p) for p in pods]
    rows = snapshot.all_indices()
    first = batch.answers[pods[0].meta.uid]
    state = CycleState()
    fw.run_pre_filter(state, pods[0], snapshot)
    fw.run_pre_score(state, pods[0], snapshot, rows)
    first.window, first.raw = rows, fw.run_raw_score(state, pods[0], snapshot, rows)
    snapshot.remove_node(nodes[-1].meta.name)
    batch.seal(items, B.templates_of(items), threading.RLock())
    ordered = snapshot.all_indices()
    state = CycleState()
    fw.run_pre_filter(state, pods[0], snapshot)
    assert batch.filter(SchedulingAlgorithm(), fw, state, pods[0], snapshot, ordered, len(ordered), Diagnosis(),
                        None) is None
    batch.close()
    assert len(snapshot._watchers) == watching


def test_a_pod_a_service_selects_after_the_batch_was_prepared_is_not_answered_from_it() -> None:
    """Batchability is decided when a run is prepared; a Service applied before a pod's cycle
    gives it default spreading, which reads other nodes: the cycle evaluates it alone."""
    from schedmesh.api.types import LabelSelector, WorkloadSelector
    from schedmesh.plugins.pod_topology_spread import SELECTOR_SOURCES_SERVICE, WorkloadSelectorSources
    from schedmesh.plugins.pod_topology_spread.common import WorkloadSelectors

    nodes, init, _ = scheduling_basic(20, 0, 1)
    pods = [make_pod(f"web-{i}", labels={"app": "web"}) for i in range(3)]
    snapshot = Snapshot(nodes, init)
    selectors = WorkloadSelectors()
    fw = Framework(default_profile(), snapshot_fn=lambda: snapshot,
                   services={SELECTOR_SOURCES_SERVICE: WorkloadSelectorSources(selectors)})
    assert all(A.batchable(fw, p) for p in pods)
    batch = _answered_batch(snapshot, fw, pods)
    algo = SchedulingAlgorithm()

    def answered(pod) -> bool:
        state = CycleState()
        fw.run_pre_filter(state, pod, snapshot)
        ordered = snapshot.all_indices()
        return batch.filter(algo, fw, state, pod, snapshot, ordered, len(ordered), Diagnosis(), None) is not None

    assert answered(pods[0])
    service = WorkloadSelector("Service", "default", "web", LabelSelector.of({"app": "web"}))
    selectors[service.key] = service
    assert not A.batchable(fw, pods[1])
    assert not answered(pods[1])
    del selectors[service.key]
    assert answered(pods[2])  # the batch itself still stands for the pods it may answer
    batch.close()


def test_replicas_are_asked_of_the_shards_once_per_template() -> None:
    fw, other = _framework(Snapshot()), _framework(Snapshot())
    a, b, c, d = make_pod("a"), make_pod("b"), make_pod("c", cpu="2"), make_pod("d")
    items = [(fw, a), (fw, b), (fw, c), (other, d), (fw, make_pod("e", cpu="2"))]
    assert B.templates_of(items) == [0, 0, 2, 3, 2]  # same template, same profile
    windows = B.template_windows([(0, np.array([1, 3])), (1, np.array([2, 3])), (2, np.array([5])),
                                  (4, np.array([4, 6]))], [0, 0, 2, 3, 2], [0, 2, 3])
    assert [(k, w.tolist()) for k, w in windows] == [(0, [1, 2, 3]), (1, [4, 5, 6])]


def test_templates_are_looked_up_not_compared_with_every_template_before(monkeypatch) -> None:
    """A run of many distinct pods: each pod compared with the templates of its key only (every
    template before it was 0.5 s of a 1,024-pod run); replicas grouped wherever they come."""
    fw = _framework(Snapshot())
    items = [(fw, make_pod(f"p{i}", cpu=f"{1 + i % 300}m")) for i in range(900)]  # 300 templates, interleaved
    compared = []
    real = B.same_template
    monkeypatch.setattr(B, "same_template", lambda a, b: compared.append(1) or real(a, b))
    assert B.templates_of(items) == [i % 300 for i in range(900)]
    assert len(compared) < 3 * len(items)


def test_templates_with_replicas_in_the_run_are_asked_the_pods_alone_are_not() -> None:
    fw = _framework(Snapshot())
    items = [(fw, make_pod("a")), (fw, make_pod("big", cpu="2")), (fw, make_pod("b")), (fw, make_pod("odd", cpu="3"))]
    first = B.templates_of(items)
    asked, alone = B.asked_and_alone(items, first)
    assert asked == [0]
    assert alone == {items[1][1].meta.uid, items[3][1].meta.uid}


def test_a_replica_whose_key_differs_still_gets_a_template_of_its_own_kind() -> None:
    """Labels given in another order: the same template (same_template), maybe another key; each
    pod's first is an earlier or the same pod of its template."""
    fw = _framework(Snapshot())
    a = make_pod("a", labels={"app": "web", "tier": "front"})
    b = make_pod("b", labels={"tier": "front", "app": "web"})
    items = [(fw, a), (fw, make_pod("c", cpu="2")), (fw, b), (fw, make_pod("d", labels={"tier": "front", "app": "web"}))]
    first = B.templates_of(items)
    assert all(j <= i and B.same_template(items[j][1], items[i][1]) for i, j in enumerate(first))
    assert first[1] == 1 and first[3] in (0, 2)


def test_a_replica_takes_its_templates_answers_in_an_object_of_its_own() -> None:
    nodes, init, pods = scheduling_basic(50, 0, 3)
    snapshot = Snapshot(nodes, init)
    fw = _framework(snapshot)
    batch = _answered_batch(snapshot, fw, pods[:1])
    items = [(fw, p) for p in pods]
    B.share_answers(batch, items, B.templates_of(items))
    first, second = batch.answers[pods[0].meta.uid], batch.answers[pods[1].meta.uid]
    assert second is not first and second.pod is pods[1] and second.status is first.status
    first.window, first.raw = np.array([0, 1]), {"P": np.array([5, 6])}
    B.share_answers(batch, items, B.templates_of(items), scores=True)
    assert batch.answers[pods[2].meta.uid].raw is first.raw
    batch.close()
