"""Permit's Wait in a running mesh (embedded broker, the binder, a queue-manager): a Permit plugin
loaded from this test (Gang, schedmesh.framework.test_permit, through SCHEDMESH_PLUGINS) holds
the pods of a gang until all are there; meanwhile they stay assumed and other pods bind; a
timeout or a deletion rejects a waiting pod, frees its room and (timeout) requeues it as
unschedulable with kube's FailedScheduling message."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port, kafka, poll

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: gang-scheduler
  plugins:
    multiPoint:
      enabled: [{name: Gang}]
  pluginConfig:
  - {name: Gang, args: {timeoutSeconds: 120}}
- schedulerName: gang-short
  plugins:
    multiPoint:
      enabled: [{name: Gang}]
  pluginConfig:
  - {name: Gang, args: {timeoutSeconds: 1}}
- schedulerName: deny-scheduler
  plugins:
    permit:
      enabled: [{name: Deny}]
"""

NODES = "\n---\n".join(f"""
apiVersion: v1
kind: Node
metadata: {{name: node-{i}, labels: {{kubernetes.io/hostname: node-{i}}}}}
status:
  allocatable: {{cpu: "4", memory: 8Gi, pods: "110"}}
  capacity: {{cpu: "4", memory: 8Gi, pods: "110"}}
""" for i in range(2))


def pod(name: str, scheduler: str = "default-scheduler", gang: str = "", size: int = 0, labels: str = "") -> str:
    if gang:
        labels = f"labels: {{gang.schedmesh.test/name: {gang}, gang.schedmesh.test/size: '{size}'}}"
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  {labels}
spec:
  schedulerName: {scheduler}
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: "1"}}}}}}]
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory) -> Iterator[queue_pb2_grpc.SchedulerStub]:
    d: Path = tmp_path_factory.mktemp("permit")
    cfg = d / "scheduler.yaml"
    cfg.write_text(CONFIG)
    with kafka() as bootstrap:
        env = {"SCHEDMESH_KAFKA": bootstrap}
        binder = ServiceProc("services.binder", [], free_port(), env, d)
        qm = ServiceProc("services.queue_manager",
                         ["--binder", binder.target, "--client-id", "qm-permit", "--config", str(cfg)], free_port(),
                         {**env, "SCHEDMESH_PLUGINS": "schedmesh.framework.test_permit:Gang,schedmesh.framework.test_permit:Deny"}, d)
        procs = [binder, qm]
        try:
            binder.start().wait_serving()
            qm.start().wait_serving()
            with grpc.insecure_channel(qm.target) as ch:
                s = queue_pb2_grpc.SchedulerStub(ch)
                s.Apply(queue_pb2.ApplyRequest(manifest=NODES))
                assert poll(lambda: len(s.GetNodes(queue_pb2.GetRequest()).nodes) == 2)
                yield s
        finally:
            for p in reversed(procs):
                p.stop()




def views(stub) -> dict:
    return {v.pod.metadata.name: v for v in stub.GetPods(queue_pb2.GetRequest()).pods}


def requested_cpu(stub) -> int:
    return sum(n.requested_milli_cpu for n in stub.GetNodes(queue_pb2.GetRequest()).nodes)


def bound(stub, *names: str) -> bool:
    v = views(stub)
    return all(n in v and v[n].pod.node_name for n in names)


def waiting(stub, *names: str) -> bool:
    """Held by Permit: in flight (assumed), not bound."""
    v = views(stub)
    return all(n in v and v[n].queue == "in-flight" and not v[n].pod.node_name for n in names)


def failed_scheduling(stub, name: str) -> list[str]:
    try:
        d = stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name=name))
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:  # not in the queue-manager's cache yet
            return []
        raise
    return [e.message for e in d.events if e.reason == "FailedScheduling"]


@pytest.mark.timeout(120)
def test_a_gang_waits_assumed_while_other_pods_bind_then_binds_together(stub) -> None:
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("g-0", "gang-scheduler", "trio", 3) + "---" +
                                      pod("g-1", "gang-scheduler", "trio", 3)))
    # Held, and their cpu is counted on their nodes.
    assert poll(lambda: waiting(stub, "g-0", "g-1") and requested_cpu(stub) == 2000), views(stub)
    # The binding cycle is not blocked by them: a pod of another profile binds meanwhile.
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("plain-0")))
    assert poll(lambda: bound(stub, "plain-0")), views(stub)
    assert waiting(stub, "g-0", "g-1") and requested_cpu(stub) == 3000
    # The third member allows them all.
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("g-2", "gang-scheduler", "trio", 3)))
    assert poll(lambda: bound(stub, "g-0", "g-1", "g-2")), views(stub)
    assert requested_cpu(stub) == 4000
    assert not any(failed_scheduling(stub, n) for n in ("g-0", "g-1", "g-2"))


@pytest.mark.timeout(120)
def test_a_timed_out_pod_is_unreserved_forgotten_and_unschedulable_with_kubes_message(stub) -> None:
    before = requested_cpu(stub)
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("lone-0", "gang-short", "duo", 2)))
    msg = "0/1 nodes are available: 1 rejected due to timeout after waiting 1s at plugin Gang."
    assert poll(lambda: msg in failed_scheduling(stub, "lone-0")), failed_scheduling(stub, "lone-0")
    # Unschedulable (Gang rejected it: no event since helps it), its room freed, never bound.
    assert poll(lambda: views(stub)["lone-0"].queue == "unschedulable"), views(stub)["lone-0"].queue
    v = views(stub)["lone-0"]
    assert not v.pod.node_name and v.message == msg
    cond = next(c for c in v.pod.conditions if c.type == "PodScheduled")
    assert (cond.status, cond.reason, cond.message) == ("False", "Unschedulable", msg)
    assert requested_cpu(stub) == before


@pytest.mark.timeout(120)
def test_deleting_a_waiting_pod_rejects_it(stub) -> None:
    before = requested_cpu(stub)
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("d-0", "gang-scheduler", "pair", 2)))
    assert poll(lambda: waiting(stub, "d-0") and requested_cpu(stub) == before + 1000), views(stub)
    stub.Delete(queue_pb2.DeleteRequest(kind="pod", namespace="default", name="d-0"))
    assert poll(lambda: "d-0" not in views(stub) and requested_cpu(stub) == before)
    # d-0 no longer waits: a new member of its gang is alone and waits in turn...
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("d-1", "gang-scheduler", "pair", 2)))
    assert poll(lambda: waiting(stub, "d-1") and requested_cpu(stub) == before + 1000), views(stub)
    time.sleep(1.0)
    assert waiting(stub, "d-1"), "d-1 was let go by a pod deleted while waiting"
    # ...until the gang is whole again.
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("d-2", "gang-scheduler", "pair", 2)))
    assert poll(lambda: bound(stub, "d-1", "d-2")), views(stub)


@pytest.mark.timeout(120)
def test_a_permit_rejection_in_the_scheduling_cycle_is_a_fit_error_on_the_node(stub) -> None:
    before = requested_cpu(stub)
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("denied-0", "deny-scheduler", labels="labels: {deny: 'yes'}")))
    msg = "0/1 nodes are available: 1 denied."
    assert poll(lambda: msg in failed_scheduling(stub, "denied-0")), failed_scheduling(stub, "denied-0")
    assert poll(lambda: views(stub)["denied-0"].queue == "unschedulable"), views(stub)["denied-0"].queue
    assert requested_cpu(stub) == before
