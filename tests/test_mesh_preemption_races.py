"""Preemption when something happens in its window, through a real mesh started by `schedmesh up`
(nodes applied as objects, served by the mesh's kubelet agent; victims with a simulated shutdown
time so that they terminate for a while). Nothing is scheduled, preempted or evicted by the test.

* A pod of even higher priority arrives while the first preemptor waits for its victims: it is
  nominated to the same node (its victims are the pods already terminating: nothing deleted
  twice), the first preemptor loses its nomination, and preempts again elsewhere, as
  kube-scheduler's asynchronous preemption does.
* A pod of even higher priority that may not preempt (preemptionPolicy Never) waits while the
  victims terminate, then takes the room they leave before the preemptor (whose lower-priority
  nomination does not count against it); the preemptor, with nowhere else to go, stays pending
  with kube's message and no nomination.
* The preemption service is killed while a Preempt call is in flight (the service stopped with
  SIGSTOP first, so the call is surely on its way, then SIGKILL): the queue-manager retries with
  backoff, the supervisor restarts the service, the preemptor ends bound with kube's victims gone
  and nothing else; the service is killed again while those victims terminate, and the mesh goes
  on scheduling and preempting.

The tests read the topics back from the broker at the end: every pod that disappeared has exactly
one `Preempted` event (kube's PreemptPod skips a victim already terminating), and no pod was bound
to two nodes. The three tests share one mesh; each uses its own nodes (a nodeSelector keeps every
pod to them).
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from schedmesh.bus import EventConsumer
from schedmesh.local.client import Client
from schedmesh.local.supervisor import load_state
from schedmesh.mesh.cluster_cache import TOPIC_EVENTS, TOPIC_PODS
from schedmesh.mesh.records import PodTopicFold, expand
from schedmesh.v1 import events_pb2, queue_pb2

from tests.golden_mesh import CONFIG, schedmesh

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find processes")

CLASSES = (("low", 1), ("mid", 10), ("medium", 100), ("high", 1000), ("high-never", 1000))


def _pod(name: str, group: str, cls: str, cpu: str, node: str = "", shutdown: int = 0) -> dict:
    """A pod of one test's nodes (nodeSelector group=...): the other test's nodes are
    UnschedulableAndUnresolvable for it, so never preemption candidates."""
    meta: dict = {"name": name, "namespace": "default"}
    if shutdown:  # the agent's simulated containers take that long to stop
        meta["annotations"] = {"schedmesh.io/simulated-shutdown-seconds": str(shutdown)}
    spec: dict = {"priorityClassName": cls, "nodeSelector": {"group": group},
                  "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _node(name: str, group: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"group": group}},
            "status": {"capacity": {"cpu": "2", "memory": "8Gi", "pods": "10"}}}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Mesh:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.client = Client(load_state(work))
        self.bootstrap = self.state()["bootstrap"]

    def state(self) -> dict:
        return json.loads((self.work / ".schedmesh" / "mesh.json").read_text())

    def proc(self, name: str) -> dict:
        return next(p for p in self.state()["procs"] if p["name"] == name)

    def apply(self, *objs: dict) -> None:
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
        self.client.call("Apply", queue_pb2.ApplyRequest(manifest=text, source="test"), timeout=60)

    def pods(self) -> dict[str, queue_pb2.PodView]:
        return {v.pod.metadata.name: v for v in self.client.call("GetPods", queue_pb2.GetRequest()).pods}

    def until(self, describe: str, what, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while True:
            got = what()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {describe}; pods:\n{self.summary()}")
            time.sleep(0.2)

    def summary(self) -> str:
        """The pods as the queue-manager lists them and every pod's events, for failure messages."""
        lines = [f"  {n}: node={v.pod.node_name!r} nominated={v.pod.nominated_node_name!r} phase={v.pod.phase} "
                 f"deleting={bool(v.pod.metadata.deletion_timestamp)} message={v.message!r}"
                 for n, v in sorted(self.pods().items())]
        events = sorted((e.timestamp, n, e.reason, e.message) for n, es in self.audit()[1].items() for e in es)
        t0 = events[0][0] if events else 0.0
        return "\n".join(lines + ["events:"] + [f"  {t - t0:7.3f} {n}: {r}: {m}" for t, n, r, m in events])

    def running(self, *names: str, timeout: float = 60.0) -> dict[str, str]:
        def ok():
            pods = self.pods()
            if all(n in pods and pods[n].pod.phase == "Running" for n in names):
                return {n: pods[n].pod.node_name for n in names}
            return None
        return self.until(f"{names} running", ok, timeout)

    def field(self, name: str, get):
        """get(PodView) for a listed pod, else None."""
        v = self.pods().get(name)
        return get(v) if v is not None else None

    def audit(self) -> tuple[PodTopicFold, dict[str, list[events_pb2.Event]]]:
        """The pods topic folded and the events by pod name, read back from the broker."""
        async def read():
            fold, events = PodTopicFold(), {}
            async with EventConsumer(self.bootstrap, [TOPIC_PODS, TOPIC_EVENTS],
                                     client_id=f"test-audit-{time.monotonic_ns()}") as consumer:
                for r in await consumer.catch_up(60):
                    if r.topic == TOPIC_PODS:
                        fold.add(r.value)
                    elif r.value:
                        for e in expand(events_pb2.Event.FromString(r.value)):
                            events.setdefault(e.pod.split("/", 1)[-1], []).append(e)
            return fold, events
        return asyncio.run(read())


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    work: Path = tmp_path_factory.mktemp("preemption_races")
    (work / "sched.yaml").write_text(CONFIG)
    (work / "empty-pool.yaml").write_text("pools: []\n")
    up = schedmesh("up", "--detach", "--tie-break", "name", "--pool", "empty-pool.yaml", "--config", "sched.yaml",
                   cwd=work)
    assert up.returncode == 0, f"schedmesh up failed:\n{up.stdout}\n{up.stderr}"
    m = Mesh(work)
    try:
        m.apply(*({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v,
                   **({"preemptionPolicy": "Never"} if n.endswith("-never") else {})} for n, v in CLASSES))
        yield m
    finally:
        m.client.close()
        schedmesh("down", cwd=work, timeout=90)


