"""The DaemonSet controller's decisions: NodeShouldRunDaemonPod, the pod it makes, one sync's plan
(failed, succeeded, extra, misplaced and outdated pods) and maxUnavailable."""
from __future__ import annotations

import dataclasses
from typing import Optional

import pytest

from schedmesh.api.load import load_text
from schedmesh.api.types import (NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, DaemonSet, Node, ObjectMeta,
                                 PodCondition, Taint)
from schedmesh.plugins.node_affinity.matcher import required_node_affinity
from schedmesh.workloads.daemonset import (CONTROLLER_REVISION_HASH_LABEL, TEMPLATE_GENERATION_LABEL,
                                           FailedPodBackoff, controlled_by, daemon_pod, max_unavailable,
                                           missing_daemon_pods, should_run, sync_plan, target_node)


def daemon_set(spec_extra: str = "", pod_extra: str = "", strategy: str = "") -> DaemonSet:
    (ds,) = load_text(f"""
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: infra}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
{strategy}  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
      containers: [{{name: c, image: agent, resources: {{requests: {{cpu: 100m}}}}}}]
{pod_extra}{spec_extra}""").daemon_sets
    return ds


def node(name: str, labels: Optional[dict] = None, *taints: Taint) -> Node:
    return Node(meta=ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, **(labels or {})}),
                taints=list(taints))


ZONE_A = "      nodeSelector: {zone: a}\n"
AFFINITY_NOT_GPU = """      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: gpu, operator: DoesNotExist}]}]
"""
TOLERATE_DEDICATED = "      tolerations: [{key: dedicated, operator: Exists}]\n"


@pytest.mark.parametrize("name, pod_extra, n, want", [
    ("plain node", "", node("n1"), (True, True)),
    ("template nodeName is this node", "      nodeName: n1\n", node("n1"), (True, True)),
    ("template nodeName is another node", "      nodeName: n2\n", node("n1"), (False, False)),
    ("nodeSelector matches", ZONE_A, node("n1", {"zone": "a"}), (True, True)),
    ("nodeSelector does not match", ZONE_A, node("n1", {"zone": "b"}), (False, False)),
    ("required affinity matches", AFFINITY_NOT_GPU, node("n1"), (True, True)),
    ("required affinity does not match", AFFINITY_NOT_GPU, node("n1", {"gpu": "yes"}), (False, False)),
    ("untolerated NoSchedule: no new pod, the one there stays", "",
     node("n1", None, Taint("dedicated", NO_SCHEDULE)), (False, True)),
    ("untolerated NoExecute: none at all", "", node("n1", None, Taint("dedicated", NO_EXECUTE)), (False, False)),
    ("NoSchedule and NoExecute untolerated", "",
     node("n1", None, Taint("a", NO_SCHEDULE), Taint("b", NO_EXECUTE)), (False, False)),
    ("PreferNoSchedule does not count", "", node("n1", None, Taint("dedicated", PREFER_NO_SCHEDULE)), (True, True)),
    ("tolerated by the template", TOLERATE_DEDICATED,
     node("n1", None, Taint("dedicated", NO_SCHEDULE), Taint("dedicated", NO_EXECUTE)), (True, True)),
    ("unschedulable (cordoned): tolerated by the daemon tolerations", "",
     node("n1", None, Taint("node.kubernetes.io/unschedulable", NO_SCHEDULE)), (True, True)),
    ("unreachable NoExecute: tolerated by the daemon tolerations", "",
     node("n1", None, Taint("node.kubernetes.io/unreachable", NO_EXECUTE)), (True, True)),
    ("memory pressure: tolerated by the daemon tolerations", "",
     node("n1", None, Taint("node.kubernetes.io/memory-pressure", NO_SCHEDULE)), (True, True)),
    ("network unavailable, not host network: untolerated", "",
     node("n1", None, Taint("node.kubernetes.io/network-unavailable", NO_SCHEDULE)), (False, True)),
    ("network unavailable, host network: tolerated", "      hostNetwork: true\n",
     node("n1", None, Taint("node.kubernetes.io/network-unavailable", NO_SCHEDULE)), (True, True)),
])
def test_node_should_run_daemon_pod(name, pod_extra, n, want):
    assert should_run(daemon_set(pod_extra=pod_extra), n) == want


