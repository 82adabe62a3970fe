"""The benchmark workloads: kube scheduler_perf's shapes, the in-process cycle deciding as
explain does, and one small `schedmesh bench` through a real mesh.

Every workload is read back the way the mesh reads what it is given (JSON manifests through
schedmesh.api.load and admission), and its shapes are checked against scheduler_perf's
performance-config.yaml files and templates (test/integration/scheduler_perf in kubernetes).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from schedmesh.api.types import same_template
from schedmesh.api.load import admit_all, load_files, load_text
from schedmesh.api.to_json import node_to_json, pod_to_json
from schedmesh.bench.cycle_bench import run as run_cycle_bench, schedule_in_process
from schedmesh.bench.mesh_bench import (_pool_for, add_arguments, alternated, cpu_ms_per_pod, cpu_seconds, median_run,
                                        record_time, round_orders, shard_cpu_ms_per_pod, submit_all)
from schedmesh.bench.workloads import SHAPES, WORKLOAD_NAMES, ZONE_LABEL, build, default_sizes
from schedmesh.cli.explain import Explainer, fill_times, load_profiles
from schedmesh.mesh.nodepool import load_pools

HOSTNAME = "kubernetes.io/hostname"
SCHED_NAMESPACES = ["sched-1", "sched-0"]

# scheduler_perf's 5000Nodes variants: (nodes, init pods per createPods op, measured pods).
KUBE_SIZES = {
    "SchedulingBasic": (5000, 1000, 1000),
    "Unschedulable": (5000, 1000, 1000),
    "SchedulingPodAntiAffinity": (5000, 1000, 1000),
    "SchedulingPodAffinity": (5000, 5000, 1000),
    "SchedulingPreferredPodAffinity": (5000, 5000, 1000),
    "SchedulingPreferredPodAntiAffinity": (5000, 5000, 1000),
    "SchedulingNodeAffinity": (5000, 5000, 1000),
    "TopologySpreading": (5000, 5000, 2000),
    "PreferredTopologySpreading": (5000, 5000, 2000),
    "MixedSchedulingBasePod": (5000, 2000, 1000),
}


def _as_manifests(objs: list[dict]):
    """JSON manifests read as the mesh's Apply reads them: parsed, validated, admitted."""
    return admit_all(load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}), "bench",
                               strict_names=True))


def _admitted(name: str, nodes=12, init_pods=6, pods=9, unschedulable_pods=None):
    if unschedulable_pods is None and name in SHAPES and SHAPES[name].unschedulable:
        unschedulable_pods = 3
    w = build(name, nodes, init_pods, pods, unschedulable_pods=unschedulable_pods)
    m = _as_manifests([node_to_json(n) for n in w.nodes]
                      + [pod_to_json(p) for p in w.init + w.unschedulable + w.measured])
    assert len(m.nodes) == len(w.nodes) and len(m.pods) == len(w.init) + len(w.unschedulable) + len(w.measured)
    pods = {p.name: p for p in m.pods}
    init = [pods[p.name] for p in w.init]
    unsched = [pods[p.name] for p in w.unschedulable]
    measured = [pods[p.name] for p in w.measured]
    return w, m.nodes, init, unsched, measured


def _requests(pod) -> tuple[int, int]:
    c = pod.containers[0]
    return int(c.requests["cpu"] * 1000), int(c.requests["memory"])


def _zone_labels(nodes) -> list:
    return [n.labels.get(ZONE_LABEL) for n in nodes]


@pytest.mark.parametrize("name", sorted(KUBE_SIZES))
def test_default_sizes_are_the_5000_nodes_variants(name):
    assert default_sizes(name) == KUBE_SIZES[name]


