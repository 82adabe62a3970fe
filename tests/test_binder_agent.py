"""The binder and the kubelet agent as real processes against a real Kafka-protocol broker:
registration and heartbeats, binding and starting (one trace across both), refusals that keep
a node from being over-committed (also under 20 concurrent binds from two clients),
idempotent re-binds, deleted pods, graceful deletion, and surviving a broker restart.

The tests share one broker, binder and agent (module fixture) and run in file order; each
uses its own pods and nodes so they do not depend on one another's outcome, except the last
(broker restart), which checks that the state built before survives.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Optional

import grpc
import pytest

from schedmesh.api import convert
from schedmesh.api.quantity import parse_quantity
from schedmesh.api.types import Container, ContainerPort, ObjectMeta, Pod
from schedmesh.broker.embedded import EmbeddedBroker
from schedmesh.bus import EventConsumer, EventProducer, Record
from schedmesh.mesh.agent import TOPIC_LEASES
from schedmesh.mesh.cluster_cache import TOPIC_EVENTS, TOPIC_NODES, TOPIC_PODS
from schedmesh.mesh.nodepool import GPU, POOL_LABEL, ZONE_LABEL, PoolError, load_pool_file, load_pools, zones_of
from schedmesh.mesh.records import expand, pod_record, publish
from schedmesh.telemetry.testing import OtlpTraceReceiver
from schedmesh.v1 import binder_pb2, binder_pb2_grpc, events_pb2

from tests.mesh_harness import ROOT, ServiceProc, free_port

AGENT = "agent-t"
POOL = """
pools:
  - name: t
    count: 3
    cpu: "4"
    memory: 8Gi
    zones: [zone-a, zone-b, zone-c]
  - name: small
    count: 1
    cpu: "1"
    memory: 4Gi