def test_the_pod_made_for_a_node():
    ds = daemon_set(pod_extra=AFFINITY_NOT_GPU + TOLERATE_DEDICATED)
    p = daemon_pod(ds, "n1", "agent-abcde", "uid-1")
    assert (p.namespace, p.name, p.uid, p.node_name) == ("infra", "agent-abcde", "uid-1", "")
    assert p.labels == {"app": "agent", TEMPLATE_GENERATION_LABEL: "1", CONTROLLER_REVISION_HASH_LABEL: ds.template_hash}
    (ref,) = p.meta.owner_references
    assert (ref.api_version, ref.kind, ref.name, ref.uid, ref.controller) == ("apps/v1", "DaemonSet", "agent",
                                                                             ds.meta.uid, True)
    assert ds.meta.uid
    # the template's required affinity is replaced by the one term naming the node
    (term,) = p.affinity.node_affinity.required.terms
    assert term.match_expressions == [] and [(r.key, r.operator, r.values) for r in term.match_fields] == [
        ("metadata.name", "In", ["n1"])]
    assert required_node_affinity(p).match(node("n1", {"gpu": "yes"}))
    assert not required_node_affinity(p).match(node("n2"))
    assert target_node(p) == "n1" and controlled_by(ds, p)
    # the template's toleration, then the controller's
    assert [(t.key, t.effect, t.toleration_seconds) for t in p.tolerations] == [
        ("dedicated", "", None),
        ("node.kubernetes.io/not-ready", NO_EXECUTE, None), ("node.kubernetes.io/unreachable", NO_EXECUTE, None),
        ("node.kubernetes.io/disk-pressure", NO_SCHEDULE, None),
        ("node.kubernetes.io/memory-pressure", NO_SCHEDULE, None),
        ("node.kubernetes.io/pid-pressure", NO_SCHEDULE, None),
        ("node.kubernetes.io/unschedulable", NO_SCHEDULE, None)]
    assert ds.template.affinity.node_affinity.required.terms[0].match_fields == []  # the template is untouched
    assert p.containers == ds.template.containers and p.phase == "Pending"


def pod_of(ds: DaemonSet, node_name: str, name: str, *, phase: str = "Running", bound: bool = True,
           created: float = 0.0, ready: bool = True, outdated: bool = False, terminating: bool = False):
    p = daemon_pod(ds, node_name, name, f"uid-{name}")
    labels = dict(p.labels)
    if outdated:
        labels[CONTROLLER_REVISION_HASH_LABEL], labels[TEMPLATE_GENERATION_LABEL] = "old", "0"
    meta = dataclasses.replace(p.meta, labels=labels, creation_timestamp=created,
                               deletion_timestamp=1.0 if terminating else None)
    return dataclasses.replace(p, meta=meta, node_name=node_name if bound else "", phase=phase,
                               conditions=[PodCondition("Ready", "True" if ready else "False")])


def names(plan) -> tuple[list[str], list[tuple[str, str]]]:
    return plan.create_on, [(p.name, why) for p, why in plan.delete]


def test_plan_creates_deletes_and_prunes():
    ds = daemon_set()
    nodes = [node("n1"), node("n2"), node("n3"), node("n4", None, Taint("dedicated", NO_EXECUTE)),
             node("n5", None, Taint("dedicated", NO_SCHEDULE)), node("n6")]
    pods = [pod_of(ds, "n2", "failed", phase="Failed"),
            pod_of(ds, "n3", "young", created=20.0), pod_of(ds, "n3", "old", created=10.0),
            pod_of(ds, "n3", "pending", created=5.0, bound=False),
            pod_of(ds, "n4", "misplaced"), pod_of(ds, "n5", "stays"),
            pod_of(ds, "n6", "done", phase="Succeeded"), pod_of(ds, "n6", "going", terminating=True),
            pod_of(ds, "gone", "orphan", bound=False)]
    assert names(sync_plan(ds, nodes, pods)) == (["n1"], [
        ("failed", "failed"),
        ("young", "more than one on its node"), ("pending", "more than one on its node"),  # the oldest bound one stays
        ("misplaced", "its node no longer runs it"),
        ("done", "succeeded"),
        ("orphan", "its node gone is gone")])