def test_every_workload_is_listed():
    assert set(WORKLOAD_NAMES) == set(KUBE_SIZES) | {"Mixed", "DistinctPods"}


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_nodes_and_default_pods_have_node_default_and_pod_default_shapes(name):
    w, nodes, init, unsched, measured = _admitted(name)
    for n in nodes:
        assert n.allocatable["cpu"] == 4 and n.allocatable["memory"] == 32 * 2**30 and n.allocatable["pods"] == 110
        assert n.labels[HOSTNAME] == n.name
    assert len({n.name for n in nodes}) == len(nodes)
    if name == "Mixed":
        return
    for p in init + (measured if name != "DistinctPods" else []):
        assert _requests(p) == (100, 500 * 2**20)
        assert p.containers[0].limits == p.containers[0].requests
        assert p.priority == 0
    assert all(p.node_name for p in init) and not any(p.node_name for p in measured)
    # Init pods are placed one per node while there are nodes left (node i mod N).
    assert [p.node_name for p in init] == [nodes[i % len(nodes)].name for i in range(len(init))]


@pytest.mark.parametrize("name", ["SchedulingBasic", "SchedulingPodAntiAffinity", "SchedulingPreferredPodAffinity",
                                  "SchedulingPreferredPodAntiAffinity", "Unschedulable"])
def test_workloads_without_a_zone_strategy_have_no_zone(name):
    _, nodes, *_ = _admitted(name)
    assert _zone_labels(nodes) == [None] * len(nodes)


@pytest.mark.parametrize("name", ["SchedulingPodAffinity", "SchedulingNodeAffinity", "MixedSchedulingBasePod"])
def test_zone1_workloads(name):
    _, nodes, *_ = _admitted(name)
    assert _zone_labels(nodes) == ["zone1"] * len(nodes)


@pytest.mark.parametrize("name", ["TopologySpreading", "PreferredTopologySpreading"])
def test_spreading_nodes_are_in_three_moons_round_robin(name):
    _, nodes, *_ = _admitted(name, nodes=12)
    assert _zone_labels(nodes) == ["moon-1", "moon-2", "moon-3"] * 4


def test_basic_namespaces_and_pods():
    _, _, init, unsched, measured = _admitted("SchedulingBasic")
    assert {p.namespace for p in init} == {"namespace-1"} and {p.namespace for p in measured} == {"namespace-2"}
    assert not unsched
    for p in init + measured:
        assert p.affinity is None and not p.topology_spread_constraints and not p.labels


@pytest.mark.parametrize("name,kind,required,color,topology_key", [
    ("SchedulingPodAntiAffinity", "pod_anti_affinity", True, "green", HOSTNAME),
    ("SchedulingPodAffinity", "pod_affinity", True, "blue", ZONE_LABEL),
    ("SchedulingPreferredPodAffinity", "pod_affinity", False, "red", HOSTNAME),
    ("SchedulingPreferredPodAntiAffinity", "pod_anti_affinity", False, "yellow", HOSTNAME),
])
def test_inter_pod_affinity_workloads(name, kind, required, color, topology_key):
    _, _, init, _, measured = _admitted(name)
    assert {p.namespace for p in init} == {"sched-0"} and {p.namespace for p in measured} == {"sched-1"}
    for p in init + measured:
        assert p.labels == {"color": color}
        terms = getattr(p.affinity, kind)
        other = "pod_affinity" if kind == "pod_anti_affinity" else "pod_anti_affinity"
        assert getattr(p.affinity, other) is None and p.affinity.node_affinity is None
        if required:
            assert not terms.preferred and len(terms.required) == 1
            term = terms.required[0]
        else:
            assert not terms.required and len(terms.preferred) == 1 and terms.preferred[0].weight == 1
            term = terms.preferred[0].term
        assert term.topology_key == topology_key
        assert term.namespaces == SCHED_NAMESPACES
        assert term.label_selector.matches({"color": color}) and not term.label_selector.matches({"color": "x"})


def test_anti_affinity_init_pods_respect_their_own_anti_affinity():
    # init pods (1,000 of 5,000 nodes in kube's variant) each on a node of its own
    _, _, init, _, _ = _admitted("SchedulingPodAntiAffinity", nodes=12, init_pods=12)
    assert len({p.node_name for p in init}) == 12


