"""The whole mesh as a user runs it (`schedmesh up --detach`: broker, queue-manager, filter and
score workers, binder, kubelet agent, each its own process), checked from the outside:

* one pod's scheduling attempt is one trace across at least four services, with correct
  parent links (a real OTLP/gRPC receiver in the test);
* killing a filter worker while pods are being scheduled (the supervisor restarts it) loses no pod
  and binds none twice.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from schedmesh.bus import EventConsumer
from schedmesh.mesh.cluster_cache import TOPIC_PODS
from schedmesh.telemetry.testing import OtlpTraceReceiver
from schedmesh.mesh.records import PodTopicFold
from schedmesh.security.local import mesh_channel
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
SCHEDMESH = [sys.executable, "-m", "schedmesh.cli.main"]

POOL = """
pools:
- name: node
  count: 12
  cpu: "4"
  memory: 16Gi
  pods: 110
  zones: [zone-a, zone-b, zone-c]
"""


def pods_manifest(prefix: str, n: int, cpu: str = "100m") -> str:
    docs = []
    for i in range(n):
        docs.append(f"""apiVersion: v1
kind: Pod
metadata: {{name: {prefix}-{i}, namespace: default, labels: {{app: {prefix}}}}}
spec:
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: {cpu}, memory: 64Mi}}}}}}]
""")
    return "---\n".join(docs)


class RunningMesh:
    def __init__(self, base: Path, env: dict) -> None:
        self.base, self.env = base, env
        self.state = json.loads((base / ".schedmesh" / "mesh.json").read_text())
        self.stub = queue_pb2_grpc.SchedulerStub(mesh_channel(self.state))  # user's certificate and API token
    def wait_restarted(self, name: str, old_pid: int, timeout: float = 60) -> dict:
        """The supervisor of `schedmesh up` restarts a dead service on its port; wait for that."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.state = json.loads((self.base / ".schedmesh" / "mesh.json").read_text())
            info = self.proc(name)
            if info["pid"] != old_pid and info["restarts"] > 0:
                return info
            time.sleep(0.2)
        raise AssertionError(f"{name} was not restarted within {timeout}s")

    def proc(self, name: str) -> dict:
        return next(p for p in self.state["procs"] if p["name"] == name)

    def apply(self, text: str) -> None:
        self.stub.Apply(queue_pb2.ApplyRequest(manifest=text, source="test.yaml"), timeout=60)

    def bound(self, prefix: str) -> dict[str, str]:
        return {p.pod.metadata.name: p.pod.node_name for p in self.stub.GetPods(queue_pb2.GetRequest()).pods
                if p.pod.metadata.name.startswith(prefix + "-") and p.pod.node_name}

    def wait_bound(self, prefix: str, n: int, timeout: float = 120) -> dict[str, str]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = self.bound(prefix)
            if len(got) == n:
                return got
            time.sleep(0.3)
        raise AssertionError(f"only {len(self.bound(prefix))}/{n} {prefix} pods bound after {timeout}s")


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    base: Path = tmp_path_factory.mktemp("mesh")
    (base / "pool.yaml").write_text(POOL)
    with OtlpTraceReceiver() as receiver:
        env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_TRACES_EXPORTER": "otlp",
               "OTEL_BSP_SCHEDULE_DELAY": "200", "PYTHONPATH": str(ROOT)}
        up = subprocess.run([*SCHEDMESH, "up", "--detach", "--filter-workers", "2", "--score-workers", "2",
                             "--pool", "pool.yaml"], cwd=base, env=env, capture_output=True, text=True, timeout=240)
        assert up.returncode == 0, up.stderr
        m = RunningMesh(base, env)
        m.receiver = receiver
        try:
            yield m
        finally:
            subprocess.run([*SCHEDMESH, "down"], cwd=base, env=env, capture_output=True, timeout=120)


@pytest.mark.timeout(300)
def test_one_trace_across_the_services(mesh) -> None:
    mesh.apply(pods_manifest("traced", 1))
    mesh.wait_bound("traced", 1)
    tid = ""
    deadline = time.time() + 30
    while not tid and time.time() < deadline:
        tid = mesh.stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name="traced-0")).pod.trace_id
        time.sleep(0.2)
    assert tid, "the pod has no trace id"

    def complete(spans) -> bool:
        mine = [s for s in spans if s.trace_id == tid]
        return {"schedule_pod", "start_pod"} <= {s.name for s in mine} and len({s.service_name for s in mine}) >= 5

    spans = [s for s in mesh.receiver.wait_for(complete, timeout=30) if s.trace_id == tid]
    services = {s.service_name for s in spans}
    for kind in ("queue-manager", "filter-worker", "score-worker", "binder", "agent"):
        assert any(kind in name for name in services), f"no {kind} span in the trace: {sorted(services)}"
    by_id = {s.span_id: s for s in spans}
    roots = [s for s in spans if s.parent_span_id is None]
    assert [r.name for r in roots] == ["schedule_pod"], "one root per attempt"
    for s in spans:  # every span leads up to the attempt's root through its parents
        hops = 0
        while s.parent_span_id is not None:
            assert s.parent_span_id in by_id, f"{s.service_name}/{s.name} has a parent outside the trace"
            s = by_id[s.parent_span_id]
            hops += 1
            assert hops < 50
        assert s is roots[0]


