"""A shard answers on the snapshot its caller feeds it: the same verdicts as the caller's own
Filter over that shard's nodes, and no answer at all from a shard that lacks the feed before."""
from __future__ import annotations

import pytest

from schedmesh.api import convert
from schedmesh.bench.workloads import make_node, make_pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import CycleState
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import build_frameworks
from schedmesh.mesh.shard import NodeShard
from schedmesh.mesh.shard_feed import FedCluster, FeedRefused, ShardFeed
from schedmesh.scheduling.cycle import SchedulingAlgorithm
from schedmesh.v1 import scheduling_pb2 as spb


def request(feed: ShardFeed, snap: Snapshot, pod) -> spb.FilterRequest:
    req = spb.FilterRequest(pod=convert.pod_to_proto(pod), scheduler_name="default-scheduler", evaluate_all=True,
                            order_digest=snap.cols.order_digest)
    feed.take(snap, req.view.shard_feed)
    return req


def test_a_shard_filters_on_its_callers_snapshot():
    caller = Snapshot([make_node(i, zone=None) for i in range(6)])
    for i in range(4):  # nodes 0 and 1 full: 4 cpu each
        caller.add_pod(make_pod(f"big-{i}", cpu="2"), f"node-{i % 2:05d}")
    feeds = [ShardFeed(), ShardFeed()]
    shards = [NodeShard(FedCluster(), build_frameworks([default_profile()]), i, 2) for i in range(2)]
    pod = make_pod("p", cpu="2")
    answers = [s.filter(request(f, caller, pod)) for f, s in zip(feeds, shards)]
    fw = build_frameworks([default_profile()])["default-scheduler"]
    fw.set_snapshot_source(lambda: caller)
    state = CycleState()
    fw.run_pre_filter(state, pod, caller)
    want, _, _ = SchedulingAlgorithm().filter_rows(fw, state, pod, caller, caller.all_indices(), None)
    got = sorted(n for a in answers for n in a.feasible)
    assert got == sorted(caller.cols.names[r] for r in want.tolist())
    assert {n for a in answers for g in a.failures for n in g.nodes} == {"node-00000", "node-00001"}

    caller.remove_pod(next(pi.pod for pi in caller.get("node-00000").pods))  # room again on node 0
    again = [s.filter(request(f, caller, pod)) for f, s in zip(feeds, shards)]  # (only the change is sent)
    assert "node-00000" in {n for a in again for n in a.feasible}
    assert {n for a in again for g in a.failures for n in g.nodes} == {"node-00001"}
    with pytest.raises(FeedRefused):  # a restarted shard: it has not the feed this one follows
        NodeShard(FedCluster(wait_timeout=0.1), build_frameworks([default_profile()]), 0, 2) \
            .filter(request(feeds[0], caller, pod))