def test_node_affinity_workload():
    _, _, init, _, measured = _admitted("SchedulingNodeAffinity")
    assert {p.namespace for p in init} == {"namespace-1"} and {p.namespace for p in measured} == {"namespace-2"}
    for p in init + measured:
        (term,) = p.affinity.node_affinity.required.terms
        (req,) = term.match_expressions
        assert (req.key, req.operator, req.values) == (ZONE_LABEL, "In", ["zone1", "zone2"])


@pytest.mark.parametrize("name,when", [("TopologySpreading", "DoNotSchedule"),
                                       ("PreferredTopologySpreading", "ScheduleAnyway")])
def test_spreading_workloads(name, when):
    _, _, init, _, measured = _admitted(name)
    assert {p.namespace for p in init} == {"namespace-1"} and {p.namespace for p in measured} == {"namespace-2"}
    for p in init:
        assert not p.topology_spread_constraints and not p.labels  # pod-default.yaml
    for p in measured:
        (c,) = p.topology_spread_constraints
        assert (c.max_skew, c.topology_key, c.when_unsatisfiable) == (5, ZONE_LABEL, when)
        assert p.labels == {"color": "blue"} and c.label_selector.matches({"color": "blue"})


def test_mixed_scheduling_base_pod():
    _, _, init, _, measured = _admitted("MixedSchedulingBasePod", nodes=40, init_pods=6)
    assert len(init) == 30 and {p.namespace for p in init} == {"sched-0"}
    colors = Counter(p.labels.get("color") for p in init)
    assert colors == {None: 6, "blue": 6, "green": 6, "red": 6, "yellow": 6}
    assert {p.namespace for p in measured} == {"namespace-7"}
    assert all(p.affinity is None and not p.labels for p in measured)
    green = [p.node_name for p in init if p.labels.get("color") == "green"]
    assert len(set(green)) == len(green)  # required anti-affinity holds among the placed init pods


def test_distinct_pods_are_scheduling_basic_with_every_measured_pod_of_its_own_kind():
    w, nodes, init, _, measured = _admitted("DistinctPods", nodes=40, init_pods=6, pods=300)
    basic = build("SchedulingBasic", 40, 6, 300)
    assert [n.name for n in nodes] == [n.name for n in basic.nodes] and len(init) == 6
    assert default_sizes("DistinctPods") == default_sizes("SchedulingBasic")
    kinds = {_requests(p) for p in measured}
    assert len(kinds) == len(measured)  # no two alike (20,000 kinds)
    assert all(p.containers[0].limits == p.containers[0].requests for p in measured)  # admitted as written
    assert {cpu for cpu, _ in kinds} == set(range(1, 101)) and min(m for _, m in kinds) == 300 * 2**20
    assert not any(same_template(a, b) for a, b in zip(w.measured, w.measured[1:]))


def test_unschedulable_pods_fit_nowhere_and_come_first():
    w, nodes, init, unsched, measured = _admitted("Unschedulable", unschedulable_pods=7)
    assert len(unsched) == 7 and build("Unschedulable", 12, 6, 9).unschedulable.__len__() == 1000
    max_cpu = max(n.allocatable["cpu"] for n in nodes)
    for p in unsched:
        assert p.priority == 10 and _requests(p) == (9000, 500 * 2**20) and p.containers[0].requests["cpu"] > max_cpu
        assert not p.node_name and p.namespace == "namespace-2"
    assert {p.namespace for p in measured} == {"namespace-3"}
    assert all(_requests(p) == (100, 500 * 2**20) for p in measured)


