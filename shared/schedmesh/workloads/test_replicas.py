"""The controllers of replicated workloads, as tables: the pods a ReplicaSet, a StatefulSet and a
Job create or delete in one sync given their pods, the order extra pods are deleted in
(ActivePodsWithRanks, ActivePods), the pod made from a workload's template and its name."""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

import pytest

from schedmesh.api.load import JOB_COMPLETION_INDEX, load_text
from schedmesh.api.types import ObjectMeta, OwnerReference, Pod, PodCondition, WorkloadSelector
from schedmesh.workloads.job import BACKOFF_LIMIT_EXCEEDED, COMPLETE, JobHistory, job_plan
from schedmesh.workloads.replicas import (POD_DELETION_COST, deletion_order, pod_name, removal_order,
                                          workload_pod)
from schedmesh.workloads.replicaset import replica_set_plan
from schedmesh.workloads.statefulset import stateful_set_plan

T0 = 1_700_000_000.0
GENERATED = "[bcdfghjklmnpqrstvwxz2456789]{5}"


def workload(kind: str, spec: str = "", name: str = "web") -> WorkloadSelector:
    api = {"Job": "batch/v1", "ReplicationController": "v1"}.get(kind, "apps/v1")
    selector = "" if kind in ("Job", "ReplicationController") else "  selector: {matchLabels: {app: web}}\n"
    restart = "restartPolicy: Never, " if kind == "Job" else ""
    (w,) = load_text(f"""
apiVersion: {api}
kind: {kind}
metadata: {{name: {name}, namespace: shop}}
spec:
{spec}{selector}  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{{restart}containers: [{{name: c}}]}}
""").workloads
    return w


def pod(w: WorkloadSelector, name: str, node: str = "", phase: str = "Pending", ready: bool = False,
        created: Optional[float] = T0, terminating: bool = False, cost: Optional[int] = None,
        index: Optional[int] = None) -> Pod:
    annotations = {} if cost is None else {POD_DELETION_COST: str(cost)}
    if index is not None:
        annotations[JOB_COMPLETION_INDEX] = str(index)
    return Pod(meta=ObjectMeta(name=name, namespace=w.namespace, uid=f"uid-{name}", creation_timestamp=created,
                               deletion_timestamp=T0 if terminating else None, annotations=annotations,
                               owner_references=[OwnerReference(w.kind, w.name, "x", "apps/v1", True)]),
               node_name=node, phase=phase, conditions=[PodCondition("Ready", "True" if ready else "False")])


def running(w: WorkloadSelector, name: str, node: str = "n1", **kw) -> Pod:
    return pod(w, name, node=node, phase="Running", ready=True, **kw)


def names(pods) -> list[str]:
    return [p.name for p in pods]


# ---- the pod made from a workload --------------------------------------------------------------

def test_a_pod_made_from_the_template_is_the_expansion_s_but_for_its_identity():
    (m_pod, *_), w = (lambda m: (m.pods, m.workloads[0]))(load_text("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}, annotations: {a: b}}
    spec: {containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}}]}
