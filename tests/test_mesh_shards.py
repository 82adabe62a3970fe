"""More shards mean more throughput, not different answers: 1, 2 and 4 filter/score shards
(separate processes, gRPC over sockets, state from a real Kafka-protocol broker) place the
golden scenarios' pods exactly where `schedmesh explain` places them."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from schedmesh.api.load import admit_all, load_text
from schedmesh.bus import EventProducer
from schedmesh.cli.explain import Explainer, fill_times
from schedmesh.framework.interface import CycleState
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework
from schedmesh.mesh.cluster_cache import STATE_TOPICS, ClusterCache
from schedmesh.mesh.fanout import FanOutEvaluator
from schedmesh.mesh.records import manifest_records, publish
from schedmesh.mesh.runtime import CacheFollower
from schedmesh.scheduling.cycle import FitError, SchedulingAlgorithm
from schedmesh.v1 import scheduling_pb2 as spb

from tests.mesh_harness import ServiceProc, free_port, kafka

GOLDEN = Path(__file__).parent / "golden"
SCENARIOS = ["v-mixed-02", "v-spread-01", "v-interpod-00", "v-taints-02"]


def load_scenario(name: str):
    d = json.loads((GOLDEN / f"{name}.in.json").read_text())
    items = [o for k in ("namespaces", "priorityClasses", "pdbs", "nodes", "pods") for o in d.get(k, [])]
    cluster = load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    pending = load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": d["pending"]}))
    admit_all(cluster, cluster.priority_classes)
    admit_all(pending, cluster.priority_classes)
    fill_times([p for p in cluster.pods if p.node_name], pending.pods)
    return cluster, pending


def explain_placements(cluster, pending) -> list:
    ex = Explainer(cluster, [default_profile()], tie_break="name")
    return [ex.decide(p).chosen for p in pending.pods]


async def mesh_placements(bootstrap: str, shards: int, cluster, pending, tmp_path: Path) -> list:
    ports_f = [free_port() for _ in range(shards)]
    ports_s = [free_port() for _ in range(shards)]
    env = {"SCHEDMESH_KAFKA": bootstrap, "OTEL_TRACES_EXPORTER": "none"}
    procs = [ServiceProc("services.filter_worker", ["--shard", str(i), "--shards", str(shards)], p, env, tmp_path)
             for i, p in enumerate(ports_f)]
    procs += [ServiceProc("services.score_worker", ["--shard", str(i), "--shards", str(shards)], p, env, tmp_path)
              for i, p in enumerate(ports_s)]
    cache = ClusterCache()
    follower = CacheFollower(bootstrap, cache, client_id=f"test-qm-{shards}")
    try:
        for p in procs:
            p.start()
        for p in procs:
            await asyncio.to_thread(p.wait_serving)
        await follower.start()
        follow = asyncio.create_task(follower.follow())
        # the whole recorded cluster in this cache before the first attempt: the view's offsets
        # (what the shards wait for) are this cache's
        want_pods, want_nodes = len(cluster.pods), len(cluster.nodes)
        for _ in range(300):
            with cache.lock:
                if len(cache.pods) >= want_pods and len(cache.snapshot.node_info_list) >= want_nodes:
                    break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the cache did not catch up: {len(cache.pods)}/{want_pods} pods")
        assumed: dict[str, tuple] = {}

        def view() -> spb.ClusterView:
            v = spb.ClusterView(client_id="test-qm", offsets=cache.view_offsets())
            from schedmesh.api import convert
            for pod, node in assumed.values():
                v.assumed.add(pod=convert.pod_to_proto(pod), node_name=node)
            return v

        fw = Framework(default_profile(), snapshot_fn=lambda: cache.snapshot)
        evaluator = FanOutEvaluator([p.target for p in procs[:shards]], [p.target for p in procs[shards:]], view)
        algo = SchedulingAlgorithm(tie_break="name", evaluator=evaluator)
        chosen = []
        for pod in pending.pods:
            def cycle():
                with cache.lock:
                    try:
                        res = algo.schedule_pod(fw, CycleState(), pod, cache.snapshot, evaluate_all=True,
                                                always_score=True)
                    except FitError:
                        return None
                    cache.snapshot.add_pod(pod, res.suggested_host)  # assume
                    assumed[pod.uid] = (pod, res.suggested_host)
                    return res.suggested_host
            chosen.append(await asyncio.to_thread(cycle))
        evaluator.close()
        follow.cancel()
        return chosen
    finally:
        await follower.stop()
        for p in procs:
            p.stop()


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", SCENARIOS)
async def test_shards_place_like_explain(name: str, tmp_path: Path) -> None:
    cluster, pending = load_scenario(name)
    want = explain_placements(*load_scenario(name))
    with kafka() as bootstrap:
        async with EventProducer(bootstrap) as producer:
            await producer.ensure_topics(STATE_TOPICS)
            await publish(producer, manifest_records(cluster))
            await producer.flush()
        for shards in (1, 2, 4):
            got = await mesh_placements(bootstrap, shards, cluster, pending, tmp_path)
            assert got == want, f"{shards} shard(s) placed differently"
