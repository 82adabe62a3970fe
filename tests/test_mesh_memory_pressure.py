"""Memory pressure end to end through a mesh started by `schedmesh up` (pool nodes with a
simulated kubelet: evictionHard memory.available<500Mi, evictionPressureTransitionPeriod 12s): the
pods' simulated usage (the `schedmesh.io/simulated-usage` annotation) crosses the threshold; the
agent reports MemoryPressure=True and evicts the pod kube's ranking picks (not the one that
tipped the node over); the node-lifecycle controller adds the `node.kubernetes.io/memory-pressure`
NoSchedule taint (TaintNodesByCondition), so the scheduler's TaintToleration filter keeps a new
pod off the node even though it prefers it (the mesh's admission, like kube-apiserver's default
plugins, adds no memory-pressure toleration); once the pressure is over and the transition period
has passed, the condition and the taint go, and the node is chosen again.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from schedmesh.local.client import Client
from schedmesh.local.supervisor import load_state
from schedmesh.v1 import queue_pb2

from tests.golden_mesh import schedmesh
from tests.mesh_harness import up_kafka_args

TRANSITION = 12.0  # longer than the eviction manager's 10 s pass, which would hide a shorter one
POOL = f"""
pools:
- name: mem
  count: 2
  cpu: "4"
  memory: 4Gi
  systemUsage: {{memory: 1Gi}}      # the node's own usage
  kubeletConfiguration:
    evictionHard: {{memory.available: 500Mi}}
    evictionPressureTransitionPeriod: {TRANSITION:g}s
"""
TAINT = ("node.kubernetes.io/memory-pressure", "NoSchedule")


def _pod(name: str, memory: str, usage: str = "", cls: str = "", on: str = "", prefer: str = "") -> dict:
    meta: dict = {"name": name, "namespace": "default"}
    if usage:
        meta["annotations"] = {"schedmesh.io/simulated-usage": f"memory={usage}"}
    spec: dict = {"containers": [{"name": "c", "image": "pause",
                                  "resources": {"requests": {"cpu": "100m", "memory": memory}}}]}
    if cls:
        spec["priorityClassName"] = cls
    if on:
        spec["nodeSelector"] = {"kubernetes.io/hostname": on}
    if prefer:
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "preference": {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [prefer]}]}}]}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class Mesh:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.client = Client(load_state(work))

    def apply(self, *objs: dict) -> None:
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
        self.client.call("Apply", queue_pb2.ApplyRequest(manifest=text, source="test"), timeout=60)

    def pods(self) -> dict:
        return {v.pod.metadata.name: v for v in self.client.call("GetPods", queue_pb2.GetRequest()).pods}

    def node(self, name: str):
        return next(v.node for v in self.client.call("GetNodes", queue_pb2.GetRequest()).nodes
                    if v.node.metadata.name == name)

    def pressure(self, name: str) -> tuple[str, bool]:
        """The node's MemoryPressure status and whether it has the memory-pressure taint."""
        n = self.node(name)
        return (next((c.status for c in n.conditions if c.type == "MemoryPressure"), ""),
                TAINT in {(t.key, t.effect) for t in n.taints})

    def events(self, name: str) -> list:
        return list(self.client.call("DescribePod", queue_pb2.DescribeRequest(namespace="default", name=name)).events)

    def until(self, describe: str, what, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while True:
            got = what()
            if got:
                return got
            if time.monotonic() > deadline:
                pods = {n: (v.pod.node_name, v.pod.phase, v.pod.status_reason) for n, v in sorted(self.pods().items())}
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {describe}; pods {pods}, "
                                     f"mem-0 {self.pressure('mem-0')}")
            time.sleep(0.2)

    def bound(self, name: str, timeout: float = 30.0) -> str:
        return self.until(f"{name} bound", lambda: (lambda v: v.pod.node_name if v else "")(self.pods().get(name)),
                          timeout)

    def running(self, *names: str) -> None:
        self.until(f"{names} running", lambda: (lambda p: all(n in p and p[n].pod.phase == "Running"
                                                              for n in names))(self.pods()))


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    work: Path = tmp_path_factory.mktemp("memory_pressure")
    (work / "pool.yaml").write_text(POOL)
    up = schedmesh("up", "--detach", "--pool", "pool.yaml", "--tie-break", "name", *up_kafka_args(work), cwd=work)
    assert up.returncode == 0, f"schedmesh up failed:\n{up.stdout}\n{up.stderr}"
    m = Mesh(work)
    try:
        yield m
    finally:
        m.client.close()
        schedmesh("down", cwd=work, timeout=90)