def _preempted_by(events: dict, name: str) -> list[str]:
    return [e.message for e in events.get(name, []) if e.reason == "Preempted"]


def _uid(fold: PodTopicFold, name: str) -> str:
    return next(u for u, n in fold.names.items() if n == f"default/{name}")


@pytest.mark.timeout(150)
def test_higher_priority_pod_takes_the_room_meanwhile(mesh: Mesh) -> None:
    # a1: two low pods (1 cpu each) that take 10 s to stop; a2: one mid pod (2 cpu).
    mesh.apply(_node("a1", "a"), _node("a2", "a"),
               _pod("v1", "a", "low", "1", node="a1", shutdown=10), _pod("v2", "a", "low", "1", node="a1", shutdown=10),
               _pod("m1", "a", "mid", "2", node="a2", shutdown=1))
    mesh.running("v1", "v2", "m1")

    # The preemptor (medium): kube picks a1, whose victims have the lower priority.
    mesh.apply(_pod("preemptor", "a", "medium", "2"))
    mesh.until("preemptor nominated", lambda: mesh.field("preemptor", lambda v: v.pod.nominated_node_name))
    pods = mesh.pods()
    assert pods["preemptor"].pod.nominated_node_name == "a1" and not pods["preemptor"].pod.node_name
    assert all(pods[v].pod.metadata.deletion_timestamp for v in ("v1", "v2")), "a1's pods not terminating"
    uid = {n: v.pod.metadata.uid for n, v in pods.items()}

    # While v1 and v2 terminate, a pod of even higher priority: its cheapest node is a1 too (the
    # victims there are already going: nothing new deleted), the preemptor loses its nomination.
    mesh.apply(_pod("urgent", "a", "high", "2"))
    mesh.until("urgent nominated to a1 or bound there",
               lambda: mesh.field("urgent", lambda v: "a1" in (v.pod.nominated_node_name, v.pod.node_name)))
    # (kube's prepareCandidate clears the nominations of lower-priority pods to that node)
    mesh.until("the preemptor's nomination to a1 cleared",
               lambda: mesh.field("preemptor", lambda v: v.pod.nominated_node_name != "a1"), 8)
    pods = mesh.pods()
    assert not pods["preemptor"].pod.node_name and not pods["urgent"].pod.node_name, mesh.summary()
    assert {"v1", "v2"} <= set(pods), f"the victims were gone before the nomination was checked:\n{mesh.summary()}"

    # urgent lands on a1 once v1 and v2 are gone; the preemptor preempts m1 and lands on a2.
    placed = mesh.until("urgent and the preemptor bound", lambda: (lambda p: {
        n: p[n].pod.node_name for n in ("urgent", "preemptor")} if all(
        n in p and p[n].pod.node_name for n in ("urgent", "preemptor")) else None)(mesh.pods()), 90)
    assert placed == {"urgent": "a1", "preemptor": "a2"}, mesh.summary()
    mesh.until("v1, v2, m1 gone", lambda: not {"v1", "v2", "m1"} & set(mesh.pods()), 30)
    mesh.running("urgent", "preemptor")

    fold, events = mesh.audit()
    # every pod that disappeared says why, once: preempted by the pod that needed its room
    assert _preempted_by(events, "v1") == [f"Preempted by pod {uid['preemptor']} on node a1"]
    assert _preempted_by(events, "v2") == [f"Preempted by pod {uid['preemptor']} on node a1"]
    assert _preempted_by(events, "m1") == [f"Preempted by pod {uid['preemptor']} on node a2"]
    assert {fold.names[u].split("/")[1] for u in fold.deleted} >= {"v1", "v2", "m1"}
    # nobody else lost or moved: each pod was bound to one node only
    for name in ("urgent", "preemptor", "v1", "v2", "m1"):
        assert len(fold.bindings[_uid(fold, name)]) == 1, (name, fold.bindings[_uid(fold, name)])
    # the preemptor was told why it waited, after each of its two preemptions: one that succeeded
    # adds no PostFilter words to kube's message ("0/N nodes are available: 2 Insufficient cpu.")
    failed = [e.message for e in events["preemptor"] if e.reason == "FailedScheduling"]
    succeeded = [m for m in failed if m.startswith("0/") and "2 Insufficient cpu" in m and "preemption:" not in m]
    assert failed[0] == succeeded[0] and len(succeeded) >= 2, failed


