"""`schedmesh bench-cycle`: one scheduling cycle per pod, in this process, over N nodes.

Measures the brain alone (PreFilter, Filter, Score over the nodes, selection), the figure
behind "one pod against 5,000 nodes well under 10 ms". The mesh benchmark is `schedmesh bench`.
A workload's unschedulable pods (Unschedulable) each get one attempt before the measured pods;
there is no queue here, so they cost the measured pods nothing: that cost is the mesh's figure.
"""
from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import resource
import time
from typing import Iterator, Optional

import numpy as np

from schedmesh.api.types import Pod
from schedmesh.bench.workloads import WORKLOAD_NAMES, Workload, build
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework
from schedmesh.scheduling.cycle import FitError, SchedulingAlgorithm


def schedule_in_process(workload: Workload, evaluate_all: bool = False, tie_break: str = "random",
                        seed: Optional[int] = 1, replicas: bool = False) -> Iterator[tuple[Pod, Optional[str], float]]:
    """Schedules the workload's unschedulable pods, then its measured pods, each assumed on its
    node before the next: yields (pod, chosen node or None, milliseconds of its cycle).
    `replicas`: a template's answers kept for its replicas, as the queue-manager does."""
    snap = Snapshot(workload.nodes, workload.init)
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    evaluator = None
    if replicas:
        from schedmesh.mesh.replicas import ReplicaEvaluator
        evaluator = ReplicaEvaluator()
    algo = SchedulingAlgorithm(tie_break=tie_break, seed=seed, evaluator=evaluator)
    snap.cols  # build the columns once, as a long-running scheduler has them
    fw.warm(snap)  # and its plugins' indexes, as an idle queue-manager has them (Plugin.warm)
    for pod in workload.unschedulable + workload.measured:
        t0 = time.perf_counter()
        try:
            res = algo.schedule_pod(fw, CycleState(), pod, snap, evaluate_all=evaluate_all)
            snap.add_pod(pod, res.suggested_host)
            node: Optional[str] = res.suggested_host
        except FitError:
            node = None
        yield pod, node, (time.perf_counter() - t0) * 1000


def run(workload: str, nodes: Optional[int] = None, init_pods: Optional[int] = None, pods: Optional[int] = None,
        evaluate_all: bool = False, seed: int = 1, unschedulable_pods: Optional[int] = None,
        tie_break: str = "random", replicas: bool = False) -> dict:
    w = build(workload, nodes, init_pods, pods, seed, unschedulable_pods)
    measured = {id(p) for p in w.measured}
    latencies, scheduled, unschedulable_placed, start, measured_start = [], 0, 0, time.perf_counter(), None
    for pod, node, ms in schedule_in_process(w, evaluate_all, tie_break, seed, replicas):
        if id(pod) not in measured:
            unschedulable_placed += node is not None
            continue
        if measured_start is None:
            measured_start = time.perf_counter() - ms / 1000
        scheduled += node is not None
        latencies.append(ms)
    end = time.perf_counter()
    seconds = end - (measured_start if measured_start is not None else start)
    lat = np.array(latencies)
    return {"benchmark": "cycle", "workload": workload, "nodes": len(w.nodes), "init_pods": len(w.init),
            "pods": len(w.measured), "unschedulable_pods": len(w.unschedulable),
            "unschedulable_placed": unschedulable_placed, "scheduled": scheduled,
            "evaluate_all_nodes": evaluate_all, "replica_answers": replicas, "seconds": round(seconds, 3),
            "pods_per_second": round(len(w.measured) / seconds, 1),
            "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 3),
                           "p90": round(float(np.percentile(lat, 90)), 3),
                           "p99": round(float(np.percentile(lat, 99)), 3),
                           "max": round(float(lat.max()), 3)},
            "filter_shards": 0, "score_shards": 0,  # one process: Filter and Score run here
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def add_arguments(p) -> None:
    p.add_argument("--workload", choices=WORKLOAD_NAMES, default="SchedulingBasic")
    p.add_argument("--nodes", type=int, default=None, help="default: the workload's (5,000 for scheduler_perf's)")
    p.add_argument("--init-pods", type=int, default=None, help="default: the workload's")
    p.add_argument("--pods", type=int, default=None, help="measured pods; default: the workload's")
    p.add_argument("--unschedulable-pods", type=int, default=None,
                   help="pods that fit nowhere, tried first (Unschedulable only; default 1,000)")
    p.add_argument("--all-nodes", action="store_true",
                   help="evaluate every node (as explain does) instead of percentageOfNodesToScore")
    p.add_argument("--replicas", action="store_true",
                   help="keep a template's answers for its replicas, as the queue-manager does (mesh/replicas.py)")
    p.add_argument("--tie-break", choices=("random", "name"), default="random")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--processes", type=int, default=1,
                   help="run this many copies at once, each in its own process, and report their sum: "
                        "how much the host's cores give together (on a VM two vCPUs may share one core)")


def _run_args(args) -> tuple:
    return (args.workload, args.nodes, args.init_pods, args.pods, args.all_nodes, args.seed,
            args.unschedulable_pods, args.tie_break, args.replicas)


def run_together(n: int, run_args: tuple) -> dict:
    """`run(*run_args)` in n processes at once (spawned, so each is a fresh interpreter): the
    first's figures, with pods_per_second the sum of all n and each one's in per_process."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(n, mp_context=ctx) as pool:
        results = [f.result() for f in [pool.submit(run, *run_args) for _ in range(n)]]
    out = dict(results[0])
    out["processes"] = n
    out["per_process"] = [r["pods_per_second"] for r in results]
    out["pods_per_second"] = round(sum(out["per_process"]), 1)
    return out


def main(args) -> int:
    if args.processes < 1:
        raise SystemExit("bench-cycle: --processes must be at least 1")
    result = run(*_run_args(args)) if args.processes == 1 else run_together(args.processes, _run_args(args))
    print(json.dumps(result))
    return 0
