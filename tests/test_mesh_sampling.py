"""Sampling (percentageOfNodesToScore below 100) across shards decides like one process.

kube's adaptive default finds numFeasibleNodesToFind = max(100, N * (50 - N/125) / 100)
feasible nodes, walking the node order from a start index that rotates by the number of
nodes processed. Here N = 600 nodes, so 46 % of them (276) are enough and the search stops
early. The mesh (the queue-manager's `FanOutEvaluator` fanning Filter out to filter-worker
processes and raw Score to score-worker processes, every worker fed the caller's snapshot
with each request) must make, pod for pod, the decisions of the in-process cycle
(`SchedulingAlgorithm` with its LocalEvaluator): the same node, the same number of feasible
and of evaluated nodes, the same FailedScheduling message, the same next start index.

The clusters are scheduler_perf's SchedulingBasic and the Mixed workload, with some nodes
filled up so that Filter fails on them, and a few pending pods that fit nowhere or whose
node affinity narrows the candidates at PreFilter (a shorter node order to rotate over).
Every chosen pod is assumed on its node before the next pod; the workers learn of it from
their next feed, as from the queue-manager's.

Both follow kube's cancellation rule: the search stops at the (numFeasibleNodesToFind+1)-th
feasible node, so failures after the last kept node are examined until then (or to the end of
the order); the ExactQuota cluster puts failing nodes after the last feasible one to check it.
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

from schedmesh.api.types import (Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement,
                                 NodeSelectorTerm, Pod)
from schedmesh.bench.workloads import make_pod, mixed, scheduling_basic
from schedmesh.bus import EventProducer
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework
from schedmesh.mesh.cluster_cache import STATE_TOPICS, ClusterCache
from schedmesh.mesh.answers import batchable
from schedmesh.mesh.fanout import FanOutEvaluator
from schedmesh.mesh.records import node_record, pod_batch_record, pod_message, publish
from schedmesh.mesh.runtime import CacheFollower
from schedmesh.scheduling.cycle import FitError, SchedulingAlgorithm
from schedmesh.v1 import scheduling_pb2 as spb

from tests.mesh_harness import ServiceProc, free_port, kafka

N_NODES = 600
TO_FIND = 276  # 600 * (50 - 600 // 125) // 100: fewer than N_NODES, so sampling matters
SHARD_COUNTS = (1, 2, 4)


# ---- the clusters ------------------------------------------------------------------------------
@dataclass
class Cluster:
    nodes: list[Node]
    bound: list[Pod]  # pods already on nodes
    pending: list[Pod]  # scheduled in this order
    prefix: str


def _isolate(prefix: str, nodes, bound, pending) -> Cluster:
    """Give the cluster's nodes and pods their own names: the broker and the worker replicas
    outlive a cluster (its records are deleted afterwards), and a replica keeps the pods a
    client assumed on a deleted node until a node of that name comes back."""
    for n in nodes:
        n.meta.name = prefix + n.meta.name
        n.meta.labels["kubernetes.io/hostname"] = n.meta.name
    for p in bound + pending:
        p.meta.uid = prefix + p.meta.uid
        if p.node_name:
            p.node_name = prefix + p.node_name
    return Cluster(nodes, bound, pending, prefix)


def _fill(nodes, rng: random.Random, fraction: float) -> list[Pod]:
    """3.9 cpu of 4 on a fraction of the nodes: one more 100m pod fills such a node."""
    return [make_pod(f"filler-{n.meta.name}", cpu="3900m", node_name=n.meta.name)
            for n in nodes if rng.random() < fraction]


def _pinned(name: str, node_names: list[str], cpu: str = "100m") -> Pod:
    """A pod whose required node affinity names its nodes (metadata.name): NodeAffinity's
    PreFilter narrows the candidates to them. (A matchFields value list has one element;
    the terms are ORed.)"""
    p = make_pod(name, cpu=cpu)
    p.affinity = Affinity(node_affinity=NodeAffinity(NodeSelector([NodeSelectorTerm(
        match_fields=[NodeSelectorRequirement("metadata.name", "In", [n])]) for n in node_names])))
    return p


def _with_odd_pods(c: Cluster, fillers: list[Pod]) -> Cluster:
    """Pods that fit nowhere (FailedScheduling) or only on a few named nodes, spread through
    the pending list."""
    nowhere = make_pod("nowhere")
    nowhere.node_selector = {"schedmesh.test/nowhere": "true"}
    odd = [
        (5, make_pod("huge", cpu="5")),  # more cpu than any node has
        (17, _pinned("pinned", [c.nodes[i].meta.name for i in (7, 300, 551)])),
        (33, nowhere),
        # Filled nodes only, with a pod too big for what is left: unschedulable after PreFilter narrowed.
        (48, _pinned("pinned-full", [p.node_name for p in fillers[:3]], cpu="1")),
        (60, make_pod("huge-2", cpu="5")),
    ]
    for i, p in odd:
        p.meta.uid = c.prefix + p.meta.uid
        c.pending.insert(i, p)
    return c


def scheduling_basic_cluster() -> Cluster:
    nodes, init, pending = scheduling_basic(N_NODES, 200, 60, seed=11)
    fillers = _fill(nodes, random.Random(12), 0.3)
    return _with_odd_pods(_isolate("sb-", nodes, init + fillers, pending), fillers)


def mixed_cluster() -> Cluster:
    nodes, init, pending = mixed(N_NODES, 200, 60, seed=21)
    fillers = _fill(nodes, random.Random(22), 0.3)
    return _with_odd_pods(_isolate("mx-", nodes, init + fillers, pending), fillers)


def exact_quota_cluster() -> Cluster:
    """SchedulingBasic nodes of which exactly numFeasibleNodesToFind (276) have room, none of
    them among the last 10 of the node order: the 276th feasible node is the last one found,
    and 10 nodes that fail Filter follow it."""
    nodes, _, pending = scheduling_basic(N_NODES, 0, 3)
    order = Snapshot(nodes).cols.names
    full = set(order[-10:]) | set(random.Random(31).sample(order[:-10], N_NODES - TO_FIND - 10))
    fillers = [make_pod(f"filler-{name}", cpu="4", node_name=name) for name in sorted(full)]
    return _isolate("eq-", nodes, fillers, pending)


def one_slot_cluster() -> Cluster:
    """Every node has room for one more pod: each pod assumed makes its node infeasible for the
    pods after it (in a batch: a verdict the shards gave that the queue-manager must correct)."""
    nodes, _, pending = scheduling_basic(N_NODES, 0, 60, seed=41)
    fillers = [make_pod(f"filler-{n.meta.name}", cpu="3900m", node_name=n.meta.name) for n in nodes]
    return _isolate("os-", nodes, fillers, pending)


CLUSTERS = {"SchedulingBasic": scheduling_basic_cluster, "Mixed": mixed_cluster}
BATCH_CLUSTERS = {**CLUSTERS, "OneSlot": one_slot_cluster}
EDGE_CLUSTERS = {"ExactQuota": exact_quota_cluster}


# ---- one decision ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    pod: str
    node: Optional[str]  # None: FailedScheduling
    feasible: int
    evaluated: int  # feasible nodes + nodes with a diagnosed failure
    message: str  # the FailedScheduling message
    unschedulable_plugins: tuple[str, ...]
    next_start: int  # the start index after this pod


def decide(algo: SchedulingAlgorithm, fw: Framework, snapshot: Snapshot, pod: Pod) -> Decision:
    """One attempt as the queue-manager makes it (sampling on, no explain-style options)."""
    try:
        res = algo.schedule_pod(fw, CycleState(), pod, snapshot)
    except FitError as e:
        d = e.diagnosis
        return Decision(pod.name, None, 0, len(d.node_to_status), e.message(),
                        tuple(sorted(d.unschedulable_plugins)), algo.next_start_node_index)
    return Decision(pod.name, res.suggested_host, res.feasible_nodes, res.evaluated_nodes, "", (),
                    algo.next_start_node_index)


def in_process_decisions(c: Cluster) -> tuple[list[str], list[Decision]]:
    snapshot = Snapshot(c.nodes, c.bound)
    fw = Framework(default_profile(), snapshot_fn=lambda: snapshot)
    algo = SchedulingAlgorithm(tie_break="name")
    out = []
    for pod in c.pending:
        d = decide(algo, fw, snapshot, pod)
        if d.node is not None:
            snapshot.add_pod(pod, d.node)  # assume
        out.append(d)
    return list(snapshot.cols.names), out


def first_difference(want: list[Decision], got: list[Decision]) -> str:
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            return f"pod #{i} {w.pod}:\n  in-process {w}\n  mesh       {g}"
    return f"{len(want)} decisions in-process, {len(got)} in the mesh"


# ---- the mesh ----------------------------------------------------------------------------------
@dataclass
class Mesh:
    bootstrap: str
    filter_targets: dict[int, list[str]]
    score_targets: dict[int, list[str]]


async def _publish(bootstrap: str, records: list, ordered: bool = True) -> None:
    async with EventProducer(bootstrap) as producer:
        await producer.ensure_topics(STATE_TOPICS)
        if ordered:  # one record after the other: the node order is the order nodes arrive
            await publish(producer, records)
        else:
            await asyncio.gather(*(producer.send(t, v, key=k) for t, k, v in records))
        await producer.flush()


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> Iterator[Mesh]:
    """The broker and, for every shard count, its filter and score workers: started once."""
    logs: Path = tmp_path_factory.mktemp("mesh-sampling-logs")
    with kafka() as bootstrap:
        asyncio.run(_publish(bootstrap, []))  # the topics exist before the workers subscribe
        # The workers read no topic: the evaluator feeds them the test's snapshot.
        env = {"OTEL_TRACES_EXPORTER": "none"}
        procs: list[ServiceProc] = []
        filters: dict[int, list[str]] = {}
        scores: dict[int, list[str]] = {}
        try:
            for shards in SHARD_COUNTS:
                for kind, targets in (("filter", filters), ("score", scores)):
                    for i in range(shards):
                        p = ServiceProc(f"services.{kind}_worker", ["--shard", str(i), "--shards", str(shards)],
                                        free_port(), env, logs)
                        procs.append(p.start())
                        targets.setdefault(shards, []).append(p.target)
            for p in procs:
                p.wait_serving(timeout=120)
            yield Mesh(bootstrap, filters, scores)
        finally:
            for p in procs:  # all at once: each takes a moment to shut down
                if p.proc is not None and p.proc.poll() is None:
                    p.proc.terminate()
            for p in procs:
                p.stop()


@dataclass
class Published:
    name: str
    cluster: Cluster
    node_order: list[str]
    want: list[Decision]


@pytest.fixture(scope="module")
def published(request, mesh: Mesh) -> Iterator[Published]:
    """One cluster on the broker (nodes in order on the single-partition nodes topic, the
    bound pods as one batch) and its in-process decisions; deleted again afterwards."""
    name = request.param
    c = {**BATCH_CLUSTERS, **EDGE_CLUSTERS}[name]()
    bound = [pod_message(p) for p in c.bound]
    asyncio.run(_publish(mesh.bootstrap, [node_record(n) for n in c.nodes] + [pod_batch_record(bound)]))
    order, want = in_process_decisions(c)
    try:
        yield Published(name, c, order, want)
    finally:
        gone = [pod_message(p, deleted=True) for p in c.bound]
        asyncio.run(_publish(mesh.bootstrap, [pod_batch_record(gone)] +
                             [node_record(n, deleted=True) for n in c.nodes], ordered=False))


@dataclass
class BatchUse:
    """How much of a batched run the shards' answers decided (so a silent fallback to pod by
    pod cannot pass for the batched path)."""
    batchable: int = 0
    answered: int = 0  # pods whose Filter came from a batch
    local_rows: int = 0  # rows re-evaluated for nodes changed since the batch's view
    logged_rows: int = 0  # the same, as the evaluator counts them for the queue-manager's log
    here: int = 0  # pods alone of their template in their run, evaluated by the queue-manager
    streams_opened: int = 0  # streams the evaluator opened, all shards together


def runs(fw: Framework, pending: list[Pod], size: int) -> Iterator[list[Pod]]:
    """The queue-manager's runs: consecutive node-local pods, up to `size`, plus the pod that
    ends the run (attempted after them, pod by pod)."""
    i = 0
    while i < len(pending):
        run = [pending[i]]
        while size and len(run) < size and i + len(run) < len(pending) and batchable(fw, run[-1]):
            run.append(pending[i + len(run)])
        i += len(run)
        yield run


def mesh_decisions(cache: ClusterCache, evaluator_targets: tuple[list[str], list[str]], client: str,
                   pending: list[Pod], batch_size: int = 0, use: Optional[BatchUse] = None,
                   pipelined: bool = False, ask_alone: bool = True, close_streams: bool = False) -> list[Decision]:
    """The queue-manager's decisions through the shards: pod by pod, or in runs of `batch_size`
    (each run's batch prepared just before it, or, `pipelined`, before the previous run is
    decided, as the queue-manager's loop prepares the next run while it decides one).
    `ask_alone`: pods alone of their template in a run asked of the shards too (the queue-manager
    evaluates them itself), so that batches answer every kind of pod here. `close_streams`: each
    shard's stream closed after every run, as the queue-manager closes one left idle."""
    # The workers take the cluster from the evaluator's feeds (this cache's snapshot).
    evaluator = FanOutEvaluator(*evaluator_targets, lambda: spb.ClusterView(client_id=client), ask_alone=ask_alone)
    try:
        fw = Framework(default_profile(), snapshot_fn=lambda: cache.snapshot)
        algo = SchedulingAlgorithm(tie_break="name", evaluator=evaluator)
        out = []
        all_runs = list(runs(fw, pending, batch_size))

        def prepare(k: int, start: int):
            items = [(fw, p) for p in all_runs[k] if batchable(fw, p)] if batch_size else []
            return evaluator.prepare_batch(algo, items, cache.lock, lambda: cache.snapshot, None, None, start)

        batch = prepare(0, algo.next_start_node_index) if all_runs else None
        for k, run in enumerate(all_runs):
            following = None
            # Only after a run of node-local pods alone: a pod with affinity terms would end the
            # next batch as soon as it is assumed (the queue-manager's loop does the same).
            ahead = pipelined and all(batchable(fw, p) for p in run)
            if ahead and k + 1 < len(all_runs):
                # The next run's view is taken before this run's pods are assumed.
                start = batch.next_start if batch is not None and batch.next_start is not None \
                    else algo.next_start_node_index
                following = prepare(k + 1, start)
            evaluator.use_batch(batch)
            items = [p for p in run if batchable(fw, p)]
            for pod in run:
                with cache.lock:
                    d = decide(algo, fw, cache.snapshot, pod)
                    if d.node is not None:  # assume, here and (through the feeds) on the workers
                        cache.snapshot.add_pod(pod, d.node)
                out.append(d)
            if use is not None and evaluator._batch is not None:
                use.batchable += len(items)
                use.here += evaluator._batch.evaluated_here
                use.answered += evaluator._batch.hits
                use.local_rows += evaluator._batch.local_rows
            evaluator.end_batch()
            if close_streams:
                for stream in (*evaluator.filter_streams, *evaluator.score_streams):
                    stream.close_if_idle(0.0)
            if ahead:
                batch = following
            elif k + 1 < len(all_runs):
                batch = prepare(k + 1, algo.next_start_node_index)
        if use is not None:
            use.logged_rows = evaluator.batch_local_rows
            use.streams_opened = sum(st.opened for st in (*evaluator.filter_streams, *evaluator.score_streams))
        return out
    finally:
        evaluator.close()


async def run_mesh(published: Published, shards: int, mesh: Mesh, batch_size: int = 0,
                   use: Optional[BatchUse] = None, pipelined: bool = False, ask_alone: bool = True,
                   close_streams: bool = False) -> list[Decision]:
    # One client per cluster and shard count: its next view replaces what it assumed before.
    client = f"test-qm-{published.name}-{shards}"
    cache = ClusterCache()
    follower = CacheFollower(mesh.bootstrap, cache, client_id=client)
    await follower.start()  # replays everything published so far; nothing is published meanwhile
    try:
        with cache.lock:
            assert list(cache.snapshot.cols.names) == published.node_order, "the replica orders the nodes differently"
        return await asyncio.to_thread(mesh_decisions, cache,
                                       (mesh.filter_targets[shards], mesh.score_targets[shards]),
                                       client, published.cluster.pending, batch_size, use, pipelined, ask_alone,
                                       close_streams)
    finally:
        await follower.stop()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("shards", SHARD_COUNTS)
@pytest.mark.parametrize("published", list(CLUSTERS), indirect=True)
async def test_sharded_sampling_decides_like_one_process(published: Published, shards: int, mesh: Mesh) -> None:
    want = published.want
    # The scenario exercises what it is meant to: the search stopped early for some pods,
    # the start index moved, Filter failed on some nodes, and some pods fit nowhere.
    assert any(d.feasible == TO_FIND and d.evaluated < N_NODES for d in want)
    assert len({d.next_start for d in want}) > len(want) // 2
    assert any(d.node is not None and d.evaluated > d.feasible for d in want)
    assert any(d.node is None and d.evaluated == N_NODES for d in want)
    assert any(d.node is None and d.evaluated < N_NODES for d in want)  # narrowed at PreFilter

    got = await run_mesh(published, shards, mesh)
    assert got == want, f"{shards} shard(s) decided differently; first difference at {first_difference(want, got)}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("shards", SHARD_COUNTS)
@pytest.mark.parametrize("published", list(BATCH_CLUSTERS), indirect=True)
async def test_batches_decide_like_one_process(published: Published, shards: int, mesh: Mesh) -> None:
    """Runs of node-local pods asked of the shards in one FilterBatch and one ScoreBatch each
    (schedmesh.mesh.batch), then decided pod by pod with the rows their predecessors changed
    re-evaluated: the same decisions as one process, pod for pod, sampling on."""
    use = BatchUse()
    got = await run_mesh(published, shards, mesh, batch_size=16, use=use)
    want = published.want
    assert got == want, f"{shards} shard(s) in batches decided differently; first difference at {first_difference(want, got)}"
    assert use.answered >= use.batchable // 2 > 0, use  # the batches did the work
    assert use.local_rows > 0, use  # and the assumed pods' nodes were re-evaluated
    assert use.logged_rows == use.local_rows, use  # (what the queue-manager's log counts)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("published", ["SchedulingBasic"], indirect=True)
async def test_pods_alone_of_their_template_are_evaluated_by_the_queue_manager(published: Published, mesh: Mesh) -> None:
    """As the queue-manager runs batches: a pod alone of its template in its run is not asked of
    the shards (its answers would cost more to merge than its sampled search costs), replicas
    are; the same decisions as one process either way."""
    use = BatchUse()
    got = await run_mesh(published, 2, mesh, batch_size=16, use=use, ask_alone=False)
    want = published.want
    assert got == want, f"batches with pods alone evaluated here decided differently; first difference at {first_difference(want, got)}"
    assert 0 < use.here < use.batchable, use  # replicas and odd pods (too big, pinned, fitting nowhere) in runs
    assert 0 < use.answered <= use.batchable - use.here, use  # the replicas were answered by the shards


@pytest.mark.timeout(300)
@pytest.mark.parametrize("published", ["SchedulingBasic"], indirect=True)
async def test_streams_closed_between_runs_decide_like_one_process(published: Published, mesh: Mesh) -> None:
    """The queue-manager closes a shard's stream left idle (ShardStream.close_if_idle): the next
    run opens another and its feed follows the ones sent on the stream before; here every run
    goes on a stream of its own, with the same decisions as one process."""
    use = BatchUse()
    got = await run_mesh(published, 2, mesh, batch_size=16, use=use, close_streams=True)
    want = published.want
    assert got == want, f"runs on new streams decided differently; first difference at {first_difference(want, got)}"
    assert use.answered >= use.batchable // 2 > 0, use
    assert use.streams_opened >= 4 * 3, use  # 4 streams, each opened again for the runs after the first


@pytest.mark.timeout(300)
@pytest.mark.parametrize("published", list(BATCH_CLUSTERS), indirect=True)
async def test_pipelined_batches_decide_like_one_process(published: Published, mesh: Mesh) -> None:
    """As the queue-manager's loop runs them: each run's batch is prepared (view taken, shards
    asked, the start index predicted from the run before) while the run before it is decided,
    so it must also correct every row that earlier run changed after its view."""
    use = BatchUse()
    got = await run_mesh(published, 2, mesh, batch_size=16, use=use, pipelined=True)
    want = published.want
    assert got == want, f"pipelined batches decided differently; first difference at {first_difference(want, got)}"
    assert use.answered >= use.batchable // 2 > 0, use
    assert use.local_rows > 0, use
    assert use.logged_rows == use.local_rows, use


@pytest.mark.timeout(300)
@pytest.mark.parametrize("shards", SHARD_COUNTS)
@pytest.mark.parametrize("published", list(EDGE_CLUSTERS), indirect=True)
async def test_exact_quota_counts_evaluated_nodes_alike(published: Published, shards: int, mesh: Mesh) -> None:
    """The first search finds its 276th and last feasible node with failing nodes after it: no
    277th feasible node cancels the search, so the failures after it are examined too (600
    evaluated, the start index back to 0), on one process and across shards alike."""
    c = published.cluster
    snapshot = Snapshot(c.nodes, c.bound)
    res = SchedulingAlgorithm().schedule_pod(Framework(default_profile(), snapshot_fn=lambda: snapshot),
                                             CycleState(), c.pending[0], snapshot, evaluate_all=True)
    if res.feasible_nodes != TO_FIND or snapshot.cols.names[-1] not in res.diagnosis.node_to_status:
        pytest.fail("the cluster does not set up the edge case")
    want = published.want
    got = await run_mesh(published, shards, mesh)
    assert got == want, f"{shards} shard(s) decided differently; first difference at {first_difference(want, got)}"
