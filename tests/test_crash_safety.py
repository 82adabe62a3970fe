"""Crash safety under load (issue 13, point 2), with the mesh a user runs (`schedmesh up --detach`):
each case kills one process with SIGKILL while a few hundred pods are being placed on 100
nodes, lets the supervisor restart it, and then checks, from the outside:

* every submitted pod exists once (one uid per name) and is bound, none lost;
* no pod was ever published bound to two nodes, nor published unbound after its binding
  (an audit consumer folds the pods topic for the whole run, across broker restarts);
* no node is over-committed (requested cpu and pod count within allocatable);
* scheduling resumes by itself: the seconds from the kill to the last binding are printed and
  bounded;
* a few pods that fit nowhere, submitted before the kill, end Pending (never bound, one uid each)
  with kube's FailedScheduling message, in the API's view, the pod's PodScheduled=False condition,
  its events and (queue-manager case) `schedmesh get pods -o json`'s
  schedmesh.io/unschedulable-message annotation.

The sharded broker case first gives the broker a history longer than what the owners re-publish
(a namespace relabelled 40 times) and kills filter-worker-0 once the broker is back: a shard that
started on the new broker serves the queue-manager's views only if no process kept the lost
broker's offsets (else the reported wedge, "filter-worker-0 has not caught up with the event
stream", for good).
The preemption case fills dedicated nodes with low-priority pods and submits high-priority pods
that need victims while the preemption service is killed.

Submissions go through the Scheduler API in small Applies while the kill happens; an Apply that
fails (the queue-manager is down) is sent again, which Apply's "unchanged" makes harmless."""
from __future__ import annotations

import asyncio
import logging
import json
import os
import queue
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

from tests.mesh_harness import poll, up_kafka_args
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
    unbound_after_bound: dict[str, list[str]] = field(default_factory=dict)  # uid -> publications, in order
    # bound so far in the log being read: a restarted broker's log is read again from its start
    # (the consumer's epoch), so a record delivered just before the restart was noticed comes
    # again after it, before that log's bindings; checked against the earlier reading it would
    # look like an unbound copy after a binding when the log itself has none
    bound_in_log: set[str] = field(default_factory=set)
    epoch: int = 0
    deleted: set[str] = field(default_factory=set)
    terminating_at: dict[str, float] = field(default_factory=dict)  # uid -> when its deletion was first requested
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, value: Optional[bytes], epoch: int = 0) -> None:
        if not value:
            return
        with self.lock:
            if epoch != self.epoch:
                self.epoch = epoch
                self.bound_in_log.clear()
            outer = events_pb2.PodRecord.FromString(value)
            for rec in records.expand(outer):
                if rec.HasField("update"):
                    uid, node = rec.update.uid, rec.update.node_name
                    terminating = rec.update.deletion_timestamp > 0
                else:
                    uid, node = rec.pod.metadata.uid, rec.pod.node_name
                    terminating = rec.pod.metadata.deletion_timestamp > 0
                if terminating:
                    self.terminating_at.setdefault(uid, time.time())
                if not rec.HasField("update"):
                    self.names[uid] = rec.pod.metadata.name
                    if rec.deleted:
                        self.deleted.add(uid)
                        continue
                    if not node and uid in self.bound_in_log:
                        # who and which path: its version, phase and PodScheduled condition, and the
                        # size of the batch it came in (an Apply, a re-publication, a failed attempt)
                        scheduled = next((f"{c.status}/{c.reason}" for c in rec.pod.conditions
                                          if c.type == "PodScheduled"), "-")
                        self.unbound_after_bound.setdefault(uid, []).append(
                            f"{rec.source or outer.source or '?'} (rv {rec.pod.metadata.resource_version}, "
                            f"{rec.pod.phase or 'Pending'}, PodScheduled {scheduled}, "
                            f"batch of {len(outer.batch) or 1})")
                if node:
                    self.bound_in_log.add(uid)
                    seen = self.bindings.setdefault(uid, [])
                    if not seen or seen[-1] != node:
                        seen.append(node)