GATED = """apiVersion: v1
kind: Pod
metadata: {name: gated-0, namespace: default}
spec:
  GATES
  containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}}]
"""


@pytest.mark.timeout(200)
def test_gated_pod_waits_until_its_gates_are_removed(mesh) -> None:
    mesh.apply(GATED.replace("GATES", "schedulingGates: [{name: example.com/quota}]"))
    time.sleep(3)
    view = next(p for p in mesh.stub.GetPods(queue_pb2.GetRequest()).pods if p.pod.metadata.name == "gated-0")
    assert view.queue == "gated" and not view.pod.node_name
    got = subprocess.run([*SCHEDMESH, "get", "pods"], cwd=mesh.base, env=mesh.env, capture_output=True, text=True,
                         timeout=60)
    assert "SchedulingGated" in next(line for line in got.stdout.splitlines() if "gated-0" in line)
    mesh.apply(GATED.replace("GATES", "schedulingGates: []"))  # the gate's owner removes it
    mesh.wait_bound("gated", 1, timeout=60)


BIG_NODE = """apiVersion: v1
kind: Node
metadata: {name: big-0, labels: {topology.kubernetes.io/zone: zone-a}}
status: {capacity: {cpu: "16", memory: 64Gi, pods: "110"}}
"""


@pytest.mark.timeout(200)
def test_unschedulable_pod_moves_when_a_node_that_fits_arrives(mesh) -> None:
    """Event-driven requeueing: the Node/Add event wakes the pod NodeResourcesFit rejected,
    long before the 5-minute flush of unschedulable pods."""
    mesh.apply(pods_manifest("big", 1, cpu="6"))
    deadline = time.time() + 60
    message = ""
    while not message and time.time() < deadline:
        try:
            message = mesh.stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name="big-0")).pod.message
        except grpc.RpcError as e:  # not in the queue-manager's cache yet
            assert e.code() == grpc.StatusCode.NOT_FOUND
        time.sleep(0.3)
    assert message.startswith("0/12 nodes are available: 12 Insufficient cpu.")
    t0 = time.time()
    mesh.apply(BIG_NODE)
    assert mesh.wait_bound("big", 1, timeout=60) == {"big-0": "big-0"}
    assert time.time() - t0 < 30


async def _bound_records(bootstrap: str) -> dict[str, set[str]]:
    """Every pod uid -> the set of nodes it was ever published as bound to."""
    fold = PodTopicFold()
    async with EventConsumer(bootstrap, [TOPIC_PODS], client_id="test-audit") as consumer:
        for r in await consumer.catch_up(60):
            fold.add(r.value)
    return {uid: set(nodes) for uid, nodes in fold.bindings.items()
            if fold.names.get(uid, "").split("/")[-1].startswith("churn-")}


@pytest.mark.timeout(400)
def test_killing_a_filter_worker_loses_no_pod_and_binds_none_twice(mesh) -> None:
    victim = mesh.proc("filter-worker-1")
    n = 300
    mesh.apply(pods_manifest("churn", n))
    os.kill(victim["pid"], signal.SIGKILL)  # while the pods are being scheduled
    assert len(mesh.bound("churn")) < n, "scheduling finished before the worker died; nothing was tested"
    mesh.wait_restarted("filter-worker-1", victim["pid"])
    placed = mesh.wait_bound("churn", n, timeout=240)
    assert len(placed) == n
    history = asyncio.run(_bound_records(mesh.state["bootstrap"]))
    assert len(history) == n, "every pod was published bound"
    twice = {uid: ns for uid, ns in history.items() if len(ns) > 1}
    assert not twice, f"bound to more than one node: {twice}"


@pytest.mark.timeout(400)
def test_broker_restart_loses_nothing_that_is_owned(mesh) -> None:
    """The embedded broker keeps topics in memory only. After it restarts empty, agents
    re-register their nodes and running pods, the queue-manager re-publishes what was applied
    through it, and scheduling goes on."""
    before = {n.node.metadata.name for n in mesh.stub.GetNodes(queue_pb2.GetRequest()).nodes}
    broker = mesh.proc("broker")
    os.kill(broker["pid"], signal.SIGTERM)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(broker["pid"], 0)
            time.sleep(0.2)
        except ProcessLookupError:
            break
    mesh.wait_restarted("broker", broker["pid"])
    mesh.apply(pods_manifest("after-restart", 3))
    placed = mesh.wait_bound("after-restart", 3, timeout=240)
    assert set(placed.values()) <= before
    history = asyncio.run(_all_pod_names(mesh.state["bootstrap"]))
    # Pods bound before the restart were re-published by their agent.
    assert any(name.startswith("churn-") for name in history)
    nodes = {n.node.metadata.name for n in mesh.stub.GetNodes(queue_pb2.GetRequest()).nodes}
    assert nodes == before


async def _all_pod_names(bootstrap: str) -> set[str]:
    fold = PodTopicFold()
    async with EventConsumer(bootstrap, [TOPIC_PODS], client_id="test-audit-2") as consumer:
        for r in await consumer.catch_up(60):
            fold.add(r.value)
    return {name.split("/", 1)[1] for name in fold.names.values()}
