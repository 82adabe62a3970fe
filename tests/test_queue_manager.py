"""The queue-manager end to end: real processes (embedded broker, 2 filter + 2 score shards, the
binder, the queue-manager) talking gRPC over sockets and Kafka."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from schedmesh.bus import EventConsumer
from schedmesh.mesh.cluster_cache import TOPIC_PODS
from schedmesh.mesh.records import PodTopicFold
from schedmesh.telemetry.testing import OtlpTraceReceiver
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port, kafka, poll

NODES = "\n---\n".join(f"""
apiVersion: v1
kind: Node
metadata: {{name: node-{i}, labels: {{kubernetes.io/hostname: node-{i}}}}}
status:
  allocatable: {{cpu: "4", memory: 8Gi, pods: "110"}}
  capacity: {{cpu: "4", memory: 8Gi, pods: "110"}}
""" for i in range(4))

PODS = "\n---\n".join(f"""
apiVersion: v1
kind: Pod
metadata: {{name: web-{i}, namespace: default}}
spec:
  containers:
  - name: c
    image: nginx
    resources: {{requests: {{cpu: 500m, memory: 256Mi}}}}
""" for i in range(6))

HUGE = """
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers:
  - name: c
    image: nginx
    resources: {requests: {cpu: "64"}}
"""

BAD_PC = """
apiVersion: v1
kind: Pod
metadata: {name: bad, namespace: default}
spec:
  priorityClassName: no-such-class
  containers: [{name: c, image: nginx}]