@pytest.mark.timeout(150)
def test_memory_pressure_taints_evicts_and_steers_new_pods_away(mesh: Mesh) -> None:
    mesh.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "important"},
                "value": 1000},
               # the biggest user, within its request; two over their requests, one more important
               _pod("big", "1536Mi", usage="1400Mi", on="mem-0"),
               _pod("over-important", "100Mi", usage="700Mi", cls="important", on="mem-0"),
               _pod("over-small", "50Mi", usage="300Mi", on="mem-0"))
    mesh.running("big", "over-important", "over-small")
    mesh.until("mem-0 reporting no pressure", lambda: mesh.pressure("mem-0") == ("False", False))

    # 1Gi (the node) + 1400 + 700 + 300 + 200Mi: 472Mi left, under 500Mi. kube's ranking evicts
    # neither the pod that tipped the node over nor the biggest user (both within their requests)
    # nor the one furthest above its request (more important): over-small.
    mesh.apply(_pod("steady", "256Mi", usage="200Mi", on="mem-0"))
    mesh.until("MemoryPressure=True and the memory-pressure taint on mem-0",
               lambda: mesh.pressure("mem-0") == ("True", True))
    evicted_pod = mesh.until("over-small evicted", lambda: (lambda v: v if v and v.pod.phase == "Failed" else None)(
        mesh.pods().get("over-small")))
    message = ("The node was low on resource: memory. Threshold quantity: 500Mi, available: 472Mi. "
               "Container c was using 300Mi, request is 50Mi, has larger consumption of memory. ")
    assert (evicted_pod.pod.status_reason, evicted_pod.pod.status_message) == ("Evicted", message)
    evicted = mesh.until("the Evicted event", lambda: [e for e in mesh.events("over-small") if e.reason == "Evicted"])
    assert [(e.type, e.message) for e in evicted] == [("Warning", message)]
    assert {n: v.pod.phase for n, v in mesh.pods().items()} == {
        "big": "Running", "over-important": "Running", "over-small": "Failed", "steady": "Running"}

    # While mem-0 is tainted, a new pod that prefers it (Burstable: no toleration is added for it)
    # is placed on the other node.
    mesh.apply(_pod("newcomer", "64Mi", prefer="mem-0"))
    assert mesh.bound("newcomer") == "mem-1"
    assert mesh.pressure("mem-0") == ("True", True), "the pressure ended before newcomer was placed"
    assert not [t for t in mesh.pods()["newcomer"].pod.tolerations if t.key == TAINT[0]]

    # The pressure is over (over-small no longer counts): after the transition period, condition and
    # taint go, and mem-0 is the preferred node again.
    last_pressed = time.time()

    def cleared() -> bool:
        nonlocal last_pressed
        now, got = time.time(), mesh.pressure("mem-0")
        if got == ("True", True):
            last_pressed = now
        return got == ("False", False)
    mesh.until("MemoryPressure=False and no taint on mem-0", cleared, TRANSITION + 30)
    # not before the transition period after the last pressure (the eviction); 1 s for polling
    assert last_pressed - evicted[0].timestamp >= TRANSITION - 1, (last_pressed, evicted[0].timestamp)
    mesh.apply(_pod("after", "64Mi", prefer="mem-0"))
    assert mesh.bound("after") == "mem-0"
    mesh.running("newcomer", "after")
    assert {n: v.pod.phase for n, v in mesh.pods().items()} == {
        "big": "Running", "over-important": "Running", "over-small": "Failed", "steady": "Running",
        "newcomer": "Running", "after": "Running"}
