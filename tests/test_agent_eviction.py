"""The kubelet agent acting as a kubelet, as a real process against a real Kafka-protocol broker:
node-pressure eviction (kube's ranking, the MemoryPressure condition as a node delta, the evicted
pod ending Failed/Evicted with the kubelet's message and a Warning event, and staying listed),
admission (OutOfcpu / OutOfmemory / OutOfpods, BestEffort refused under MemoryPressure), and
graceful deletion with and without a simulated shutdown time.

Pods are published as records, bound by spec.nodeName as a user binds them; the agent's answers
are read back from the topics into a ClusterCache, as every service of the mesh reads them. Each
test uses its own node so they do not depend on one another.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

import pytest

from schedmesh.api.quantity import parse_quantity
from schedmesh.api.types import Container, ObjectMeta, Pod
from schedmesh.broker.embedded import EmbeddedBroker
from schedmesh.bus import EventConsumer, EventProducer
from schedmesh.mesh.cluster_cache import TOPIC_EVENTS, TOPIC_NODES, TOPIC_PODS, ClusterCache
from schedmesh.mesh.records import binding_update, deletion_update, expand, pod_batch_record, pod_record, publish
from schedmesh.v1 import events_pb2

from tests.mesh_harness import ServiceProc, free_port

AGENT = "agent-ev"
POOL = """
pools:
  - name: mem              # memory pressure: 4Gi, the node itself uses 1Gi, evicts below 500Mi
    count: 1
    cpu: "4"
    memory: 4Gi
    systemUsage: {memory: 1Gi}
    kubeletConfiguration:
      evictionHard: {memory.available: 500Mi}
      evictionPressureTransitionPeriod: 2s
  - name: pressed          # always under memory pressure: its own usage leaves 248Mi
    count: 1
    cpu: "4"
    memory: 2Gi
    systemUsage: {memory: 1800Mi}
    kubeletConfiguration:
      evictionHard: {memory.available: 500Mi}
  - name: small            # admission: 1 cpu, 1Gi, 2 pods
    count: 1
    cpu: "1"
    memory: 1Gi
    pods: 2
  - name: grace
    count: 1
    cpu: "4"
    memory: 8Gi
  - name: disk             # disk and pid pressure: kube's default disk thresholds, pid.available<100
    count: 1
    cpu: "4"
    memory: 8Gi
    ephemeralStorage: 10Gi
    maxPids: 1000
    kubeletConfiguration:
      evictionHard: {nodefs.available: "10%", imagefs.available: "15%", pid.available: "100"}
      evictionPressureTransitionPeriod: 1s
  - name: soft             # a soft threshold only: 1 s of grace, evicted pods get at most 2 s
    count: 1
    cpu: "4"
    memory: 4Gi
    kubeletConfiguration:
      evictionHard: {}
      evictionSoft: {memory.available: 1Gi}
      evictionSoftGracePeriod: {memory.available: 1s}
      evictionMaxPodGracePeriod: 2
      evictionPressureTransitionPeriod: 1s