"""


class Mesh:
    def __init__(self, bootstrap: str, target: str, procs: list, receiver: OtlpTraceReceiver) -> None:
        self.bootstrap, self.target, self.procs, self.receiver = bootstrap, target, procs, receiver

    def __iter__(self):  # bootstrap, target
        return iter((self.bootstrap, self.target))


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> Iterator[Mesh]:
    log_dir: Path = tmp_path_factory.mktemp("qm-logs")
    with kafka() as bootstrap, OtlpTraceReceiver() as receiver:
        env = {"SCHEDMESH_KAFKA": bootstrap, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
               "OTEL_TRACES_EXPORTER": "otlp", "OTEL_BSP_SCHEDULE_DELAY": "200"}
        procs = [ServiceProc("services.filter_worker", ["--shard", str(i), "--shards", "2"], free_port(), env, log_dir)
                 for i in range(2)]
        procs += [ServiceProc("services.score_worker", ["--shard", str(i), "--shards", "2"], free_port(), env, log_dir)
                  for i in range(2)]
        binder = ServiceProc("services.binder", [], free_port(), env, log_dir)
        procs.append(binder)
        try:
            for p in procs:
                p.start()
            for p in procs:
                p.wait_serving()
            qm = ServiceProc("services.queue_manager",
                             ["--filter-workers", ",".join(p.target for p in procs[:2]),
                              "--score-workers", ",".join(p.target for p in procs[2:4]),
                              "--binder", binder.target, "--client-id", "qm-test"], free_port(), env, log_dir)
            procs.append(qm)
            qm.start()
            qm.wait_serving()
            yield Mesh(bootstrap, qm.target, procs, receiver)
        finally:
            for p in reversed(procs):
                p.stop()


def _stub(target: str) -> queue_pb2_grpc.SchedulerStub:
    return queue_pb2_grpc.SchedulerStub(grpc.insecure_channel(target))


def _wait(fn, timeout: float = 20.0, interval: float = 0.2):
    return poll(fn, timeout, interval)


@pytest.mark.timeout(120)
def test_bad_manifest_is_invalid_argument(mesh) -> None:
    _, target = mesh
    stub = _stub(target)
    with pytest.raises(grpc.RpcError) as e:
        stub.Apply(queue_pb2.ApplyRequest(manifest=BAD_PC, source="bad.yaml"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.priorityClassName" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        stub.Apply(queue_pb2.ApplyRequest(manifest="kind: Pod\nmetadata: [", source="broken.yaml"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "broken.yaml" in e.value.details()


@pytest.mark.timeout(120)
async def test_pods_get_bound_and_unschedulable_pod_is_explained(mesh) -> None:
    bootstrap, target = mesh
    stub = _stub(target)
    applied = stub.Apply(queue_pb2.ApplyRequest(manifest=NODES + "\n---\n" + PODS + "\n---\n" + HUGE)).applied
    assert "pod/default/web-0 created" in applied and "node/node-3 created" in applied

    # Every web pod is bound (the binder's PodRecords on schedmesh.pods).
    want = {f"web-{i}" for i in range(6)}
    bound: dict[str, str] = {}
    fold = PodTopicFold()
    async with EventConsumer(bootstrap, [TOPIC_PODS], client_id="qm-test-watch") as consumer:
        deadline = time.time() + 30
        while not want <= bound.keys() and time.time() < deadline:
            for r in await consumer.getmany(timeout=0.5):
                if r.value is None:
                    continue
                fold.add(r.value)
            bound = fold.bound_by_name()
    assert want <= bound.keys(), f"bound only {sorted(bound)}"
    assert "huge" not in bound
    assert set(bound.values()) <= {f"node-{i}" for i in range(4)}

    # The queue-manager's view agrees, and the huge pod carries kube's FailedScheduling text.
    def bound_views():
        views = {v.pod.metadata.name: v for v in stub.GetPods(queue_pb2.GetRequest()).pods}
        return views if all(n in views and views[n].queue == "bound" for n in want) else None
    views = _wait(bound_views)
    assert views, "GetPods does not show every web pod bound"
    assert {n: views[n].pod.node_name for n in want} == {n: bound[n] for n in want}
    msg = "0/4 nodes are available: 4 Insufficient cpu."
    desc = _wait(lambda: (d := stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name="huge")))
                 and any(e.reason == "FailedScheduling" for e in d.events) and d)
    assert desc, "no FailedScheduling event for the huge pod"
    failed = [e for e in desc.events if e.reason == "FailedScheduling"]
    assert failed[-1].message.startswith(msg), failed[-1].message
    assert desc.pod.message.startswith(msg)
    assert desc.pod.queue in ("unschedulable", "backoffQ", "activeQ", "in-flight")
    huge = _wait(lambda: next((p for p in stub.GetPods(queue_pb2.GetRequest()).pods
                               if p.pod.metadata.name == "huge" and p.pod.conditions), None))
    assert huge is not None and huge.pod.conditions[0].reason == "Unschedulable"

    nodes = stub.GetNodes(queue_pb2.GetRequest()).nodes
    assert sum(n.pods for n in nodes) == 6
    assert sum(n.requested_milli_cpu for n in nodes) == 3000

    # One trace per attempt: queue wait, PreFilter, the shards' Filter/Score, selection, bind.
    tid = _wait(lambda: stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name="web-0")).pod.trace_id)
    assert tid

    def complete(spans) -> bool:
        names = {sp.name for sp in spans if sp.trace_id == tid}
        services = {sp.service_name or "" for sp in spans if sp.trace_id == tid}
        return ({"schedule_pod", "queue_wait", "prefilter", "filter", "score", "select", "bind"} <= names
                and any(x.startswith("filter-worker") for x in services)
                and any(x.startswith("score-worker") for x in services))
    spans = [sp for sp in mesh.receiver.wait_for(complete, timeout=15) if sp.trace_id == tid]
    root = next(sp for sp in spans if sp.name == "schedule_pod")
    assert root.parent_span_id is None
    assert (root.attributes["k8s.namespace.name"], root.attributes["k8s.pod.name"]) == ("default", "web-0")
    by_id = {sp.span_id: sp for sp in spans}
    for name in ("queue_wait", "prefilter", "filter", "score", "select", "bind"):
        sp = next(x for x in spans if x.name == name)
        while sp.parent_span_id in by_id and sp.name != "schedule_pod":
            sp = by_id[sp.parent_span_id]
        assert sp is root, f"{name} is not under schedule_pod"

    # Deleting a pending pod removes it.
    assert "deleted" in stub.Delete(queue_pb2.DeleteRequest(kind="pod", namespace="default", name="huge")).result
    assert _wait(lambda: all(p.pod.metadata.name != "huge" for p in stub.GetPods(queue_pb2.GetRequest()).pods))


@pytest.mark.timeout(120)
async def test_shard_down_pod_waits_then_binds(mesh) -> None:
    """A filter shard that is down fails the attempt with an error: the pod stays queued (with
    backoff), is never lost or half-bound, and binds once the shard is back."""
    stub = _stub(mesh.target)
    stub.Apply(queue_pb2.ApplyRequest(manifest=NODES))  # its own cluster (unchanged if an earlier test applied it)
    shard = mesh.procs[1]
    shard.kill()
    stub.Apply(queue_pb2.ApplyRequest(manifest=PODS.replace("web-", "late-").split("---")[0]))
    time.sleep(2.0)
    view = next(p for p in stub.GetPods(queue_pb2.GetRequest()).pods if p.pod.metadata.name == "late-0")
    assert not view.pod.node_name
    assert view.queue in ("backoffQ", "activeQ", "in-flight", "unschedulable"), view.queue
    again = ServiceProc(shard.module, shard.args, shard.port, {k: v for k, v in shard.env.items()},
                        shard.log.name and Path(shard.log.name).parent)
    mesh.procs.append(again.start())
    again.wait_serving()
    bound = _wait(lambda: next((p for p in stub.GetPods(queue_pb2.GetRequest()).pods
                                if p.pod.metadata.name == "late-0" and p.queue == "bound"), None), timeout=30)
    assert bound is not None, "late-0 was not bound after the shard came back"


def _again(cpu: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: again, namespace: default}}
spec:
  containers:
  - name: c
    image: nginx
    resources: {{requests: {{cpu: "{cpu}"}}}}
"""


