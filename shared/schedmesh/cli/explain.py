"""`schedmesh explain`: place pending pods on a cluster and show every decision.

Each pending pod gets one full scheduling cycle over every node (as with
percentageOfNodesToScore = 100) and is assumed on its chosen node before the next one.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence, TextIO

from schedmesh.api.admission import AdmissionObjects, admit_created_pod
from schedmesh.api.load import AdmissionError, Manifests, admit_all, load_files, object_uid, refuse_duplicates_across
from schedmesh.api.types import Pod, WorkloadSelector
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState
from schedmesh.framework.profile import Profile
from schedmesh.framework.runtime import Framework, build_frameworks
from schedmesh.plugins.pod_topology_spread import (SELECTOR_SOURCES_SERVICE, WorkloadSelectors,
                                                   WorkloadSelectorSources)
from schedmesh.scheduling.cycle import FitError, SchedulingAlgorithm, run_post_filter
from schedmesh.workloads.daemonset import missing_daemon_pods

# Pods without a creation time are taken as created at this instant plus their position in
# the input (bound pods first), so preemption's "latest start time" rule is reproducible.
BASE_TIME = 1767225600.0  # 2026-01-01T00:00:00Z


@dataclass
class PodDecision:
    pod: str
    chosen: Optional[str]
    nodes: dict[str, dict[str, Any]]
    message: Optional[str] = None
    preemption: Optional[dict[str, Any]] = None
    skipped: Optional[str] = None  # why the pod was not considered (no matching profile)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "chosen": self.chosen, "nodes": self.nodes}
        if self.message is not None:
            out["message"] = self.message
        if self.preemption is not None:
            out["preemption"] = self.preemption
        if self.skipped is not None:
            out["skipped"] = self.skipped
        return out


def daemon_set_pods(cluster: Manifests, pending: Manifests) -> list[Pod]:
    """The pods the DaemonSets of both inputs would create for the cluster's nodes, as their
    controller would (none for a node that already holds its daemon pod), named apart from
    every pod given."""
    pods = cluster.pods + pending.pods
    taken = {(p.namespace, p.name) for p in pods}
    out: list[Pod] = []
    for ds in cluster.daemon_sets + pending.daemon_sets:
        made = missing_daemon_pods(ds, cluster.nodes, pods, lambda ns, name: (ns, name) in taken,
                                   lambda ns, name: object_uid("Pod", ns, name))
        taken.update((p.namespace, p.name) for p in made)
        out += made
    return out


def fill_times(bound: list[Pod], pending: list[Pod]) -> None:
    for i, p in enumerate(bound + pending):
        if p.meta.creation_timestamp is None:
            p.meta.creation_timestamp = BASE_TIME + i
    for p in bound:
        if p.start_time is None:
            p.start_time = p.meta.creation_timestamp


class Explainer:
    """Runs scheduling cycles for pending pods against a snapshot, assuming each placement."""

    def __init__(self, cluster: Manifests, profiles: list[Profile], tie_break: str = "name",
                 percentage_of_nodes_to_score: int = 0, extenders: Optional[list] = None,
                 seed: Optional[int] = None, workloads: Sequence[WorkloadSelector] = ()) -> None:
        """`workloads`: pod controllers besides the cluster's (those of the pods to place)."""
        self.cluster = cluster
        self.snapshot = Snapshot(cluster.nodes, [p for p in cluster.pods if p.node_name],
                                 {ns.name: ns.labels for ns in cluster.namespaces})
        # The controllers of the workloads read here select their pods for PodTopologySpread's
        # default constraints, as the ReplicaSets and StatefulSets they stand for do in kube.
        controllers = WorkloadSelectorSources(WorkloadSelectors([*cluster.workloads, *workloads]))
        self.frameworks: dict[str, Framework] = build_frameworks(profiles,
                                                                 services={SELECTOR_SOURCES_SERVICE: controllers})
        for fw in self.frameworks.values():
            fw.set_snapshot_source(lambda: self.snapshot)
            # Explain's preemption dry run covers every potential node (no random sampling).
            fw.services.update(pdbs=cluster.pdbs, namespaces=self.snapshot.namespace_labels,
                               preemption_all_candidates=True, extenders=extenders or [])
        self.algorithm = SchedulingAlgorithm(percentage_of_nodes_to_score, extenders or [], tie_break, seed)

    def decide(self, pod: Pod) -> PodDecision:
        fw = self.frameworks.get(pod.scheduler_name)
        if fw is None:
            return PodDecision(pod.key, None, {}, skipped=f"no profile for schedulerName {pod.scheduler_name!r}")
        snap = self.snapshot
        names = snap.cols.names
        state = CycleState()
        nodes: dict[str, dict[str, Any]] = {}
        try:
            res = self.algorithm.schedule_pod(fw, state, pod, snap, evaluate_all=True, always_score=True)
        except FitError as err:
            decision = PodDecision(pod.key, None, nodes)
            self._record_failures(nodes, names, err.diagnosis)
            if not pod.node_name:
                result, _ = run_post_filter(fw, state, pod, err)
                decision.preemption = {"node": (result.nominated_node_name or None) if result else None,
                                       "victims": list(result.victims) if result else []}
            decision.message = err.message()
            return decision
        for i, row in enumerate(res.feasible_rows):
            scores = {p: int(s[i]) for p, s in res.plugin_scores.items()}
            nodes[names[row]] = {"feasible": True, "scores": scores, "total": int(res.totals[i])}
        self._record_failures(nodes, names, res.diagnosis)
        snap.add_pod(pod, res.suggested_host)
        return PodDecision(pod.key, res.suggested_host, nodes)

    @staticmethod
    def _record_failures(nodes: dict, names: list[str], diagnosis) -> None:
        if diagnosis is None:
            return
        for name in names:
            if name in nodes:
                continue
            st = diagnosis.node_to_status.get(name)
            nodes[name] = {"feasible": False, "plugin": st.plugin, "reasons": list(st.reasons)}