@pytest.mark.timeout(150)
def test_room_taken_by_a_higher_priority_pod_that_does_not_preempt(mesh: Mesh) -> None:
    # One victim, so that its room is freed by one event: with two, which waiting pod comes first
    # depends on whether the first deletion finds them in activeQ or backing off, in kube as here.
    mesh.apply(_node("c1", "c"), _pod("w", "c", "low", "2", node="c1", shutdown=6))
    mesh.running("w")
    mesh.apply(_pod("c-preemptor", "c", "medium", "2"))
    mesh.until("c-preemptor nominated", lambda: mesh.field("c-preemptor", lambda v: v.pod.nominated_node_name))
    # A pod of higher priority that may not preempt: it waits (kube's words for it), nominated
    # nowhere, while w terminates ...
    mesh.apply(_pod("c-urgent", "c", "high-never", "2"))
    v = mesh.until("c-urgent's FailedScheduling", lambda: (lambda v: v if v and v.message else None)(
        mesh.pods().get("c-urgent")))
    assert v.message.endswith("no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never."), \
        v.message
    assert not v.pod.nominated_node_name and "w" in mesh.pods(), mesh.summary()
    # ... then takes the room w leaves before the preemptor (a lower-priority nomination does not
    # count against it; the queue pops it first)
    assert mesh.until("c-urgent bound", lambda: mesh.field("c-urgent", lambda v: v.pod.node_name), 60) == "c1"
    # c1 holds a pod it may not preempt and it fits nowhere else: pending, nominated nowhere, with
    # kube's words (the other tests' nodes do not match its nodeSelector)
    n = len(mesh.client.call("GetNodes", queue_pb2.GetRequest()).nodes)

    def histogram(*parts: tuple[int, str]) -> str:  # kube's FitError: "N reason" sorted as strings
        return ", ".join(sorted(f"{k} {r}" for k, r in parts if k))
    filtered = histogram((1, "Insufficient cpu"), (n - 1, "node(s) didn't match Pod's node affinity/selector"))
    dry_run = histogram((1, "No preemption victims found for incoming pod"),
                        (n - 1, "Preemption is not helpful for scheduling"))
    want = (f"0/{n} nodes are available: {filtered}. no new claims to deallocate, "
            f"preemption: 0/{n} nodes are available: {dry_run}.")
    # (its FailedScheduling event and its status travel on two topics: wait for both)
    mesh.until("c-preemptor pending with kube's message, its nomination cleared", lambda: mesh.field(
        "c-preemptor", lambda v: v.message == want and not v.pod.node_name and not v.pod.nominated_node_name and [
            (c.status, c.reason, c.message) for c in v.pod.conditions if c.type == "PodScheduled"] == [
            ("False", "Unschedulable", want)]), 30)
    fold, events = mesh.audit()
    assert len(fold.bindings[_uid(fold, "c-urgent")]) == 1 and _uid(fold, "c-preemptor") not in fold.bindings
    preemptor = _uid(fold, "c-preemptor")
    assert _preempted_by(events, "w") == [f"Preempted by pod {preemptor} on node c1"]


