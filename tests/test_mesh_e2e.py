"""The whole mesh as a user runs it (`schedmesh up --detach`: broker, queue-manager, filter and
score workers, binder, kubelet agent, each its own process), checked from the outside:

* one pod's scheduling attempt is one trace across at least four services, with correct
  parent links and kube's k8s.* span attributes (a real OTLP/gRPC receiver in the test);
* the queue-manager's JSON log lines of an attempt, bound or unschedulable, carry its pod and
  trace id (the mesh runs with SCHEDMESH_LOG_FORMAT=json, SCHEDMESH_VERBOSITY=4);
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

from tests.mesh_harness import EXTERNAL_KAFKA, SKIP_EMBEDDED_BROKER_KILL, up_kafka_args

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
               "OTEL_BSP_SCHEDULE_DELAY": "200", "PYTHONPATH": str(ROOT),
               # kube's JSON lines at -v=4 (kube's debug level: the queue's moves too)
               "SCHEDMESH_LOG_FORMAT": "json", "SCHEDMESH_VERBOSITY": "4"}
        up = subprocess.run([*SCHEDMESH, "up", "--detach", "--filter-workers", "2", "--score-workers", "2",
                             "--pool", "pool.yaml", *up_kafka_args(base)], cwd=base, env=env, capture_output=True,
                            text=True, timeout=240)
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
    # kube's / OpenTelemetry's k8s.* names on every span about the pod, in every service
    node = mesh.bound("traced")["traced-0"]
    uid = mesh.stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name="traced-0")).pod.pod.metadata.uid
    want = {"k8s.pod.name": "traced-0", "k8s.namespace.name": "default", "k8s.node.name": node}
    for name in ("schedule_pod", "bind", "start_pod"):
        span = next(s for s in spans if s.name == name)
        assert {k: span.attributes.get(k) for k in want} == want, (name, span.attributes)
        assert span.attributes.get("k8s.pod.uid") == uid, (name, span.attributes)
        assert not {"pod", "node", "schedmesh.pod", "schedmesh.node"} & span.attributes.keys(), span.attributes
    assert next(s for s in spans if s.name == "select").attributes.get("k8s.node.name") == node
    for s in spans:  # every span leads up to the attempt's root through its parents
        hops = 0
        while s.parent_span_id is not None:
            assert s.parent_span_id in by_id, f"{s.service_name}/{s.name} has a parent outside the trace"
            s = by_id[s.parent_span_id]
            hops += 1
            assert hops < 50
        assert s is roots[0]


@pytest.mark.timeout(300)
def test_a_runs_shard_work_is_traced_per_request_and_per_pod(mesh) -> None:
    """Pods applied together are asked of the shards as one run, on each shard's stream
    (FilterBatches, ScoreBatches): each request gets its own server span (not one span as long as
    the stream), and each pod's work on a shard joins that pod's attempt trace."""
    mesh.apply(pods_manifest("run", 6))
    bound = mesh.wait_bound("run", 6)

    def shard_pod_spans(spans) -> list:
        return [s for s in spans if s.name in ("filter", "score") and "-worker" in s.service_name
                and s.attributes.get("k8s.pod.name") in bound]

    def batched(spans) -> bool:
        names = {(s.service_name.split("-worker")[0], s.name) for s in spans}
        roots = {s.trace_id for s in spans if s.name == "schedule_pod"}
        per_pod = shard_pod_spans(spans)
        return ({("filter", "FilterBatches"), ("score", "ScoreBatches")} <= names
                and {"filter", "score"} <= {s.name for s in per_pod} and all(s.trace_id in roots for s in per_pod))
    spans = mesh.receiver.wait_for(batched, timeout=30)  # each pod's shard spans in its attempt's trace
    requests = [s for s in spans if s.name in ("FilterBatches", "ScoreBatches")]
    # (the idle feeds are requests of no pods)
    assert any(s.attributes.get("schedmesh.pods", 0) >= 1 for s in requests), [s.attributes for s in requests]
    assert all(s.end_time_ns - s.start_time_ns < 10 * 10**9 for s in requests), "a request's span, not the stream's"
    assert not [s for s in spans if s.name.endswith("Batches") and s.name.startswith("/")], "a span per stream"


# scheduling_queue's lines: a move at the end of an attempt; those on a watch event
_AFTER_ATTEMPT = "after a failed attempt"
_EVENT_LINES = (" by its update (", " updated while in flight", " gated by ")


def _json_lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:  # a line being written
                pass
    return out


@pytest.mark.timeout(200)
def test_every_line_of_an_attempt_carries_its_trace_id_and_pod(mesh) -> None:
    """kube's -v=2 attempt lines ("Successfully bound pod to node", "Unable to schedule pod; no
    fit; waiting") and every other queue-manager line about a pod's attempt (the binding thread,
    the queue's moves) carry that pod and the attempt's trace id, which DescribePod shows too."""
    mesh.apply(pods_manifest("logged", 1))
    mesh.apply(pods_manifest("toobig", 1, cpu="100"))  # no node has 100 cpus: unschedulable
    node = mesh.wait_bound("logged", 1)["logged-0"]
    log_file = Path(mesh.proc("queue-manager")["log"])
    bound_key, failed_key = "default/logged-0", "default/toobig-0"

    def seen() -> list[dict] | None:
        lines = _json_lines(log_file)
        msgs = {(ln.get("pod"), ln["msg"]) for ln in lines}
        if ((bound_key, "Successfully bound pod to node") in msgs
                and (failed_key, "Unable to schedule pod; no fit; waiting") in msgs
                and any(ln.get("pod") == failed_key and _AFTER_ATTEMPT in ln["msg"] for ln in lines)):
            return lines
        return None
    deadline = time.time() + 60
    while (lines := seen()) is None:
        assert time.time() < deadline, f"attempt lines missing from {log_file}"
        time.sleep(0.5)

    def describe(name: str):
        return mesh.stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name=name)).pod

    for key in (bound_key, failed_key):
        # every line about the pod: those naming it in the message, those tagged with it
        about = [ln for ln in lines if key in ln["msg"] or ln.get("pod") == key]
        assert about
        untagged = [ln for ln in about if ln.get("pod") != key]
        assert not untagged, f"lines about {key} without its pod: {untagged}"
        # and every one logged by an attempt carries its trace id: all but the queue's lines on a
        # watch event (the pod's own update), which happen outside any attempt
        traceless = [ln for ln in about if len(ln.get("trace_id", "")) != 32
                     and not any(event in ln["msg"] for event in _EVENT_LINES)]
        assert not traceless, f"lines about {key} without a trace id: {traceless}"

    [ok] = [ln for ln in lines if ln["msg"] == "Successfully bound pod to node" and ln["pod"] == bound_key]
    assert ok["v"] == 2 and ok["node"] == node and ok["evaluatedNodes"] >= ok["feasibleNodes"] >= 1
    # DescribePod's trace id comes with the binder's Scheduled event, published after its answer
    # and read by the queue-manager's paced Events reader: up to a pause after the bound line.
    deadline = time.time() + 10
    while not (described := describe("logged-0").trace_id) and time.time() < deadline:
        time.sleep(0.1)
    assert ok["trace_id"] == described
    no_fit = [ln for ln in lines if ln["msg"] == "Unable to schedule pod; no fit; waiting" and ln["pod"] == failed_key]
    assert all(ln["v"] == 2 and ln["err"].startswith("0/") and "Insufficient cpu" in ln["err"] for ln in no_fit)
    moved = [ln for ln in lines if ln.get("pod") == failed_key and _AFTER_ATTEMPT in ln["msg"]]
    attempts = {ln["trace_id"] for ln in no_fit}
    assert {ln["trace_id"] for ln in moved} <= attempts, "a move after a failed attempt is logged in that attempt"
    assert any(ln["msg"].startswith(f"pod {failed_key} moved to unschedulable") for ln in moved)
    # DescribePod's trace id is an attempt's that logged those lines (a later attempt's, read
    # after the lines were, may be logged a moment later)
    tid = describe("toobig-0").trace_id
    deadline = time.time() + 15
    while tid not in attempts and time.time() < deadline:
        time.sleep(0.3)
        attempts = {ln.get("trace_id") for ln in _json_lines(log_file) if ln.get("pod") == failed_key
                    and ln["msg"] == "Unable to schedule pod; no fit; waiting"}
    assert tid in attempts
    mesh.stub.Delete(queue_pb2.DeleteRequest(kind="pod", namespace="default", name="toobig-0"))


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
@pytest.mark.skipif(bool(EXTERNAL_KAFKA), reason=SKIP_EMBEDDED_BROKER_KILL)
def test_broker_restart_loses_nothing_that_is_owned(mesh) -> None:
    """The embedded broker keeps topics in memory only. After it restarts empty, agents
    re-register their nodes and running pods, the queue-manager re-publishes what was applied
    through it, and scheduling goes on."""
    before = {n.node.metadata.name for n in mesh.stub.GetNodes(queue_pb2.GetRequest()).nodes}
    mesh.apply(pods_manifest("before-restart", 3))  # this test's own pods, bound before the restart
    mesh.wait_bound("before-restart", 3)
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
    # Pods bound before the restart were re-published, bound to their node, by their agent (and
    # the binder; the queue-manager re-publishes what was applied): maybe after the new pods
    # were bound, whose Apply can precede the moment the re-publishers notice the restart.
    first = mesh.bound("before-restart")
    deadline = time.time() + 60
    while (got := asyncio.run(_pod_nodes(mesh.state["bootstrap"], "before-restart-"))) != first:
        assert time.time() < deadline, f"pods bound before the restart, re-published: {got}, want {first}"
        time.sleep(1.0)
    nodes = {n.node.metadata.name for n in mesh.stub.GetNodes(queue_pb2.GetRequest()).nodes}
    assert nodes == before


async def _pod_nodes(bootstrap: str, prefix: str) -> dict[str, str]:
    """name -> node of the pods named `prefix`... on the pods topic now ("" when unbound)."""
    fold = PodTopicFold()
    async with EventConsumer(bootstrap, [TOPIC_PODS], client_id="test-audit-2") as consumer:
        for r in await consumer.catch_up(60):
            fold.add(r.value)
    return {name.split("/", 1)[1]: fold.node.get(uid, "") for uid, name in fold.names.items()
            if name.split("/", 1)[1].startswith(prefix)}
