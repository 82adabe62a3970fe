"""The kubelet agent's reconcile loop, in-process (its Kafka clients are never started): it sleeps
until a timer is due instead of passing over nothing every tick."""
from __future__ import annotations

import asyncio
import time

from schedmesh.bus.watch import cancel_and_wait
from schedmesh.mesh.agent import KubeletAgent


class _ReadingAgent:
    """An agent serving the nodes "api" applies, its Kafka clients never started: `read` hands
    it a record as its consumer would, `sent` collects what it publishes, `now` is its clock."""

    def __init__(self) -> None:
        from schedmesh.bus import Record
        self.now = [1000.0]
        self.agent = KubeletAgent("agent-t", [], "127.0.0.1:9", clock=lambda: self.now[0], serve_applied_nodes=["api"])
        self.sent: list[tuple[str, str, bytes]] = []
        self._offset = iter(range(1_000_000))
        self._record = Record

        async def send(rec) -> None:
            self.sent.append(rec)

        async def register(nodes=None) -> None:
            return None

        self.agent._send, self.agent.register = send, register

    async def read(self, topic: str, rec: tuple[str, str, bytes]) -> None:
        await self.agent.handle(self._record(topic, 0, next(self._offset), rec[1].encode(), rec[2]))

    def started(self) -> dict[str, float]:
        """uid -> start time of the pods it reported Running, in the order it reported them."""
        from schedmesh.bus.topics import PODS
        from schedmesh.mesh.records import expand
        from schedmesh.v1 import events_pb2
        return {r.update.uid: r.update.start_time for topic, _key, value in self.sent if topic == PODS
                for r in expand(events_pb2.PodRecord.FromString(value)) if r.update.phase == "Running"}


async def test_the_reconcile_loop_sleeps_until_a_timer_is_due() -> None:
    """(Ten passes a second over no due timer were a fifth of an idle agent's wake-ups.)"""
    agent = KubeletAgent("agent-t", [], "127.0.0.1:9", tick=0.01)
    passes: list[float] = []

    async def reconcile() -> None:  # as the real one: handles (pops) what is due
        now = agent.clock()
        if agent._timers.pop_due(now) or agent._checks.pop_due(now):
            passes.append(time.monotonic())
        else:
            passes.append(-1.0)  # a pass with nothing due

    agent.reconcile = reconcile
    loop = asyncio.create_task(agent.reconcile_loop())
    try:
        await asyncio.sleep(0.3)
        assert passes == [], f"{len(passes)} passes in 0.3 s with no timer"
        pushed = time.monotonic()
        agent._timers.push(agent.clock() + 0.2, "uid-a")  # e.g. a pod's start, due in 0.2 s
        await asyncio.sleep(0.05)
        agent._checks.push(agent.clock() + 0.05, "node-a")  # one due sooner, pushed while it sleeps
        deadline = time.monotonic() + 5
        while len(passes) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # no third pass follows
        assert len(passes) == 2 and -1.0 not in passes
        assert 0.08 <= passes[0] - pushed < 0.2  # the evictor check's time, not the pod's
        assert passes[1] - pushed >= 0.2
    finally:
        await cancel_and_wait(loop)


async def test_pods_waiting_for_their_node_start_in_their_records_order() -> None:
    """The pods of one record bound to applied nodes whose records are read later (a fetch cut
    at a hole, see bus.consumer) start in later passes, yet in the record's order: their start
    times follow from when the record was read, not from the pass (the preemption service
    breaks ties by the victims' start times)."""
    from schedmesh.api.types import Node, ObjectMeta, Pod
    from schedmesh.api.quantity import parse_quantity
    from schedmesh.bus.topics import NODES, PODS
    from schedmesh.mesh.records import node_record, pod_batch_record, pod_message

    t = _ReadingAgent()
    names = ["node-b", "node-a", "node-b", "node-a"]  # a pod of node-a is learned before node-a's record
    pods = [Pod(ObjectMeta(name=f"p-{i}", namespace="default", uid=f"u-{i}"), node_name=n) for i, n in enumerate(names)]
    allocatable = {k: parse_quantity(v) for k, v in {"cpu": "4", "memory": "8Gi", "pods": "110"}.items()}
    await t.read(NODES, node_record(Node(ObjectMeta(name="node-b"), allocatable=allocatable), source="api"))
    await t.read(PODS, pod_batch_record([pod_message(p, source="api") for p in pods], "api"))
    t.now[0] += t.agent.start_delay
    await t.agent.reconcile()  # starts node-b's pods, all due at once (the record's clock + the delay)
    await t.read(NODES, node_record(Node(ObjectMeta(name="node-a"), allocatable=allocatable), source="api"))
    t.now[0] += 1.0
    await t.agent.reconcile()  # starts node-a's pods, a pass later
    starts = t.started()
    assert list(starts) == ["u-0", "u-2", "u-1", "u-3"]  # two passes
    times = [starts[p.uid] for p in pods]
    assert times == sorted(times) and len(set(times)) == 4 and times[-1] - times[0] < 0.001, times