@pytest.mark.parametrize("kwargs,message", [
    ({"name": "NoSuchWorkload"}, "unknown workload 'NoSuchWorkload'"),
    ({"name": "SchedulingBasic", "nodes": 0}, "nodes must be at least 1, not 0"),
    ({"name": "SchedulingBasic", "pods": -3}, "pods must be at least 1, not -3"),
    ({"name": "SchedulingBasic", "init_pods": -1}, "init pods must not be negative, not -1"),
    ({"name": "SchedulingBasic", "unschedulable_pods": 5}, "workload SchedulingBasic has no unschedulable pods"),
    ({"name": "Mixed", "unschedulable_pods": 5}, "workload Mixed has no unschedulable pods"),
    ({"name": "DistinctPods", "unschedulable_pods": 5}, "workload DistinctPods has no unschedulable pods"),
])
def test_bad_sizes_and_names_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build(**kwargs)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_the_mesh_bench_node_pool_reproduces_the_workload_nodes(name):
    w = build(name, 100, 0, 1)  # Mixed: every 20th node a gpu node, its zones not round-robin among them
    pool, rename = _pool_for(w.nodes)
    made = {n.name: n for n in load_pools(pool)}
    for n in w.nodes:
        m = made[rename[n.name]]
        assert m.labels.get(ZONE_LABEL) == n.labels.get(ZONE_LABEL)
        # (the pool's kubelets also report 100Gi of ephemeral-storage, which no bench pod requests)
        assert {k: m.allocatable[k] for k in n.allocatable} == n.allocatable and m.taints == n.taints
        assert all(m.labels.get(k) == v for k, v in n.labels.items() if k != HOSTNAME)


# ---- the in-process cycle decides as explain does --------------------------------------------
def _explain_decisions(w, tmp_path: Path) -> list:
    """`schedmesh explain --cluster cluster.yaml --pods pods.yaml --tie-break name`, through its library path."""
    cluster_file, pods_file = tmp_path / "cluster.yaml", tmp_path / "pods.yaml"
    cluster_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": (
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in w.namespaces]
        + [node_to_json(n) for n in w.nodes] + [pod_to_json(p) for p in w.init])}))
    pods_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                     "items": [pod_to_json(p) for p in w.unschedulable + w.measured]}))
    cluster, pending = load_files([cluster_file]), load_files([pods_file])
    admit_all(cluster)
    admit_all(pending)
    fill_times([p for p in cluster.pods if p.node_name], pending.pods)
    profiles, percentage, extenders = load_profiles(None)
    explainer = Explainer(cluster, profiles, "name", percentage, extenders)
    return [(d.pod, d.chosen) for d in (explainer.decide(p) for p in pending.pods)]


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_in_process_cycle_places_like_explain(name, tmp_path):
    unsched = 5 if SHAPES.get(name) and SHAPES[name].unschedulable else None
    w = build(name, 50, 15, 30, unschedulable_pods=unsched)  # anti-affinity: init + measured <= nodes
    ours = [(p.key, node) for p, node, _ in schedule_in_process(w, tie_break="name")]
    theirs = _explain_decisions(w, tmp_path)
    assert ours == theirs
    placed = [node for _, node in ours]
    assert placed[len(w.unschedulable):] and all(placed[len(w.unschedulable):])  # every measured pod fits here
    assert placed[:len(w.unschedulable)] == [None] * len(w.unschedulable)


def test_spreading_places_within_max_skew():
    w = build("TopologySpreading", 50, 20, 40)
    zone_of = {n.name: n.labels[ZONE_LABEL] for n in w.nodes}
    counts = Counter(zone_of[node] for _, node, _ in schedule_in_process(w, tie_break="name"))
    assert max(counts.values()) - min(counts.values()) <= 5


def test_bench_cycle_reports_the_unschedulable_pods_apart():
    result = run_cycle_bench("Unschedulable", nodes=30, init_pods=10, pods=20, unschedulable_pods=4,
                             tie_break="name")
    assert (result["workload"], result["nodes"], result["init_pods"], result["pods"]) == ("Unschedulable", 30, 10, 20)
    assert (result["unschedulable_pods"], result["unschedulable_placed"], result["scheduled"]) == (4, 0, 20)
    assert set(result["latency_ms"]) >= {"p50", "p90", "p99"}
    assert result["pods_per_second"] > 0 and result["peak_rss_mib"] > 0
    assert (result["filter_shards"], result["score_shards"]) == (0, 0)


def test_bench_cycle_with_replica_answers_places_every_pod_where_the_cycle_alone_does():
    w = build("SchedulingBasic", 300, 50, 120)
    alone = [node for _, node, _ in schedule_in_process(w, tie_break="name")]
    w = build("SchedulingBasic", 300, 50, 120)
    kept = [node for _, node, _ in schedule_in_process(w, tie_break="name", replicas=True)]
    assert kept == alone and all(alone)
    result = run_cycle_bench("SchedulingBasic", nodes=300, init_pods=50, pods=120, tie_break="name", replicas=True)
    assert result["replica_answers"] is True and result["scheduled"] == 120


