"""Crash safety under load (issue 13, point 2), with the mesh a user runs (`schedmesh up --detach`):
each case kills one process with SIGKILL while a few hundred pods are being placed on 100
nodes, lets the supervisor restart it, and then checks, from the outside:

* every submitted pod exists once (one uid per name) and is bound, none lost;
* no pod was ever published bound to two nodes, nor published unbound after its binding
  (an audit consumer folds the pods topic for the whole run, across broker restarts);
* no node is over-committed (requested cpu and pod count within allocatable);
* scheduling resumes by itself: the seconds from the kill to the last binding are printed and
  bounded.

Submissions go through the Scheduler API in small Applies while the kill happens; an Apply that
fails (the queue-manager is down) is sent again, which Apply's "unchanged" makes harmless."""
from __future__ import annotations

import asyncio
import logging
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import grpc
import pytest

from schedmesh.bus import EventConsumer
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import TOPIC_PODS
from schedmesh.security.local import mesh_channel
from schedmesh.v1 import events_pb2, queue_pb2, queue_pb2_grpc

from tests.test_supervision import _env, alive, schedmesh, wait_all_dead, mesh_pids

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find processes")
logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the audit consumer retrying while a broker restarts

NODES, NODE_CPU_MILLI, NODE_PODS = 100, 4000, 110
PODS_PER_CASE, BATCH, POD_CPU_MILLI = 200, 20, 200
RESUME_LIMIT_SECONDS = 120  # kill -> every pod bound, on this loaded 2-core machine

POOL = f"""
pools:
- name: node
  count: {NODES}
  cpu: "{NODE_CPU_MILLI // 1000}"
  memory: 16Gi
  pods: {NODE_PODS}
  zones: [zone-a, zone-b, zone-c]
"""


def pods_manifest(names: list[str]) -> str:
    return "---\n".join(f"""apiVersion: v1
kind: Pod
metadata: {{name: {n}, namespace: default, labels: {{app: crash}}}}
spec:
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: {POD_CPU_MILLI}m, memory: 64Mi}}}}}}]
""" for n in names)


@dataclass
class PodAudit:
    """What the pods topic said about each pod over the whole run."""
    names: dict[str, str] = field(default_factory=dict)         # uid -> name
    bindings: dict[str, list[str]] = field(default_factory=dict)  # uid -> nodes, consecutive repeats removed
    unbound_after_bound: dict[str, list[str]] = field(default_factory=dict)  # uid -> publishers, in order
    deleted: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, value: Optional[bytes]) -> None:
        if not value:
            return
        with self.lock:
            outer = events_pb2.PodRecord.FromString(value)
            for rec in records.expand(outer):
                if rec.HasField("update"):
                    uid, node = rec.update.uid, rec.update.node_name
                else:
                    uid, node = rec.pod.metadata.uid, rec.pod.node_name
                    self.names[uid] = rec.pod.metadata.name
                    if rec.deleted:
                        self.deleted.add(uid)
                        continue
                    if not node and self.bindings.get(uid):
                        self.unbound_after_bound.setdefault(uid, []).append(rec.source or outer.source or "?")
                if node:
                    seen = self.bindings.setdefault(uid, [])
                    if not seen or seen[-1] != node:
                        seen.append(node)