async def test_a_binding_delta_read_before_its_applied_node_waits_for_the_node() -> None:
    """The binder publishes a binding as a delta; the agent reads the pods topic and the nodes
    topic apart, so the delta can arrive before the applied node's record. The pod then waits
    for its node and starts once the node is read (dropped, it stayed Pending for good: the
    crash-safety preemption case's low-priority pods that never started)."""
    from schedmesh.api.types import Node, ObjectMeta, Pod
    from schedmesh.api.quantity import parse_quantity
    from schedmesh.bus.topics import NODES, PODS
    from schedmesh.mesh.records import binding_update, node_record, pod_batch_record, pod_message

    t = _ReadingAgent()
    pod = Pod(ObjectMeta(name="p-0", namespace="default", uid="u-0"))
    other = Pod(ObjectMeta(name="p-1", namespace="default", uid="u-1"))
    await t.read(PODS, pod_batch_record([pod_message(pod, source="api"), pod_message(other, source="api")], "api"))
    await t.read(PODS, pod_batch_record([binding_update(pod, "node-a", "binder-0"),
                                         binding_update(other, "node-z", "binder-0")], "binder-0"))
    allocatable = {k: parse_quantity(v) for k, v in {"cpu": "4", "memory": "8Gi", "pods": "110"}.items()}
    await t.read(NODES, node_record(Node(ObjectMeta(name="node-a"), allocatable=allocatable), source="api"))
    t.now[0] += t.agent.start_delay + 1.0
    await t.agent.reconcile()
    assert set(t.started()) == {"u-0"}  # p-1's node was never read: it waits, not started anywhere
    assert "u-1" in t.agent._waiting_for_node["node-z"]


async def test_applied_nodes_read_in_one_fetch_are_registered_in_one_record() -> None:
    """5,000 applied nodes registered one record each kept every reader's node columns
    rebuilding for the whole registration (the mesh placed 95 pods/s meanwhile)."""
    from schedmesh.api.types import Node, ObjectMeta
    from schedmesh.bus import Record
    from schedmesh.bus.topics import NODES
    from schedmesh.mesh.records import expand, node_record
    from schedmesh.v1 import events_pb2

    agent = KubeletAgent("agent-t", [], "127.0.0.1:9", clock=lambda: 1000.0, serve_applied_nodes=["api"])
    sent: list[tuple[str, str, bytes]] = []

    async def send(rec) -> None:
        sent.append(rec)

    agent._send = send
    for i in range(3):
        rec = node_record(Node(ObjectMeta(name=f"node-{i}")), source="api")
        await agent.handle(Record(NODES, 0, i, rec[1].encode(), rec[2]))
    assert sent == []  # registered after the fetch, not per record
    await agent._register_served()
    (topic, _key, value), = sent
    items = expand(events_pb2.NodeRecord.FromString(value))
    assert topic == NODES and [n.node.metadata.name for n in items] == ["node-0", "node-1", "node-2"]
    assert all(n.source == "agent-t" and [c.type for c in n.node.conditions if c.status == "True"] == ["Ready"]
               for n in items)
    await agent._register_served()
    assert len(sent) == 1  # nothing served since