"""
Mi = 2**20


@dataclass
class Mesh:
    broker: EmbeddedBroker
    agent: ServiceProc
    agent_args: list[str]
    logs: Path

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers

    def start_agent(self) -> None:
        self.agent = ServiceProc("services.kubelet_agent", self.agent_args, free_port(), log_dir=self.logs)
        self.agent.start()
        self.agent.wait_serving(60)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> Iterable[Mesh]:
    logs = tmp_path_factory.mktemp("agent_eviction")
    pool = logs / "pool.yaml"
    pool.write_text(POOL)
    with EmbeddedBroker(log_path=logs / "broker.log") as broker:
        args = ["--bootstrap", broker.bootstrap_servers, "--pool", str(pool), "--name", AGENT, "--start-delay", "0.2",
                "--heartbeat", "1", "--eviction-interval", "0.5"]
        mesh = Mesh(broker, ServiceProc("services.kubelet_agent", args, free_port(), log_dir=logs), args, logs)
        try:
            mesh.start_agent()
            yield mesh
        finally:
            mesh.agent.stop()


# ---- helpers ---------------------------------------------------------------------------------
def mkpod(name: str, node: str, *, cpu: str = "100m", memory: Optional[str] = None, limits: bool = False,
          usage: Optional[str] = None, priority: int = 0, grace: int = 30, shutdown: Optional[str] = None,
          best_effort: bool = False, storage: Optional[str] = None) -> Pod:
    requests = {} if best_effort else {"cpu": parse_quantity(cpu)}
    if memory and not best_effort:
        requests["memory"] = parse_quantity(memory)
    if storage:
        requests["ephemeral-storage"] = parse_quantity(storage)
    annotations = {}
    if usage is not None:
        annotations["schedmesh.io/simulated-usage"] = usage
    if shutdown is not None:
        annotations["schedmesh.io/simulated-shutdown-seconds"] = shutdown
    meta = ObjectMeta(name=name, namespace="default", uid=str(uuid.uuid4()), creation_timestamp=time.time(),
                      annotations=annotations)
    return Pod(meta=meta, node_name=node, priority=priority, termination_grace_period_seconds=grace,
               containers=[Container("app", "registry.k8s.io/pause:3.10", requests=requests,
                                     limits=dict(requests) if limits else {})])


@dataclass
class View:
    """The topics folded as the mesh's services fold them, plus the events and node deltas."""

    cache: ClusterCache
    events: list[events_pb2.Event]
    node_updates: list[events_pb2.NodeRecord]
    tombstones: set[str]

    def pod(self, p: Pod) -> Optional[Pod]:
        return self.cache.pods.get(p.uid)

    def phase(self, p: Pod) -> str:
        cur = self.pod(p)
        return cur.phase if cur is not None else ""

    def events_of(self, p: Pod) -> list[events_pb2.Event]:
        return [e for e in self.events if e.pod_uid == p.uid]

    def condition(self, node: str, type_: str) -> str:
        ni = self.cache.snapshot.get(node)
        return next((c.status for c in ni.node.conditions if c.type == type_), "") if ni and ni.node else ""

    def pressure_history(self, node: str, type_: str) -> list[str]:
        """The statuses of `type_` the agent published for `node` as deltas, in order."""
        return [c.status for rec in self.node_updates if rec.update.name == node for c in rec.update.conditions
                if c.type == type_]


async def until(bootstrap: str, done: Callable[[View], bool], timeout: float = 40.0) -> tuple[View, float]:
    """Replay and follow pods, nodes and events until `done(view)`; also when it became true."""
    consumer = EventConsumer(bootstrap, [TOPIC_PODS, TOPIC_NODES, TOPIC_EVENTS],
                             client_id=f"test-{uuid.uuid4().hex[:6]}", probe_interval=None)
    await consumer.start(timeout)
    view = View(ClusterCache(), [], [], set())
    try:
        deadline = time.monotonic() + timeout
        while True:
            for r in await consumer.getmany(timeout=0.1):
                if not r.value:
                    continue
                if r.topic == TOPIC_EVENTS:
                    view.events += expand(events_pb2.Event.FromString(r.value))
                    continue
                if r.topic == TOPIC_NODES:
                    view.node_updates += [n for n in expand(events_pb2.NodeRecord.FromString(r.value))
                                          if n.HasField("update") and n.source == AGENT]
                if r.topic == TOPIC_PODS:
                    view.tombstones |= {p.pod.metadata.uid for p in expand(events_pb2.PodRecord.FromString(r.value))
                                        if p.deleted and p.source == AGENT}
                view.cache.apply(r.topic, r.value, r.offset, r.partition)
            if done(view):
                return view, time.monotonic()
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met after {timeout}s")
    finally:
        await consumer.stop()


async def send(bootstrap: str, recs) -> float:
    async with EventProducer(bootstrap, client_id=f"test-api-{uuid.uuid4().hex[:4]}") as producer:
        await publish(producer, recs)
    return time.monotonic()


def has_event(view: View, pod: Pod, *reasons: str) -> bool:
    return set(reasons) <= {e.reason for e in view.events_of(pod)}


def all_running(*pods: Pod) -> Callable[[View], bool]:
    return lambda v: all(v.phase(p) == "Running" for p in pods)