class Auditor(threading.Thread):
    """Follows schedmesh.pods from the start of the mesh to the end of the module, across broker
    restarts (the consumer re-reads the new broker's topic from its beginning)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="pod-audit", daemon=True)
        self.bootstrap, self.audit = bootstrap, PodAudit()
        self._stopping = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        asyncio.run(self._follow())

    async def _follow(self) -> None:
        async with EventConsumer(self.bootstrap, [TOPIC_PODS], client_id="test-crash-audit") as consumer:
            for r in await consumer.catch_up(60):
                self.audit.add(r.value)
            self.ready.set()
            while not self._stopping.is_set():
                for r in await consumer.getmany(timeout=0.3):
                    self.audit.add(r.value)

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)


class Mesh:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.auditor = Auditor(self.state()["bootstrap"])
        self.auditor.start()
        assert self.auditor.ready.wait(60), "the audit consumer did not catch up"

    def state(self) -> dict:
        return json.loads((self.base / ".schedmesh" / "mesh.json").read_text())

    def proc(self, name: str) -> dict:
        return next(p for p in self.state()["procs"] if p["name"] == name)

    def stub(self) -> queue_pb2_grpc.SchedulerStub:
        return queue_pb2_grpc.SchedulerStub(mesh_channel(self.state()))

    def call(self, method: str, request, timeout: float = 20.0, retry_for: float = 60.0):
        """A Scheduler API call, retried while the queue-manager is down or catching up."""
        deadline = time.time() + retry_for
        while True:
            try:
                return getattr(self.stub(), method)(request, timeout=timeout)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.INVALID_ARGUMENT or time.time() > deadline:
                    raise
                time.sleep(0.5)

    def pods(self) -> list[queue_pb2.PodView]:
        return list(self.call("GetPods", queue_pb2.GetRequest()).pods)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while len(self.call("GetNodes", queue_pb2.GetRequest()).nodes) < NODES:
            assert time.time() < deadline, "the agent's nodes did not register"
            time.sleep(0.5)


@pytest.fixture(scope="module")
def meshes(tmp_path_factory):
    """Started lazily, one per shape: "default" (evaluation in the queue-manager) and "sharded"
    (2 filter + 2 score workers); each is brought down at the end of the module."""
    started: dict[str, Mesh] = {}

    def get(shape: str) -> Mesh:
        if shape not in started:
            base: Path = tmp_path_factory.mktemp(f"crash-{shape}")
            (base / "pool.yaml").write_text(POOL)
            args = ["--filter-workers", "2", "--score-workers", "2"] if shape == "sharded" else []
            # deaths are seen at once; "unhealthy" only after a minute (startup on a loaded machine is slow)
            r = schedmesh("up", "--detach", "--pool", "pool.yaml", *args, cwd=base, timeout=240,
                          env=_env(SCHEDMESH_UNHEALTHY_SECONDS="60"))
            assert r.returncode == 0, r.stdout + r.stderr
            started[shape] = Mesh(base)
            started[shape].wait_ready()
        return started[shape]

    yield get
    for m in started.values():
        m.auditor.stop()
        pids = mesh_pids(m.base)
        r = schedmesh("down", cwd=m.base)
        assert r.returncode == 0, r.stderr
        wait_all_dead(pids, timeout=30)


def wait_restarted(mesh: Mesh, name: str, old_pid: int, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        info = mesh.proc(name)
        if info["pid"] != old_pid and alive(info["pid"]):
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} was not restarted within {timeout}s")


def run_case(mesh: Mesh, victim: str, prefix: str) -> float:
    """Submit PODS_PER_CASE pods in small Applies, SIGKILL `victim` a third of the way through,
    and check the invariants; returns the seconds from the kill to the last binding."""
    names = [f"{prefix}-{i}" for i in range(PODS_PER_CASE)]
    killed_at = threading.Event()
    kill_time = [0.0]
    old = mesh.proc(victim)

    def kill() -> None:
        os.kill(old["pid"], signal.SIGKILL)
        kill_time[0] = time.time()
        killed_at.set()

    for i in range(0, len(names), BATCH):
        if i == len(names) // 3 // BATCH * BATCH:
            kill()
        mesh.call("Apply", queue_pb2.ApplyRequest(manifest=pods_manifest(names[i:i + BATCH]),
                                                    source=f"{prefix}.yaml"), retry_for=120)
        time.sleep(0.1)
    wait_restarted(mesh, victim, old["pid"])
    placed: dict[str, list[str]] = {}
    deadline = kill_time[0] + RESUME_LIMIT_SECONDS
    while True:
        placed = {}
        for v in mesh.pods():
            if v.pod.metadata.name.startswith(prefix + "-"):
                placed.setdefault(v.pod.metadata.name, []).append(v.pod.node_name)
        if len(placed) == len(names) and all(all(n) for n in placed.values()):
            break
        if time.time() > deadline:
            pending = sorted(n for n in names if not all(placed.get(n, [""])))
            raise AssertionError(f"{len(pending)} of {len(names)} pods not bound {RESUME_LIMIT_SECONDS}s after "
                                 f"killing {victim}: {pending[:10]}")
        time.sleep(0.5)
    resumed = time.time() - kill_time[0]
    time.sleep(1.0)  # late records (a wrong re-publication) reach the audit
    duplicates = {n: nodes for n, nodes in placed.items() if len(nodes) > 1}
    assert not duplicates, f"two pods of one name: {duplicates}"
    audit = mesh.auditor.audit
    with audit.lock:
        ours = {uid for uid, n in audit.names.items() if n.startswith(prefix + "-")}
        assert {audit.names[u] for u in ours} == set(names), "a pod never reached the pods topic"
        twice = {audit.names[u]: audit.bindings[u] for u in ours if len(audit.bindings.get(u, [])) > 1}
        assert not twice, f"bound to more than one node: {twice}"
        unbound = {audit.names[u]: c for u, c in audit.unbound_after_bound.items() if u in ours}
        assert not unbound, f"published unbound after being bound: {unbound}"
    for v in mesh.call("GetNodes", queue_pb2.GetRequest()).nodes:
        assert v.requested_milli_cpu <= NODE_CPU_MILLI, f"{v.node.metadata.name} over-committed on cpu"
        assert v.pods <= NODE_PODS, f"{v.node.metadata.name} over-committed on pods"
    print(f"\ncrash case {victim}: {len(names)} pods, all bound {resumed:.1f}s after the kill")
    return resumed


DEFAULT_CASES = ["queue-manager", "binder", "kubelet-agent", "broker", "preemption"]
SHARDED_CASES = ["filter-worker-1", "score-worker-0"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", DEFAULT_CASES)
def test_kill_while_placing_default_mesh(meshes: Callable[[str], Mesh], victim: str) -> None:
    mesh = meshes("default")
    if victim not in {p["name"] for p in mesh.state()["procs"]}:
        pytest.skip(f"this mesh runs no {victim}")
    run_case(mesh, victim, f"d-{victim}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", SHARDED_CASES)
def test_kill_while_placing_sharded_mesh(meshes: Callable[[str], Mesh], victim: str) -> None:
    run_case(meshes("sharded"), victim, f"s-{victim}")
