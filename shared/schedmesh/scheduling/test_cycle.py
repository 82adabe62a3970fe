"""schedule_one's algorithm: how many nodes to find, the rotating start, FitError text,
host selection and nominated pods (kube's schedule_one_test.go cases, re-expressed)."""
from __future__ import annotations

import numpy as np

import pytest

from schedmesh.api.load import admit_all, load_text
from schedmesh.cache.node_info import PodInfo
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import Code, CycleState, Status
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import Framework, Nominator
from schedmesh.scheduling.cycle import Diagnosis, FitError, SchedulingAlgorithm


def node(name: str, cpu: str = "4", zone: str = "a") -> str:
    return f"""---
apiVersion: v1
kind: Node
metadata: {{name: {name}, labels: {{topology.kubernetes.io/zone: {zone}, kubernetes.io/hostname: {name}}}}}
status: {{capacity: {{cpu: "{cpu}", memory: 16Gi, pods: "110"}}}}
"""


def pod(name: str, cpu: str = "1", priority: int = 0, extra: str = "") -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  priority: {priority}
  containers: [{{name: c, resources: {{requests: {{cpu: "{cpu}", memory: 1Gi}}}}}}]
{extra}"""


def cluster(text: str) -> tuple[Snapshot, list]:
    m = admit_all(load_text(text))
    snap = Snapshot(m.nodes, [p for p in m.pods if p.node_name])
    return snap, [p for p in m.pods if not p.node_name]


@pytest.mark.parametrize("num_nodes, percentage, want", [
    (10, None, 10),  # fewer than 100 nodes: all of them
    (99, 50, 99),
    (1000, None, 420),  # adaptive: 50 - 1000/125 = 42 %
    (1000, 40, 400),
    (1000, 100, 1000),
    (6000, None, 300),  # adaptive bottoms out at 5 %
    (6000, 1, 100),  # never fewer than 100
    (5000, None, 500),
], ids=lambda v: str(v))
def test_num_feasible_nodes_to_find(num_nodes, percentage, want):
    assert SchedulingAlgorithm().num_feasible_nodes_to_find(percentage, num_nodes) == want


def test_fit_error_message_histogram_sorted_as_strings():
    d = Diagnosis()
    d.node_to_status.set("n1", Status(Code.UNSCHEDULABLE, ("Insufficient cpu", "Insufficient memory")))
    d.node_to_status.set("n2", Status(Code.UNSCHEDULABLE, ("Insufficient cpu",)))
    d.node_to_status.set("n3", Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) had untolerated taint(s)",)))
    err = FitError(None, 12, d)
    # 9 nodes were not evaluated: the absent status has no reasons, so they add nothing.
    assert err.message() == ("0/12 nodes are available: 1 Insufficient memory, 1 node(s) had untolerated taint(s), "
                             "2 Insufficient cpu.")
    d.post_filter_msg = "preemption: not eligible due to preemptionPolicy=Never."
    assert err.message().endswith("2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.")


def test_fit_error_prefilter_message_replaces_histogram():
    d = Diagnosis(pre_filter_msg="pod affinity terms conflict")
    d.node_to_status.absent = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("pod affinity terms conflict",))
    assert FitError(None, 3, d).message() == "0/3 nodes are available: pod affinity terms conflict."


def test_absent_nodes_count_their_reason():
    d = Diagnosis()
    d.node_to_status.absent = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("node(s) didn't satisfy plugin(s) [NodeAffinity]",))
    d.node_to_status.set("n1", Status(Code.UNSCHEDULABLE, ("node(s) didn't match Pod's node affinity/selector",)))
    assert FitError(None, 4, d).message() == (
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "3 node(s) didn't satisfy plugin(s) [NodeAffinity].")


def _schedule(snap, p, **kw):
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    return SchedulingAlgorithm(**kw).schedule_pod(fw, CycleState(), p, snap, evaluate_all=True, always_score=True)


def test_tie_break_by_name_and_uniform_random():
    snap, [p] = cluster(node("b") + node("a") + node("c") + pod("p"))
    assert _schedule(snap, p, tie_break="name").suggested_host == "a"
    seen = {_schedule(snap, p, tie_break="random", seed=s).suggested_host for s in range(40)}
    assert seen == {"a", "b", "c"}


def test_tie_break_by_name_takes_the_smallest_name_in_string_order_whatever_the_node_order():
    names = ["n9", "n10", "m-2", "n1", "zz", "m-10"]
    snap, [p] = cluster("".join(node(n) for n in names) + pod("p"))
    assert _schedule(snap, p, tie_break="name").suggested_host == min(names) == "m-10"
    rank = snap.cols.name_rank
    assert [snap.cols.names[i] for i in np.argsort(rank)] == sorted(names)


def test_rotating_start_index_spreads_the_search():
    nodes = "".join(node(f"n{i:03d}") for i in range(300))
    snap, [p] = cluster(nodes + pod("p"))
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    algo = SchedulingAlgorithm()
    first = algo.schedule_pod(fw, CycleState(), p, snap)
    second = algo.schedule_pod(fw, CycleState(), p, snap)
    # 300 nodes: 50 - 300/125 = 48 % of them (144) are enough; the next search starts after them.
    assert first.feasible_nodes == second.feasible_nodes == 144
    assert algo.next_start_node_index == 288
    assert not set(first.feasible_rows.tolist()) & set(second.feasible_rows.tolist())


@pytest.mark.parametrize("full, want_feasible, want_processed", [
    # 300 nodes, 144 to find. Full (failing) nodes right after the 144th feasible one are
    # examined until the 145th feasible node cancels the search (kube's feasibleNodesLen >
    # numNodesToFind), so they count as processed and move the next start index.
    (set(), 144, 144),
    ({144, 145, 146}, 144, 147),
    ({10, 144}, 144, 146),
    # no 145th feasible node: everything after the 144th is examined
    (set(range(144, 300)), 144, 300),
    # fewer feasible than wanted: the whole order is examined
    (set(range(100, 300)), 100, 300),
])
def test_search_cancels_at_the_next_feasible_node(full, want_feasible, want_processed):
    nodes = "".join(node(f"n{i:03d}", cpu="1" if i in full else "4") for i in range(300))
    snap, [p] = cluster(nodes + pod("p", cpu="2"))
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    algo = SchedulingAlgorithm(tie_break="name")
    res = algo.schedule_pod(fw, CycleState(), p, snap)
    assert res.feasible_nodes == want_feasible
    assert len(res.diagnosis.node_to_status) == want_processed - want_feasible
    assert algo.next_start_node_index == want_processed % 300


class _Nominated(Nominator):
    def __init__(self, by_node):
        self.by_node = by_node

    def nominated_pods_for_node(self, node_name):
        return self.by_node.get(node_name, [])

    def nominated_node_names(self):
        return list(self.by_node)


@pytest.mark.parametrize("nominated_priority, feasible", [
    (10, ["n2"]),  # an equal-or-higher priority nominated pod takes n1's room
    (0, ["n1", "n2"]),  # a lower-priority nominated pod does not count
])
def test_nominated_pods_count_on_their_node(nominated_priority, feasible):
    snap, pods = cluster(node("n1", cpu="2") + node("n2", cpu="2") + pod("p", "2", priority=5)
                         + pod("nom", "2", priority=nominated_priority))
    p, nom = pods
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    res = SchedulingAlgorithm(tie_break="name").schedule_pod(
        fw, CycleState(), p, snap, nominator=_Nominated({"n1": [PodInfo(nom)]}), evaluate_all=True, always_score=True)
    assert sorted(snap.cols.names[r] for r in res.feasible_rows) == feasible
    if feasible == ["n2"]:
        assert res.diagnosis.node_to_status.get("n1").reasons == ("Insufficient cpu",)


def test_nominated_node_is_tried_first():
    snap, [p] = cluster(node("n1") + node("n2") + pod("p", extra="status: {nominatedNodeName: n2}\n"))
    fw = Framework(default_profile(), snapshot_fn=lambda: snap)
    res = SchedulingAlgorithm(tie_break="name").schedule_pod(fw, CycleState(), p, snap)
    assert res.suggested_host == "n2" and res.feasible_nodes == 1


def test_no_fit_raises_fit_error_with_every_node():
    snap, [p] = cluster(node("n1", cpu="1") + node("n2", cpu="1") + pod("p", "3"))
    with pytest.raises(FitError) as e:
        _schedule(snap, p)
    assert e.value.message() == "0/2 nodes are available: 2 Insufficient cpu."
    assert e.value.diagnosis.unschedulable_plugins == {"NodeResourcesFit"}