def test_a_failed_pod_s_deletion_is_backed_off_per_node():
    ds = daemon_set()
    backoff = FailedPodBackoff()
    failed = [pod_of(ds, "n1", "f1", phase="Failed")]
    assert names(sync_plan(ds, [node("n1")], failed, 100.0, backoff)) == ([], [("f1", "failed")])
    waiting = sync_plan(ds, [node("n1")], [pod_of(ds, "n1", "f2", phase="Failed")], 100.5, backoff)
    assert names(waiting) == ([], []) and waiting.retry_at == 101.0
    assert names(sync_plan(ds, [node("n1")], [pod_of(ds, "n1", "f2", phase="Failed")], 101.0, backoff)) == (
        [], [("f2", "failed")])
    assert sync_plan(ds, [node("n1")], [pod_of(ds, "n1", "f3", phase="Failed")], 102.0, backoff).retry_at == 103.0


@pytest.mark.parametrize("written, desired, want", [
    ("1", 10, 1), ("3", 10, 3), ("0", 10, 1), ("10%", 10, 1), ("25%", 10, 3), ("10%", 3, 1), ("100%", 7, 7),
    ("0%", 4, 1), ("1", 0, 1), ("50%", 0, 0),
])
def test_max_unavailable_as_an_integer_or_a_percentage(written, desired, want):
    assert max_unavailable(dataclasses.replace(daemon_set(), max_unavailable=written), desired) == want


def test_rolling_update_replaces_outdated_pods_max_unavailable_at_a_time():
    ds = daemon_set(strategy="  updateStrategy: {rollingUpdate: {maxUnavailable: 2}}\n")
    nodes = [node(f"n{i}") for i in range(1, 6)]
    old = [pod_of(ds, f"n{i}", f"old-{i}", outdated=True) for i in range(1, 6)]
    assert names(sync_plan(ds, nodes, old)) == ([], [("old-1", "outdated"), ("old-2", "outdated")])
    # n1 replaced and ready, n2 replaced but not ready yet: one more may go
    progress = [pod_of(ds, "n1", "new-1"), pod_of(ds, "n2", "new-2", ready=False), *old[2:]]
    assert names(sync_plan(ds, nodes, progress)) == ([], [("old-3", "outdated")])
    # an outdated pod that is not available is replaced at once, beyond the budget
    broken = [pod_of(ds, "n1", "new-1", ready=False), progress[1], pod_of(ds, "n3", "old-3", outdated=True, ready=False),
              *old[3:]]
    assert names(sync_plan(ds, nodes, broken)) == ([], [("old-3", "outdated")])
    # a node with no pod counts as unavailable; manage creates first, the update waits
    assert names(sync_plan(ds, nodes, old[1:])) == (["n1"], [])
    assert names(sync_plan(ds, nodes, [pod_of(ds, "n1", "new-1", ready=False), *old[1:]])) == (
        [], [("old-2", "outdated")])


def test_rolling_update_with_a_percentage_and_on_delete():
    nodes = [node(f"n{i}") for i in range(1, 5)]
    pct = daemon_set(strategy="  updateStrategy: {rollingUpdate: {maxUnavailable: 50%}}\n")
    old = [pod_of(pct, f"n{i}", f"old-{i}", outdated=True) for i in range(1, 5)]
    assert len(sync_plan(pct, nodes, old).delete) == 2
    on_delete = daemon_set(strategy="  updateStrategy: {type: OnDelete}\n")
    assert names(sync_plan(on_delete, nodes, old)) == ([], [])


def test_a_pod_is_current_by_hash_or_by_generation():
    ds = daemon_set()
    by_generation = pod_of(ds, "n1", "p", outdated=True)
    by_generation.meta.labels[TEMPLATE_GENERATION_LABEL] = "1"
    assert names(sync_plan(ds, [node("n1")], [by_generation])) == ([], [])


def test_missing_pods_skip_covered_nodes_and_taken_names():
    ds = daemon_set()
    nodes = [node("n1"), node("n2"), node("n3", None, Taint("dedicated", NO_SCHEDULE))]
    existing = pod_of(ds, "n1", "agent-here")
    first = missing_daemon_pods(ds, nodes, [existing], lambda ns, n: False, lambda ns, n: f"uid-{n}")
    assert [target_node(p) for p in first] == ["n2"]
    again = missing_daemon_pods(ds, nodes, [existing], lambda ns, n: False, lambda ns, n: f"uid-{n}")
    assert [p.name for p in again] == [p.name for p in first]  # the same for the same DaemonSet and node
    avoided = missing_daemon_pods(ds, nodes, [existing], lambda ns, n: n == first[0].name, lambda ns, n: n)
    assert avoided[0].name != first[0].name and avoided[0].name.startswith("agent-") and len(avoided[0].name) == 11