# ---- node-pressure eviction --------------------------------------------------------------------
@pytest.mark.timeout(150)
async def test_memory_pressure_evicts_by_kubes_ranking(mesh: Mesh) -> None:
    # A uses the most above its request but has the higher priority; B exceeds its request too, at
    # priority 0; C uses the most memory of all, within its request. kube evicts B.
    a = mkpod("hog-important", "mem-0", memory="100Mi", usage="memory=600Mi", priority=1000)
    b = mkpod("small-over", "mem-0", memory="50Mi", usage="memory=50Mi")
    c = mkpod("big-guaranteed", "mem-0", cpu="100m", memory="2Gi", limits=True, usage="memory=1900Mi")
    await send(mesh.bootstrap, [pod_record(p, source="test-api") for p in (a, b, c)])
    view, _ = await until(mesh.bootstrap, lambda v: all_running(a, b, c)(v) and v.condition("mem-0", "MemoryPressure"))
    assert view.condition("mem-0", "MemoryPressure") == "False"  # 1024 + 2550Mi used of 4Gi: 522Mi left
    assert view.condition("mem-0", "Ready") == "True"

    # Re-applying B with a larger usage leaves 372Mi: below the 500Mi hard threshold.
    more = dataclasses.replace(b, meta=dataclasses.replace(
        b.meta, annotations={"schedmesh.io/simulated-usage": "memory=200Mi"}))
    await send(mesh.bootstrap, [pod_record(more, source="test-api")])
    # (events and pods are separate topics: wait for both)
    view, _ = await until(mesh.bootstrap, lambda v: v.phase(b) == "Failed" and has_event(v, b, "Evicted", "Killing")
                          and "True" in v.pressure_history("mem-0", "MemoryPressure"))
    ended = view.pod(b)
    message = ("The node was low on resource: memory. Threshold quantity: 500Mi, available: 372Mi. "
               "Container app was using 200Mi, request is 50Mi, has larger consumption of memory. ")
    assert (ended.status_reason, ended.status_message) == ("Evicted", message)
    assert ("DisruptionTarget", "True", "TerminationByKubelet", message) in [
        (c.type, c.status, c.reason, c.message) for c in ended.conditions]
    assert ("Ready", "False") in [(c.type, c.status) for c in ended.conditions]
    evicted = [e for e in view.events_of(b) if e.reason == "Evicted"]
    assert len(evicted) == 1 and (evicted[0].type, evicted[0].message, evicted[0].source) == ("Warning", message, AGENT)
    assert "Killing" in [e.reason for e in view.events_of(b)]
    assert view.phase(a) == "Running" and view.phase(c) == "Running"  # one pod is enough: 572Mi left
    # The evicted pod stays listed, as kube keeps it, but no longer counts on its node.
    assert b.uid in view.cache.pods and view.cache.get_pod("default", "small-over").phase == "Failed"
    assert sorted(p.pod.name for p in view.cache.snapshot.get("mem-0").pods) == ["big-guaranteed", "hog-important"]

    # The condition goes back to False once the transition period (2s) has passed without pressure.
    view, _ = await until(mesh.bootstrap, lambda v: v.condition("mem-0", "MemoryPressure") == "False"
                          and "True" in v.pressure_history("mem-0", "MemoryPressure"))
    assert view.pressure_history("mem-0", "MemoryPressure")[-2:] == ["True", "False"]
    assert view.phase(a) == "Running" and view.phase(c) == "Running"

    # Deleting the evicted pod: the kubelet removes a terminal pod at once.
    await send(mesh.bootstrap, [pod_batch_record([deletion_update(ended, time.time(), "test-api")], "test-api")])
    view, _ = await until(mesh.bootstrap, lambda v: b.uid in v.tombstones)
    assert b.uid not in view.cache.pods