# ---- one small bench through a real mesh -----------------------------------------------------
def test_schedmesh_bench_through_a_real_mesh_prints_its_json(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    bench = subprocess.Popen([sys.executable, "-m", "schedmesh.cli.main", "bench", "--workload", "Unschedulable",
                              "--nodes", "20", "--init-pods", "5", "--pods", "12", "--unschedulable-pods", "6",
                              "--timeout", "40"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = bench.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        bench.terminate()  # SIGTERM: the bench stops its mesh before it exits
        stdout, stderr = bench.communicate(timeout=120)
        pytest.fail(f"schedmesh bench did not finish in 240 s: {stderr[-3000:]}")
    assert bench.returncode == 0, stderr[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    for key in ("workload", "nodes", "pods", "scheduled", "pods_per_second", "latency_ms", "filter_shards",
                "score_shards", "peak_rss_mib", "unschedulable_pods", "unschedulable_bound", "baseline_workload"):
        assert key in result, key
    assert set(result["latency_ms"]) >= {"p50", "p90", "p99"}
    # from submission to the binding's record: after the pod was sent, within the run
    lat = result["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= 1000 * result["seconds"] + 1, result  # (rounded)
    assert 0 < result["first_bound_ms"] <= 1000 * result["seconds"] + 1, result  # the first binding, within the run
    assert (result["workload"], result["nodes"], result["pods"], result["scheduled"]) == ("Unschedulable", 20, 12, 12)
    assert (result["unschedulable_pods"], result["unschedulable_bound"]) == (6, 0)
    assert result["pods_per_second"] > 0 and result["peak_rss_mib"] > 0
    cpu = result["cpu_ms_per_pod"]
    assert {"queue-manager", "binder", "kubelet-agent", "broker", "bench-client", "total"} <= set(cpu), cpu
    assert all(v >= 0 for v in cpu.values()) and cpu["queue-manager"] > 0
    assert cpu["total"] == pytest.approx(sum(v for k, v in cpu.items() if k != "total"), abs=0.01)
    assert not list(tmp_path.glob(".schedmesh/mesh.json"))  # the bench's mesh is stopped
    # the measured phase began once the init pods had started (as scheduler_perf measures)
    assert "bench: init pods started and the mesh quiet after" in stderr, stderr[-3000:]


def _run(pods_per_second, p99, rate=None, total=1.0):
    return {"workload": "SchedulingBasic", "pods_per_second": pods_per_second, "offered_rate": rate,
            "latency_ms": {"p50": p99 / 4, "p90": p99 / 2, "p99": p99}, "cpu_ms_per_pod": {"total": total},
            "peak_rss_mib": pods_per_second}  # (a field only to tell which run was reported whole)


def test_repeated_runs_report_the_median_run_whole_with_every_run():
    runs = [_run(900, 300), _run(1400, 200, total=0.9), _run(1100, 250, total=1.2)]
    got = median_run(runs)
    # the median by throughput, all of its own figures (not a mix of runs), then the spread
    assert (got["pods_per_second"], got["latency_ms"]["p99"], got["peak_rss_mib"]) == (1100, 250, 1100)
    assert got["repeats"] == 3 and got["pods_per_second_range"] == [900, 1400] and got["p99_ms_range"] == [200, 300]
    assert [r["pods_per_second"] for r in got["runs"]] == [900, 1400, 1100]
    assert [r["cpu_ms_per_pod_total"] for r in got["runs"]] == [1.0, 0.9, 1.2]
    assert [r["cpu_ms_per_pod"] for r in got["runs"]] == [{"total": 1.0}, {"total": 0.9}, {"total": 1.2}]
    # of two, the worse: the lower throughput
    assert median_run([_run(1400, 200), _run(900, 300)])["pods_per_second"] == 900
    # one run is reported as it is
    assert median_run([runs[0]]) == runs[0]


def test_repeated_runs_at_an_offered_rate_report_the_median_latency():
    """At a steady rate every run achieves about the rate: the runs differ in latency."""
    runs = [_run(499, 90, rate=500), _run(497, 310, rate=500), _run(500, 120, rate=500), _run(498, 60, rate=500)]
    got = median_run(runs)
    assert got["latency_ms"]["p99"] == 120 and got["pods_per_second"] == 500  # of 90 and 120, the worse
    assert got["p99_ms_range"] == [60, 310]


def test_the_watcher_times_a_record_by_its_kafka_timestamp():
    """A binding is timed when it was published, not when the bench's watcher read it."""
    import time
    from schedmesh.bus.records import Record
    published = Record("schedmesh.pods", 0, 7, None, b"x", timestamp_ms=1_700_000_000_123)
    assert record_time(published) == pytest.approx(1_700_000_000.123)
    before = time.time()
    assert before <= record_time(Record("schedmesh.pods", 0, 8, None, b"x", timestamp_ms=-1)) <= time.time()


def test_cpu_seconds_reads_the_processes_and_their_children():
    """The bench's per-process CPU: each named process with its children (this test process
    stands in for a mesh process), and the client's own."""
    from schedmesh.local.supervisor import ProcInfo
    spin_until = __import__("time").process_time() + 0.05
    while __import__("time").process_time() < spin_until:
        pass
    got = cpu_seconds([ProcInfo("me", "m", 0, pid=os.getpid()), ProcInfo("never-started", "m", 0)])
    assert set(got) == {"me", "bench-client"} and got["me"] >= 0.05
    per = cpu_ms_per_pod({"me": 1.0}, {"me": 3.0, "bench-client": 0.5}, pods=1000)
    assert per == {"me": 2.0, "bench-client": 0.5, "total": 2.5}


def test_another_processs_cpu_is_read_to_the_nanosecond_with_its_ended_threads():
    """process_cpu_seconds of a child: finer than /proc's 10 ms ticks, and counting the CPU of
    a thread that has ended (a process clock, not a sum over the threads still there)."""
    import textwrap
    from schedmesh.bench.mesh_bench import process_cpu_seconds
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, threading, time
        def spin(seconds):
            end = time.thread_time() + seconds
            while time.thread_time() < end:
                pass
        t = threading.Thread(target=spin, args=(0.123,))
        t.start(); t.join()
        print(time.process_time(), flush=True)
        sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        own = float(child.stdout.readline())  # what the child reads of itself, its thread ended
        seen = process_cpu_seconds(child.pid)
        assert own >= 0.123
        assert own <= seen < own + 0.005  # (it idles on stdin meanwhile)
        assert seen != round(seen, 2)  # not whole ticks
    finally:
        child.stdin.close()
        child.wait(10)
    with pytest.raises(OSError):
        process_cpu_seconds(child.pid)


def test_a_shards_cpu_per_pod_is_the_mean_of_its_kind_to_four_decimals():
    before = {"filter-worker-0": 1.0, "filter-worker-1": 2.0, "score-worker-0": 5.0, "queue-manager": 9.0}
    after = {"filter-worker-0": 1.1, "filter-worker-1": 2.1234, "score-worker-0": 0.05, "queue-manager": 20.0}
    got = shard_cpu_ms_per_pod(before, after, pods=12000)
    # (0.1 + 0.1234) / 2 s over 12,000 pods; the score shard restarted: its new process's 0.05 s
    assert got == {"filter": round(1000 * 0.1117 / 12000, 4), "score": round(1000 * 0.05 / 12000, 4)}
    assert got["filter"] == 0.0093
    assert shard_cpu_ms_per_pod({}, {"queue-manager": 1.0}, pods=10) == {"filter": None, "score": None}


def test_bench_cycle_in_several_processes_sums_what_each_did():
    """`bench-cycle --processes 2` (make bench's host calibration): two copies at once, each in
    its own process, every pod placed in each; their rates and their sum."""
    from schedmesh.bench.cycle_bench import run_together

    result = run_together(2, ("SchedulingBasic", 30, 10, 20, False, 1, None, "name", True))
    assert result["processes"] == 2 and len(result["per_process"]) == 2
    assert all(r > 0 for r in result["per_process"])
    assert result["pods_per_second"] == round(sum(result["per_process"]), 1)
    assert result["scheduled"] == 20 and result["replica_answers"] is True


def test_submit_all_keeps_at_most_the_given_applies_in_flight_in_order():
    lock, state, calls = threading.Lock(), {"now": 0, "most": 0}, []

    def apply(chunk):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            calls.append([d["metadata"]["name"] for d in chunk])
        time.sleep(0.02)  # an Apply takes a while: the next ones overlap it
        with lock:
            state["now"] -= 1

    docs = [{"metadata": {"name": f"p{i}"}} for i in range(10)]
    submitted: dict[str, float] = {}
    before = time.time()
    submit_all(apply, docs, 3, 2, submitted)
    assert state["most"] == 2
    assert sorted(calls) == [["p0", "p1", "p2"], ["p3", "p4", "p5"], ["p6", "p7", "p8"], ["p9"]]
    assert calls[0] == ["p0", "p1", "p2"]  # sent in order
    assert set(submitted) == {f"p{i}" for i in range(10)}
    assert all(before <= submitted[f"p{i}"] <= submitted[f"p{i + 1}"] for i in range(9))
    assert submitted["p0"] == submitted["p2"] < submitted["p9"]  # a pod's time is its Apply's


def test_submit_all_one_at_a_time_and_a_failed_apply_fails_the_submission():
    state = {"now": 0, "most": 0}

    def apply(chunk):
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        time.sleep(0.005)
        state["now"] -= 1
        if chunk[0]["metadata"]["name"] == "p4":
            raise RuntimeError("refused")

    docs = [{"metadata": {"name": f"p{i}"}} for i in range(6)]
    with pytest.raises(RuntimeError, match="refused"):
        submit_all(apply, docs, 2, 1, {})
    assert state["most"] == 1


def test_apply_concurrency_below_one_is_refused_by_name(capsys):
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args(["--apply-concurrency", "3"]).apply_concurrency == 3
    assert p.parse_args([]).apply_concurrency == 2
    for bad, why in (("0", "0 is less than 1"), ("two", "'two' is not a whole number")):
        with pytest.raises(SystemExit):
            p.parse_args(["--apply-concurrency", bad])
        assert f"argument --apply-concurrency: {why}" in capsys.readouterr().err


def test_alternated_shard_counts_run_side_by_side_in_rotating_order():
    assert round_orders([0, 1, 2, 4], 5) == [[0, 1, 2, 4], [1, 2, 4, 0], [2, 4, 0, 1], [4, 0, 1, 2], [0, 1, 2, 4]]
    assert round_orders([2, 4], 0) == [[2, 4]]  # at least one round
    # The host slows down round by round: 2 + 2 is 10 % faster than 4 + 4 in every round.
    speed = iter([1.0, 1.0, 0.8, 0.8, 0.6, 0.6])
    calls = []

    def run(n):
        calls.append(n)
        return _run((2000 if n == 2 else 1800) * next(speed), 100)

    got = alternated([2, 4], 3, run)
    assert calls == [2, 4, 4, 2, 2, 4]
    two, four = got
    assert [r["pods_per_second"] for r in two["runs"]] == [2000, 1600, 1200]  # in round order
    assert [r["pods_per_second"] for r in four["runs"]] == [1800, 1440, 1080]
    assert (two["pods_per_second"], four["pods_per_second"]) == (1600, 1440)
    assert two["alternated_with"] == [4] and four["alternated_with"] == [2]
    assert two["relative_to"] == {} and four["relative_to"] == {"2": [0.9, 0.9, 0.9]}


def test_alternate_shards_is_a_list_of_different_counts():
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args(["--alternate-shards", "0,1,2,4"]).alternate_shards == [0, 1, 2, 4]
    for bad in ("2", "1,1", "1,x", "-1,2"):
        with pytest.raises(SystemExit):
            p.parse_args(["--alternate-shards", bad])
