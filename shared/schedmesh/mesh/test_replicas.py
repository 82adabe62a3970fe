"""A template's answers kept for its replicas (mesh/replicas.py): every pod decided exactly as the
cycle decides it alone, whatever changes between the pods."""
from __future__ import annotations

import dataclasses
import random
from fractions import Fraction

import pytest

from schedmesh.api.labels import LabelSelector
from schedmesh.api.types import (POD_BINDING_AND_STATUS, Affinity, ObjectMeta, Pod, PodAffinity, PodAffinityTerm,
                                 Taint, WeightedPodAffinityTerm, same_but_status, same_template)
from schedmesh.bench.workloads import build, make_pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState
from schedmesh.telemetry.metrics import FRAMEWORK_EXTENSION_POINT_DURATION, REPLICA_ANSWERS
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework
from schedmesh.mesh.fanout import FanOutEvaluator
from schedmesh.scheduling.cycle import FitError, LocalEvaluator, SchedulingAlgorithm


class _Nominator:
    """The queue's nominator as the cycle reads it: pods nominated to nodes."""

    def __init__(self) -> None:
        self.by_node: dict[str, list] = {}

    def nominated_node_names(self):
        return [n for n, pods in self.by_node.items() if pods]

    def nominated_pods_for_node(self, node: str):
        return self.by_node.get(node, [])


def _outcome(res) -> tuple:
    return (res.suggested_host, res.evaluated_nodes, res.feasible_nodes, res.totals.tolist(),
            {k: v.tolist() for k, v in res.plugin_scores.items()},
            sorted((n, s.code, s.reasons) for n, s in res.diagnosis.node_to_status.items()))


def _schedule(nodes, init, pods, evaluator, churn: bool, seed: int = 7,
              between=None) -> tuple[list, FanOutEvaluator]:
    """Each pod scheduled and assumed in turn; with `churn`, seeded changes between pods:
    bound pods deleted, bound (status only: ignored by the answers) or given more cpu (not
    ignored), a node tainted and untainted, a pod with anti-affinity placed, a pod whose
    preferred affinity selects the pods to come placed, a nomination made and dropped.
    `between(i, snapshot)`: called before the i-th pod, for changes of the test's own."""
    snap = Snapshot(nodes, init)
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    algo = SchedulingAlgorithm(tie_break="random", seed=3, evaluator=evaluator)
    nominator = _Nominator()
    rng = random.Random(seed)
    placed: list = []
    out = []
    for i, pod in enumerate(pods):
        if between is not None:
            between(i, snap)
        if churn:
            roll = rng.random()
            if roll < 0.15 and placed:
                snap.remove_pod(placed.pop(rng.randrange(len(placed)))[0])
            elif roll < 0.17:
                ni = snap.node_info_list[rng.randrange(snap.num_nodes())]
                node = ni.node
                node.taints = [] if node.taints else [Taint("dedicated", "NoSchedule", "x")]
                snap.update_node(node)
            elif roll < 0.175:
                anti = make_pod(f"anti-{i}", labels={"app": "other"})
                anti.affinity = Affinity(pod_anti_affinity=PodAffinity(required=[PodAffinityTerm(
                    topology_key="kubernetes.io/hostname")]))
                snap.add_pod(anti, snap.node_info_list[rng.randrange(snap.num_nodes())].name)
            elif roll < 0.185 and pod.meta.labels:
                # preferred affinity for the pods to come, over a zone: their scores change there
                fan = make_pod(f"fan-{i}", labels={"app": "other"})
                fan.meta.namespace = pod.meta.namespace
                term = PodAffinityTerm(topology_key="topology.kubernetes.io/zone",
                                       label_selector=LabelSelector.of(match_labels=pod.meta.labels))
                fan.affinity = Affinity(pod_affinity=PodAffinity(preferred=[WeightedPodAffinityTerm(50, term)]))
                snap.add_pod(fan, snap.node_info_list[rng.randrange(snap.num_nodes())].name)
            elif roll < 0.19:
                from schedmesh.cache.node_info import PodInfo
                big = make_pod(f"nominated-{i}", cpu="3")
                big.priority = 10
                name = snap.node_info_list[rng.randrange(snap.num_nodes())].name
                nominator.by_node[name] = [PodInfo(big)]
            elif roll < 0.20:
                nominator.by_node.clear()
            elif roll < 0.45 and placed:
                k = rng.randrange(len(placed))
                old, host = placed[k]
                if roll < 0.40:  # its binding, then its kubelet's Running
                    new = dataclasses.replace(old, node_name=host, phase="Running" if old.node_name else old.phase)
                else:  # resized: its node's totals change
                    new = dataclasses.replace(old, containers=[dataclasses.replace(
                        old.containers[0], requests={**old.containers[0].requests, "cpu": Fraction(1, 2)})])
                snap.add_pod(new, host)
                placed[k] = (new, host)
        try:
            res = algo.schedule_pod(fw, CycleState(), pod, snap, nominator=nominator)
        except FitError as e:
            out.append(("unschedulable", e.message(), algo.next_start_node_index))
            continue
        snap.add_pod(pod, res.suggested_host)
        placed.append((pod, res.suggested_host))
        out.append((_outcome(res), algo.next_start_node_index))
    return out, evaluator


