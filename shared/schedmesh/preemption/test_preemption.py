"""The preemption Evaluator and DefaultPreemption's policy, re-expressing kube-scheduler's
default_preemption_test.go (TestDryRunPreemption, TestSelectBestCandidate, TestCustomSelection,
TestCustomOrdering, TestPodEligibleToPreemptOthers) and preemption_test.go
(TestNodesWherePreemptionMightHelp), plus the PDB split, pickOneNodeForPreemption's criteria one
by one, and Go's sort order."""
from __future__ import annotations

import random
import pytest

from schedmesh.api.labels import LabelSelector, LabelSelectorRequirement
from schedmesh.api.types import PREEMPT_NEVER, ObjectMeta, PodDisruptionBudget
from schedmesh.cache.node_info import PodInfo
from schedmesh.framework.interface import Code, CycleState, NodeToStatus, Status
from schedmesh.preemption.candidates import (PRIORITY_OFFSET, Victims, earliest_pod_start_time,
                                             pick_one_node_for_preemption)
from schedmesh.preemption.default_policy import (ERR_NO_VICTIMS, MSG_PREEMPTION_POLICY_NEVER,
                                                 MSG_TERMINATING_ON_NOMINATED, StrictClock,
                                                 pod_terminating_by_preemption)
from schedmesh.preemption.gosort import go_sort_slice
from schedmesh.preemption.pdb import filter_pods_with_pdb_violation, pdb_selector
from schedmesh.preemption.testkit import (HIGH, LARGE, LOW, MEDIUM, MID, NEG, SMALL, VERY_HIGH, VERY_LARGE,
                                          StaticNominator, build_framework, epoch, make_node, make_pdb,
                                          make_pod, run_pre_filter, statuses, topo_node)

FIT = "NodeResourcesFit"


class FixedOffsets:
    """Stands in for rand.Int31n: returns the given offsets in turn (kube seeds rand with 4)."""

    def __init__(self, *offsets: int) -> None:
        self.offsets = list(offsets)

    def randrange(self, n: int) -> int:
        return self.offsets.pop(0) % n


def plugin_of(fw):
    return fw.plugins["DefaultPreemption"]


def summarize(candidates) -> list[tuple[str, list[str], int]]:
    """Candidates by node name, victims by name (as kube's test compares them)."""
    return sorted((c.name, sorted(p.name for p in c.victims.pods), c.victims.num_pdb_violations) for c in candidates)


