"""`schedmesh bench-cycle`: one scheduling cycle per pod, in this process, over N nodes.

Measures the brain alone (PreFilter, Filter, Score over every node, selection), the figure
behind "one pod against 5,000 nodes well under 10 ms". The mesh benchmark is `schedmesh bench`.
"""
from __future__ import annotations

import json
import time

import numpy as np

from schedmesh.bench.workloads import WORKLOADS
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework
from schedmesh.scheduling.cycle import FitError, SchedulingAlgorithm


def run(workload: str, nodes: int, init_pods: int, pods: int, evaluate_all: bool, seed: int = 1) -> dict:
    node_list, init, pending = WORKLOADS[workload](nodes, init_pods, pods, seed)
    snap = Snapshot(node_list, init)
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    algo = SchedulingAlgorithm(seed=seed)
    snap.cols  # build the columns once, as a long-running scheduler has them
    latencies, scheduled = [], 0
    start = time.perf_counter()
    for pod in pending:
        t0 = time.perf_counter()
        try:
            res = algo.schedule_pod(fw, CycleState(), pod, snap, evaluate_all=evaluate_all)
            snap.add_pod(pod, res.suggested_host)
            scheduled += 1
        except FitError:
            pass
        latencies.append((time.perf_counter() - t0) * 1000)
    seconds = time.perf_counter() - start
    lat = np.array(latencies)
    return {"benchmark": "cycle", "workload": workload, "nodes": nodes, "init_pods": init_pods, "pods": pods,
            "scheduled": scheduled, "evaluate_all_nodes": evaluate_all, "seconds": round(seconds, 3),
            "pods_per_second": round(pods / seconds, 1),
            "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 3),
                           "p90": round(float(np.percentile(lat, 90)), 3),
                           "p99": round(float(np.percentile(lat, 99)), 3),
                           "max": round(float(lat.max()), 3)}}


def add_arguments(p) -> None:
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="SchedulingBasic")
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--init-pods", type=int, default=1000)
    p.add_argument("--pods", type=int, default=500)
    p.add_argument("--all-nodes", action="store_true",
                   help="evaluate every node (as explain does) instead of percentageOfNodesToScore")
    p.add_argument("--seed", type=int, default=1)


def main(args) -> int:
    print(json.dumps(run(args.workload, args.nodes, args.init_pods, args.pods, args.all_nodes, args.seed)))
    return 0