class Auditor(threading.Thread):
    """Follows schedmesh.pods from the start of the mesh to the end of the module, across broker
    restarts (the consumer re-reads the new broker's topic from its beginning)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="pod-audit", daemon=True)
        self.bootstrap, self.audit = bootstrap, PodAudit()
        self.error: Optional[BaseException] = None
        self._stopping = threading.Event()
        self.ready = threading.Event()
        # for a failure's message: how far the audit got (records per broker lifetime, reads)
        self._consumer: Optional[EventConsumer] = None
        self._task: Optional[asyncio.Task] = None
        self._syncs: "queue.SimpleQueue[threading.Event]" = queue.SimpleQueue()  # sync()'s requests
        self.records_by_epoch: dict[int, int] = {}
        self.reads = 0
        self.last_record_at = 0.0

    def run(self) -> None:
        try:
            asyncio.run(self._follow())
        except BaseException as e:  # noqa: BLE001 - the checks say the audit is incomplete
            self.error = e
            raise

    async def _follow(self) -> None:
        self._task = asyncio.current_task()
        async with EventConsumer(self.bootstrap, [TOPIC_PODS], client_id="test-crash-audit") as consumer:
            self._consumer = consumer
            for r in await consumer.catch_up(60):
                self._add(r.value, r.epoch)
            self.ready.set()
            while not self._stopping.is_set():
                for r in await consumer.getmany(timeout=0.3):
                    self._add(r.value, r.epoch)
                self.reads += 1
                if not self._syncs.empty():
                    asked = []
                    while not self._syncs.empty():
                        asked.append(self._syncs.get())
                    for r in await consumer.catch_up(60):
                        self._add(r.value, r.epoch)
                    for done in asked:
                        done.set()

    def sync(self, timeout: float = 90) -> None:
        """Return once the audit has read the pods topic up to where it ends now: its reader lags the
        mesh by a fetch and more (a broker restart's new log is read from its start), and a check
        made before it catches up would find pods missing that are there."""
        done = threading.Event()
        self._syncs.put(done)
        assert done.wait(timeout), f"the audit did not catch up with the pods topic in {timeout}s: {self.describe()}"

    def _add(self, value: Optional[bytes], epoch: int) -> None:
        self.records_by_epoch[epoch] = self.records_by_epoch.get(epoch, 0) + 1
        self.last_record_at = time.time()
        self.audit.add(value, epoch)

    def describe(self) -> str:
        """Where the audit stands, for a failure's message; a reader stuck in an await shows where."""
        consumer = self._consumer
        last = f"{time.time() - self.last_record_at:.1f}s ago" if self.last_record_at else "never"
        text = (f"audit thread alive {self.is_alive()}, {self.reads} reads, records by broker lifetime "
                f"{self.records_by_epoch}, last record {last}, consumer restarts "
                f"{consumer.restart_count if consumer else '-'}")
        task = self._task
        if task is not None and not task.done():
            # the chain of awaits (a task's own stack shows only its outer coroutine); read
            # from this thread, it may be caught mid-step, which a message can live with
            where, awaited = [], task.get_coro()
            while awaited is not None and getattr(awaited, "cr_frame", None) is not None:
                code = awaited.cr_frame.f_code
                where.append(f"{code.co_filename.rsplit('/', 1)[-1]}:{awaited.cr_frame.f_lineno} {code.co_name}")
                awaited = awaited.cr_await
            text += "; the reader waits in " + " > ".join(where) + f" on {awaited!r}"[:200]
        return text

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
            # SCHEDMESH_TEST_KAFKA: on a broker of its own given with --kafka (the broker cases skip)
            r = schedmesh("up", "--detach", "--pool", "pool.yaml", *args, *up_kafka_args(base), cwd=base,
                          timeout=240, env=_env(SCHEDMESH_UNHEALTHY_SECONDS="60"))
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


UNFIT_PODS = 3  # per case: pods of 64 cpus, which no node of 4 has


def unfit_manifest(names: list[str]) -> str:
    return "---\n".join(f"""apiVersion: v1
kind: Pod
metadata: {{name: {n}, namespace: default, labels: {{app: crash-unfit}}}}
spec:
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: "64", memory: 64Mi}}}}}}]
""" for n in names)


def unschedulable_message(nodes: int) -> str:
    """kube-scheduler's FailedScheduling message for a pod that requests more cpu than any node's
    allocatable: NodeResourcesFit's Insufficient cpu is then unresolvable, so preemption is not
    even tried on any node (kube >= 1.32 words, as the golden scenarios record them)."""
    return (f"0/{nodes} nodes are available: {nodes} Insufficient cpu. no new claims to deallocate, "
            f"preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling.")


def check_unfit_pending(mesh: Mesh, unfit: list[str], cli: bool) -> None:
    """The pods that fit nowhere: still there once each, never bound, Pending with kube's message
    (in the view, the PodScheduled condition and a FailedScheduling event; with `cli`, also in
    `schedmesh get pods -o json`). After a restart the message comes back with the next attempt."""
    want = set(unfit)

    def views() -> Optional[list]:
        vs = [v for v in mesh.pods() if v.pod.metadata.name in want]
        return vs if {v.pod.metadata.name for v in vs} == want and all(v.message for v in vs) else None
    vs = poll(views, timeout=60, interval=0.5)
    assert vs, f"pods that fit nowhere lost or without a FailedScheduling message: " \
               f"{[(v.pod.metadata.name, v.message) for v in mesh.pods() if v.pod.metadata.name in want]}"
    assert len(vs) == len(unfit), f"two pods of one name: {sorted(v.pod.metadata.name for v in vs)}"
    message = unschedulable_message(len(mesh.call("GetNodes", queue_pb2.GetRequest()).nodes))
    for v in vs:
        name = v.pod.metadata.name
        assert not v.pod.node_name, f"{name} fits nowhere but is bound to {v.pod.node_name}"
        assert v.message == message, f"{name}: {v.message!r}"
        assert [(c.status, c.reason, c.message) for c in v.pod.conditions if c.type == "PodScheduled"] == \
            [("False", "Unschedulable", message)], f"{name}: {list(v.pod.conditions)}"
        events = mesh.call("DescribePod", queue_pb2.DescribeRequest(namespace="default", name=name)).events
        assert ("Warning", "FailedScheduling", message) in {(e.type, e.reason, e.message) for e in events}, \
            f"{name}: no FailedScheduling event with kube's message: {[(e.reason, e.message) for e in events]}"
    mesh.auditor.sync()
    audit = mesh.auditor.audit
    with audit.lock:
        uids = {u for u, n in audit.names.items() if n in want}
        assert len(uids) == len(unfit), "a pod that fits nowhere was lost or created twice"
        assert not {audit.names[u]: audit.bindings[u] for u in uids if audit.bindings.get(u)}, "bound, yet fits nowhere"
        assert not uids & audit.deleted
    if cli:
        r = schedmesh("get", "pods", "-l", "app=crash-unfit", "-o", "json", cwd=mesh.base)
        assert r.returncode == 0, r.stderr
        items = {i["metadata"]["name"]: i for i in json.loads(r.stdout)["items"] if i["metadata"]["name"] in want}
        assert set(items) == want, f"`get pods -o json` misses {sorted(want - set(items))}"
        for name, item in items.items():
            assert item["status"]["phase"] == "Pending" and not item["spec"].get("nodeName"), item
            assert item["metadata"]["annotations"]["schedmesh.io/unschedulable-message"] == message, item["metadata"]


def run_case(mesh: Mesh, victim: str, prefix: str, then: Optional[str] = None, cli: bool = False) -> float:
    """Submit UNFIT_PODS pods that fit nowhere, then PODS_PER_CASE pods in small Applies; SIGKILL
    `victim` a third of the way through (and `then`, once `victim` is back, two thirds of the
    way) and check the invariants; returns the seconds from the kill to the last binding."""
    names = [f"{prefix}-{i}" for i in range(PODS_PER_CASE)]
    unfit = [f"{prefix}-unfit-{i}" for i in range(UNFIT_PODS)]
    wanted = set(names)
    kill_time = [0.0]
    old = mesh.proc(victim)
    later = mesh.proc(then) if then else None

    mesh.call("Apply", queue_pb2.ApplyRequest(manifest=unfit_manifest(unfit), source=f"{prefix}-unfit.yaml"))
    for i in range(0, len(names), BATCH):
        if i == len(names) // 3 // BATCH * BATCH:
            os.kill(old["pid"], signal.SIGKILL)
            kill_time[0] = time.time()
        if later is not None and i == 2 * len(names) // 3 // BATCH * BATCH:
            wait_restarted(mesh, victim, old["pid"])
            os.kill(later["pid"], signal.SIGKILL)
        mesh.call("Apply", queue_pb2.ApplyRequest(manifest=pods_manifest(names[i:i + BATCH]),
                                                    source=f"{prefix}.yaml"), retry_for=120)
        time.sleep(0.1)
    wait_restarted(mesh, victim, old["pid"])
    if later is not None:
        wait_restarted(mesh, then, later["pid"])
    placed: dict[str, list[str]] = {}
    deadline = kill_time[0] + RESUME_LIMIT_SECONDS
    while True:
        placed = {}
        for v in mesh.pods():
            if v.pod.metadata.name in wanted:
                placed.setdefault(v.pod.metadata.name, []).append(v.pod.node_name)
        if len(placed) == len(names) and all(all(n) for n in placed.values()):
            break
        if time.time() > deadline:
            pending = sorted(n for n in names if not all(placed.get(n, [""])))
            missing = [n for n in pending if n not in placed]
            raise AssertionError(f"{len(pending)} of {len(names)} pods not bound {RESUME_LIMIT_SECONDS}s after "
                                 f"killing {victim}: {pending[:10]}; {len(missing)} of them unknown to the "
                                 f"queue-manager: {missing[:10]}")
        time.sleep(0.5)
    resumed = time.time() - kill_time[0]
    time.sleep(1.0)  # time for a late wrong record (a stale re-publication) to be published
    mesh.auditor.sync()
    duplicates = {n: nodes for n, nodes in placed.items() if len(nodes) > 1}
    assert not duplicates, f"two pods of one name: {duplicates}"
    audit = mesh.auditor.audit
    assert mesh.auditor.error is None, f"the audit consumer failed: {mesh.auditor.error!r}"
    with audit.lock:
        missing = wanted - set(audit.names.values())
    # (outside the lock: the audit's reader takes it, and describe() asks that reader for its stack)
    assert not missing, (f"{len(missing)} pods never reached the pods topic: {sorted(missing)[:10]}; "
                         f"{mesh.auditor.describe()}")
    with audit.lock:
        ours = {uid for uid, n in audit.names.items() if n in wanted}
        twice = {audit.names[u]: audit.bindings[u] for u in ours if len(audit.bindings.get(u, [])) > 1}
        assert not twice, f"bound to more than one node: {twice}"
        unbound = {audit.names[u]: c for u, c in audit.unbound_after_bound.items() if u in ours}
        assert not unbound, f"published unbound after being bound: {unbound}"
    check_nodes(mesh)
    check_unfit_pending(mesh, unfit, cli)
    killed = f"{victim} (then {then})" if then else victim
    print(f"\ncrash case {killed}: {len(names)} pods, all bound {resumed:.1f}s after the kill; "
          f"{len(unfit)} that fit nowhere pending with kube's message")
    return resumed


def check_nodes(mesh: Mesh) -> None:
    for v in mesh.call("GetNodes", queue_pb2.GetRequest()).nodes:
        assert v.requested_milli_cpu <= NODE_CPU_MILLI, f"{v.node.metadata.name} over-committed on cpu"
        assert v.pods <= NODE_PODS, f"{v.node.metadata.name} over-committed on pods"


DEFAULT_CASES = ["queue-manager", "binder", "kubelet-agent", "broker", "controller-manager"]
SHARDED_CASES = ["filter-worker-1", "score-worker-0", "broker"]
THEN = {"broker": "filter-worker-0"}  # sharded mesh: a shard started on the restarted broker


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", DEFAULT_CASES)
def test_kill_while_placing_default_mesh(meshes: Callable[[str], Mesh], victim: str) -> None:
    mesh = meshes("default")
    if victim not in {p["name"] for p in mesh.state()["procs"]}:
        pytest.skip(f"this mesh runs no {victim}")
    run_case(mesh, victim, f"d-{victim}", cli=victim == "queue-manager")


# The preemption case: PREEMPT_NODES nodes of their own (tainted, so no other case's pod lands
# there), full of LOW_PER_NODE low-priority pods of 1 cpu each; HIGH_PODS high-priority pods of 2
# cpus each then need two victims apiece.
PREEMPT_NODES, LOW_PER_NODE, HIGH_PODS, HIGH_BATCH, KILL_AFTER_HIGH = 10, 4, 10, 2, 4


def preemption_setup_manifest() -> str:
    classes = [f"""apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: crash-{n}}}
value: {v}
""" for n, v in (("low", 100), ("high", 10000))]
    nodes = [f"""apiVersion: v1
kind: Node
metadata: {{name: crash-preempt-{i}, labels: {{crash-pool: preempt}}}}
spec:
  taints: [{{key: crash-pool, value: preempt, effect: NoSchedule}}]
status:
  capacity: {{cpu: "{NODE_CPU_MILLI // 1000}", memory: 16Gi, pods: "{NODE_PODS}"}}
""" for i in range(PREEMPT_NODES)]
    return "---\n".join(classes + nodes)


def preemption_pods_manifest(names: list[str], cls: str, cpu: str) -> str:
    return "---\n".join(f"""apiVersion: v1
kind: Pod
metadata: {{name: {n}, namespace: default, labels: {{app: crash-preempt}}}}
spec:
  priorityClassName: crash-{cls}
  nodeSelector: {{crash-pool: preempt}}
  tolerations: [{{key: crash-pool, operator: Equal, value: preempt, effect: NoSchedule}}]
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: "{cpu}", memory: 64Mi}}}}}}]
""" for n in names)


@pytest.mark.timeout(300)
def test_kill_preemption_service_while_preempting(meshes: Callable[[str], Mesh]) -> None:
    """High-priority pods that need victims, the preemption service killed after the first
    KILL_AFTER_HIGH are submitted: afterwards every high-priority pod is bound once, exactly two
    low-priority victims each are gone (deleted, bound once before), the other low-priority pods
    kept their node, no node is over-committed, and the restarted service did preempt."""
    mesh = meshes("default")
    lows = [f"p-low-{i}" for i in range(PREEMPT_NODES * LOW_PER_NODE)]
    highs = [f"p-high-{i}" for i in range(HIGH_PODS)]
    mesh.call("Apply", queue_pb2.ApplyRequest(manifest=preemption_setup_manifest(), source="preempt-setup.yaml"))

    def preempt_nodes_ready() -> bool:
        return sum(v.ready for v in mesh.call("GetNodes", queue_pb2.GetRequest()).nodes
                   if v.node.metadata.name.startswith("crash-preempt-")) == PREEMPT_NODES
    assert poll(preempt_nodes_ready, 60, 0.5), "the applied nodes did not become ready"
    mesh.call("Apply", queue_pb2.ApplyRequest(manifest=preemption_pods_manifest(lows, "low", "1"),
                                              source="preempt-low.yaml"))

    def views(names) -> dict[str, list]:
        out: dict[str, list] = {}
        want = set(names)
        for v in mesh.pods():
            if v.pod.metadata.name in want:
                out.setdefault(v.pod.metadata.name, []).append(v)
        return out
    # running, as a cluster's pods are when higher-priority work arrives
    if not poll(lambda: (lambda vs: len(vs) == len(lows) and all(
            v[0].pod.node_name and v[0].pod.phase == "Running" for v in vs.values()))(views(lows)), 90, 0.5):
        lo = views(lows)
        raise AssertionError(f"the low-priority pods did not all start: {len(lo)} of {len(lows)} known, not running: "
                             f"{[(n, v[0].pod.node_name, v[0].pod.phase, v[0].message) for n, v in lo.items() if v[0].pod.phase != 'Running'][:5]}")
    first_node = {n: v[0].pod.node_name for n, v in views(lows).items()}

    old = mesh.proc("preemption")
    kill_time = 0.0
    for i in range(0, len(highs), HIGH_BATCH):
        if i == KILL_AFTER_HIGH:
            os.kill(old["pid"], signal.SIGKILL)
            kill_time = time.time()
        mesh.call("Apply", queue_pb2.ApplyRequest(manifest=preemption_pods_manifest(highs[i:i + HIGH_BATCH], "high", "2"),
                                                  source="preempt-high.yaml"))
        time.sleep(0.2)
    wait_restarted(mesh, "preemption", old["pid"])

    def settled() -> bool:
        h, lo = views(highs), views(lows)
        return (len(h) == len(highs) and all(v[0].pod.node_name for v in h.values())
                and len(lo) == len(lows) - 2 * len(highs)
                and not any(v[0].pod.metadata.deletion_timestamp for v in lo.values()))
    if not poll(settled, RESUME_LIMIT_SECONDS - (time.time() - kill_time), 0.5):
        h, lo = views(highs), views(lows)
        raise AssertionError(f"{RESUME_LIMIT_SECONDS}s after killing the preemption service: "
                             f"{sum(bool(v[0].pod.node_name) for v in h.values())} of {len(highs)} high-priority pods "
                             f"bound, {len(lo)} of {len(lows)} low-priority pods left (want {len(lows) - 2 * len(highs)}): "
                             f"{[(n, v[0].message) for n, v in h.items() if not v[0].pod.node_name][:3]}")
    resumed = time.time() - kill_time
    time.sleep(1.0)  # time for a late wrong record to be published
    mesh.auditor.sync()
    h, lo = views(highs), views(lows)
    assert all(len(v) == 1 for v in (*h.values(), *lo.values())), "two pods of one name"
    for n, v in lo.items():
        assert v[0].pod.node_name == first_node[n], f"{n} moved from {first_node[n]} to {v[0].pod.node_name}"
    audit = mesh.auditor.audit
    with audit.lock:
        ours_by_name: dict[str, list[str]] = {}
        for u, n in audit.names.items():
            if n in set(highs) | set(lows):
                ours_by_name.setdefault(n, []).append(u)
        assert len(ours_by_name) == len(highs) + len(lows), "a pod never reached the pods topic"
        assert all(len(u) == 1 for u in ours_by_name.values()), "two uids for one name"
        uid_of = {n: u[0] for n, u in ours_by_name.items()}
        for n in highs:
            assert audit.bindings.get(uid_of[n]) == [h[n][0].pod.node_name], f"{n}: {audit.bindings.get(uid_of[n])}"
        victims = {n for n in lows if n not in lo}
        assert len(victims) == 2 * len(highs)
        for n in lows:
            assert audit.bindings.get(uid_of[n]) == [first_node[n]], f"{n}: {audit.bindings.get(uid_of[n])}"
        assert {n for n in victims if uid_of[n] not in audit.deleted} == set(), "a victim left without its deletion"
        assert {n for n in victims if uid_of[n] not in audit.terminating_at} == set(), \
            "a victim deleted without a graceful deletion first"
        ours = set(uid_of.values())
        unbound = {audit.names[u]: c for u, c in audit.unbound_after_bound.items() if u in ours}
        assert not unbound, f"published unbound after being bound: {unbound}"
        after_kill = sorted(n for n in victims if audit.terminating_at[uid_of[n]] > kill_time)
    highs_after_kill = len(highs) - KILL_AFTER_HIGH
    assert len(after_kill) >= 2 * highs_after_kill, \
        f"the restarted preemption service preempted for {len(after_kill)} victims, want >= {2 * highs_after_kill}"
    check_nodes(mesh)
    print(f"\ncrash case preemption: {len(highs)} high-priority pods bound, {len(victims)} victims "
          f"({len(after_kill)} chosen after the kill), {resumed:.1f}s after the kill")


HISTORY_REVISIONS = 40


def lengthen_history(mesh: Mesh) -> None:
    """Give the broker a history longer than what the owners re-publish after it restarts: a
    namespace relabelled HISTORY_REVISIONS times is HISTORY_REVISIONS records on the old broker
    and one on the new. A process that kept the old broker's offsets then sends views whose
    namespaces offset a shard started on the new broker never reaches (the reported wedge)."""
    for rev in range(HISTORY_REVISIONS):
        mesh.call("Apply", queue_pb2.ApplyRequest(
            manifest=f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: crash-history, labels: {{rev: '{rev}'}}}}\n",
            source="history.yaml"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", SHARDED_CASES)
def test_kill_while_placing_sharded_mesh(meshes: Callable[[str], Mesh], victim: str) -> None:
    mesh = meshes("sharded")
    if victim == "broker":
        lengthen_history(mesh)
    run_case(mesh, victim, f"s-{victim}", then=THEN.get(victim))