# ---------------------------------------------------------------------------------------------
# TestDryRunPreemption
# ---------------------------------------------------------------------------------------------
ANTI_FOO = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}, "topologyKey": "hostname"}]}}}
SPREAD_FOO = {"topologySpreadConstraints": [
    {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
     "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}} for key in ("zone", "hostname")]}
FOO = {"foo": ""}
APP_FOO = {"app": "foo"}
ARGS_40_1 = {"minCandidateNodesPercentage": 40, "minCandidateNodesAbsolute": 1}
ARGS_40_2 = {"minCandidateNodesPercentage": 40, "minCandidateNodesAbsolute": 2}
FIVE = ["node1", "node2", "node3", "node4", "node5"]


def five_mid_large(*very_high: str, foo: tuple[str, ...] = ()) -> list:
    return [make_pod(f"p{i}", f"node{i}", VERY_HIGH if f"node{i}" in very_high else MID, LARGE,
                     labels=APP_FOO if f"node{i}" in foo else None) for i in range(1, 6)]


DRY_RUN_CASES = [
    # id, plugins, node specs, pods to place (one cycle each), bound pods, pdbs, fake filter code,
    # args, offsets, expected candidates per cycle, expected FakeFilter calls per cycle
    ("pod-fits-no-node", ["FakeFilter", "FalseFilter"], ["node1", "node2"],
     [make_pod("p", priority=HIGH)],
     [make_pod("p1", "node1", MID), make_pod("p2", "node2", MID)], [], None, None, None,
     [[]], [2]),
    ("pod-fits-without-preemption-fake-unschedulable", ["FakeFilter", "TrueFilter"], ["node1", "node2"],
     [make_pod("p", priority=HIGH)],
     [make_pod("p1", "node1", MID), make_pod("p2", "node2", MID)], [], Code.UNSCHEDULABLE, None, None,
     [[]], [2]),
    ("pod-fits-one-node-fake-unschedulable", ["FakeFilter", "MatchFilter"], ["node1", "node2"],
     [make_pod("node1", priority=HIGH)],
     [make_pod("p1", "node1", MID), make_pod("p2", "node2", MID)], [], Code.UNSCHEDULABLE, None, None,
     [[]], [2]),
    ("fits-both-nodes-after-preempting-lower-priority", ["FakeFilter", FIT], ["node1", "node2"],
     [make_pod("p", priority=HIGH, req=LARGE)],
     [make_pod("p1", "node1", MID, LARGE), make_pod("p2", "node2", MID, LARGE)], [], None, None, None,
     [[("node1", ["p1"], 0), ("node2", ["p2"], 0)]], [4]),
    ("running-pods-higher-priority-no-preemption", ["FakeFilter", FIT], ["node1", "node2"],
     [make_pod("p", priority=LOW, req=LARGE)],
     [make_pod("p1", "node1", MID, LARGE), make_pod("p2", "node2", MID, LARGE)], [], None, None, None,
     [[]], [0]),
    ("medium-preempted-small-low-stays", ["FakeFilter", FIT], ["node1", "node2"],
     [make_pod("p", priority=HIGH, req=LARGE)],
     [make_pod("p1.1", "node1", LOW, SMALL), make_pod("p1.2", "node1", MID, LARGE),
      make_pod("p2", "node2", MID, LARGE)], [], None, None, None,
     [[("node1", ["p1.2"], 0), ("node2", ["p2"], 0)]], [5]),
    ("mixed-priority-pods-preempted", ["FakeFilter", FIT], ["node1", "node2"],
     [make_pod("p", priority=HIGH, req=LARGE)],
     [make_pod("p1.1", "node1", MID, SMALL), make_pod("p1.2", "node1", LOW, SMALL),
      make_pod("p1.3", "node1", MID, MEDIUM), make_pod("p1.4", "node1", HIGH, SMALL),
      make_pod("p2", "node2", HIGH, LARGE)], [], None, None, None,
     [[("node1", ["p1.2", "p1.3"], 0)]], [4]),
    ("mixed-priority-later-start-time-preempted", ["FakeFilter", FIT], ["node1", "node2"],
     [make_pod("p", priority=HIGH, req=LARGE)],
     [make_pod("p1.1", "node1", LOW, SMALL, start=epoch(5)), make_pod("p1.2", "node1", LOW, SMALL, start=epoch(4)),
      make_pod("p1.3", "node1", MID, MEDIUM, start=epoch(3)), make_pod("p1.4", "node1", HIGH, SMALL, start=epoch(2)),
      make_pod("p2", "node2", HIGH, LARGE, start=epoch(1))], [], None, None, None,
     [[("node1", ["p1.1", "p1.3"], 0)]], [4]),
    ("pod-with-anti-affinity-preempted", ["FakeFilter", FIT, "InterPodAffinity"], ["node1", "node2"],
     [make_pod("p", priority=HIGH, req=SMALL, labels=FOO)],
     [make_pod("p1.1", "node1", LOW, SMALL, labels=FOO, spec=ANTI_FOO), make_pod("p1.2", "node1", MID, SMALL),
      make_pod("p1.3", "node1", HIGH, SMALL), make_pod("p2", "node2", HIGH, SMALL)], [], None, None, None,
     [[("node1", ["p1.1"], 0)]], [3]),
    ("preemption-resolves-topology-spread", ["FakeFilter", "PodTopologySpread"],
     ["node-a/zone1", "node-b/zone1", "node-x/zone2"],
     [make_pod("p", priority=HIGH, labels=FOO, spec=SPREAD_FOO)],
     [make_pod("pod-a1", "node-a", MID, labels=FOO), make_pod("pod-a2", "node-a", LOW, labels=FOO),
      make_pod("pod-b1", "node-b", LOW, labels=FOO), make_pod("pod-x1", "node-x", HIGH, labels=FOO),
      make_pod("pod-x2", "node-x", HIGH, labels=FOO)], [], None, None, None,
     [[("node-a", ["pod-a2"], 0), ("node-b", ["pod-b1"], 0)]], [5]),
    ("filter-unschedulable-during-preemption", ["FakeFilter", FIT], ["node1", "node2"],
     [make_pod("p", priority=HIGH, req=LARGE)],
     [make_pod("p1", "node1", MID, LARGE), make_pod("p2", "node2", MID, LARGE)], [], Code.UNSCHEDULABLE, None, None,
     [[]], [2]),
    ("violation-of-same-pdb", ["FakeFilter", FIT], ["node1"],
     [make_pod("p", priority=HIGH, req=VERY_LARGE)],
     [make_pod("p1.1", "node1", MID, MEDIUM, labels=APP_FOO), make_pod("p1.2", "node1", MID, MEDIUM, labels=APP_FOO)],
     [make_pdb("pdb", APP_FOO, allowed=1)], None, None, None,
     [[("node1", ["p1.1", "p1.2"], 1)]], [3]),
    ("pdb-disrupted-pods-not-a-victim", ["FakeFilter", FIT], ["node1"],
     [make_pod("p", priority=HIGH, req=VERY_LARGE)],
     [make_pod("p1.1", "node1", MID, MEDIUM, labels=APP_FOO), make_pod("p1.2", "node1", MID, MEDIUM, labels=APP_FOO)],
     [make_pdb("pdb", APP_FOO, allowed=1, disrupted=["p2"])], None, None, None,
     [[("node1", ["p1.1", "p1.2"], 1)]], [3]),
    ("pdb-disrupted-pod-is-a-victim", ["FakeFilter", FIT], ["node1"],
     [make_pod("p", priority=HIGH, req=VERY_LARGE)],
     [make_pod("p1.1", "node1", MID, MEDIUM, labels=APP_FOO), make_pod("p1.2", "node1", MID, MEDIUM, labels=APP_FOO)],
     [make_pdb("pdb", APP_FOO, allowed=1, disrupted=["p1.2"])], None, None, None,
     [[("node1", ["p1.1", "p1.2"], 0)]], [3]),
    ("pdb-disrupted-victim-treated-as-non-violating", ["FakeFilter", FIT], ["node1"],
     [make_pod("p", priority=HIGH, req=VERY_LARGE)],
     [make_pod("p1.1", "node1", MID, MEDIUM, labels=APP_FOO), make_pod("p1.2", "node1", MID, MEDIUM, labels=APP_FOO),
      make_pod("p1.3", "node1", MID, MEDIUM, labels=APP_FOO)],
     [make_pdb("pdb", APP_FOO, allowed=1, disrupted=["p1.3"])], None, None, None,
     [[("node1", ["p1.1", "p1.2", "p1.3"], 1)]], [4]),
    ("all-nodes-candidates-args-limit-to-2", ["FakeFilter", FIT], FIVE,
     [make_pod("p", priority=HIGH, req=LARGE)], five_mid_large(), [], None, ARGS_40_1, [4],
     [[("node1", ["p1"], 0), ("node5", ["p5"], 0)]], [4]),
    ("some-nodes-not-candidates-args-limit-to-2", ["FakeFilter", FIT], FIVE,
     [make_pod("p", priority=HIGH, req=LARGE)], five_mid_large("node2", "node5"), [], None, ARGS_40_1, [4],
     [[("node1", ["p1"], 0), ("node3", ["p3"], 0)]], [4]),
    ("offset-across-cycles-wraps-around", ["FakeFilter", FIT], FIVE,
     [make_pod(f"tp{i}", priority=HIGH, req=LARGE) for i in (1, 2, 3)], five_mid_large(), [], None, ARGS_40_1,
     [4, 1, 3],
     [[("node1", ["p1"], 0), ("node5", ["p5"], 0)], [("node2", ["p2"], 0), ("node3", ["p3"], 0)],
      [("node4", ["p4"], 0), ("node5", ["p5"], 0)]], [4, 4, 4]),
    ("looks-past-num-candidates-for-non-pdb-violating-node", ["FakeFilter", FIT], FIVE,
     [make_pod("p", priority=HIGH, req=LARGE)], five_mid_large(foo=("node1", "node2", "node5")),
     [make_pdb("pdb", APP_FOO, allowed=0)], None, ARGS_40_2, [4],
     [[("node1", ["p1"], 1), ("node3", ["p3"], 0), ("node5", ["p5"], 1)]], [8]),
]


@pytest.mark.parametrize("plugins,node_specs,pending,bound,pdbs,fake_code,args,offsets,expected,calls",
                         [c[1:] for c in DRY_RUN_CASES], ids=[c[0] for c in DRY_RUN_CASES])
def test_dry_run_preemption(plugins, node_specs, pending, bound, pdbs, fake_code, args, offsets, expected, calls):
    nodes = [topo_node(s, VERY_LARGE) for s in node_specs]
    config = {"FakeFilter": {"codes": {n.meta.name: fake_code for n in nodes}} if fake_code else {}}
    if args:
        config["DefaultPreemption"] = args
    fw, snap = build_framework(nodes, bound, plugins, plugin_config=config)
    pl = plugin_of(fw)
    pl.policy.rng = FixedOffsets(*(offsets or [0] * len(pending)))
    fake = fw.plugins["FakeFilter"]
    infos = sorted(snap.node_info_list, key=lambda ni: ni.name)
    for cycle, pod in enumerate(pending):
        state = run_pre_filter(fw, pod, snap)
        before = fake.calls
        offset, num = pl.policy.get_offset_and_num_candidates(len(infos))
        dry = pl.evaluator.dry_run_preemption(state, pod, infos, pdbs, offset, num)
        assert summarize(dry.candidates) == sorted(expected[cycle])
        assert fake.calls - before == calls[cycle]


def test_dry_run_lists_non_violating_candidates_first():
    nodes = [make_node(n, VERY_LARGE) for n in ("node1", "node2", "node3")]
    bound = [make_pod("p1", "node1", MID, LARGE, labels=APP_FOO), make_pod("p2", "node2", MID, LARGE),
             make_pod("p3", "node3", MID, LARGE, labels=APP_FOO)]
    fw, snap = build_framework(nodes, bound, [FIT])
    pod = make_pod("p", priority=HIGH, req=LARGE)
    dry = plugin_of(fw).evaluator.dry_run_preemption(run_pre_filter(fw, pod, snap), pod, snap.node_info_list,
                                                     [make_pdb("pdb", APP_FOO, allowed=0)], 0, 3)
    assert [(c.name, c.victims.num_pdb_violations) for c in dry.candidates] == [("node2", 0), ("node1", 1), ("node3", 1)]


def test_dry_run_does_not_change_the_snapshot_or_state():
    nodes = [make_node("node1", VERY_LARGE)]
    bound = [make_pod("p1", "node1", MID, LARGE), make_pod("p2", "node1", LOW, SMALL)]
    fw, snap = build_framework(nodes, bound, [FIT])
    pod = make_pod("p", priority=HIGH, req=LARGE)
    state = run_pre_filter(fw, pod, snap)
    ni = snap.get("node1")
    before = ([pi.pod.name for pi in ni.pods], ni.requested.milli_cpu, ni.generation)
    dry = plugin_of(fw).evaluator.dry_run_preemption(state, pod, snap.node_info_list, [], 0, 1)
    assert summarize(dry.candidates) == [("node1", ["p1"], 0)]
    assert ([pi.pod.name for pi in ni.pods], ni.requested.milli_cpu, ni.generation) == before


# ---------------------------------------------------------------------------------------------
# TestSelectBestCandidate
# ---------------------------------------------------------------------------------------------
T0, T1, T2, T3, T4, T5, T6 = (epoch(i) for i in range(7))

SELECT_CASES = [
    ("fits-both-nodes-first-name-wins", ["node1", "node2"], make_pod("p", priority=HIGH, req=LARGE),
     [make_pod("p1", "node1", MID, LARGE, start=T0), make_pod("p2", "node2", MID, LARGE, start=T0)], "node1"),
    ("min-highest-priority-node", ["node1", "node2", "node3"], make_pod("p", priority=HIGH, req=VERY_LARGE),
     [make_pod("p1.1", "node1", MID, MEDIUM, start=T0), make_pod("p1.2", "node1", MID, LARGE, start=T0),
      make_pod("p2.1", "node2", MID, MEDIUM, start=T0), make_pod("p2.2", "node2", LOW, MEDIUM, start=T0),
      make_pod("p3.1", "node3", LOW, MEDIUM, start=T0), make_pod("p3.2", "node3", LOW, MEDIUM, start=T0)], "node3"),
    ("same-highest-priority-min-sum", ["node1", "node2", "node3"], make_pod("p", priority=HIGH, req=VERY_LARGE),
     [make_pod("p1.1", "node1", MID, MEDIUM, start=T0), make_pod("p1.2", "node1", MID, LARGE, start=T0),
      make_pod("p2.1", "node2", MID, LARGE, start=T0), make_pod("p2.2", "node2", LOW, MEDIUM, start=T0),
      make_pod("p3.1", "node3", MID, MEDIUM, start=T0), make_pod("p3.2", "node3", MID, MEDIUM, start=T0)], "node2"),
    ("same-highest-and-sum-min-number-of-pods", ["node1", "node2", "node3"],
     make_pod("p", priority=HIGH, req=VERY_LARGE),
     [make_pod("p1.1", "node1", MID, SMALL, start=T0), make_pod("p1.2", "node1", NEG, SMALL, start=T0),
      make_pod("p1.3", "node1", MID, SMALL, start=T0), make_pod("p1.4", "node1", NEG, SMALL, start=T0),
      make_pod("p2.1", "node2", MID, LARGE, start=T0), make_pod("p2.2", "node2", NEG, MEDIUM, start=T0),
      make_pod("p3.1", "node3", MID, MEDIUM, start=T0), make_pod("p3.2", "node3", NEG, SMALL, start=T0),
      make_pod("p3.3", "node3", LOW, SMALL, start=T0)], "node2"),
    ("sum-of-offset-priorities", ["node1", "node2", "node3"], make_pod("p", priority=HIGH, req=VERY_LARGE),
     [make_pod("p1.1", "node1", MID, SMALL, start=T0), make_pod("p1.2", "node1", NEG, SMALL, start=T0),
      make_pod("p1.3", "node1", NEG, SMALL, start=T0), make_pod("p2.1", "node2", MID, LARGE, start=T0),
      make_pod("p2.2", "node2", NEG, MEDIUM, start=T0), make_pod("p3.1", "node3", MID, MEDIUM, start=T0),
      make_pod("p3.2", "node3", NEG, SMALL, start=T0), make_pod("p3.3", "node3", LOW, SMALL, start=T0)], "node2"),
    ("non-overlapping-highest-sum-count", ["node1", "node2", "node3", "node4"],
     make_pod("p", priority=VERY_HIGH, req=VERY_LARGE),
     [make_pod("p1.1", "node1", MID, SMALL, start=T0), make_pod("p1.2", "node1", LOW, SMALL, start=T0),
      make_pod("p1.3", "node1", LOW, SMALL, start=T0), make_pod("p2.1", "node2", HIGH, LARGE, start=T0),
      make_pod("p3.1", "node3", MID, MEDIUM, start=T0), make_pod("p3.2", "node3", LOW, SMALL, start=T0),
      make_pod("p3.3", "node3", LOW, SMALL, start=T0), make_pod("p3.4", "node3", LOW, MEDIUM, start=T0),
      make_pod("p4.1", "node4", MID, MEDIUM, start=T0), make_pod("p4.2", "node4", MID, SMALL, start=T0),
      make_pod("p4.3", "node4", MID, SMALL, start=T0), make_pod("p4.4", "node4", NEG, SMALL, start=T0)], "node1"),
    ("same-priority-same-count-node-start-times", ["node1", "node2", "node3"],
     make_pod("p", priority=HIGH, req=VERY_LARGE),
     [make_pod("p1.1", "node1", MID, MEDIUM, start=T2), make_pod("p1.2", "node1", MID, MEDIUM, start=T2),
      make_pod("p2.1", "node2", MID, MEDIUM, start=T3), make_pod("p2.2", "node2", MID, MEDIUM, start=T3),
      make_pod("p3.1", "node3", MID, MEDIUM, start=T1), make_pod("p3.2", "node3", MID, MEDIUM, start=T1)], "node2"),
    ("same-priority-same-count-all-start-times", ["node1", "node2", "node3"],
     make_pod("p", priority=HIGH, req=VERY_LARGE),
     [make_pod("p1.1", "node1", MID, MEDIUM, start=T4), make_pod("p1.2", "node1", MID, MEDIUM, start=T2),
      make_pod("p2.1", "node2", MID, MEDIUM, start=T5), make_pod("p2.2", "node2", MID, MEDIUM, start=T1),
      make_pod("p3.1", "node3", MID, MEDIUM, start=T3), make_pod("p3.2", "node3", MID, MEDIUM, start=T6)], "node3"),
    ("different-priority-same-count-all-start-times", ["node1", "node2", "node3"],
     make_pod("p", priority=HIGH, req=VERY_LARGE),
     [make_pod("p1.1", "node1", LOW, MEDIUM, start=T4), make_pod("p1.2", "node1", MID, MEDIUM, start=T2),
      make_pod("p2.1", "node2", MID, MEDIUM, start=T6), make_pod("p2.2", "node2", LOW, MEDIUM, start=T1),
      make_pod("p3.1", "node3", LOW, MEDIUM, start=T3), make_pod("p3.2", "node3", MID, MEDIUM, start=T5)], "node2"),
]


@pytest.mark.parametrize("node_names,pod,bound,expected", [c[1:] for c in SELECT_CASES],
                         ids=[c[0] for c in SELECT_CASES])
def test_select_best_candidate(node_names, pod, bound, expected):
    nodes = [make_node(n, VERY_LARGE) for n in node_names]
    fw, snap = build_framework(nodes, bound, [FIT])
    pl = plugin_of(fw)
    pl.policy.rng = random.Random(4)
    state = run_pre_filter(fw, pod, snap)
    infos = snap.node_info_list
    offset, num = pl.policy.get_offset_and_num_candidates(len(infos))
    dry = pl.evaluator.dry_run_preemption(state, pod, infos, [], offset, num)
    best = pl.evaluator.select_candidate(dry.candidates)
    assert best is not None and best.name == expected


# ---------------------------------------------------------------------------------------------
# TestCustomSelection / TestCustomOrdering: IsEligiblePod and MoreImportantPod are replaceable
# ---------------------------------------------------------------------------------------------
def label_is(key, val):
    return lambda node_info, victim, preemptor: victim.pod.meta.labels.get(key) == val


def node_is(name):
    return lambda node_info, victim, preemptor: node_info.name == name


def preemptor_at_least(p):
    return lambda node_info, victim, preemptor: preemptor.priority >= p


def victim_at_most(p):
    return lambda node_info, victim, preemptor: victim.pod.priority <= p


def _label_pods():
    return [make_pod("v1", "node1", MID, LARGE, labels={"preemptible": "no"}, start=T0),
            make_pod("v2", "node2", MID, LARGE, labels={"preemptible": "yes"}, start=T0),
            make_pod("v3", "node3", LOW, LARGE, labels={"preemptible": "yes"}, start=T0),
            make_pod("v4", "node4", LOW, LARGE, start=T0)]


def _node1_pods(v1_res):
    return [make_pod("v1", "node1", HIGH, v1_res, start=T0), make_pod("v2", "node1", MID, SMALL, start=T0),
            make_pod("v3", "node1", LOW, SMALL, start=T0), make_pod("v4", "node2", MID, LARGE, start=T0),
            make_pod("v5", "node3", LOW, LARGE, start=T0)]


def _three_pods():
    return [make_pod("v1", "node1", HIGH, LARGE, start=T0), make_pod("v2", "node2", MID, LARGE, start=T0),
            make_pod("v3", "node3", LOW, LARGE, start=T0)]


N4, N3 = ["node1", "node2", "node3", "node4"], ["node1", "node2", "node3"]
CUSTOM_SELECTION_CASES = [
    ("pod-label-high-priority", label_is("preemptible", "yes"), N4, make_pod("p1", priority=HIGH, req=LARGE),
     _label_pods(), {"node2": ["v2"], "node3": ["v3"]}),
    ("pod-label-mid-priority", label_is("preemptible", "yes"), N4, make_pod("p2", priority=MID, req=LARGE),
     _label_pods(), {"node3": ["v3"]}),
    ("pod-label-low-priority", label_is("preemptible", "yes"), N4, make_pod("p3", priority=LOW, req=LARGE),
     _label_pods(), {}),
    ("victim-node-high-priority", node_is("node1"), N3, make_pod("p3", priority=HIGH, req=LARGE),
     _node1_pods(MEDIUM), {"node1": ["v2", "v3"]}),
    ("victim-node-mid-priority", node_is("node1"), N3, make_pod("p3", priority=MID, req=LARGE),
     _node1_pods(SMALL), {"node1": ["v3"]}),
    ("victim-node-low-priority", node_is("node1"), N3, make_pod("p3", priority=LOW, req=LARGE),
     _node1_pods(SMALL), {}),
    ("preemptor-threshold-high", preemptor_at_least(HIGH), N3, make_pod("p1", priority=HIGH, req=LARGE),
     _three_pods(), {"node2": ["v2"], "node3": ["v3"]}),
    ("preemptor-threshold-mid", preemptor_at_least(HIGH), N3, make_pod("p2", priority=MID, req=LARGE),
     _three_pods(), {}),
    ("victim-threshold", victim_at_most(MID), N3, make_pod("p1", priority=HIGH, req=LARGE),
     _three_pods(), {"node2": ["v2"], "node3": ["v3"]}),
]


@pytest.mark.parametrize("eligible,node_names,pod,bound,expected", [c[1:] for c in CUSTOM_SELECTION_CASES],
                         ids=[c[0] for c in CUSTOM_SELECTION_CASES])
def test_custom_selection(eligible, node_names, pod, bound, expected):
    nodes = [make_node(n, VERY_LARGE) for n in node_names]
    fw, snap = build_framework(nodes, bound, [FIT])
    pl = plugin_of(fw)
    pl.policy.is_eligible_pod = eligible
    state = run_pre_filter(fw, pod, snap)
    infos = snap.node_info_list
    candidates = pl.evaluator.dry_run_preemption(state, pod, infos, [], 0, len(infos)).candidates
    assert len(candidates) == len(expected)
    while candidates:
        best = pl.evaluator.select_candidate(candidates)
        assert [p.name for p in best.victims.pods] == expected[best.name]
        candidates = [c for c in candidates if c.name != best.name]


CUSTOM_ORDER_CASES = [
    ("newest-pods-first", lambda a, b: a.start_time < b.start_time,
     [make_pod("v1", "node1", LOW, MEDIUM, start=T2), make_pod("v2", "node1", LOW, MEDIUM, start=T0),
      make_pod("v3", "node1", MID, MEDIUM, start=T1)], ["v3", "v1"]),
    ("alphabetically-last-pods", lambda a, b: a.name < b.name,
     [make_pod("foo", "node1", LOW, MEDIUM, start=T0, uid="v1"), make_pod("bar", "node1", LOW, MEDIUM, start=T0, uid="v2"),
      make_pod("baz", "node1", MID, MEDIUM, start=T0, uid="v3")], ["baz", "foo"]),
]


@pytest.mark.parametrize("order,bound,expected", [c[1:] for c in CUSTOM_ORDER_CASES],
                         ids=[c[0] for c in CUSTOM_ORDER_CASES])
def test_custom_ordering(order, bound, expected):
    fw, snap = build_framework([make_node("node1", VERY_LARGE)], bound, [FIT])
    pl = plugin_of(fw)
    pl.policy.more_important_pod = order
    pod = make_pod("p2", priority=HIGH, req=LARGE)
    candidates = pl.evaluator.dry_run_preemption(run_pre_filter(fw, pod, snap), pod, snap.node_info_list,
                                                 [], 0, 1).candidates
    assert len(candidates) == 1
    assert [p.name for p in candidates[0].victims.pods] == expected


# ---------------------------------------------------------------------------------------------
# Victim order: most important first, PDB-violating victims interleaved back
# ---------------------------------------------------------------------------------------------
def test_victims_most_important_first_across_pdb_groups():
    bound = [make_pod("a", "node1", LOW, SMALL, start=T1), make_pod("b", "node1", MID, SMALL, labels=APP_FOO, start=T2),
             make_pod("c", "node1", MID, SMALL, start=T1), make_pod("d", "node1", LOW, SMALL, labels=APP_FOO, start=T0)]
    fw, snap = build_framework([make_node("node1", {"cpu": "400m", "memory": "1000"})], bound, [FIT])
    pod = make_pod("p", priority=HIGH, req={"cpu": "400m"})
    dry = plugin_of(fw).evaluator.dry_run_preemption(run_pre_filter(fw, pod, snap), pod, snap.node_info_list,
                                                     [make_pdb("pdb", APP_FOO, allowed=0)], 0, 1)
    (c,) = dry.candidates
    assert [p.name for p in c.victims.pods] == ["c", "b", "d", "a"]
    assert c.victims.num_pdb_violations == 2


def test_unstarted_victims_of_equal_priority_order_as_kube():
    """Pods without status.startTime take "now" at each read, so of two such pods the one read
    first is older: Go's insertion sort then reverses them."""
    bound = [make_pod(n, "node1", LOW, SMALL) for n in ("x", "y", "z")]
    fw, snap = build_framework([make_node("node1", {"cpu": "300m", "memory": "1000"})], bound, [FIT])
    pod = make_pod("p", priority=HIGH, req={"cpu": "300m"})
    dry = plugin_of(fw).evaluator.dry_run_preemption(run_pre_filter(fw, pod, snap), pod, snap.node_info_list, [], 0, 1)
    assert [p.name for p in dry.candidates[0].victims.pods] == ["z", "y", "x"]


def test_pod_that_fits_with_every_victim_back_is_an_error():
    """A node whose filter failure is not caused by pods yields no victims: kube reports an error."""
    fw, snap = build_framework([make_node("node1", VERY_LARGE)], [make_pod("p1", "node1", LOW, SMALL)], [FIT])
    pod = make_pod("p", priority=HIGH, req=SMALL)
    dry = plugin_of(fw).evaluator.dry_run_preemption(run_pre_filter(fw, pod, snap), pod, snap.node_info_list, [], 0, 1)
    assert dry.candidates == []
    assert dry.errors == ['expected at least one victim pod on node "node1"']
    assert dry.node_to_status.get("node1").code == Code.ERROR


# ---------------------------------------------------------------------------------------------
# Nominated pods: counted when of equal or higher priority; lower ones are to be cleared
# ---------------------------------------------------------------------------------------------
def test_nominated_pods_take_room_during_dry_run():
    nodes = [make_node("node1", VERY_LARGE), make_node("node2", VERY_LARGE)]
    bound = [make_pod("p1", "node1", LOW, LARGE), make_pod("p2", "node2", LOW, LARGE)]
    # A higher-priority pod nominated to node1 already needs the room the victim leaves.
    nominator = StaticNominator({"node1": [make_pod("nom", priority=VERY_HIGH, req=LARGE)]})
    fw, snap = build_framework(nodes, bound, [FIT], services={"nominator": nominator})
    pod = make_pod("p", priority=HIGH, req=LARGE)
    dry = plugin_of(fw).evaluator.dry_run_preemption(run_pre_filter(fw, pod, snap), pod, snap.node_info_list, [], 0, 2)
    assert summarize(dry.candidates) == [("node2", ["p2"], 0)]
    assert dry.node_to_status.get("node1").reasons == ("Insufficient cpu", "Insufficient memory")


def test_lower_priority_nominated_pods_are_returned_for_clearing():
    nodes = [make_node("node1", VERY_LARGE)]
    low_nom, high_nom = make_pod("low-nom", priority=LOW, req=SMALL), make_pod("high-nom", priority=VERY_HIGH)
    nominator = StaticNominator({"node1": [low_nom, high_nom]})
    fw, snap = build_framework(nodes, [make_pod("p1", "node1", LOW, VERY_LARGE)], [FIT],
                               services={"nominator": nominator})
    pod = make_pod("p", priority=HIGH, req=LARGE)
    out = plugin_of(fw).evaluator.preempt(run_pre_filter(fw, pod, snap), pod, statuses(node1=Code.UNSCHEDULABLE))
    assert out.decision is not None and out.decision.node_name == "node1"
    assert [p.name for p in out.decision.nominated_pods_to_clear] == ["low-nom"]


# ---------------------------------------------------------------------------------------------
# TestPodEligibleToPreemptOthers
# ---------------------------------------------------------------------------------------------
PREEMPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
ELIGIBLE_CASES = [
    ("nominated-node-unresolvable", make_pod("p", priority=HIGH, nominated="node1"),
     [make_pod("p1", "node1", LOW, terminating=True)], ["node1"], Status.unresolvable("node(s) had untolerated taint(s)"),
     True, ""),
    ("no-nominated-node", make_pod("p", priority=HIGH), [], [], None, True, ""),
    ("preempt-never", make_pod("p", priority=HIGH, policy=PREEMPT_NEVER), [], [], None, False,
     MSG_PREEMPTION_POLICY_NEVER),
    ("victim-terminating-by-preemption", make_pod("p", priority=HIGH, nominated="node1"),
     [make_pod("p1", "node1", LOW, terminating=True, conditions=[PREEMPTED])], ["node1"], None, False,
     MSG_TERMINATING_ON_NOMINATED),
    ("non-victim-pod-terminating", make_pod("p", priority=HIGH, nominated="node1"),
     [make_pod("p1", "node1", LOW, terminating=True)], ["node1"], None, True, ""),
    ("higher-priority-pod-terminating-by-preemption", make_pod("p", priority=HIGH, nominated="node1"),
     [make_pod("p1", "node1", VERY_HIGH, terminating=True, conditions=[PREEMPTED])], ["node1"], None, True, ""),
    ("nominated-node-gone", make_pod("p", priority=HIGH, nominated="gone"), [], ["node1"], None, True, ""),
]


@pytest.mark.parametrize("pod,bound,node_names,nominated_status,want,msg", [c[1:] for c in ELIGIBLE_CASES],
                         ids=[c[0] for c in ELIGIBLE_CASES])
def test_pod_eligible_to_preempt_others(pod, bound, node_names, nominated_status, want, msg):
    fw, _ = build_framework([make_node(n) for n in node_names], bound, [])
    assert plugin_of(fw).policy.pod_eligible_to_preempt_others(pod, nominated_status) == (want, msg)


@pytest.mark.parametrize("conditions,terminating,want", [
    ([PREEMPTED], True, True),
    ([PREEMPTED], False, False),
    ([], True, False),
    ([{**PREEMPTED, "status": "False"}], True, False),
    ([{**PREEMPTED, "reason": "EvictionByEvictionAPI"}], True, False),
    ([{**PREEMPTED, "reason": "Other"}, PREEMPTED], True, False),  # only the first such condition counts
], ids=["preempted", "not-deleting", "no-condition", "condition-false", "other-reason", "first-condition-decides"])
def test_pod_terminating_by_preemption(conditions, terminating, want):
    assert pod_terminating_by_preemption(make_pod("v", "n", conditions=conditions, terminating=terminating)) is want


# ---------------------------------------------------------------------------------------------
# TestNodesWherePreemptionMightHelp
# ---------------------------------------------------------------------------------------------
U, UU = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
HELP_CASES = [
    ("no-node", {"node1": UU, "node2": UU, "node3": UU, "node4": UU}, UU, set()),
    ("anti-affinity-unschedulable-is-tried", {"node1": U, "node2": UU, "node3": UU}, U, {"node1", "node4"}),
    ("affinity-unresolvable-skipped", {"node1": UU, "node2": U}, U, {"node2", "node3", "node4"}),
    ("only-unschedulable-explicit", {"node2": UU, "node3": U, "node4": UU}, UU, {"node3"}),
    ("absent-unschedulable-counts", {"node2": UU, "node3": U, "node4": UU}, U, {"node1", "node3"}),
    ("absent-default-unresolvable", {}, UU, set()),
]


@pytest.mark.parametrize("by_node,absent,expected", [c[1:] for c in HELP_CASES], ids=[c[0] for c in HELP_CASES])
def test_nodes_where_preemption_might_help(by_node, absent, expected):
    nodes = [make_node(f"node{i}") for i in range(1, 5)]
    fw, snap = build_framework(nodes, [], [])
    m = statuses(**by_node)
    m.absent = Status(absent)
    got = plugin_of(fw).evaluator.nodes_where_preemption_might_help(snap.node_info_list, m)
    assert {ni.name for ni in got} == expected
    assert [ni.name for ni in got] == sorted(ni.name for ni in got)  # snapshot order


# ---------------------------------------------------------------------------------------------
# filterPodsWithPDBViolation
# ---------------------------------------------------------------------------------------------
def _pdb_pods():
    return [make_pod("a", "n", labels={"app": "x"}), make_pod("b", "n", labels={"app": "x"}),
            make_pod("c", "n", labels={"app": "y"}), make_pod("d", "n"),
            make_pod("e", "n", labels={"app": "x"}, namespace="other")]


PDB_CASES = [
    ("no-pdbs", [], [], ["a", "b", "c", "d", "e"]),
    ("budget-spent-in-order", [make_pdb("x", {"app": "x"}, allowed=1)], ["b"], ["a", "c", "d", "e"]),
    ("zero-budget", [make_pdb("x", {"app": "x"}, allowed=0)], ["a", "b"], ["c", "d", "e"]),
    ("negative-budget", [make_pdb("x", {"app": "x"}, allowed=-1)], ["a", "b"], ["c", "d", "e"]),
    ("other-namespace-pdb", [make_pdb("x", {"app": "x"}, allowed=0, namespace="other")], ["e"], ["a", "b", "c", "d"]),
    ("empty-selector-matches-nothing", [make_pdb("x", selector={}, allowed=0)], [], ["a", "b", "c", "d", "e"]),
    ("nil-selector-matches-nothing", [make_pdb("x", selector=None, allowed=0)], [], ["a", "b", "c", "d", "e"]),
    ("expression-selector", [make_pdb("x", selector={"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["x", "y"]}]}, allowed=2)], ["c"], ["a", "b", "d", "e"]),
    ("not-in-selects-unlabelled-key-but-unlabelled-pods-never-match", [make_pdb("x", selector={"matchExpressions": [
        {"key": "tier", "operator": "DoesNotExist"}]}, allowed=0)], ["a", "b", "c"], ["d", "e"]),
    ("pod-matching-two-pdbs-violates-if-either-does", [make_pdb("x", {"app": "x"}, allowed=5),
                                                       make_pdb("all", selector={"matchExpressions": [
                                                           {"key": "app", "operator": "Exists"}]}, allowed=1)],
     ["b", "c"], ["a", "d", "e"]),
    ("disrupted-pod-spends-nothing", [make_pdb("x", {"app": "x"}, allowed=1, disrupted=["a"])], [],
     ["a", "b", "c", "d", "e"]),
]


@pytest.mark.parametrize("pdbs,violating,non_violating", [c[1:] for c in PDB_CASES], ids=[c[0] for c in PDB_CASES])
def test_filter_pods_with_pdb_violation(pdbs, violating, non_violating):
    v, nv = filter_pods_with_pdb_violation(_pdb_pods(), pdbs)
    assert [p.name for p in v] == violating
    assert [p.name for p in nv] == non_violating


@pytest.mark.parametrize("selector,valid", [
    (LabelSelector.of({"a": "b"}), True),
    (LabelSelector.of(None, [LabelSelectorRequirement("a", "In", ())]), False),
    (LabelSelector.of(None, [LabelSelectorRequirement("a", "NotIn", ())]), False),
    (LabelSelector.of(None, [LabelSelectorRequirement("a", "Exists", ("x",))]), False),
    (LabelSelector.of(None, [LabelSelectorRequirement("a", "Gt", ("1",))]), False),
    (LabelSelector.of(), False),
    (None, False),
], ids=["labels", "in-without-values", "notin-without-values", "exists-with-values", "unknown-operator", "empty",
        "nil"])
def test_pdb_selector_conversion(selector, valid):
    """Selectors LabelSelectorAsSelector rejects (the loader refuses them too) select nothing."""
    pdb = PodDisruptionBudget(ObjectMeta("x", "default"), selector, disruptions_allowed=0)
    assert (pdb_selector(pdb) is not None) is valid
    v, _ = filter_pods_with_pdb_violation([make_pod("a", "n", labels={"a": "b"})], [pdb])
    assert bool(v) is valid


# ---------------------------------------------------------------------------------------------
# pickOneNodeForPreemption, one criterion at a time
# ---------------------------------------------------------------------------------------------
def V(name, priority, start=None):
    return make_pod(name, "n", priority, start=start)


PICK_CASES = [
    ("fewest-pdb-violations", {"n1": Victims([V("a", LOW)], 2), "n2": Victims([V("b", HIGH), V("c", HIGH)], 1)}, "n2"),
    ("lowest-highest-priority", {"n1": Victims([V("a", MID), V("b", LOW)]), "n2": Victims([V("c", LOW), V("d", LOW),
                                                                                           V("e", LOW)])}, "n2"),
    ("smallest-priority-sum", {"n1": Victims([V("a", MID), V("b", MID)]), "n2": Victims([V("c", MID), V("d", LOW)])}, "n2"),
    ("sum-with-offset-prefers-fewer-negative", {"n1": Victims([V("a", NEG), V("b", NEG), V("c", NEG)]),
                                                "n2": Victims([V("d", NEG), V("e", NEG)])}, "n2"),
    # Equal offset sums need int32-min priorities: 100 + 2^31 on both nodes.
    ("fewest-victims", {"n1": Victims([V("a", MID), V("b", -2**31), V("c", -2**31)]),
                        "n2": Victims([V("d", MID), V("e", -2**31)])}, "n2"),
    ("latest-start-of-highest-priority", {"n1": Victims([V("a", MID, T5), V("b", LOW, T0)]),
                                          "n2": Victims([V("c", MID, T4), V("d", LOW, T6)])}, "n1"),
    ("earliest-among-highest-priority-victims", {"n1": Victims([V("a", MID, T5), V("b", MID, T1)]),
                                                 "n2": Victims([V("c", MID, T3), V("d", MID, T2)])}, "n2"),
    ("full-tie-smallest-name", {"n2": Victims([V("a", MID, T1)]), "n1": Victims([V("b", MID, T1)])}, "n1"),
    ("unstarted-victims-tie-smallest-name", {"n3": Victims([V("a", MID)]), "n2": Victims([V("b", MID)]),
                                             "n1": Victims([V("c", MID, T1)])}, "n2"),
    ("single", {"only": Victims([V("a", MID)])}, "only"),
    ("none", {}, ""),
]


@pytest.mark.parametrize("victims_map,expected", [c[1:] for c in PICK_CASES], ids=[c[0] for c in PICK_CASES])
def test_pick_one_node_for_preemption(victims_map, expected):
    assert pick_one_node_for_preemption(victims_map, now=1e9) == expected


def test_priority_offset_is_max_int32_plus_one():
    assert PRIORITY_OFFSET == 2147483648


def test_custom_score_funcs_replace_the_defaults():
    vm = {"n1": Victims([V("a", LOW)]), "n2": Victims([V("b", HIGH)])}
    assert pick_one_node_for_preemption(vm, [lambda n: 1 if n == "n2" else 0]) == "n2"


def test_earliest_pod_start_time():
    assert earliest_pod_start_time(Victims([]), lambda: 0.0) is None
    vs = Victims([V("a", LOW, T5), V("b", MID, T3), V("c", MID, T4), V("d", LOW, T0)])
    assert earliest_pod_start_time(vs, lambda: 99.0) == T3
    assert earliest_pod_start_time(Victims([V("a", MID), V("b", MID, T2)]), lambda: 99.0) == T2


# ---------------------------------------------------------------------------------------------
# Go's sort.Slice
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 12, 13, 49, 50, 51, 200, 1000])
def test_go_sort_slice_sorts(n):
    rnd = random.Random(n)
    items = [(rnd.randrange(10), i) for i in range(n)]
    got = list(items)
    go_sort_slice(got, lambda a, b: a[0] < b[0])
    assert [k for k, _ in got] == sorted(k for k, _ in items)
    assert sorted(got) == sorted(items)


def test_go_sort_slice_is_insertion_sort_up_to_twelve():
    items = [(k, i) for i, k in enumerate([3, 1, 3, 2, 1, 3, 2, 2, 1, 3, 1, 2])]
    got = list(items)
    go_sort_slice(got, lambda a, b: a[0] < b[0])
    assert got == sorted(items, key=lambda t: t[0])  # stable


@pytest.mark.parametrize("pattern", ["sorted", "reversed", "all-equal", "sawtooth"])
def test_go_sort_slice_patterns(pattern):
    n = 300
    keys = {"sorted": list(range(n)), "reversed": list(range(n, 0, -1)), "all-equal": [7] * n,
            "sawtooth": [i % 17 for i in range(n)]}[pattern]
    got = list(keys)
    go_sort_slice(got, lambda a, b: a < b)
    assert got == sorted(keys)


def test_strict_clock_increases():
    clock = StrictClock()
    readings = [clock() for _ in range(1000)]
    assert all(b > a for a, b in zip(readings, readings[1:]))


def test_no_victims_status_message():
    fw, snap = build_framework([make_node("node1", VERY_LARGE)], [make_pod("p1", "node1", HIGH)], [FIT])
    pod = make_pod("p", priority=HIGH)
    dry = plugin_of(fw).evaluator.dry_run_preemption(run_pre_filter(fw, pod, snap), pod, snap.node_info_list, [], 0, 1)
    st = dry.node_to_status.get("node1")
    assert (st.code, st.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_NO_VICTIMS,))


@pytest.mark.parametrize("n,distinct_starts", [(5, False), (12, False), (13, True), (40, True), (40, False)],
                         ids=["5-ties", "12-ties", "13-distinct", "40-distinct", "40-ties"])
def test_importance_sort_matches_go_sort(n, distinct_starts):
    """The key-sort shortcut gives Go's sort.Slice order whenever it is taken."""
    fw, _ = build_framework([], [], [])
    policy = plugin_of(fw).policy
    rnd = random.Random(n)
    pis = [PodInfo(make_pod(f"v{i}", "n", rnd.choice([LOW, MID, HIGH]),
                            start=epoch(i if distinct_starts else rnd.randrange(3)))) for i in range(n)]
    got, want = list(pis), list(pis)
    policy._sort_by_importance(got)
    go_sort_slice(want, lambda a, b: policy.more_important_pod(a.pod, b.pod))
    assert [pi.pod.name for pi in got] == [pi.pod.name for pi in want]


def test_plugin_raising_during_dry_run_fails_that_node_with_an_error():
    class Boom(Exception):
        pass

    fw, snap = build_framework([make_node("node1", VERY_LARGE), make_node("node2", VERY_LARGE)],
                               [make_pod("p1", "node1", LOW, LARGE), make_pod("p2", "node2", LOW, LARGE)],
                               ["FakeFilter", FIT])
    fake = fw.plugins["FakeFilter"]

    def filter_(state, pod, node_info):
        if node_info.name == "node1":
            raise Boom("kaput")
        return None

    fake.filter = filter_
    pod = make_pod("p", priority=HIGH, req=LARGE)
    out = plugin_of(fw).evaluator.preempt(run_pre_filter(fw, pod, snap), pod,
                                          statuses(node1=Code.UNSCHEDULABLE, node2=Code.UNSCHEDULABLE))
    assert out.result.nominated_node_name == "node2"  # errors only matter without candidates
    fake.filter = lambda state, pod, node_info: (_ for _ in ()).throw(Boom("kaput"))
    out = plugin_of(fw).evaluator.preempt(run_pre_filter(fw, pod, snap), pod,
                                          statuses(node1=Code.UNSCHEDULABLE, node2=Code.UNSCHEDULABLE))
    assert out.result is None
    assert (out.status.code, out.status.reasons) == (Code.ERROR, ("kaput",))


def test_no_nodes_available():
    fw, _ = build_framework([], [], [FIT])
    pod = make_pod("p", priority=HIGH)
    out = plugin_of(fw).evaluator.preempt(CycleState(), pod, NodeToStatus())
    assert (out.result, out.status.code, out.status.reasons) == (None, Code.ERROR, ("no nodes available",))


def test_error_aggregate_message():
    from schedmesh.preemption.evaluator import DryRunResult
    assert DryRunResult([], NodeToStatus(), ["a"]).error_message() == "a"
    assert DryRunResult([], NodeToStatus(), ["a", "a"]).error_message() == "a"
    assert DryRunResult([], NodeToStatus(), ["a", "b", "a"]).error_message() == "[a, b]"