@pytest.mark.timeout(150)
async def test_soft_threshold_waits_its_grace_and_caps_the_shutdown(mesh: Mesh) -> None:
    # The pod would take 20 s to stop; a soft eviction gives it min(evictionMaxPodGracePeriod=2,
    # terminationGracePeriodSeconds=30) seconds.
    hog = mkpod("slow-hog", "soft-0", usage="memory=3.5Gi", shutdown="20")
    await send(mesh.bootstrap, [pod_record(hog, source="test-api")])
    view, _ = await until(mesh.bootstrap, lambda v: v.phase(hog) == "Failed" and has_event(v, hog, "Evicted", "Started"),
                          timeout=60)
    failed_seen = time.time()
    (evicted,) = [e for e in view.events_of(hog) if e.reason == "Evicted"]
    (started,) = [e for e in view.events_of(hog) if e.reason == "Started"]
    assert evicted.timestamp - started.timestamp >= 1.0  # the soft threshold's grace period ran first
    stopped_after = failed_seen - evicted.timestamp
    assert 2.0 <= stopped_after < 12.0, stopped_after  # not at once, not 20 s: the eviction's 2 s
    assert view.pod(hog).status_message.startswith(
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. ")


# ---- admission ---------------------------------------------------------------------------------
@pytest.mark.timeout(150)
async def test_admission_refuses_what_does_not_fit(mesh: Mesh) -> None:
    cpu = mkpod("too-much-cpu", "small-0", cpu="2")
    memory = mkpod("too-much-memory", "small-0", memory="2Gi")
    await send(mesh.bootstrap, [pod_record(p, source="test-api") for p in (cpu, memory)])
    fill = [mkpod(f"fill-{i}", "small-0") for i in range(2)]
    await send(mesh.bootstrap, [pod_record(p, source="test-api") for p in fill])
    await until(mesh.bootstrap, all_running(*fill))
    extra = mkpod("one-too-many", "small-0")
    await send(mesh.bootstrap, [pod_record(extra, source="test-api")])
    view, _ = await until(mesh.bootstrap, lambda v: all(v.phase(p) == "Failed" and v.events_of(p)
                                                        for p in (cpu, memory, extra)))
    want = {
        cpu.uid: ("OutOfcpu", "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"),
        memory.uid: ("OutOfmemory", "Node didn't have enough resource: memory, requested: 2147483648, used: 0, "
                                    "capacity: 1073741824"),
        extra.uid: ("OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"),
    }
    for p in (cpu, memory, extra):
        reason, message = want[p.uid]
        got = view.pod(p)
        assert (got.status_reason, got.status_message) == (reason, "Pod was rejected: " + message)
        assert [(e.type, e.reason, e.message) for e in view.events_of(p)] == [("Warning", reason, message)]
    assert all(view.phase(p) == "Running" for p in fill)
    assert sorted(p.pod.name for p in view.cache.snapshot.get("small-0").pods) == ["fill-0", "fill-1"]


@pytest.mark.timeout(150)
async def test_best_effort_refused_under_memory_pressure(mesh: Mesh) -> None:
    await until(mesh.bootstrap, lambda v: v.condition("pressed-0", "MemoryPressure") == "True")
    best_effort = mkpod("best-effort", "pressed-0", best_effort=True)
    burstable = mkpod("burstable", "pressed-0", memory="100Mi")
    await send(mesh.bootstrap, [pod_record(p, source="test-api") for p in (best_effort, burstable)])
    view, _ = await until(mesh.bootstrap, lambda v: v.phase(best_effort) == "Failed" and v.phase(burstable) == "Running"
                          and has_event(v, best_effort, "Evicted"))
    got = view.pod(best_effort)
    assert (got.status_reason, got.status_message) == (
        "Evicted", "Pod was rejected: The node had condition: [MemoryPressure]. ")
    assert [(e.type, e.reason, e.message) for e in view.events_of(best_effort)] == [
        ("Warning", "Evicted", "The node had condition: [MemoryPressure]. ")]


# ---- graceful deletion -------------------------------------------------------------------------
@pytest.mark.timeout(150)
async def test_graceful_deletion_with_and_without_a_shutdown_time(mesh: Mesh) -> None:
    quick = mkpod("quick", "grace-0", grace=30)  # no annotation: containers stop at once
    slow = mkpod("slow", "grace-0", grace=30, shutdown="2")  # takes 2 s to stop
    capped = mkpod("capped", "grace-0", grace=1, shutdown="30")  # would take 30 s; the grace period is 1 s
    await send(mesh.bootstrap, [pod_record(p, source="test-api") for p in (quick, slow, capped)])
    view, _ = await until(mesh.bootstrap, all_running(quick, slow, capped))
    running = {p.uid: view.pod(p) for p in (quick, slow, capped)}
    # A deletion request as a delta (the preemption service, the Eviction API) and as a whole record (delete).
    now = time.time()
    whole = running[slow.uid]
    asked = await send(mesh.bootstrap, [
        pod_batch_record([deletion_update(running[quick.uid], now, "test-api"),
                          deletion_update(running[capped.uid], now, "test-api")], "test-api"),
        pod_record(dataclasses.replace(whole, meta=dataclasses.replace(whole.meta, deletion_timestamp=now)),
                   source="test-api")])
    gone_at = {}

    def record_deletions(v: View) -> bool:
        for p in (quick, slow, capped):
            if p.uid in v.tombstones and p.uid not in gone_at:
                gone_at[p.uid] = time.monotonic() - asked
        return len(gone_at) == 3 and all(has_event(v, p, "Killing") for p in (quick, slow, capped))

    view, _ = await until(mesh.bootstrap, record_deletions, timeout=60)
    # (upper bounds leave room for a loaded machine; what matters is that none waits 30 s)
    assert gone_at[quick.uid] < 5.0 and gone_at[quick.uid] < gone_at[slow.uid], gone_at  # at once
    assert 1.0 <= gone_at[capped.uid] < 10.0, gone_at
    assert 2.0 <= gone_at[slow.uid] < 10.0, gone_at
    for p in (quick, slow, capped):
        assert [(e.reason, e.message) for e in view.events_of(p) if e.reason == "Killing"] == [
            ("Killing", "Stopping container app")]
        assert p.uid not in view.cache.pods


@pytest.mark.timeout(150)
async def test_disk_then_pid_pressure(mesh: Mesh) -> None:
    # nodefs and imagefs are one filesystem here: 10Mi + 8800Mi written leave 1430Mi, below imagefs's 15%.
    writer = mkpod("writer", "disk-0", usage="ephemeral-storage=8800Mi", priority=10)
    quiet = mkpod("quiet", "disk-0", usage="ephemeral-storage=10Mi", storage="1Gi")
    await send(mesh.bootstrap, [pod_record(quiet, source="test-api")])
    await until(mesh.bootstrap, all_running(quiet))
    await send(mesh.bootstrap, [pod_record(writer, source="test-api")])
    view, _ = await until(mesh.bootstrap, lambda v: v.phase(writer) == "Failed"
                          and "True" in v.pressure_history("disk-0", "DiskPressure"))
    assert view.pod(writer).status_message == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 1610612800, available: 1430Mi. "
        "Container app was using 8800Mi, request is 0, has larger consumption of ephemeral-storage. ")
    assert view.phase(quiet) == "Running"  # within its request: ranked after the writer despite its lower priority
    view, _ = await until(mesh.bootstrap, lambda v: v.condition("disk-0", "DiskPressure") == "False")

    forks = mkpod("forks", "disk-0", usage="pids=880", priority=100)
    few = mkpod("few", "disk-0", usage="pids=30")
    await send(mesh.bootstrap, [pod_record(p, source="test-api") for p in (forks, few)])
    view, _ = await until(mesh.bootstrap, lambda v: v.phase(few) == "Failed"
                          and "True" in v.pressure_history("disk-0", "PIDPressure"))
    # pid pressure ranks by priority first: the low-priority pod goes although it has few processes
    assert view.pod(few).status_message == (
        "The node was low on resource: pids. Threshold quantity: 100, available: 90. ")
    # one eviction was enough (120 pids left): the pod with the most processes keeps running
    view, _ = await until(mesh.bootstrap, lambda v: v.condition("disk-0", "PIDPressure") == "False")
    assert view.phase(forks) == "Running" and view.phase(quiet) == "Running"