@pytest.mark.parametrize("workload,nodes,churn", [
    ("SchedulingBasic", 600, False),
    ("SchedulingBasic", 40, True),  # every node evaluated
    ("SchedulingBasic", 3000, True),  # answers walked a prefix at a time
    ("SchedulingBasic", 600, True),
    ("MixedSchedulingBasePod", 500, True),
    ("SchedulingNodeAffinity", 400, True),
    ("Mixed", 400, True),
    # node-local answers: every Filter plugin node-local, InterPodAffinity or PodTopologySpread
    # scoring per pod (churn places a pod with required anti-affinity: then filtering is not)
    ("SchedulingPreferredPodAffinity", 600, False),
    ("SchedulingPreferredPodAffinity", 400, True),
    ("SchedulingPreferredPodAntiAffinity", 400, True),
    ("PreferredTopologySpreading", 400, True),
    ("PreferredTopologySpreading", 40, True),
    # node-local raw scores alone: a Filter plugin that is not node-local (required spreading or
    # inter-pod affinity), each pod filtered as usual
    ("TopologySpreading", 600, False),
    ("TopologySpreading", 400, True),
    ("TopologySpreading", 200, True),
    ("SchedulingPodAffinity", 400, True),
    ("SchedulingPodAntiAffinity", 1500, True),  # (its 1,000 initial pods hold a node each)
])
def test_every_pod_is_decided_as_the_cycle_decides_it_alone(workload: str, nodes: int, churn: bool) -> None:
    w = build(workload, nodes, None, 400, 1)
    alone, _ = _schedule(w.nodes, w.init, w.unschedulable + w.measured, LocalEvaluator(), churn)
    w = build(workload, nodes, None, 400, 1)
    answered = REPLICA_ANSWERS.labels("pod_answered")._value.get()
    kept, ev = _schedule(w.nodes, w.init, w.unschedulable + w.measured, FanOutEvaluator([], [], None), churn)
    assert [i for i, (a, b) in enumerate(zip(alone, kept)) if a != b] == []
    assert len(alone) == len(kept)
    if workload != "Mixed":
        assert ev.replicas.templates >= 1  # the answers were taken, not bypassed
        assert REPLICA_ANSWERS.labels("pod_answered")._value.get() - answered == ev.replicas.answered[0] > 0


def test_unschedulable_replicas_and_templates_taking_turns() -> None:
    """Replicas that fit nowhere, then ones that fill nodes until they fail, two templates
    alternating: the failures' messages, node by node, are the cycle's."""
    w = build("SchedulingBasic", 300, 0, 1, 1)
    pods = [make_pod(f"huge-{i}", cpu="64") for i in range(5)]
    pods += [make_pod(f"fill-{i}", cpu="1500m", mem_mi=100) for i in range(700)]
    pods += [make_pod(f"t{i % 2}-{i}", cpu="100m" if i % 2 else "200m") for i in range(40)]
    alone, _ = _schedule(w.nodes, [], pods, LocalEvaluator(), churn=False)
    kept, ev = _schedule(w.nodes, [], pods, FanOutEvaluator([], [], None), churn=False)
    assert alone == kept
    assert any(o[0] == "unschedulable" for o in alone) and any(o[0] != "unschedulable" for o in alone)
    assert ev.replicas.templates >= 2


def test_a_large_cluster_reads_further_when_the_first_nodes_fail() -> None:
    """Past 1,024 nodes the answers are walked a prefix at a time: with most nodes tainted the
    search needs more than the first prefix, and the failures it examines are all reported."""
    w = build("SchedulingBasic", 2000, 0, 150, 1)
    rng = random.Random(5)
    for n in w.nodes:
        if rng.random() < 0.6:
            n.taints = [Taint("dedicated", "NoSchedule", "x")]
    alone, _ = _schedule(w.nodes, [], w.measured, LocalEvaluator(), churn=False)
    kept, ev = _schedule(w.nodes, [], w.measured, FanOutEvaluator([], [], None), churn=False)
    assert alone == kept and ev.replicas.templates == 1
    assert all(o[0][1] > 1024 for o in alone)  # every search read past the first prefix