def test_heartbeats_of_many_nodes_fit_in_records_the_bus_takes() -> None:
    """One heartbeat record for 15,000 nodes was 1.5 MB: aiokafka refused it, every period. A
    record names at most LEASES_PER_RECORD nodes, of at most 253 bytes each."""
    from schedmesh.mesh.agent import LEASES_PER_RECORD, lease_records
    from schedmesh.mesh.records import MAX_RECORD_BYTES
    from schedmesh.v1 import events_pb2
    assert len(lease_records(["n" * 253] * LEASES_PER_RECORD, 1000.0, "agent-0")[0][2]) < MAX_RECORD_BYTES * 0.6
    names = [f"node-{i:06d}" for i in range(15_000)]
    recs = lease_records(names, 1000.0, "agent-0")
    assert len(recs) > 1 and all(len(v) < MAX_RECORD_BYTES // 3 for _t, _k, v in recs)
    assert len({k for _t, k, _v in recs}) == len(recs) and recs[0][1] == "agent-0"  # chunks keep their own keys
    leases = [events_pb2.NodeRecord.FromString(v).leases for _t, _k, v in recs]
    assert [name for batch in leases for name in batch.names] == names
    assert {(b.ready.type, b.ready.status, b.ready.last_heartbeat_time) for b in leases} == {("Ready", "True", 1000.0)}
    assert lease_records([], 1000.0, "agent-0") == []


async def test_a_pod_deleted_while_waiting_for_its_node_is_terminated_not_started() -> None:
    """A preemption's deletion request read before the victim's node record (the agent lagging
    after an idle spell) was dropped: the victim started and never ended, and its preemptor waited
    forever (caught once in the suite under load)."""
    from schedmesh.api.types import Node, ObjectMeta, Pod
    from schedmesh.api.quantity import parse_quantity
    from schedmesh.bus import Record
    from schedmesh.bus.topics import NODES, PODS
    from schedmesh.mesh.agent import STARTING, TERMINATING
    from schedmesh.mesh.records import deletion_update, node_record, pod_batch_record, pod_message

    now = [1000.0]
    agent = KubeletAgent("agent-t", [], "127.0.0.1:9", clock=lambda: now[0], serve_applied_nodes=["api"])
    sent: list[tuple[str, str, bytes]] = []

    async def send(rec) -> None:
        sent.append(rec)

    agent._send = send
    offset = iter(range(100))

    async def read(topic: str, rec: tuple[str, str, bytes]) -> None:
        await agent.handle(Record(topic, 0, next(offset), rec[1].encode(), rec[2]))

    victim = Pod(ObjectMeta(name="victim", namespace="default", uid="u-victim"), node_name="n2")
    other = Pod(ObjectMeta(name="other", namespace="default", uid="u-other"), node_name="n2")
    await read(PODS, pod_batch_record([pod_message(p, source="api") for p in (victim, other)], "api"))
    await read(PODS, pod_batch_record([deletion_update(victim, now[0], "preemption")], "preemption"))
    allocatable = {k: parse_quantity(v) for k, v in {"cpu": "4", "memory": "8Gi", "pods": "110"}.items()}
    await read(NODES, node_record(Node(ObjectMeta(name="n2"), allocatable=allocatable), source="api"))
    sn = agent.nodes["n2"]
    assert sn.pods["u-victim"].state == TERMINATING and sn.pods["u-victim"].pod.meta.deletion_timestamp == now[0]
    assert sn.pods["u-other"].state == STARTING


async def test_a_started_event_carries_its_pods_trace_without_a_span_nobody_records(monkeypatch) -> None:
    """The agent starts no start_pod span where none would be recorded (a seventh of its CPU per
    pod), yet the Started event names the trace of the binding that brought the pod, as the span's
    would."""
    from schedmesh.api.types import Node, ObjectMeta, Pod
    from schedmesh.api.quantity import parse_quantity
    from schedmesh.bus.topics import EVENTS, NODES, PODS
    from schedmesh.mesh.records import binding_update, expand, node_record, pod_batch_record, pod_message
    from schedmesh.v1 import events_pb2

    from schedmesh.mesh import agent as agent_module

    class NoSpans:  # a tracer without a sampler records nothing: starting a span there fails the test
        def start_as_current_span(self, *args, **kwargs):
            raise AssertionError("a span nobody records was started")

    monkeypatch.setattr(agent_module, "tracer", NoSpans())
    t = _ReadingAgent()
    allocatable = {k: parse_quantity(v) for k, v in {"cpu": "4", "memory": "8Gi", "pods": "110"}.items()}
    await t.read(NODES, node_record(Node(ObjectMeta(name="node-a"), allocatable=allocatable), source="api"))
    traced, untraced = (Pod(ObjectMeta(name=f"p-{i}", namespace="default", uid=f"u-{i}")) for i in range(2))
    await t.read(PODS, pod_batch_record([pod_message(traced, source="api"), pod_message(untraced, source="api")], "api"))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    await t.read(PODS, pod_batch_record([binding_update(traced, "node-a", "binder-0", f"00-{trace_id}-00f067aa0ba902b7-00"),
                                         binding_update(untraced, "node-a", "binder-0")], "binder-0"))
    t.now[0] += t.agent.start_delay + 1.0
    await t.agent.reconcile()
    assert set(t.started()) == {"u-0", "u-1"}
    started = {e.pod_uid: e.trace_id for topic, _key, value in t.sent if topic == EVENTS
               for e in expand(events_pb2.Event.FromString(value)) if e.reason == "Started"}
    assert started == {"u-0": trace_id, "u-1": ""}


async def test_its_own_running_report_read_back_changes_nothing_but_still_starts_a_replayed_pod() -> None:
    """The agent reads its own Running reports back from the pods topic: for a pod it runs they
    are skipped before the pod is copied with them; replayed after a restart (the pod rebuilt as
    Starting from its binding), the same report still marks it Running."""
    from schedmesh.api.types import Node, ObjectMeta, Pod
    from schedmesh.api.quantity import parse_quantity
    from schedmesh.bus.topics import NODES, PODS
    from schedmesh.mesh.agent import RUNNING, STARTING
    from schedmesh.mesh.records import binding_update, node_record, pod_batch_record, pod_message

    allocatable = {k: parse_quantity(v) for k, v in {"cpu": "4", "memory": "8Gi", "pods": "110"}.items()}
    node = node_record(Node(ObjectMeta(name="node-a"), allocatable=allocatable), source="api")
    pod = Pod(ObjectMeta(name="p-0", namespace="default", uid="u-0"))
    t = _ReadingAgent()
    await t.read(NODES, node)
    await t.read(PODS, pod_batch_record([pod_message(pod, source="api")], "api"))
    await t.read(PODS, pod_batch_record([binding_update(pod, "node-a", "binder-0")], "binder-0"))
    t.now[0] += t.agent.start_delay + 1.0
    await t.agent.reconcile()
    (report,) = [r for r in t.sent if r[0] == PODS]
    sp = t.agent.nodes["node-a"].pods["u-0"]
    running = sp.pod
    assert sp.state == RUNNING and running.phase == "Running"
    t.sent.clear()
    await t.read(PODS, report)
    assert sp.state == RUNNING and sp.pod is running and t.sent == []

    again = _ReadingAgent()  # the same agent restarted, replaying the topic
    again.agent._replaying = True
    await again.read(NODES, node)
    await again.read(PODS, pod_batch_record([pod_message(pod, source="api")], "api"))
    await again.read(PODS, pod_batch_record([binding_update(pod, "node-a", "binder-0")], "binder-0"))
    replayed = again.agent.nodes["node-a"].pods["u-0"]
    assert replayed.state == STARTING
    await again.read(PODS, report)
    assert replayed.state == RUNNING and replayed.pod.phase == "Running"
    assert replayed.pod.start_time == running.start_time


def test_a_simulated_nodes_totals_follow_its_pods_through_status_changes_and_resizes() -> None:
    """SimNode.update: a status change (the same requests) replaces the pod's entry without taking
    its requests out and back; a change of requests moves the node's totals."""
    from schedmesh.api.evolve import evolve
    from schedmesh.api.quantity import parse_quantity
    from schedmesh.api.types import Container, Node, ObjectMeta, Pod
    from schedmesh.mesh.agent import STARTING, SimNode, SimPod, running_pod

    allocatable = {k: parse_quantity(v) for k, v in {"cpu": "4", "memory": "8Gi", "pods": "110"}.items()}
    sn = SimNode(Node(ObjectMeta(name="node-a"), allocatable=allocatable))
    pods = [Pod(ObjectMeta(name=f"p-{i}", namespace="default", uid=f"u-{i}"), node_name="node-a",
                containers=[Container("c", requests={"cpu": parse_quantity(cpu)})]) for i, cpu in enumerate(["1", "500m"])]
    sps = [SimPod(p, STARTING) for p in pods]
    for sp in sps:
        sn.add(sp)
    assert sn.info.requested.milli_cpu == 1500
    started = running_pod(pods[0], 1000.0)
    sn.update(sps[0], started)
    assert sn.info.requested.milli_cpu == 1500 and len(sn.info.pods) == 2
    assert {pi.pod.meta.uid: pi.pod for pi in sn.info.pods}["u-0"] is started
    resized = evolve(started, containers=[Container("c", requests={"cpu": parse_quantity("2")})])
    sn.update(sps[0], resized)
    assert sn.info.requested.milli_cpu == 2500 and {pi.pod.meta.uid: pi.pod for pi in sn.info.pods}["u-0"] is resized
    sn.remove("u-0")
    assert sn.info.requested.milli_cpu == 500 and [pi.pod.meta.uid for pi in sn.info.pods] == ["u-1"]