"""
NODES = {"t-0", "t-1", "t-2", "small-0"}


@dataclass
class Mesh:
    broker: EmbeddedBroker
    binder: ServiceProc
    agent: ServiceProc
    traces: OtlpTraceReceiver

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> Iterable[Mesh]:
    logs = tmp_path_factory.mktemp("binder_agent")
    pool = logs / "pool.yaml"
    pool.write_text(POOL)
    with OtlpTraceReceiver() as traces, EmbeddedBroker(log_path=logs / "broker.log") as broker:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": traces.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        common = ["--bootstrap", broker.bootstrap_servers]
        binder = ServiceProc("services.binder", common, free_port(), env, logs)
        agent = ServiceProc("services.kubelet_agent", [*common, "--pool", str(pool), "--name", AGENT,
                                                       "--start-delay", "0.2", "--max-grace", "1",
                                                       "--heartbeat", "1"], free_port(), env, logs)
        procs = [binder.start(), agent.start()]
        try:
            for p in procs:
                p.wait_serving(60)
            _wait_until_the_ledger_knows(binder.target, NODES)
            yield Mesh(broker, binder, agent, traces)
        finally:
            for p in procs:
                p.stop()


# ---- helpers ---------------------------------------------------------------------------------
def _wait_until_the_ledger_knows(target: str, nodes: set[str], timeout: float = 30.0) -> None:
    """Serving, the binder may not have read the agent's node registrations yet (a busy machine):
    ask it about a pod too large for any node until no node is "not found" (a refusal publishes
    nothing)."""
    probe = convert.pod_to_proto(mkpod("ledger-probe", cpu="1000"))
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as channel:
        stub = binder_pb2_grpc.BinderStub(channel)
        for node in sorted(nodes):
            while True:
                resp = stub.Bind(binder_pb2.BindRequest(pod=probe, node_name=node, client_id="probe"), timeout=20)
                if not resp.reason.endswith("not found"):
                    assert not resp.bound, resp
                    break
                assert time.monotonic() < deadline, f"the binder never learned node {node}"
                time.sleep(0.1)


def mkpod(name: str, cpu: str = "100m", host_port: int = 0, grace: int = 30) -> Pod:
    ports = [ContainerPort(80, host_port=host_port)] if host_port else []
    return Pod(meta=ObjectMeta(name=name, namespace="default", uid=str(uuid.uuid4()), creation_timestamp=time.time()),
               containers=[Container("main", "registry.k8s.io/pause:3.10", requests={"cpu": parse_quantity(cpu)},
                                     ports=ports)],
               termination_grace_period_seconds=grace)


class BinderClient:
    def __init__(self, target: str, client_id: str) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.stub = binder_pb2_grpc.BinderStub(self.channel)
        self.client_id = client_id

    async def bind(self, pod: Pod, node: str, metadata=None) -> binder_pb2.BindResponse:
        return await self.stub.Bind(binder_pb2.BindRequest(pod=convert.pod_to_proto(pod), node_name=node,
                                                           client_id=self.client_id), timeout=20, metadata=metadata)

    async def close(self) -> None:
        await self.channel.close()


async def records_until(bootstrap: str, topics: list[str], done: Callable[[list[Record]], bool],
                        timeout: float = 15.0) -> list[Record]:
    """Replay `topics` and follow them until `done(records)`."""
    consumer = EventConsumer(bootstrap, topics, client_id=f"test-{uuid.uuid4().hex[:6]}", probe_interval=None)
    await consumer.start(timeout)
    try:
        got: list[Record] = []
        deadline = time.monotonic() + timeout
        while True:
            got += await consumer.getmany(timeout=0.2)
            if done(got):
                return got
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met on {topics} after {timeout}s ({len(got)} records)")
    finally:
        await consumer.stop()


def pods_of(records: list[Record]) -> list[tuple[events_pb2.PodRecord, Record]]:
    """Every pod record in order, batches flattened and deltas (bindings, status reports)
    turned into the whole pod they make, as a reader of the topic sees it."""
    last: dict[str, events_pb2.PodRecord] = {}
    out = []
    for r in records:
        if r.topic != TOPIC_PODS or not r.value:
            continue
        for rec in expand(events_pb2.PodRecord.FromString(r.value)):
            if rec.HasField("update"):
                u = rec.update
                whole = events_pb2.PodRecord(source=rec.source, update=u, traceparent=rec.traceparent)
                if u.uid in last:
                    whole.pod.CopyFrom(last[u.uid].pod)
                whole.pod.metadata.uid = u.uid
                whole.pod.node_name = u.node_name or whole.pod.node_name
                whole.pod.phase = u.phase or whole.pod.phase
                whole.pod.start_time = u.start_time or whole.pod.start_time
                if u.conditions:
                    del whole.pod.conditions[:]
                    whole.pod.conditions.extend(u.conditions)
                elif u.node_name:
                    keep = [c for c in whole.pod.conditions if c.type != "PodScheduled"]
                    del whole.pod.conditions[:]
                    whole.pod.conditions.add(type="PodScheduled", status="True")
                    whole.pod.conditions.extend(keep)
                rec = whole
            last[rec.pod.metadata.uid] = rec
            out.append((rec, r))
    return out


def events_of(records: list[Record]) -> list[events_pb2.Event]:
    return [e for r in records if r.topic == TOPIC_EVENTS and r.value
            for e in expand(events_pb2.Event.FromString(r.value))]


def nodes_of(records: list[Record], source: str = AGENT) -> dict[str, events_pb2.NodeRecord]:
    out = {}
    for r in records:
        if r.topic == TOPIC_NODES and r.value:
            for rec in expand(events_pb2.NodeRecord.FromString(r.value)):  # an agent registers in batches
                if rec.source == source:
                    out[rec.node.metadata.name] = rec
    return out


def running(records: list[Record], uid: str) -> Optional[events_pb2.PodRecord]:
    return next((p for p, _ in pods_of(records) if p.pod.metadata.uid == uid and p.pod.phase == "Running"
                 and not p.deleted), None)


# ---- tests ---------------------------------------------------------------------------------
def test_demo_pool_spreads_three_zones() -> None:
    nodes = load_pool_file(ROOT / "deploy" / "nodepools" / "demo.yaml", agent="agent-0")
    assert zones_of(nodes) == ["zone-a", "zone-b", "zone-c"]
    general = [n for n in nodes if n.labels[POOL_LABEL] == "general"]
    assert [n.labels[ZONE_LABEL] for n in general[:4]] == ["zone-a", "zone-b", "zone-c", "zone-a"]
    gpu = [n for n in nodes if n.allocatable.get(GPU)]
    assert gpu and all(str(t) == "nvidia.com/gpu=present:NoSchedule" for n in gpu for t in n.taints)
    with pytest.raises(PoolError, match=r"pools\[0\]\.cpu"):
        load_pools([{"name": "x", "count": 1, "cpu": "lots", "memory": "1Gi"}])


@pytest.mark.timeout(60)
async def test_agent_registers_nodes_and_heartbeats(mesh: Mesh) -> None:
    recs = await records_until(mesh.bootstrap, [TOPIC_NODES, TOPIC_LEASES], lambda rs: (
        set(nodes_of(rs)) >= NODES
        and {name for r in rs if r.topic == TOPIC_LEASES
             for name in events_pb2.NodeRecord.FromString(r.value).leases.names} >= NODES))
    nodes = nodes_of(recs)
    assert set(nodes) == NODES
    zones = {}
    for name, rec in nodes.items():
        n = rec.node
        assert n.metadata.labels["kubernetes.io/hostname"] == name
        assert [(c.type, c.status) for c in n.conditions] == [
            ("Ready", "True"), ("MemoryPressure", "False"), ("DiskPressure", "False"), ("PIDPressure", "False")]
        zones[name] = n.metadata.labels.get("topology.kubernetes.io/zone", "")
    assert zones == {"t-0": "zone-a", "t-1": "zone-b", "t-2": "zone-c", "small-0": ""}
    assert dict(nodes["t-0"].node.allocatable) == {"cpu": "4", "memory": str(8 << 30), "pods": "110",
                                                    "ephemeral-storage": str(100 << 30)}
    lease = next(events_pb2.NodeRecord.FromString(r.value) for r in recs if r.topic == TOPIC_LEASES)
    assert lease.leases.ready.type == "Ready" and lease.leases.ready.last_heartbeat_time > 0
    assert not lease.HasField("node") and not lease.batch  # a heartbeat carries nothing else


@pytest.mark.timeout(60)
async def test_bind_then_running_in_one_trace(mesh: Mesh) -> None:
    client = BinderClient(mesh.binder.target, "qm-a")
    pod = mkpod("web-0", cpu="3")
    trace_id, parent_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    try:
        resp = await client.bind(pod, "t-0", metadata=(("traceparent", f"00-{trace_id}-{parent_id}-01"),))
    finally:
        await client.close()
    assert resp.bound and not resp.reason
    recs = await records_until(mesh.bootstrap, [TOPIC_PODS, TOPIC_EVENTS],
                               lambda rs: running(rs, pod.uid) is not None
                               and {"Scheduled", "Started"} <= {e.reason for e in events_of(rs)
                                                                if e.pod_uid == pod.uid})
    mine = [(p, r) for p, r in pods_of(recs) if p.pod.metadata.uid == pod.uid]
    bound, bound_rec = mine[0]
    assert bound.source == "binder-0" and bound.pod.node_name == "t-0" and bound.pod.phase in ("", "Pending")
    assert ("PodScheduled", "True") in [(c.type, c.status) for c in bound.pod.conditions]
    assert trace_id in bound.traceparent  # the binding record carries the pod's trace
    run = running(recs, pod.uid)
    assert run.source == AGENT and run.pod.node_name == "t-0" and run.pod.start_time > 0
    assert ("Ready", "True") in [(c.type, c.status) for c in run.pod.conditions]
    scheduled = next(e for e in events_of(recs) if e.pod_uid == pod.uid and e.reason == "Scheduled")
    assert scheduled.message == "Successfully assigned default/web-0 to t-0"
    assert scheduled.trace_id == trace_id
    # one trace: the binder's server span under the caller's span, the agent's start_pod in it
    spans = await mesh.traces.await_spans(
        lambda ss: {"/schedmesh.v1.Binder/Bind", "start_pod"} <= {s.name for s in ss if s.trace_id == trace_id})
    in_trace = {s.name: s for s in spans if s.trace_id == trace_id}
    assert in_trace["/schedmesh.v1.Binder/Bind"].parent_span_id == parent_id
    assert in_trace["start_pod"].service_name == AGENT
    # start_pod's parent is the binder's span for this pod (the binding delta's traceparent)
    parent = next(s for s in spans if s.span_id == in_trace["start_pod"].parent_span_id)
    assert parent.name == "bind" and parent.service_name == "binder-0"


@pytest.mark.timeout(60)
async def test_refusals_keep_nodes_from_overcommit(mesh: Mesh) -> None:
    client = BinderClient(mesh.binder.target, "qm-a")
    try:
        assert (await client.bind(mkpod("big-0", cpu="3"), "t-1")).bound
        resp = await client.bind(mkpod("big-1", cpu="3"), "t-1")
        assert not resp.bound and resp.reason == "Insufficient cpu"
        assert (await client.bind(mkpod("hp-0", host_port=8080), "t-2")).bound
        resp = await client.bind(mkpod("hp-1", host_port=8080), "t-2")
        assert not resp.bound and resp.reason == "node(s) didn't have free ports for the requested pod ports"
        resp = await client.bind(mkpod("lost"), "no-such-node")
        assert not resp.bound and "not found" in resp.reason
    finally:
        await client.close()


@pytest.mark.timeout(60)
async def test_concurrent_binds_from_two_clients_never_overcommit(mesh: Mesh) -> None:
    a, b = BinderClient(mesh.binder.target, "qm-a"), BinderClient(mesh.binder.target, "qm-b")
    pods = [mkpod(f"burst-{i}", cpu="100m") for i in range(20)]  # small-0 has 1 cpu: 10 fit
    try:
        answers = await asyncio.gather(*((a if i % 2 else b).bind(p, "small-0") for i, p in enumerate(pods)))
    finally:
        await a.close()
        await b.close()
    bound = [p.uid for p, r in zip(pods, answers) if r.bound]
    assert len(bound) == 10
    assert {r.reason for r in answers if not r.bound} == {"Insufficient cpu"}
    uids = {p.uid for p in pods}
    recs = await records_until(mesh.bootstrap, [TOPIC_PODS], lambda rs: sum(
        1 for p, _ in pods_of(rs) if p.pod.metadata.uid in uids and p.source == "binder-0") >= 10)
    published = [p.pod.metadata.uid for p, _ in pods_of(recs) if p.pod.metadata.uid in uids and p.source == "binder-0"]
    assert sorted(published) == sorted(bound)


@pytest.mark.timeout(60)
async def test_rebind_is_idempotent(mesh: Mesh) -> None:
    client = BinderClient(mesh.binder.target, "qm-a")
    pod = mkpod("again-0")
    try:
        assert (await client.bind(pod, "t-2")).bound
        assert (await client.bind(pod, "t-2")).bound  # a retried bind: same answer
        resp = await client.bind(pod, "t-1")
        assert not resp.bound and resp.reason == "pod default/again-0 is already bound to t-2"
        recs = await records_until(mesh.bootstrap, [TOPIC_PODS, TOPIC_EVENTS],
                                   lambda rs: running(rs, pod.uid) is not None)
        assert (await client.bind(pod, "t-2")).bound  # also once the binder has seen it come back
    finally:
        await client.close()
    await asyncio.sleep(0.5)
    recs = await records_until(mesh.bootstrap, [TOPIC_PODS, TOPIC_EVENTS], lambda rs: True)
    # One commitment: every binding the binder published names t-2 (the refused rebind to t-1
    # announces the binding it holds again, for a scheduler that missed it), one Scheduled event.
    bindings = [p.pod.node_name for p, _ in pods_of(recs) if p.pod.metadata.uid == pod.uid and p.source == "binder-0"]
    assert bindings and set(bindings) == {"t-2"}
    assert len([e for e in events_of(recs) if e.pod_uid == pod.uid and e.reason == "Scheduled"]) == 1


@pytest.mark.timeout(60)
async def test_deleted_pods(mesh: Mesh) -> None:
    client = BinderClient(mesh.binder.target, "qm-a")
    async with EventProducer(mesh.bootstrap, client_id="test-qm") as producer:
        try:
            # a pod deleted before it was bound is refused
            gone = mkpod("gone-0")
            await publish(producer, [pod_record(gone, source="test-qm"),
                                     pod_record(gone, deleted=True, source="test-qm")])
            deadline = time.monotonic() + 10
            while "has been deleted" not in (resp := await client.bind(gone, "no-such-node")).reason:
                assert time.monotonic() < deadline, resp.reason  # (no-such-node: a probe can never commit)
                await asyncio.sleep(0.1)
            resp = await client.bind(gone, "t-1")
            assert not resp.bound and resp.reason == "pod default/gone-0 has been deleted"
            going = mkpod("going-0")
            going.meta.deletion_timestamp = time.time()
            resp = await client.bind(going, "t-1")
            assert not resp.bound and resp.reason == "pod default/going-0 is being deleted"

            # a running pod deleted with a grace period: Killing, then a tombstone after the grace
            # Simulated containers stop at once unless the pod asks for a shutdown time; this one
            # asks for 30 s, capped by the agent at 1 s (--max-grace).
            pod = mkpod("grace-0", cpu="900m", grace=30)
            pod.meta.annotations["schedmesh.io/simulated-shutdown-seconds"] = "30"
            assert (await client.bind(pod, "t-1")).bound
            recs = await records_until(mesh.bootstrap, [TOPIC_PODS], lambda rs: running(rs, pod.uid) is not None)
            run = convert.pod_from_proto(running(recs, pod.uid).pod)
            asked = time.monotonic()
            await publish(producer, [pod_record(replace(run, meta=replace(run.meta, deletion_timestamp=time.time())),
                                                source="test-qm")])
            recs = await records_until(mesh.bootstrap, [TOPIC_PODS, TOPIC_EVENTS], lambda rs: any(
                p.deleted and p.pod.metadata.uid == pod.uid and p.source == AGENT for p, _ in pods_of(rs)))
            assert time.monotonic() - asked >= 0.9
            killing = [e for e in events_of(recs) if e.pod_uid == pod.uid and e.reason == "Killing"]
            assert killing and killing[0].message == "Stopping container main"
            # its cpu is free again in the binder's ledger once the tombstone reached it
            after = mkpod("after-grace-0", cpu="1")
            deadline = time.monotonic() + 10
            while not (resp := await client.bind(after, "t-1")).bound:
                assert resp.reason == "Insufficient cpu" and time.monotonic() < deadline
                await asyncio.sleep(0.1)
        finally:
            await client.close()


@pytest.mark.timeout(60)
async def test_broker_restart(mesh: Mesh) -> None:
    # 3 cpu of t-0 held by a Running pod before the restart: this test's own, or, when the whole
    # module runs, test_bind_then_running_in_one_trace's web-0 (which then refuses this one)
    client = BinderClient(mesh.binder.target, "qm-a")
    try:
        first = await client.bind(mkpod("restart-web", cpu="3"), "t-0")
    finally:
        await client.close()
    holder = "restart-web" if first.bound else "web-0"
    await records_until(mesh.bootstrap, [TOPIC_PODS], lambda rs: any(
        p.pod.metadata.name == holder and p.pod.phase == "Running" for p, _ in pods_of(rs)), timeout=30)
    await asyncio.to_thread(mesh.broker.restart)
    # the agent re-registers its nodes and re-publishes its pods on the new (empty) broker
    # (the binder re-publishes its bindings too, the pod's status included: either may come first)
    def agent_running(p) -> bool:
        return p.pod.metadata.name == holder and p.pod.phase == "Running" and p.source == AGENT
    recs = await records_until(mesh.bootstrap, [TOPIC_NODES, TOPIC_PODS], lambda rs: set(nodes_of(rs)) >= NODES
                               and any(agent_running(p) for p, _ in pods_of(rs)), timeout=30)
    web = next(p for p, _ in pods_of(recs) if agent_running(p))
    assert web.pod.node_name == "t-0"
    client = BinderClient(mesh.binder.target, "qm-a")
    try:
        # the binder's ledger still holds the holder's 3 cpu on t-0, and it can publish again
        resp = await client.bind(mkpod("web-1", cpu="3"), "t-0")
        assert not resp.bound and resp.reason == "Insufficient cpu"
        pod = mkpod("after-restart-0")
        assert (await client.bind(pod, "t-0")).bound
    finally:
        await client.close()
    await records_until(mesh.bootstrap, [TOPIC_PODS], lambda rs: running(rs, pod.uid) is not None)