def test_one_filter_and_one_score_observation_per_cycle() -> None:
    def counts() -> tuple[float, float]:
        got = {}
        for metric in FRAMEWORK_EXTENSION_POINT_DURATION.collect():
            for s in metric.samples:
                if s.name.endswith("_count") and s.labels.get("status") == "Success":
                    got[s.labels["extension_point"]] = got.get(s.labels["extension_point"], 0) + s.value
        return got.get("Filter", 0), got.get("Score", 0)

    # all answers, node-local ones, node-local raw scores alone
    for workload in ("SchedulingBasic", "SchedulingPreferredPodAffinity", "TopologySpreading"):
        w = build(workload, 400, 0, 50, 1)
        before = counts()
        _schedule(w.nodes, [], w.measured, LocalEvaluator(), churn=False)
        mid = counts()
        _, ev = _schedule(w.nodes, [], w.measured, FanOutEvaluator([], [], None), churn=False)
        after = counts()
        assert ev.replicas.templates == 1
        assert (mid[0] - before[0], mid[1] - before[1]) == (after[0] - mid[0], after[1] - mid[1]) == (50, 50)


def test_node_local_answers_outlive_the_placement_of_pods_with_affinity_terms() -> None:
    """Replicas with preferred inter-pod affinity: each placement is a pod with affinity terms,
    which changes InterPodAffinity's scores everywhere but the node-local plugins' answers only
    on its node, so one template's answers serve every replica (InterPodAffinity scored per pod),
    and every pod is decided as the cycle decides it alone. Once a pod with required
    anti-affinity runs, InterPodAffinity filters too: the verdicts are not kept, only the
    node-local raw scores (each replica filtered as usual)."""
    w = build("SchedulingPreferredPodAffinity", 300, 100, 120, 1)
    alone, _ = _schedule(w.nodes, w.init, w.measured, LocalEvaluator(), churn=False)
    w = build("SchedulingPreferredPodAffinity", 300, 100, 120, 1)
    kept, ev = _schedule(w.nodes, w.init, w.measured, FanOutEvaluator([], [], None), churn=False)
    assert kept == alone
    assert ev.replicas.templates == 1 and ev.replicas.answered[0] == 119
    assert ev.replicas.current is not None and ev.replicas.current.local is not None
    assert "InterPodAffinity" not in ev.replicas.current.local and "NodeResourcesFit" in ev.replicas.current.local
    # a pod with required anti-affinity against every pod among the initial ones: every
    # replica filtered by InterPodAffinity
    w = build("SchedulingPreferredPodAffinity", 300, 100, 60, 1)
    anti = make_pod("anti", labels={"app": "other"})
    anti.affinity = Affinity(pod_anti_affinity=PodAffinity(required=[PodAffinityTerm(
        topology_key="kubernetes.io/hostname", label_selector=LabelSelector.of())]))
    anti.meta.namespace = w.measured[0].meta.namespace
    anti.node_name = w.nodes[0].meta.name
    alone, _ = _schedule(w.nodes, w.init + [anti], w.measured, LocalEvaluator(), churn=False)
    w = build("SchedulingPreferredPodAffinity", 300, 100, 60, 1)
    anti.node_name = w.nodes[0].meta.name
    kept, ev = _schedule(w.nodes, w.init + [anti], w.measured, FanOutEvaluator([], [], None), churn=False)
    assert kept == alone and ev.replicas.templates == 1
    assert not ev.replicas.current.filters  # the node-local raw scores alone: each replica filtered


def test_a_change_feed_for_node_local_answers_keeps_pods_with_affinity_terms_to_their_rows() -> None:
    w = build("SchedulingBasic", 10, 0, 1, 1)
    snap = Snapshot(w.nodes, [])
    local, every = snap.watch_changes(ignore_affinity=True), snap.watch_changes()
    anti = make_pod("anti", labels={"app": "other"})
    anti.affinity = Affinity(pod_anti_affinity=PodAffinity(required=[PodAffinityTerm(
        topology_key="kubernetes.io/hostname")]))
    snap.add_pod(anti, w.nodes[3].meta.name)
    row = snap.get(w.nodes[3].meta.name).index
    assert (local.rows, local.beyond_rows) == ({row}, False)
    assert (every.rows, every.beyond_rows) == ({row}, True)
    node = w.nodes[5]
    node.taints = [Taint("dedicated", "NoSchedule", "x")]
    snap.update_node(node)  # a node's own change reaches beyond rows for both
    assert local.beyond_rows