"""))
    p = workload_pod(w, "web-x", "uid-1")
    assert (p.name, p.uid, p.namespace, p.meta.creation_timestamp) == ("web-x", "uid-1", "shop", None)
    assert p.labels == m_pod.labels and p.meta.annotations == m_pod.meta.annotations
    assert p.meta.owner_references == m_pod.meta.owner_references
    assert p.containers == m_pod.containers and p.priority is None  # admitted as it is created
    p.labels["x"] = "y"
    assert "x" not in w.spec.template.labels  # each pod its own metadata


@pytest.mark.parametrize("kind, spec, index, pattern", [
    ("ReplicaSet", "", None, f"web-{GENERATED}"),
    ("Deployment", "", None, f"web-[a-z0-9]+-{GENERATED}"),
    ("ReplicationController", "", None, f"web-{GENERATED}"),
    ("StatefulSet", "", 3, "web-3"),
    ("Job", "", None, f"web-{GENERATED}"),
    ("Job", "  completions: 5\n  completionMode: Indexed\n", 4, f"web-4-{GENERATED}"),
], ids=["replicaset", "deployment's replicaset", "replicationcontroller", "statefulset ordinal", "job",
        "indexed job"])
def test_names(kind: str, spec: str, index: Optional[int], pattern: str):
    w = workload(kind, spec)
    first = pod_name(w, index, "seed", lambda n: False)
    assert re.fullmatch(pattern, first), first
    if kind != "StatefulSet":  # drawn again while taken; the same seed draws the same names
        second = pod_name(w, index, "seed", lambda n: n == first)
        assert second != first and re.fullmatch(pattern, second)
        assert pod_name(w, index, "seed", lambda n: False) == first
    p = workload_pod(w, first, "u", index)
    assert (p.labels.get(JOB_COMPLETION_INDEX), p.meta.annotations.get(JOB_COMPLETION_INDEX)) == (
        (str(index), str(index)) if kind == "Job" and index is not None else (None, None))


# ---- which pods go first -----------------------------------------------------------------------

RS = workload("ReplicaSet", "  replicas: 2\n")


@pytest.mark.parametrize("pods, want", [
    ([running(RS, "bound"), pod(RS, "unbound")], ["unbound", "bound"]),
    ([running(RS, "run"), pod(RS, "pending", node="n2")], ["pending", "run"]),
    ([pod(RS, "unknown", node="n1", phase="Unknown"), pod(RS, "pending", node="n2")], ["pending", "unknown"]),
    ([running(RS, "ready"), pod(RS, "not-ready", node="n2", phase="Running")], ["not-ready", "ready"]),
    ([running(RS, "cheap", cost=-5), running(RS, "dear", node="n2", cost=10)], ["cheap", "dear"]),
    ([running(RS, "dear", cost=10), running(RS, "cheap", node="n2", cost=-5)], ["cheap", "dear"]),
    ([running(RS, "bad-cost", cost=None), running(RS, "neg", node="n2", cost=-1)], ["neg", "bad-cost"]),
    ([running(RS, "alone", node="n1"), running(RS, "doubled-a", node="n2"), running(RS, "doubled-b", node="n2", created=T0 - 3600)],
     ["doubled-a", "doubled-b", "alone"]),
    ([running(RS, "old", created=T0 - 3600), running(RS, "new", node="n2", created=T0 - 10)], ["new", "old"]),
    ([running(RS, "no-time", created=None), running(RS, "new", node="n2", created=T0 - 10)], ["no-time", "new"]),
    # 10 s and 12 s old share a power of two of nanoseconds: the uid decides
    ([running(RS, "b", created=T0 - 12), running(RS, "a", node="n2", created=T0 - 10)], ["a", "b"]),
    ([running(RS, "a", created=T0 - 12), running(RS, "b", node="n2", created=T0 - 10)], ["a", "b"]),
], ids=["unscheduled first", "pending before running", "pending before unknown", "not ready first",
        "lower deletion cost first", "lower deletion cost first, either way", "an invalid cost is 0",
        "doubled up first", "newer first", "no creation time first", "same log scale: uid, a",
        "same log scale: uid, b"])
def test_deletion_order_is_active_pods_with_ranks(pods, want):
    assert names(deletion_order(pods, pods, T0)) == want
    assert names(deletion_order(list(reversed(pods)), pods, T0)) == want


def test_removal_order_is_active_pods_without_costs_ranks_or_log_scale():
    pods = [running(RS, "old-cheap", created=T0 - 12, cost=-9), running(RS, "new", node="n1", created=T0 - 10),
            pod(RS, "pending", node="n2")]
    assert names(removal_order(pods)) == ["pending", "new", "old-cheap"]


# ---- ReplicaSet / ReplicationController ---------------------------------------------------------

@pytest.mark.parametrize("kind, replicas, pods, create, delete", [
    ("ReplicaSet", 3, [running(RS, "a"), running(RS, "b", node="n2")], 1, []),
    ("ReplicaSet", 2, [running(RS, "a"), running(RS, "b", node="n2")], 0, []),
    ("ReplicaSet", 2, [running(RS, "a"), running(RS, "b", node="n2", terminating=True)], 1, []),
    ("ReplicaSet", 2, [running(RS, "a"), dataclasses.replace(running(RS, "b"), phase="Failed")], 1, []),
    ("ReplicaSet", 2, [running(RS, "a"), dataclasses.replace(running(RS, "b"), phase="Succeeded")], 1, []),
    ("ReplicaSet", 1, [running(RS, "a", created=T0 - 3600), running(RS, "b", node="n2", created=T0 - 10),
                       pod(RS, "c")], 0, ["c", "b"]),
    ("ReplicaSet", 0, [running(RS, "a"), running(RS, "b", node="n2", terminating=True)], 0, ["a"]),
    ("ReplicationController", 4, [], 4, []),
], ids=["one missing", "enough", "a terminating pod is replaced at once", "an evicted pod is replaced",
        "a succeeded pod is replaced", "scale down: pending, then newer", "scale to zero", "rc"])
def test_replica_set_keeps_replicas_active_pods(kind, replicas, pods, create, delete):
    w = workload(kind, f"  replicas: {replicas}\n")
    plan = replica_set_plan(w, pods, now=T0)
    assert (plan.create, names(p for p, _ in plan.delete)) == ([None] * create, delete)


def test_a_deployment_s_other_replica_sets_rank_the_pods_on_their_nodes():
    pods = [running(RS, "a", node="n1"), running(RS, "b", node="n2")]
    sibling = running(workload("ReplicaSet", name="web-old"), "old", node="n2")
    w = workload("ReplicaSet", "  replicas: 1\n")
    assert names(p for p, _ in replica_set_plan(w, pods, related=pods + [sibling], now=T0).delete) == ["b"]


# ---- StatefulSet -------------------------------------------------------------------------------

SS = workload("StatefulSet", "  replicas: 3\n")


def ss(replicas: int, parallel: bool = False) -> WorkloadSelector:
    policy = "  podManagementPolicy: Parallel\n" if parallel else ""
    return workload("StatefulSet", f"  replicas: {replicas}\n{policy}")


@pytest.mark.parametrize("w, pods, create, delete", [
    (ss(3), [], [0], []),
    (ss(3, parallel=True), [], [0, 1, 2], []),
    (ss(3), [running(SS, "web-0"), pod(SS, "web-1", node="n1")], [], []),
    (ss(3), [running(SS, "web-0"), running(SS, "web-1")], [2], []),
    (ss(3), [running(SS, "web-0"), running(SS, "web-2")], [1], []),
    (ss(3, parallel=True), [running(SS, "web-0"), pod(SS, "web-1", node="n1")], [2], []),
    (ss(3), [running(SS, "web-0"), running(SS, "web-1", terminating=True), running(SS, "web-2")], [], []),
    (ss(3, parallel=True), [running(SS, "web-1", terminating=True)], [0, 2], []),
    (ss(3), [running(SS, "web-0"), dataclasses.replace(running(SS, "web-1"), phase="Failed"),
             running(SS, "web-2")], [], ["web-1"]),
    (ss(3), [running(SS, "web-0"), dataclasses.replace(running(SS, "web-1", terminating=True), phase="Failed")],
     [], []),
    (ss(3, parallel=True), [dataclasses.replace(running(SS, "web-0"), phase="Succeeded")], [1, 2], ["web-0"]),
    (ss(1), [running(SS, "web-0"), running(SS, "web-1"), running(SS, "web-2")], [], ["web-2"]),
    (ss(1, parallel=True), [running(SS, "web-0"), running(SS, "web-1"), running(SS, "web-2")], [],
     ["web-2", "web-1"]),
    (ss(1), [running(SS, "web-0"), running(SS, "web-1"), running(SS, "web-2", terminating=True)], [], []),
    (ss(1), [running(SS, "web-0"), pod(SS, "web-1", node="n1"), running(SS, "web-2")], [], ["web-2"]),
    (ss(1), [running(SS, "web-0"), running(SS, "web-1", terminating=True), pod(SS, "web-2", node="n1")], [], []),
    (ss(1), [running(SS, "web-0"), pod(SS, "web-1", node="n1"), pod(SS, "web-2", node="n1")], [], []),
    (ss(1), [running(SS, "web-0"), running(SS, "web-1"), pod(SS, "web-2", node="n1")], [], ["web-2"]),
    (ss(1), [pod(SS, "web-0", node="n1"), running(SS, "web-1")], [], []),
    (ss(2), [running(SS, "web-0"), running(SS, "web-1"), running(SS, "other-7"),
             running(SS, "web-x")], [], []),
], ids=["ordered: one at a time", "parallel: all at once", "ordered: waits for the lower one to be ready",
        "ordered: the next once ready", "a missing ordinal is made again", "parallel: does not wait",
        "ordered: waits while a lower one terminates", "parallel: a terminating ordinal keeps its name",
        "an ended pod is deleted first", "an ended pod being deleted: wait",
        "parallel: an ended pod is deleted, the others made",
        "ordered scale-down: the highest first, one at a time", "parallel scale-down: all, highest first",
        "ordered scale-down waits while one terminates",
        "ordered scale-down: a ready pod goes though a lower condemned one is not",
        "ordered scale-down: an unready pod waits while a lower one terminates",
        "ordered scale-down waits for an unhealthy pod that is not the first unhealthy",
        "the first unhealthy condemned pod goes", "no scale-down while a replica is unhealthy",
        "names not of its ordinals are ignored"])
def test_stateful_set_plan(w, pods, create, delete):
    plan = stateful_set_plan(w, pods)
    assert (plan.create, names(p for p, _ in plan.delete)) == (create, delete)


# ---- Job ---------------------------------------------------------------------------------------

JOB = workload("Job", "  parallelism: 2\n")


def job(spec: str) -> WorkloadSelector:
    return workload("Job", spec)


def failed(w: WorkloadSelector, name: str, **kw) -> Pod:
    return dataclasses.replace(running(w, name, **kw), phase="Failed")


def sync(w, history, pods, now=T0):
    history.observe(w, pods, now)
    plan = job_plan(w, pods, history, now)
    if plan.condition:
        history.finished = plan.condition
    return plan


@pytest.mark.parametrize("spec, pods, create, delete", [
    ("  parallelism: 2\n", [], [None, None], []),
    ("  parallelism: 2\n", [running(JOB, "a")], [None], []),
    ("  parallelism: 3\n  completions: 2\n", [], [None, None], []),
    ("  parallelism: 1\n", [running(JOB, "a"), pod(JOB, "b")], [], ["b"]),
    ("  parallelism: 2\n  suspend: true\n", [running(JOB, "a")], [], ["a"]),
    ("  parallelism: 2\n  completions: 3\n  completionMode: Indexed\n", [running(JOB, "a", index=1)], [0], []),
    ("  parallelism: 3\n  completions: 3\n  completionMode: Indexed\n",
     [running(JOB, "a", index=0), running(JOB, "b", index=0, created=T0 - 99), running(JOB, "c", index=7)],
     [], ["c", "a"]),
    ("  parallelism: 2\n  podReplacementPolicy: Failed\n", [running(JOB, "a"), running(JOB, "b", terminating=True)],
     [], []),
], ids=["parallelism", "one more", "no more than completions", "extra deleted", "suspended",
        "indexed: the lowest pending index", "indexed: out-of-range and duplicate indexes go",
        "replacement policy Failed: waits for the terminating pod"])
def test_job_keeps_parallelism_pods(spec, pods, create, delete):
    w = job(spec)
    plan = sync(w, JobHistory(), pods)
    assert (plan.create, names(p for p, _ in plan.delete)) == (create, delete)


def test_a_failed_or_deleted_pod_is_replaced_after_the_backoff_until_the_backoff_limit():
    w = job("  parallelism: 1\n  backoffLimit: 2\n")
    h = JobHistory()
    a = running(w, "a")
    assert sync(w, h, [a]).create == []
    # first failure: evicted by its kubelet (stays listed, Failed): replaced after 10 s
    plan = sync(w, h, [failed(w, "a")], T0 + 1)
    assert (plan.create, plan.retry_at, len(h.failed)) == ([], T0 + 11, 1)
    assert sync(w, h, [failed(w, "a")], T0 + 11).create == [None]
    # second: marked for deletion (drained): counted at once, replaced after 20 s
    b = running(w, "b")
    sync(w, h, [failed(w, "a"), b], T0 + 12)
    plan = sync(w, h, [failed(w, "a"), running(w, "b", terminating=True)], T0 + 13)
    assert (plan.create, plan.retry_at, len(h.failed)) == ([], T0 + 33, 2)
    assert sync(w, h, [failed(w, "a")], T0 + 33).create == [None]
    # third, past backoffLimit 2: a pod deleted at once while pending fails the Job
    c = pod(w, "c")
    sync(w, h, [failed(w, "a"), c], T0 + 34)
    d = running(w, "d")  # (another active pod, deleted when the Job fails)
    plan = sync(w, h, [failed(w, "a"), d], T0 + 35)
    assert (plan.condition, plan.create, names(p for p, _ in plan.delete)) == (BACKOFF_LIMIT_EXCEEDED, [], ["d"])
    assert h.finished == BACKOFF_LIMIT_EXCEEDED
    assert sync(w, h, [failed(w, "a")], T0 + 9999).create == []  # no pod is made again


def test_pods_the_controller_deletes_are_no_failures_and_successes_complete_the_job():
    w = job("  parallelism: 2\n  completions: 2\n  backoffLimit: 0\n")
    h = JobHistory()
    a, b, c = running(w, "a"), running(w, "b"), running(w, "c")
    h.removed.add(c.uid)  # deleted by the controller itself (an extra pod)
    sync(w, h, [a, b, c])
    assert sync(w, h, [a, b, running(w, "c", terminating=True)]).condition == ""
    assert sync(w, h, [a, b]).condition == "" and not h.failed
    done = [dataclasses.replace(a, phase="Succeeded")]
    plan = sync(w, h, done + [b])
    assert (plan.create, plan.condition) == ([], "")  # one completion to go, b runs it
    plan = sync(w, h, done + [dataclasses.replace(b, phase="Succeeded")])
    assert (plan.create, plan.condition) == ([], COMPLETE)


def test_a_job_without_completions_stops_making_pods_after_a_success():
    w = job("  parallelism: 2\n")
    h = JobHistory()
    a, b = running(w, "a"), running(w, "b")
    sync(w, h, [a, b])
    plan = sync(w, h, [dataclasses.replace(a, phase="Succeeded"), b])
    assert (plan.create, plan.delete, plan.condition) == ([], [], "")
    assert sync(w, h, [dataclasses.replace(a, phase="Succeeded")]).condition == COMPLETE