def render_text(decisions: list[PodDecision], out: TextIO) -> None:
    for d in decisions:
        head = f"pod {d.pod}: " + (f"-> {d.chosen}" if d.chosen else "unschedulable")
        out.write(head + "\n")
        if d.skipped:
            out.write(f"  skipped: {d.skipped}\n\n")
            continue
        feasible = sorted(((n, v) for n, v in d.nodes.items() if v["feasible"]), key=lambda kv: (-kv[1]["total"], kv[0]))
        if feasible:
            plugins = list(feasible[0][1]["scores"])
            short = [p.replace("NodeResources", "NR").replace("BalancedAllocation", "Balanced") for p in plugins]
            width = max(len(n) for n, _ in feasible)
            out.write(f"  {'NODE':<{width}}  {'TOTAL':>5}  " + "  ".join(f"{s:>{max(len(s), 4)}}" for s in short) + "\n")
            for n, v in feasible:
                mark = "*" if n == d.chosen else " "
                out.write(f"{mark} {n:<{width}}  {v['total']:>5}  " +
                          "  ".join(f"{v['scores'].get(p, 0):>{max(len(s), 4)}}" for p, s in zip(plugins, short)) + "\n")
        rejected: dict[tuple, list[str]] = {}
        for n, v in d.nodes.items():
            if not v["feasible"]:
                rejected.setdefault((v["plugin"], tuple(v["reasons"])), []).append(n)
        for (plugin, reasons), ns in sorted(rejected.items(), key=lambda kv: -len(kv[1])):
            listed = ", ".join(sorted(ns)[:4]) + (f", ... ({len(ns)} nodes)" if len(ns) > 4 else "")
            out.write(f"  rejected by {plugin or '-'}: {'; '.join(reasons)}: {listed}\n")
        if d.message:
            out.write(f"  {d.message}\n")
        if d.preemption and d.preemption.get("node"):
            out.write(f"  preemption would evict {', '.join(d.preemption['victims'])} on {d.preemption['node']}\n")
        out.write("\n")