def test_replicas_differ_only_in_identity() -> None:
    a, b = make_pod("a"), make_pod("b")
    b.meta.resource_version, b.meta.creation_timestamp = "7", 12.0
    assert same_template(a, b)
    c = make_pod("c", labels={"app": "x"})
    assert not same_template(a, c)
    d = make_pod("d")
    d.containers[0].requests["cpu"] = Fraction(2)
    assert not same_template(a, d)
    e = make_pod("e")
    e.priority = 5
    assert not same_template(a, e)


def test_a_status_update_is_left_out_of_the_answers_change_feed_only() -> None:
    w = build("SchedulingBasic", 10, 0, 1, 1)
    snap = Snapshot(w.nodes, [])
    n0, n1 = w.nodes[0].meta.name, w.nodes[1].meta.name
    pod = make_pod("p")
    snap.add_pod(pod, n0)
    answers, others = snap.watch_changes(ignore_status_updates=True), snap.watch_changes()
    bound = dataclasses.replace(pod, node_name=n0, phase="Running")
    assert same_but_status(pod, bound)
    snap.add_pod(bound, n0)
    row = snap.get(n0).index
    assert (answers.rows, others.rows) == (set(), {row})
    relabelled = dataclasses.replace(bound, meta=dataclasses.replace(bound.meta, labels={"app": "x"}))
    assert not same_but_status(bound, relabelled)
    snap.add_pod(relabelled, n0)
    assert answers.rows == {row}
    snap.add_pod(relabelled, n1)  # moved: both nodes changed
    assert answers.rows == {row, snap.get(n1).index}
    assert [pi.pod for pi in snap.get(n1).pods] == [relabelled]


@pytest.mark.parametrize("workload", ["PreferredTopologySpreading", "TopologySpreading"])
@pytest.mark.parametrize("kind", ["preferred", "required"])
def test_pods_whose_terms_select_the_replicas_change_their_scores_beyond_their_rows(workload: str, kind: str) -> None:
    """Replicas without affinity terms of their own are scored by InterPodAffinity from the
    existing pods' terms that select them (preferred ones with their weight, required ones with
    hardPodAffinityWeight), over the whole topology domain: a pod with such terms placed or
    removed changes the replicas' scores beyond its own row, so the answers kept for them are
    dropped, not misapplied."""
    def with_terms(name: str, namespace: str, labels: dict):
        p = make_pod(name, labels={"app": "other"})
        p.meta.namespace = namespace
        term = PodAffinityTerm(topology_key="topology.kubernetes.io/zone",
                               label_selector=LabelSelector.of(match_labels=labels))
        p.affinity = Affinity(pod_affinity=PodAffinity(
            required=[term] if kind == "required" else [],
            preferred=[WeightedPodAffinityTerm(80, term)] if kind == "preferred" else []))
        return p

    def run(evaluator):
        w = build(workload, 60, 0, 90, 1)
        template = w.measured[0]
        placed = []

        def between(i: int, snap: Snapshot) -> None:
            if i in (30, 50):
                p = with_terms(f"selector-{i}", template.meta.namespace, template.meta.labels)
                snap.add_pod(p, w.nodes[7 * i % len(w.nodes)].meta.name)
                placed.append(p)
            elif i == 70:
                snap.remove_pod(placed[0])
        return _schedule(w.nodes, [], w.measured, evaluator, churn=False, between=between)

    alone, _ = run(LocalEvaluator())
    kept, ev = run(FanOutEvaluator([], [], None))
    assert [i for i, (a, b) in enumerate(zip(alone, kept)) if a != b] == []
    assert ev.replicas.templates >= 2  # kept before and after each change
    assert any("InterPodAffinity" in o[0][4] for o in alone[31:70] if o[0] != "unschedulable")


def test_every_field_but_identity_tells_replicas_apart_and_every_field_but_status_tells_copies() -> None:
    """Field by field: a replica differs from its template in its name, uid, resource version and
    creation time only; a copy of a pod in its binding, status and resource version only."""
    pod = make_pod("a")
    identity = {"name", "uid", "resource_version", "creation_timestamp"}
    for f in dataclasses.fields(Pod):
        if f.name == "meta":
            continue
        other = dataclasses.replace(pod, **{f.name: object()})
        assert not same_template(pod, other), f.name
        assert same_but_status(pod, other) == (f.name in POD_BINDING_AND_STATUS), f.name
    for f in dataclasses.fields(ObjectMeta):
        other = dataclasses.replace(pod, meta=dataclasses.replace(pod.meta, **{f.name: object()}))
        assert same_template(pod, other) == (f.name in identity), f.name
        assert same_but_status(pod, other) == (f.name == "resource_version"), f.name
