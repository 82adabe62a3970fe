"""Preemption acted out through a real mesh started by `schedmesh up` (broker, queue-manager,
preemption service, binder, kubelet agent, controller-manager): no scheduling or eviction written
by the test.

* The recorded kube-scheduler scenarios with preemption victims (tests/golden), as
  ../shared/tools/golden-mesh-check --mode preempt checks them: the pods before the first
  preemptor placed as recorded, then the preemptor applied: kube's victims must be gone, no other
  pod moved, and the preemptor bound on kube's node.
* The rules on a small cluster: preemptionPolicy Never preempts nothing and says so; a
  PDB-protected pod is reprieved (its node is avoided); the victims get kube's DisruptionTarget
  condition and `Preempted` events; the preemptor is nominated to the node, and lands there.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from schedmesh.local.client import Client
from schedmesh.local.supervisor import load_state
from schedmesh.v1 import queue_pb2

from tests.golden_mesh import CONFIG, GOLDEN, KINDS, pod_key, schedmesh


def _first_preemptor(name: str):
    results = json.loads((GOLDEN / f"{name}.out.json").read_text())["results"]
    return next((i for i, r in enumerate(results) if (r.get("preemption") or {}).get("victims")), None)


SCENARIOS = [n for n in sorted(p.name[:-len(".in.json")] for p in GOLDEN.glob("*.in.json"))
             if _first_preemptor(n) is not None]
assert SCENARIOS, f"no golden scenarios with preemption victims in {GOLDEN}"


class Mesh:
    """A mesh brought up in `work` as golden-mesh-check does, read through the Scheduler API."""

    def __init__(self, work: Path) -> None:
        (work / "sched.yaml").write_text(CONFIG)
        (work / "empty-pool.yaml").write_text("pools: []\n")
        up = schedmesh("up", "--detach", "--tie-break", "name", "--pool", "empty-pool.yaml", "--config", "sched.yaml",
                       cwd=work)
        assert up.returncode == 0, f"schedmesh up failed:\n{up.stdout}\n{up.stderr}"
        self.work = work
        self.client = Client(load_state(work))

    def close(self) -> None:
        self.client.close()
        schedmesh("down", cwd=self.work, timeout=90)

    def views(self) -> dict[str, queue_pb2.PodView]:
        return {f"{v.pod.metadata.namespace}/{v.pod.metadata.name}": v
                for v in self.client.call("GetPods", queue_pb2.GetRequest()).pods}

    def apply(self, objs: list[dict]) -> None:
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
        self.client.call("Apply", queue_pb2.ApplyRequest(manifest=text, source="test"), timeout=120)

    def events(self, key: str) -> list:
        ns, name = key.split("/", 1)
        return list(self.client.call("DescribePod", queue_pb2.DescribeRequest(namespace=ns, name=name)).events)

    def until(self, what, timeout: float, describe: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = what()
            if got:
                return got
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {describe}")


def _gone(v) -> bool:
    return v is None or bool(v.pod.metadata.deletion_timestamp) or v.pod.phase in ("Failed", "Succeeded")


def _message(v) -> str:
    return v.message or next((c.message for c in v.pod.conditions
                              if c.type == "PodScheduled" and c.status == "False"), "")


@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", SCENARIOS)
def test_mesh_acts_out_kubes_preemption(tmp_path: Path, name: str) -> None:
    sc = json.loads((GOLDEN / f"{name}.in.json").read_text())
    want = json.loads((GOLDEN / f"{name}.out.json").read_text())["results"]
    first = _first_preemptor(name)
    mesh = Mesh(tmp_path)
    try:
        mesh.apply([{"apiVersion": api, "kind": kind, **o} for kind, api, key in KINDS for o in sc.get(key) or []])
        bound = {pod_key(p["metadata"]): p["spec"]["nodeName"] for p in sc.get("pods") or []}
        # Running, as they are by the time golden-mesh-check's CLI calls apply the next pod: the agent
        # stamps start times in start order, and preemption prefers victims that started last.
        mesh.until(lambda: all(v is not None and v.pod.node_name and v.pod.phase == "Running"
                               for v in map(mesh.views().get, bound)), 90, "the scenario's bound pods running")
        for pod, res in zip(sc["pending"][:first], want[:first]):
            if (pod.get("spec") or {}).get("nodeName") and not res.get("chosen"):
                continue  # a pod naming its node never reaches a real scheduler
            mesh.apply([{"apiVersion": "v1", "kind": "Pod", **pod}])
            key = res["pod"]
            v = mesh.until(lambda: (lambda v: v if v is not None and (v.pod.node_name or _message(v)) else None)(
                mesh.views().get(key)), 60, f"{key} placed")
            if res.get("chosen"):
                assert v.pod.node_name == res["chosen"], f"{key} bound to {v.pod.node_name}, kube: {res['chosen']}"
                bound[key] = res["chosen"]
                mesh.until(lambda: mesh.views()[key].pod.phase == "Running", 60, f"{key} running")
            else:
                assert _message(v) == res.get("message")
                ns, pod_name = key.split("/", 1)
                mesh.client.call("Delete", queue_pb2.DeleteRequest(kind="pod", namespace=ns, name=pod_name))
        res = want[first]
        victims, node = set(res["preemption"]["victims"]), res["preemption"]["node"]
        mesh.apply([{"apiVersion": "v1", "kind": "Pod", **sc["pending"][first]}])

        def outcome():
            views = mesh.views()
            v = views.get(res["pod"])
            moved = {k for k, n in bound.items() if _gone(views.get(k)) or views[k].pod.node_name != n}
            return (v.pod.node_name, moved) if v is not None and v.pod.node_name and moved >= victims else None
        got_node, moved = mesh.until(outcome, 120, f"{res['pod']} bound after evicting {sorted(victims)}")
        assert (got_node, moved) == (node, victims)
    finally:
        mesh.close()


def _pod(name: str, node: str = "", cls: str = "low", cpu: str = "1", labels: dict | None = None,
         shutdown_seconds: int = 0) -> dict:
    meta: dict = {"name": name, "labels": labels or {}}
    if shutdown_seconds:  # the agent's simulated containers take that long to stop
        meta["annotations"] = {"schedmesh.io/simulated-shutdown-seconds": str(shutdown_seconds)}
    spec: dict = {"priorityClassName": cls,
                  "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@pytest.mark.timeout(420)
def test_policy_never_pdb_reprieve_and_the_nominated_node(tmp_path: Path) -> None:
    mesh = Mesh(tmp_path)
    try:
        classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v,
                    **({"preemptionPolicy": "Never"} if n == "polite" else {})}
                   for n, v in (("low", 1), ("high", 1000), ("polite", 1000))]
        nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n},
                  "status": {"capacity": {"cpu": "2", "memory": "8Gi", "pods": "10"}}} for n in ("n1", "n2")]
        # n1's pods are protected by a budget allowing no disruption; n2's pods by none.
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-a"},
               "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "a"}}}}
        bound = [_pod("a1", "n1", labels={"app": "a"}), _pod("a2", "n1", labels={"app": "a"}),
                 _pod("c1", "n2", labels={"app": "c"}, shutdown_seconds=4),
                 _pod("c2", "n2", labels={"app": "c"}, shutdown_seconds=4)]
        mesh.apply([*classes, pdb, *nodes, *bound])
        mesh.until(lambda: all(v.pod.phase == "Running" for k, v in mesh.views().items()) and len(mesh.views()) == 4,
                   90, "the bound pods running")

        # preemptionPolicy: Never: unschedulable with kube's PostFilter words, nothing evicted
        mesh.apply([_pod("polite", cls="polite", cpu="2")])
        v = mesh.until(lambda: (lambda v: v if v is not None and _message(v) else None)(mesh.views().get("default/polite")),
                       60, "polite's FailedScheduling")
        assert _message(v) == ("0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
                               "preemption: not eligible due to preemptionPolicy=Never.")
        assert not v.pod.nominated_node_name
        mesh.client.call("Delete", queue_pb2.DeleteRequest(kind="pod", namespace="default", name="polite"))

        # A preemptor: n1's pods are reprieved (PDB), n2's go; it is nominated to n2 and lands there.
        mesh.apply([_pod("urgent", cls="high", cpu="2")])
        nominated = mesh.until(lambda: (lambda v: v if v is not None and v.pod.nominated_node_name else None)(
            mesh.views().get("default/urgent")), 60, "urgent nominated")
        assert nominated.pod.nominated_node_name == "n2"
        views = mesh.views()
        if not views["default/urgent"].pod.node_name:  # still waiting: its victims are terminating
            for k in ("default/c1", "default/c2"):
                c = views[k].pod
                assert c.metadata.deletion_timestamp, f"{k} not terminating while urgent waits"
                assert [(x.status, x.reason) for x in c.conditions if x.type == "DisruptionTarget"] == [
                    ("True", "PreemptionByScheduler")]
                # (events are kept about live pods only: read while the victim terminates)
                preempted = mesh.until(lambda: [(e.type, e.message) for e in mesh.events(k) if e.reason == "Preempted"],
                                       10, f"{k}'s Preempted event")
                assert preempted == [("Normal", f"Preempted by pod {views['default/urgent'].pod.metadata.uid} on node n2")]

        def landed():
            views = mesh.views()
            u = views.get("default/urgent")
            return u if u is not None and u.pod.node_name else None
        u = mesh.until(landed, 120, "urgent bound")
        views = mesh.views()
        assert u.pod.node_name == "n2"
        assert {k for k in ("default/c1", "default/c2") if _gone(views.get(k))} == {"default/c1", "default/c2"}
        assert all(not _gone(views.get(k)) and views[k].pod.node_name == "n1" for k in ("default/a1", "default/a2"))
        urgent_events = mesh.events("default/urgent")
        failed = [e.message for e in urgent_events if e.reason == "FailedScheduling"]
        assert failed and failed[0] == "0/2 nodes are available: 2 Insufficient cpu."  # preemption succeeded
        assert all(k not in views for k in ("default/c1", "default/c2"))  # their agent ended them: tombstones
    finally:
        mesh.close()
