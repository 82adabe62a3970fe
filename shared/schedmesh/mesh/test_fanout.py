"""The queue-manager's merge of its filter shards' answers to a pod asked alone
(FanOutEvaluator.filter), on answers made up here, without processes: kube's search over the
merged verdicts, whatever a shard reports."""
from __future__ import annotations

import numpy as np

from schedmesh.bench.workloads import make_node, make_pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import Code, CycleState
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework
from schedmesh.mesh.fanout import FanOutEvaluator
from schedmesh.scheduling.cycle import Diagnosis, SchedulingAlgorithm
from schedmesh.v1 import scheduling_pb2 as spb


class _FilterShard:
    """A filter shard's stub that answers every Filter with `response` and keeps the request."""

    def __init__(self, response: spb.FilterResponse) -> None:
        self.response = response
        self.requests: list[spb.FilterRequest] = []

    def Filter(self, request, timeout=None, metadata=None):  # noqa: N802 - the gRPC method's name
        self.requests.append(request)
        return self.response


def _merge(response: spb.FilterResponse, ordered_rows: list[int], to_find: int):
    nodes = [make_node(i) for i in range(4)]  # node-00000 .. node-00003
    snap = Snapshot(nodes, [])
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    evaluator = FanOutEvaluator(["127.0.0.1:9"], [], view_fn=spb.ClusterView)  # (never dialled)
    shard = evaluator.filter_stubs[0] = _FilterShard(response)
    try:
        algo = SchedulingAlgorithm(tie_break="name", evaluator=evaluator)
        diagnosis = Diagnosis()
        chosen = evaluator.filter(algo, fw, CycleState(), make_pod("p"), snap, np.array(ordered_rows, np.int64),
                                  to_find, diagnosis, None)
    finally:
        evaluator.close()
    assert len(shard.requests) == 1
    return [snap.cols.names[r] for r in chosen.tolist()], diagnosis


def test_failures_on_nodes_outside_the_order_are_not_examined() -> None:
    insufficient = spb.FailureGroup(code=int(Code.UNSCHEDULABLE), plugin="NodeResourcesFit",
                                    reasons=["Insufficient cpu"],
                                    # node-00003 is outside this cycle's order, node-gone unknown here
                                    nodes=["node-00000", "node-00003", "node-gone"])
    response = spb.FilterResponse(shard="0", feasible=["node-00001", "node-00002"], failures=[insufficient])
    chosen, diagnosis = _merge(response, ordered_rows=[0, 1, 2], to_find=3)
    assert chosen == ["node-00001", "node-00002"]
    assert sorted(n for n, _ in diagnosis.node_to_status.items()) == ["node-00000"]
    assert diagnosis.unschedulable_plugins == {"NodeResourcesFit"}


def test_failures_after_the_cancelling_node_are_not_examined() -> None:
    # kube's search cancels at the (to_find+1)-th feasible node: node-00003's failure, after it
    # in the order, was never examined; node-00000's, before, was.
    insufficient = spb.FailureGroup(code=int(Code.UNSCHEDULABLE), plugin="NodeResourcesFit",
                                    reasons=["Insufficient cpu"], nodes=["node-00000", "node-00003"])
    response = spb.FilterResponse(shard="0", feasible=["node-00001", "node-00002"], failures=[insufficient])
    chosen, diagnosis = _merge(response, ordered_rows=[0, 1, 2, 3], to_find=1)
    assert chosen == ["node-00001"]
    assert sorted(n for n, _ in diagnosis.node_to_status.items()) == ["node-00000"]
