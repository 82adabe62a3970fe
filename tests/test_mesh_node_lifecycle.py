"""Node lifecycle and taint eviction through running processes (the embedded broker, binder,
queue-manager, a kubelet agent heartbeating every second, and the controller-manager with a
4 s node-monitor-grace-period): admission adds the DefaultTolerationSeconds tolerations; when
the agent is killed its nodes become Ready=Unknown with the unreachable NoSchedule and NoExecute
taints, a pod tolerating unreachable for 3 s is marked for deletion (TaintManagerEviction, kube's
words) after those 3 s while a pod with the default 300 s stays, and new pods stay off the
nodes; when the agent comes back the nodes are Ready again, the taints go, the marked pod ends
and the waiting pod is bound.
"""
from __future__ import annotations

import time

import grpc
import pytest

from schedmesh.broker.embedded import EmbeddedBroker
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port

GRACE = 4.0
POOL = """
pools:
- name: edge
  count: 2
  cpu: "4"
  memory: 8Gi
"""
UNREACHABLE = "node.kubernetes.io/unreachable"


def pod(name: str, tolerations: str = "") -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n"
            f"spec:\n  nodeSelector: {{kubernetes.io/hostname: edge-0}}\n{tolerations}"
            "  containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]\n")


def wait(what: str, check, timeout: float = 60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {timeout}s")


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    logs = tmp_path_factory.mktemp("node_lifecycle")
    (logs / "pool.yaml").write_text(POOL)
    procs: list[ServiceProc] = []
    with EmbeddedBroker(log_path=logs / "broker.log") as broker:
        common = ["--bootstrap", broker.bootstrap_servers]
        agent_args = [*common, "--pool", str(logs / "pool.yaml"), "--name", "agent-edge", "--heartbeat", "1",
                      "--start-delay", "0.2"]

        def start(module: str, args: list[str], env: dict | None = None) -> ServiceProc:
            p = ServiceProc(module, args, free_port(), env=env, log_dir=logs).start()
            procs.append(p)
            p.wait_serving(120)
            return p
        try:
            binder = start("services.binder", common)
            cm = start("services.controller_manager", [*common, "--node-monitor-grace-period", str(GRACE),
                                                       "--sync-period", "0.2"])
            qm = start("services.queue_manager", [*common, "--binder", binder.target],
                       env={"SCHEDMESH_CONTROLLER_MANAGER": cm.target})
            m = type("Mesh", (), {})()
            m.logs, m.agent_args, m.start = logs, agent_args, start
            m.agent = start("services.kubelet_agent", agent_args)
            m.channel = grpc.insecure_channel(qm.target)
            m.stub = queue_pb2_grpc.SchedulerStub(m.channel)
            yield m
        finally:
            for p in reversed(procs):
                p.stop()


def pods(m) -> dict:
    return {v.pod.metadata.name: v for v in m.stub.GetPods(queue_pb2.GetRequest(), timeout=30).pods}


def node(m, name: str):
    return next(v.node for v in m.stub.GetNodes(queue_pb2.GetRequest(), timeout=30).nodes
                if v.node.metadata.name == name)


def ready(n) -> str:
    return next((c.status for c in n.conditions if c.type == "Ready"), "")


def taints(n) -> set:
    return {(t.key, t.effect) for t in n.taints}


@pytest.mark.timeout(400)
def test_dead_agent_nodes_become_unreachable_and_their_pods_are_evicted(mesh) -> None:
    short = "  tolerations: [{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 3}]\n"
    mesh.stub.Apply(queue_pb2.ApplyRequest(manifest=pod("short", short) + "---\n" + pod("default-300"),
                                           source="test.yaml"), timeout=60)
    wait("pods Running", lambda: all(v.pod.phase == "Running" for v in pods(mesh).values()) and len(pods(mesh)) == 2,
         120)
    # DefaultTolerationSeconds admission: not-ready and unreachable for 300 s
    got = {(t.key, t.effect, t.toleration_seconds) for t in pods(mesh)["default-300"].pod.tolerations}
    assert got == {("node.kubernetes.io/not-ready", "NoExecute", 300), (UNREACHABLE, "NoExecute", 300)}
    got = {(t.key, t.toleration_seconds) for t in pods(mesh)["short"].pod.tolerations}
    assert got == {(UNREACHABLE, 3), ("node.kubernetes.io/not-ready", 300)}
    assert ready(node(mesh, "edge-0")) == "True" and not taints(node(mesh, "edge-0"))

    mesh.agent.kill()
    killed = time.time()
    wait("edge-0 Ready=Unknown", lambda: ready(node(mesh, "edge-0")) == "Unknown", 60)
    n = wait("unreachable taints", lambda: (lambda n: n if taints(n) >= {(UNREACHABLE, "NoSchedule"),
                                                                          (UNREACHABLE, "NoExecute")} else None)(
        node(mesh, "edge-0")), 30)
    ready_condition = next(c for c in n.conditions if c.type == "Ready")
    assert (ready_condition.reason, ready_condition.message) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    assert ready(node(mesh, "edge-1")) == "Unknown"
    tainted = next(t.time_added for t in n.taints if (t.key, t.effect) == (UNREACHABLE, "NoExecute"))
    assert tainted > killed

    marked = wait("short marked for deletion", lambda: pods(mesh)["short"].pod.metadata.deletion_timestamp, 60)
    # tolerationSeconds counted from when the controller saw the taint (its clock), not at once
    assert marked - tainted >= 3 - 0.5, (marked, tainted)
    # the Event travels on its own topic: it may reach the queue-manager a moment after the pod
    wait("the TaintManagerEviction event", lambda: ("TaintManagerEviction", "Marking for deletion Pod default/short") in [
        (e.reason, e.message) for e in mesh.stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name="short"),
                                                             timeout=30).events], 30)
    conditions = {(c.type, c.status, c.reason) for c in pods(mesh)["short"].pod.conditions}
    assert ("DisruptionTarget", "True", "DeletionByTaintManager") in conditions
    assert not pods(mesh)["default-300"].pod.metadata.deletion_timestamp  # 300 s not up

    # new pods stay off unreachable nodes
    mesh.stub.Apply(queue_pb2.ApplyRequest(manifest=pod("late"), source="late.yaml"), timeout=60)
    msg = wait("late unschedulable", lambda: pods(mesh).get("late") and pods(mesh)["late"].message, 60)
    assert "untolerated taint" in msg and not pods(mesh)["late"].pod.node_name

    # the agent comes back: Ready, taints gone, the marked pod ends, the waiting one is bound
    mesh.agent = mesh.start("services.kubelet_agent", mesh.agent_args)
    wait("edge-0 Ready again", lambda: ready(node(mesh, "edge-0")) == "True" and not taints(node(mesh, "edge-0")), 60)
    wait("short gone", lambda: "short" not in pods(mesh), 60)
    wait("late bound", lambda: pods(mesh)["late"].pod.node_name == "edge-0", 60)
    # Waited for, not read once: in one clean-clone run out of several the queue-manager showed it
    # Pending for a moment after the agent's restart (the restarted agent started it again, 0.5 s
    # after adopting it) - an open question in the session notes, not a settled behaviour.
    wait("default-300 Running", lambda: pods(mesh)["default-300"].pod.phase == "Running", 30)
