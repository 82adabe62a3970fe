"""A Deployment's replicas, and pods a Service selects, through the real queue-manager get
PodTopologySpread's system default constraints, as kube-scheduler gives them (their ReplicaSet,
the Service, selects them), and land where explain puts them: the selectors travel with the Apply
(records.workload_record). A Service is applied, re-applied unchanged and deleted as kubectl says."""
from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from schedmesh.api.load import load_text
from schedmesh.cli.explain import Explainer, fill_times
from schedmesh.framework.profile import default_profile
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port, kafka

# n1 is four times n2: the resource scores prefer n1 for both replicas; default spreading (one
# replica already in n1's node and zone) outweighs that for the second.
NODES = """
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: z1}}
status: {allocatable: {cpu: "16", memory: 32Gi, pods: "110"}, capacity: {cpu: "16", memory: 32Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2, topology.kubernetes.io/zone: z2}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}, capacity: {cpu: "4", memory: 8Gi, pods: "110"}}
"""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"""


SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec:
  selector: {app: svc}
  ports: [{port: 80}]
"""

SERVED_PODS = "".join(f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{app: svc}}}}
spec:
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
""" for name in ("served-0", "served-1"))


def explained(with_controllers: bool, pending_text: str = DEPLOYMENT) -> dict[str, str]:
    cluster, pending = load_text(NODES), load_text(pending_text)
    fill_times([], pending.pods)
    ex = Explainer(cluster, [default_profile()], "name", workloads=pending.workloads if with_controllers else ())
    out = {}
    for p in pending.pods:
        out[p.name] = ex.decide(p).chosen  # assumed there before the next, as the queue-manager does
    return out


def placed(stub, want: dict[str, str], timeout: float = 60) -> dict[str, str]:
    """The nodes the pods named in `want` are bound to, once all are (or at the timeout)."""
    deadline = time.time() + timeout
    while True:
        got = {v.pod.metadata.name: v.pod.node_name for v in stub.GetPods(queue_pb2.GetRequest(), timeout=10).pods}
        if all(got.get(n) for n in want) or time.time() > deadline:
            return {n: got.get(n) for n in want}
        time.sleep(0.2)


@pytest.mark.timeout(120)
def test_replicas_and_a_service_s_pods_are_spread_by_default_through_the_mesh(tmp_path: Path) -> None:
    want = explained(with_controllers=True)
    assert sorted(want.values()) == ["n1", "n2"]
    assert sorted(explained(with_controllers=False).values()) == ["n1", "n1"]  # what no default gives
    # The Service's pods after the replicas, the Service applied with them.
    served = {n: v for n, v in explained(True, DEPLOYMENT + "---" + SERVICE + SERVED_PODS).items()
              if n.startswith("served")}
    assert served == {"served-0": "n1", "served-1": "n2"}
    without = explained(False, DEPLOYMENT + "---" + SERVICE + SERVED_PODS)
    assert (without["served-0"], without["served-1"]) == ("n1", "n1")
    with kafka() as bootstrap:
        env = {"SCHEDMESH_KAFKA": bootstrap}
        binder = ServiceProc("services.binder", [], free_port(), env, tmp_path)
        procs = [binder]
        try:
            binder.start()
            binder.wait_serving()
            qm = ServiceProc("services.queue_manager", ["--binder", binder.target, "--tie-break", "name"],
                             free_port(), env, tmp_path)
            procs.append(qm)
            qm.start()
            qm.wait_serving()
            stub = queue_pb2_grpc.SchedulerStub(grpc.insecure_channel(qm.target))
            stub.Apply(queue_pb2.ApplyRequest(manifest=NODES, source="nodes.yaml"), timeout=30)
            stub.Apply(queue_pb2.ApplyRequest(manifest=DEPLOYMENT, source="web.yaml"), timeout=30)
            assert placed(stub, want) == want
            applied = stub.Apply(queue_pb2.ApplyRequest(manifest=SERVICE + SERVED_PODS, source="svc.yaml"), timeout=30)
            assert list(applied.applied)[0] == "service/default/svc created"
            assert placed(stub, served) == served
            again = stub.Apply(queue_pb2.ApplyRequest(manifest=SERVICE, source="svc.yaml"), timeout=30)
            assert list(again.applied) == ["service/default/svc unchanged"]
            gone = stub.Delete(queue_pb2.DeleteRequest(kind="service", namespace="default", name="svc"), timeout=30)
            assert gone.result == 'service "svc" deleted'
            with pytest.raises(grpc.RpcError) as e:
                stub.Delete(queue_pb2.DeleteRequest(kind="service", namespace="default", name="svc"), timeout=30)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
        finally:
            for p in reversed(procs):
                p.stop()