def load_profiles(config_path: Optional[str]) -> tuple[list[Profile], int, list]:
    """Profiles, the global percentageOfNodesToScore and the extenders of a KubeSchedulerConfiguration."""
    from schedmesh.framework.config import default_scheduler_config, load_scheduler_config
    # Without a file: kube-scheduler's defaulted configuration (default profile, default args).
    cfg = load_scheduler_config(config_path) if config_path else default_scheduler_config()
    return cfg.profiles, cfg.percentage_of_nodes_to_score, cfg.build_extenders()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", required=True, action="append",
                   help="YAML/JSON with Nodes, bound Pods (spec.nodeName set), PriorityClasses, RuntimeClasses, "
                        "Namespaces, PDBs, DaemonSets, LimitRanges")
    p.add_argument("--pods", required=True, action="append", help="YAML/JSON with the pods to place, in order")
    p.add_argument("--config", help="a KubeSchedulerConfiguration file (default: kube-scheduler's default profile)")
    p.add_argument("--tie-break", choices=("random", "name"), default="random",
                   help="among top-scoring nodes pick at random (as kube-scheduler) or the smallest name")
    p.add_argument("--seed", type=int, help="random seed for --tie-break random")
    p.add_argument("--output", "-o", choices=("text", "json"), default="text")


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    cluster = load_files(args.cluster)
    pending = load_files(args.pods)
    refuse_duplicates_across(cluster, "--cluster " + " ".join(args.cluster), pending, "--pods " + " ".join(args.pods))
    # A DaemonSet's pods are placed first: its controller creates them as soon as it exists.
    pending.pods[:0] = daemon_set_pods(cluster, pending)
    classes = cluster.priority_classes + pending.priority_classes
    admit_all(cluster, classes)  # bound pods: Priority only (refuses two global defaults too)
    # The pods to place are created as the mesh's apply creates them (schedmesh.api.admission),
    # except that, as kube-scheduler was given the recorded pods, DefaultTolerationSeconds is not
    # run and RuntimeClass admission only for the pods naming a RuntimeClass given here.
    runtime_classes = {c.name: c for c in cluster.runtime_classes + pending.runtime_classes}
    objects = AdmissionObjects({c.name: c for c in classes}, runtime_classes,
                               cluster.limit_ranges + pending.limit_ranges)
    for p in pending.pods:
        try:
            admit_created_pod(p, objects, default_tolerations=False,
                              runtime_class=p.runtime_class_name in runtime_classes)
        except AdmissionError as e:  # named by the file and document it was read from
            raise AdmissionError(pending.pod_source(p), e.path, e.reason) from None
    skipped = [s.key for s in cluster.skipped + pending.skipped]
    if skipped:
        print(f"schedmesh explain: ignoring {len(skipped)} object(s) not used for scheduling: "
              f"{', '.join(skipped[:5])}" + (", ..." if len(skipped) > 5 else ""), file=sys.stderr)
    unbound = [p.key for p in cluster.pods if not p.node_name]
    if unbound:
        print(f"schedmesh explain: ignoring {len(unbound)} pod(s) in --cluster without spec.nodeName "
              f"(put pods to place in --pods): {', '.join(unbound[:5])}", file=sys.stderr)
    bound = [p for p in cluster.pods if p.node_name]
    fill_times(bound, pending.pods)
    profiles, percentage, extenders = load_profiles(args.config)
    explainer = Explainer(cluster, profiles, args.tie_break, percentage, extenders, args.seed, pending.workloads)
    decisions = [explainer.decide(p) for p in pending.pods]
    if args.output == "json":
        out.write('{"results": [\n')
        out.write(",\n".join(json.dumps(d.to_json(), separators=(",", ":")) for d in decisions))
        out.write("\n]}\n")
    else:
        render_text(decisions, out)
    return 0
