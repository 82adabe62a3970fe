"""The Eviction API, drain, cordon and taint through the mesh as a user runs it (`schedmesh up
--detach`, the CLI as a subprocess): a PodDisruptionBudget refuses an eviction with kube's words
(429) and a drain waits for it, then completes once the budget allows; a pod under two budgets
is refused as the API's 500; cordon keeps new pods off a node, uncordon lets them in; a
NoSchedule taint keeps pods off until removed, a NoExecute taint evicts the pods that do not
tolerate it with the TaintManagerEviction event.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedmesh.security.local import mesh_channel
from schedmesh.v1 import queue_pb2, queue_pb2_grpc
from tests.mesh_harness import up_kafka_args

ROOT = Path(__file__).resolve().parents[1]
SCHEDMESH = [sys.executable, "-m", "schedmesh.cli.main"]
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."

POOL = """
pools:
- name: node
  count: 3
  cpu: "4"
  memory: 8Gi
  pods: 50
"""


def pod(name: str, app: str, node: str = "", tolerations: str = "") -> str:
    selector = f"  nodeSelector: {{kubernetes.io/hostname: {node}}}\n" if node else ""
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default, labels: {{app: {app}}}}}\n"
            f"spec:\n{selector}{tolerations}"
            "  containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]\n")


def pdb(name: str, app: str, min_available: str) -> str:
    return (f"apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: {name}, namespace: default}}\n"
            f"spec:\n  minAvailable: {min_available}\n  selector: {{matchLabels: {{app: {app}}}}}\n")


class Mesh:
    def __init__(self, base: Path, env: dict) -> None:
        self.base, self.env = base, env
        state = json.loads((base / ".schedmesh" / "mesh.json").read_text())
        self.stub = queue_pb2_grpc.SchedulerStub(mesh_channel(state))

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*SCHEDMESH, *args], cwd=self.base, env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([*SCHEDMESH, *args], cwd=self.base, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def apply(self, *docs: str) -> None:
        self.stub.Apply(queue_pb2.ApplyRequest(manifest="---\n".join(docs), source="test.yaml"), timeout=60)

    def pods(self) -> dict:
        return {v.pod.metadata.name: v for v in self.stub.GetPods(queue_pb2.GetRequest(), timeout=30).pods}

    def nodes(self) -> dict:
        return {v.node.metadata.name: v.node for v in self.stub.GetNodes(queue_pb2.GetRequest(), timeout=30).nodes}

    def message(self, name: str) -> str:
        """The pod's last FailedScheduling message ("" while there is none, or the pod is not listed yet)."""
        v = self.pods().get(name)
        return v.message if v is not None else ""

    def events(self, name: str) -> list[tuple[str, str]]:
        d = self.stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name=name), timeout=30)
        return [(e.reason, e.message) for e in d.events]

    def wait(self, what: str, check, timeout: float = 60.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = check()
            if got:
                return got
            time.sleep(0.3)
        raise AssertionError(f"{what}: not after {timeout}s")

    def running(self, *names: str) -> dict:
        def ok():
            pods = self.pods()
            if all(n in pods and pods[n].pod.phase == "Running" for n in names):
                return {n: pods[n].pod.node_name for n in names}
            return None
        return self.wait(f"{names} Running", ok)

    def gone(self, name: str, timeout: float = 60.0) -> None:
        self.wait(f"{name} gone", lambda: name not in self.pods(), timeout)

    def evictions(self) -> dict[str, float]:
        """schedmesh_evictions_total by reason, as the controller-manager's /metrics says."""
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families
        procs = {p["name"]: p for p in json.loads((self.base / ".schedmesh" / "mesh.json").read_text())["procs"]}
        url = f"http://127.0.0.1:{procs['controller-manager']['metrics_port']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            fams = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
        return {s.labels["reason"]: s.value for s in fams["schedmesh_evictions"].samples
                if s.name == "schedmesh_evictions_total"}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    base: Path = tmp_path_factory.mktemp("mesh_eviction")
    (base / "pool.yaml").write_text(POOL)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    up = subprocess.run([*SCHEDMESH, "up", "--detach", "--pool", "pool.yaml", "--tie-break", "name",
                         *up_kafka_args(base)], cwd=base,
                        env=env, capture_output=True, text=True, timeout=240)
    assert up.returncode == 0, up.stderr
    try:
        yield Mesh(base, env)
    finally:
        subprocess.run([*SCHEDMESH, "down"], cwd=base, env=env, capture_output=True, timeout=120)


@pytest.mark.timeout(300)
def test_budget_refuses_eviction_and_drain_waits_for_it(mesh: Mesh) -> None:
    evicted_before = mesh.evictions().get("EvictionAPI", 0)
    mesh.apply(pdb("web-pdb", "web", "2"), pod("web-0", "web", "node-0"), pod("web-1", "web", "node-1"),
               pod("web-2", "web", "node-2"))
    mesh.running("web-0", "web-1", "web-2")

    def evict_allowed():  # the controller publishes the budget's status once it has seen the pods Ready
        r = mesh.cli("evict", "web-0", "-n", "default")
        assert r.returncode in (0, 1), r.stderr
        return r if r.returncode == 0 else None
    r = mesh.wait("web-0 evicted", evict_allowed, 30)
    assert r.stdout.strip() == "pod/web-0 evicted (pdb web-pdb: disruptionsAllowed 0)"
    mesh.gone("web-0")
    # 2 healthy, 2 needed: refused with kube's words, a non-zero exit, the cause, and the pod stays
    r = mesh.cli("evict", "web-1")
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == f"error: {VIOLATES}"
    assert "The disruption budget web-pdb needs 2 healthy pods and has 2 currently" in r.stderr
    assert mesh.pods()["web-1"].pod.phase == "Running"

    # a second budget over the same pods: the API's 500
    mesh.apply(pdb("web-pdb-2", "web", "1"))
    time.sleep(1)
    r = mesh.cli("evict", "web-1")
    assert r.returncode == 1 and ("This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                  "does not support.") in r.stderr, r.stderr
    assert mesh.cli("delete", "pdb", "web-pdb-2").returncode == 0

    # drain node-1: cordoned at once, web-1 refused and retried every 5 s ...
    drain = mesh.popen("drain", "node-1", "--timeout", "120")
    mesh.wait("node-1 cordoned", lambda: mesh.nodes()["node-1"].unschedulable, 30)
    time.sleep(7)
    assert drain.poll() is None, drain.communicate()
    assert mesh.pods()["web-1"].pod.phase == "Running"
    # ... until a third healthy pod lets the budget allow one disruption
    mesh.apply(pod("web-3", "web", "node-0"))
    out, err = drain.communicate(timeout=90)
    assert drain.returncode == 0, err
    assert out.splitlines() == ["node/node-1 cordoned", "evicting pod default/web-1", "pod/web-1 evicted",
                                "node/node-1 drained"]
    assert f'error when evicting pods/"web-1" -n "default" (will retry after 5s): {VIOLATES}' in err
    assert "web-1" not in mesh.pods()
    assert mesh.pods()["web-3"].pod.node_name == "node-0"
    # the controller-manager counts the evictions the API made (web-0, then web-1 by the drain),
    # not the ones the budget refused
    assert mesh.evictions().get("EvictionAPI", 0) - evicted_before == 2


@pytest.mark.timeout(240)
def test_cordon_keeps_new_pods_off_until_uncordon(mesh: Mesh) -> None:
    r = mesh.cli("cordon", "node-2")
    assert (r.returncode, r.stdout.strip()) == (0, "node/node-2 cordoned")
    assert mesh.cli("cordon", "node-2").stdout.strip() == "node/node-2 already cordoned"
    mesh.wait("node-2 unschedulable", lambda: mesh.nodes()["node-2"].unschedulable, 30)
    # the node-lifecycle controller adds the unschedulable taint, as TaintNodesByCondition does
    mesh.wait("unschedulable taint", lambda: any(t.key == "node.kubernetes.io/unschedulable"
                                                 for t in mesh.nodes()["node-2"].taints), 30)
    mesh.apply(pod("pinned-2", "other", "node-2"))
    msg = mesh.wait("FailedScheduling", lambda: mesh.message("pinned-2"), 30)
    assert "node(s) were unschedulable" in msg and not mesh.pods()["pinned-2"].pod.node_name
    assert mesh.cli("uncordon", "node-2").stdout.strip() == "node/node-2 uncordoned"
    assert mesh.running("pinned-2") == {"pinned-2": "node-2"}
    mesh.wait("unschedulable taint removed", lambda: not mesh.nodes()["node-2"].taints, 30)


@pytest.mark.timeout(240)
def test_taints_added_and_removed(mesh: Mesh) -> None:
    r = mesh.cli("taint", "nodes", "node-0", "dedicated=db:NoSchedule")
    assert (r.returncode, r.stdout.strip()) == (0, "node/node-0 tainted")
    r = mesh.cli("taint", "nodes", "node-0", "dedicated=other:NoSchedule")
    assert r.returncode == 2 and "already has dedicated taint(s) with same effect(s) and --overwrite is false" in r.stderr
    mesh.wait("taint", lambda: [(t.key, t.value, t.effect) for t in mesh.nodes()["node-0"].taints]
              == [("dedicated", "db", "NoSchedule")], 30)
    mesh.apply(pod("pinned-0", "other", "node-0"))
    msg = mesh.wait("FailedScheduling", lambda: mesh.message("pinned-0"), 30)
    assert "1 node(s) had untolerated taint(s)" in msg
    assert mesh.cli("taint", "nodes", "node-0", "dedicated:NoSchedule-").stdout.strip() == "node/node-0 untainted"
    assert mesh.running("pinned-0") == {"pinned-0": "node-0"}
    r = mesh.cli("taint", "nodes", "node-0", "dedicated-")
    assert r.returncode == 2 and 'taint "dedicated" not found' in r.stderr

    # NoExecute: pods that do not tolerate it are deleted at once, with kube's event
    tolerates = "  tolerations: [{key: maintenance, operator: Exists, effect: NoExecute}]\n"
    mesh.apply(pod("stays-0", "other", "node-0", tolerates))
    mesh.running("stays-0")
    evicted_before = mesh.evictions()
    victims = sorted(n for n, v in mesh.pods().items() if v.pod.node_name == "node-0" and n != "stays-0")
    assert "pinned-0" in victims  # and whatever earlier tests left there
    r = mesh.cli("taint", "nodes", "node-0", "maintenance=now:NoExecute")
    assert r.returncode == 0, r.stderr
    for name in victims:
        mesh.gone(name)
    assert mesh.pods()["stays-0"].pod.phase == "Running"
    # counted by reason: the taint manager evicted each pod there but stays-0, which tolerates it
    evicted = mesh.evictions()
    assert evicted.get("TaintManagerEviction", 0) - evicted_before.get("TaintManagerEviction", 0) == len(victims), \
        (victims, evicted_before, evicted)
    assert evicted.get("EvictionAPI", 0) == evicted_before.get("EvictionAPI", 0)
    assert mesh.cli("taint", "nodes", "node-0", "maintenance-").returncode == 0