@pytest.mark.timeout(200)
def test_preemption_service_killed_in_flight(mesh: Mesh) -> None:
    mesh.apply(_node("b1", "b"), _node("b2", "b"),
               _pod("x1", "b", "low", "1", node="b1", shutdown=4), _pod("x2", "b", "low", "1", node="b1", shutdown=4),
               _pod("y1", "b", "mid", "2", node="b2", shutdown=4))
    mesh.running("x1", "x2", "y1")

    # The service stopped, the preemptor applied: its Preempt call waits on the stopped process.
    old = mesh.proc("preemption")
    os.kill(old["pid"], signal.SIGSTOP)
    try:
        mesh.apply(_pod("p1", "b", "medium", "2"))
        # in flight (its answer pending) and still so 2 s later: the call waits on the stopped process
        mesh.until("p1 in flight", lambda: mesh.field("p1", lambda v: v.queue == "in-flight"))
        time.sleep(2)
        v = mesh.pods()["p1"]
        assert (v.queue, v.pod.node_name, v.pod.nominated_node_name, v.message) == ("in-flight", "", "", ""), v
    finally:
        os.kill(old["pid"], signal.SIGKILL)
    mesh.until("the preemption service restarted", lambda: (lambda p: p["pid"] != old["pid"] and _alive(p["pid"]))(
        mesh.proc("preemption")), 30)
    assert mesh.proc("preemption")["restarts"] > old["restarts"]

    # retried with backoff until the restarted service answers: p1 nominated to b1 (kube's choice)
    mesh.until("p1 nominated", lambda: mesh.field("p1", lambda v: v.pod.nominated_node_name or v.pod.node_name), 60)
    assert mesh.field("p1", lambda v: v.pod.nominated_node_name or v.pod.node_name) == "b1"
    # killed again while x1 and x2 terminate: nothing is preempted twice, p1 still lands on b1
    old = mesh.proc("preemption")
    os.kill(old["pid"], signal.SIGKILL)
    assert mesh.until("p1 bound", lambda: mesh.field("p1", lambda v: v.pod.node_name), 60) == "b1"
    mesh.until("the preemption service restarted again", lambda: (lambda p: p["pid"] != old["pid"] and _alive(
        p["pid"]))(mesh.proc("preemption")), 30)
    mesh.until("x1, x2 gone", lambda: not {"x1", "x2"} & set(mesh.pods()), 30)
    assert mesh.running("p1", "y1") == {"p1": "b1", "y1": "b2"}

    # the mesh goes on: another preemptor preempts y1 on b2 through the restarted service
    mesh.apply(_pod("p2", "b", "medium", "2"))
    assert mesh.until("p2 bound", lambda: mesh.field("p2", lambda v: v.pod.node_name), 60) == "b2"

    fold, events = mesh.audit()
    p1, p2 = _uid(fold, "p1"), _uid(fold, "p2")
    assert _preempted_by(events, "x1") == [f"Preempted by pod {p1} on node b1"]
    assert _preempted_by(events, "x2") == [f"Preempted by pod {p1} on node b1"]
    assert _preempted_by(events, "y1") == [f"Preempted by pod {p2} on node b2"]
    # no other pod of this test preempted, none bound twice
    assert not any(_preempted_by(events, n) for n in ("p1", "p2"))
    for name in ("p1", "p2", "x1", "x2", "y1"):
        assert len(fold.bindings[_uid(fold, name)]) == 1, (name, fold.bindings[_uid(fold, name)])