@pytest.mark.timeout(120)
async def test_a_bad_simulation_annotation_is_refused_with_the_reason(mesh: Mesh) -> None:
    bad = mkpod("bad-usage", "grace-0", usage="memory=lots")
    await send(mesh.bootstrap, [pod_record(bad, source="test-api")])
    view, _ = await until(mesh.bootstrap, lambda v: v.phase(bad) == "Failed" and has_event(v, bad, "InvalidAnnotation"))
    problem = ("pod default/bad-usage: annotation schedmesh.io/simulated-usage: memory: 'lots' is not a quantity")
    assert (view.pod(bad).status_reason, view.pod(bad).status_message) == (
        "InvalidAnnotation", "Pod was rejected: " + problem)
    assert [(e.type, e.reason, e.message) for e in view.events_of(bad)] == [("Warning", "InvalidAnnotation", problem)]


@pytest.mark.timeout(120)
async def test_a_pod_recreated_after_it_ended_starts_again(mesh: Mesh) -> None:
    first = mkpod("again", "grace-0", cpu="5")
    await send(mesh.bootstrap, [pod_record(first, source="test-api")])
    await until(mesh.bootstrap, lambda v: v.phase(first) == "Failed")
    # The same pod (same uid) applied again, pending; then a binder binds it, as a delta.
    second = dataclasses.replace(mkpod("again", "", cpu="100m"), meta=first.meta)
    await send(mesh.bootstrap, [pod_record(second, source="test-api"),
                                pod_batch_record([binding_update(second, "grace-0", "test-binder")], "test-binder")])
    view, _ = await until(mesh.bootstrap, lambda v: v.phase(first) == "Running")
    assert view.pod(first).node_name == "grace-0" and view.pod(first).status_reason == ""


