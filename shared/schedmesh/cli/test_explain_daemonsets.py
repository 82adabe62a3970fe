"""`schedmesh explain` with DaemonSets: a DaemonSet in either file makes the pods its controller
would create for the cluster's nodes (none where its pod already runs, none on a node whose taint
it does not tolerate), placed before the pods given and explained like any other; they hold
their node's resources for the pods after them."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from schedmesh.api.load import load_text
from schedmesh.cli import explain
from schedmesh.workloads.daemonset import CONTROLLER_REVISION_HASH_LABEL

NODES = "".join(f"""
---
apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}
spec: {{taints: {taints}}}
status: {{allocatable: {{cpu: "1", memory: 4Gi, pods: "110"}}}}
""" for name, taints in (("n1", "[]"), ("n2", "[]"), ("n3", "[{key: dedicated, value: db, effect: NoSchedule}]"),
                         ("n4", "[]")))

LOGS = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: logs, namespace: infra}
spec:
  selector: {matchLabels: {app: logs}}
  template:
    metadata: {labels: {app: logs}}
    spec:
      containers: [{name: c, image: fluent-bit, resources: {requests: {cpu: 500m}}}]
"""

# logs' pod already on n1, as a cluster recorded from kube holds it
RUNNING_ON_N1 = """
---
apiVersion: v1
kind: Pod
metadata:
  name: logs-running
  namespace: infra
  labels: {app: logs}
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: logs, uid: 0f0f, controller: true}]
spec:
  nodeName: n1
  containers: [{name: c, image: fluent-bit, resources: {requests: {cpu: 500m}}}]
"""

METRICS_ON_N4 = """
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: metrics, namespace: infra}
spec:
  selector: {matchLabels: {app: metrics}}
  template:
    metadata: {labels: {app: metrics}}
    spec:
      nodeSelector: {kubernetes.io/hostname: n4}
      containers: [{name: c, image: node-exporter, resources: {requests: {cpu: 100m}}}]
"""

WEB = """
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 700m}}}]
"""


def explained(tmp_path: Path, cluster: str, pods: str) -> list[dict]:
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "pods.yaml").write_text(pods)
    args = argparse.Namespace(cluster=[str(tmp_path / "cluster.yaml")], pods=[str(tmp_path / "pods.yaml")],
                              config=None, tie_break="name", seed=None, output="json")
    out = tmp_path / "out.json"
    with out.open("w") as f:
        assert explain.run(args, f) == 0
    return json.loads(out.read_text())["results"]


def test_one_pod_per_eligible_node_explained_before_the_pods_given(tmp_path: Path) -> None:
    results = explained(tmp_path, NODES + RUNNING_ON_N1 + METRICS_ON_N4, LOGS + WEB)
    placed = {r["pod"]: r["chosen"] for r in results}
    daemon = [r["pod"] for r in results if r["pod"] != "default/web"]
    # the cluster's DaemonSet first, then the pods file's; logs has its pod on n1, n3's taint keeps it off
    assert [placed[p] for p in daemon] == ["n4", "n2", "n4"]
    assert daemon[0].startswith("infra/metrics-") and all(p.startswith("infra/logs-") for p in daemon[1:])
    assert all(len(p.split("/")[1]) == len("logs-") + 5 for p in daemon[1:])
    # each is explained: NodeAffinity keeps it to its node (its PreFilter, from the matchFields term)
    first_logs = next(r for r in results if r["pod"] == daemon[1])
    assert first_logs["nodes"]["n1"] == {"feasible": False, "plugin": "NodeAffinity",
                                         "reasons": ["node(s) didn't satisfy plugin(s) [NodeAffinity]"]}
    # the daemon pods hold their nodes' cpu: web's 700m fits on no untainted node any more
    web = next(r for r in results if r["pod"] == "default/web")
    assert web["chosen"] is None and "3 Insufficient cpu" in web["message"]
    assert explained(tmp_path, NODES, WEB)[0]["chosen"] == "n1"


def test_the_daemon_pods_carry_the_controller_s_labels(tmp_path: Path) -> None:
    cluster, pending = load_text(NODES), load_text(LOGS)
    pods = explain.daemon_set_pods(cluster, pending)
    assert sorted(p.affinity.node_affinity.required.terms[0].match_fields[0].values[0] for p in pods) == [
        "n1", "n2", "n4"]
    assert {p.labels[CONTROLLER_REVISION_HASH_LABEL] for p in pods} == {pending.daemon_sets[0].template_hash}
    assert explain.daemon_set_pods(cluster, pending)[0].name == pods[0].name  # the same names every time