@pytest.mark.timeout(120)
def test_a_pod_applied_again_after_its_deletion_is_a_new_pod_and_is_bound(mesh) -> None:
    """`delete pod` then `apply` of the same name: the second pod has a uid of its own, as kube's
    API server gives, and is bound. Under the first one's uid the binder refused it for good
    ("pod default/again has been deleted")."""
    stub = _stub(mesh.target)
    stub.Apply(queue_pb2.ApplyRequest(manifest=NODES))

    def listed(bound: bool = False):
        return next((p.pod for p in stub.GetPods(queue_pb2.GetRequest()).pods
                     if p.pod.metadata.name == "again" and (p.pod.node_name or not bound)), None)

    stub.Apply(queue_pb2.ApplyRequest(manifest=_again("64"), source="again.yaml"))  # fits nowhere: stays pending
    first = _wait(listed)
    assert "deleted" in stub.Delete(queue_pb2.DeleteRequest(kind="pod", namespace="default", name="again")).result
    assert _wait(lambda: listed() is None)
    applied = stub.Apply(queue_pb2.ApplyRequest(manifest=_again("100m"), source="again.yaml")).applied
    assert "pod/default/again created" in applied
    second = _wait(lambda: listed(bound=True), timeout=30)
    assert second.metadata.uid != first.metadata.uid and second.node_name.startswith("node-")


@pytest.mark.parametrize("env, args, message", [
    ({"SCHEDMESH_SHARD_BATCH_SIZE": "abc"}, [], "SCHEDMESH_SHARD_BATCH_SIZE='abc' is not a whole number"),
    ({"SCHEDMESH_SHARD_BATCH_SIZE": "0"}, [], "--shard-batch-size must be at least 1"),
    ({}, ["--shard-batch-size", "0"], "--shard-batch-size must be at least 1"),
])
def test_a_bad_shard_batch_size_is_refused_naming_where_it_came_from(env, args, message) -> None:
    run = subprocess.run([sys.executable, "-m", "services.queue_manager", "--binder", "127.0.0.1:1", *args],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr[-2000:]
    assert message in run.stderr
