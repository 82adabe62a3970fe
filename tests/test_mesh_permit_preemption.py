"""Preemption of pods a Permit plugin holds, in a running mesh (embedded broker, binder,
preemption service, queue-manager; Gang from schedmesh.framework.test_permit): as kube's
prepareCandidate, a waiting victim is rejected in Permit ("preempted") and goes back to the
queue, never deleted; its Preempted event is recorded, and the preemptor lands in its room."""
from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port, kafka, poll
from tests.test_mesh_permit import CONFIG, pod, views, waiting

NODE = """
apiVersion: v1
kind: Node
metadata: {name: node-0, labels: {kubernetes.io/hostname: node-0}}
status:
  allocatable: {cpu: "2", memory: 8Gi, pods: "110"}
  capacity: {cpu: "2", memory: 8Gi, pods: "110"}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""

URGENT = """
apiVersion: v1
kind: Pod
metadata: {name: urgent, namespace: default}
spec:
  priorityClassName: high
  containers: [{name: c, image: nginx, resources: {requests: {cpu: "2"}}}]
"""


def events(stub, name: str) -> list[tuple[str, str]]:
    try:
        d = stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name=name))
    except grpc.RpcError:
        return []
    return [(e.reason, e.message) for e in d.events]


@pytest.mark.timeout(180)
def test_a_waiting_victim_is_rejected_not_deleted(tmp_path: Path) -> None:
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(CONFIG)
    with kafka() as bootstrap:
        env = {"SCHEDMESH_KAFKA": bootstrap,
               "SCHEDMESH_PLUGINS": "schedmesh.framework.test_permit:Gang,schedmesh.framework.test_permit:Deny"}
        binder = ServiceProc("services.binder", [], free_port(), env, tmp_path)
        preemption = ServiceProc("services.preemption", ["--config", str(cfg), "--tie-break", "name"], free_port(),
                                 env, tmp_path)
        qm = ServiceProc("services.queue_manager",
                         ["--binder", binder.target, "--preemption", preemption.target, "--client-id", "qm-pp",
                          "--config", str(cfg)], free_port(), env, tmp_path)
        procs = [binder, preemption, qm]
        try:
            for p in procs:
                p.start().wait_serving()
            with grpc.insecure_channel(qm.target) as ch:
                stub = queue_pb2_grpc.SchedulerStub(ch)
                stub.Apply(queue_pb2.ApplyRequest(manifest=NODE))
                assert poll(lambda: len(stub.GetNodes(queue_pb2.GetRequest()).nodes) == 1)
                # two members of a gang of three: held by Permit, assumed on node-0, which they fill
                stub.Apply(queue_pb2.ApplyRequest(manifest=pod("w-0", "gang-scheduler", "trio", 3) + "---" +
                                                  pod("w-1", "gang-scheduler", "trio", 3)))
                assert poll(lambda: waiting(stub, "w-0", "w-1")), views(stub)
                stub.Apply(queue_pb2.ApplyRequest(manifest=URGENT))
                assert poll(lambda: views(stub).get("urgent") is not None and views(stub)["urgent"].pod.node_name,
                             timeout=60), views(stub)
                v = views(stub)
                assert v["urgent"].pod.node_name == "node-0"
                for name in ("w-0", "w-1"):
                    assert name in v, f"{name} was deleted: kube rejects a waiting victim in Permit"
                    assert not v[name].pod.node_name and not v[name].pod.metadata.deletion_timestamp
                    assert poll(lambda: ("Preempted", f"Preempted by pod {v['urgent'].pod.metadata.uid} on node node-0")
                                 in events(stub, name)), events(stub, name)
                    assert poll(lambda: any(r == "FailedScheduling" and "preempted" in m
                                             for r, m in events(stub, name))), events(stub, name)
        finally:
            for p in reversed(procs):
                p.stop()
