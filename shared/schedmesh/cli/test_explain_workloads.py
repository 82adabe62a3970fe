"""A workload's replicas get PodTopologySpread's system default constraints, as kube gives them:
their controller (a Deployment's ReplicaSet, a StatefulSet, a ReplicationController) or a Service
selects them (helper.DefaultSelector); a Job's pods are not selected by their Job."""
from __future__ import annotations

from schedmesh.api.load import load_text
from schedmesh.cli.explain import Explainer, fill_times
from schedmesh.framework.profile import default_profile

NODES = """
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: z1}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2, topology.kubernetes.io/zone: z2}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
"""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""

PLAIN = """
apiVersion: v1
kind: Pod
metadata: {name: plain, labels: {app: web}}
spec:
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""


def _spread_scores(pending_text: str, cluster_text: str = NODES) -> list[dict]:
    cluster, pending = load_text(cluster_text), load_text(pending_text)
    fill_times([], pending.pods)
    ex = Explainer(cluster, [default_profile()], "name", workloads=pending.workloads)
    out = []
    for p in pending.pods:
        d = ex.decide(p).to_json()
        out.append({n: v["scores"].get("PodTopologySpread") for n, v in d["nodes"].items()})
    return out


def test_replicas_of_a_deployment_are_spread_by_default():
    """kube: hostname (maxSkew 3) and zone (maxSkew 5) constraints, ScheduleAnyway, selecting the
    ReplicaSet's pods. The second replica: n1 holds one of them in its node and zone, so
    round(1*ln 4 + 2) + round(1*ln 4 + 4) -> 9 against 6 on n2; normalised 100*(9+6-s)/9: 66 and
    100, weight 2."""
    first, second = _spread_scores(DEPLOYMENT)
    assert first == {"n1": 200, "n2": 200}
    assert second == {"n1": 132, "n2": 200}


def test_a_pod_no_controller_selects_has_no_default_constraints():
    """Same labels, no controller: PodTopologySpread skips it (no score), as in kube."""
    assert _spread_scores(PLAIN) == [{"n1": None, "n2": None}]


def test_the_cluster_s_workloads_select_its_bound_replicas():
    """A ReplicaSet applied with the cluster (its replica bound on n1) selects that replica when
    a pod it owns is placed: explain reads the controllers of both files."""
    cluster = NODES + """
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: cache}
spec:
  replicas: 1
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec:
      nodeName: n1
      containers: [{name: c, image: redis, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""
    owned = """
apiVersion: v1
kind: Pod
metadata:
  name: cache-extra
  labels: {app: cache}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: cache, uid: u1, controller: true}]
spec:
  containers: [{name: c, image: redis, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""
    assert _spread_scores(owned, cluster) == [{"n1": 132, "n2": 200}]


def test_a_service_selects_the_pods_it_matches():
    """A Service applied with the cluster selects a pod with no controller: the pod gets the
    default constraints with the Service's selector, so the replica-like pod already on n1 counts."""
    cluster = NODES + """
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-old, labels: {app: web}}
spec:
  nodeName: n1
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""
    assert _spread_scores(PLAIN, cluster) == [{"n1": 132, "n2": 200}]


def test_replicas_of_a_replication_controller_are_spread_by_default():
    """An RC's selector (its template's labels when it has none) selects its pods, as a
    ReplicaSet's does: the same scores as the Deployment's replicas."""
    rc = """
apiVersion: v1
kind: ReplicationController
metadata: {name: web}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""
    assert _spread_scores(rc) == [{"n1": 200, "n2": 200}, {"n1": 132, "n2": 200}]


def test_a_job_s_pods_get_no_default_spreading():
    """DefaultSelector reads no Job: its pods, like a pod no controller selects, get no score."""
    job = """
apiVersion: batch/v1
kind: Job
metadata: {name: batch}
spec:
  parallelism: 2
  template:
    metadata: {labels: {app: batch}}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""
    assert _spread_scores(job) == [{"n1": None, "n2": None}] * 2