# ---- restart -------------------------------------------------------------------------------------
@pytest.mark.timeout(120)
async def test_agent_restart_replays_without_repeating_itself(mesh: Mesh) -> None:
    refused = mkpod("refused-early", "grace-0", cpu="5")
    kept = mkpod("kept", "grace-0")
    await send(mesh.bootstrap, [pod_record(p, source="test-api") for p in (refused, kept)])
    view, _ = await until(mesh.bootstrap, lambda v: v.phase(refused) == "Failed" and v.phase(kept) == "Running")
    mesh.agent.stop()
    # While the agent is away: the ended pod is deleted, two pods are bound to its node.
    late_fit, late_huge = mkpod("late-fit", "grace-0"), mkpod("late-huge", "grace-0", cpu="5")
    await send(mesh.bootstrap, [
        pod_batch_record([deletion_update(view.pod(refused), time.time(), "test-api")], "test-api"),
        *(pod_record(p, source="test-api") for p in (late_fit, late_huge))])
    mesh.start_agent()

    def settled(v: View) -> bool:
        return (refused.uid in v.tombstones and v.phase(late_fit) == "Running" and v.phase(late_huge) == "Failed"
                and has_event(v, refused, "OutOfcpu") and has_event(v, kept, "Started")
                and has_event(v, late_fit, "Started") and has_event(v, late_huge, "OutOfcpu"))

    await until(mesh.bootstrap, settled)
    await asyncio.sleep(1.0)  # anything the restarted agent would repeat has been sent by now
    view, _ = await until(mesh.bootstrap, settled)
    assert view.pod(late_huge).status_reason == "OutOfcpu"
    assert view.phase(kept) == "Running"
    # Nothing said twice: one refusal event for the pod refused before the restart, one Started for `kept`.
    assert [e.reason for e in view.events_of(refused)] == ["OutOfcpu"]
    assert [e.reason for e in view.events_of(kept)] == ["Started"]


# ---- the agent's helpers -----------------------------------------------------------------------
def test_shutdown_seconds_and_failed_pod() -> None:
    from schedmesh.mesh.agent import failed_pod, running_pod, shutdown_seconds
    assert shutdown_seconds(mkpod("a", "n")) == 0.0
    assert shutdown_seconds(mkpod("a", "n", shutdown="2.5")) == 2.5
    for bad in ("soon", "-1"):
        with pytest.raises(ValueError, match=rf"pod default/a: annotation schedmesh.io/simulated-shutdown-seconds: "
                                             rf"'{bad}' is not a non-negative number of seconds"):
            shutdown_seconds(mkpod("a", "n", shutdown=bad))
    ran = failed_pod(running_pod(mkpod("a", "n"), 5.0), "Evicted", "low")
    assert (ran.phase, ran.status_reason, ran.status_message, ran.start_time) == ("Failed", "Evicted", "low", 5.0)
    assert [(c.type, c.status) for c in ran.conditions] == [
        ("PodScheduled", "True"), ("Initialized", "True"), ("ContainersReady", "False"), ("Ready", "False")]
    refused = failed_pod(mkpod("a", "n"), "OutOfcpu", "Pod was rejected: ...")
    assert refused.conditions == [] and refused.phase == "Failed"


async def test_the_pods_of_one_record_start_together_in_its_order(mesh: Mesh) -> None:
    """An Apply's pods are learned at one moment: they start in one pass (start times a
    microsecond apart, in the record's order), so no reader sees some started and some not
    (the preemption service breaks ties by the start time of victims)."""
    from schedmesh.mesh.records import pod_message
    pods = [mkpod(f"together-{i}", "grace-0", cpu="10m") for i in range(40)]
    await send(mesh.bootstrap, [pod_batch_record([pod_message(p, source="test-api") for p in pods], "test-api")])
    view, _ = await until(mesh.bootstrap, lambda v: all(v.phase(p) == "Running" for p in pods))
    starts = [view.pod(p).start_time for p in pods]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert starts[-1] - starts[0] < 0.001, f"started over {starts[-1] - starts[0]:.4f} s: more than one pass"
