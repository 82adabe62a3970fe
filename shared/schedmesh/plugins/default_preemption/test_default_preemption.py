"""DefaultPreemption as a PostFilter plugin, re-expressing kube-scheduler's
default_preemption_test.go TestPostFilter, TestPreempt and TestPreEnqueue, plus its args and
the executor hook."""
from __future__ import annotations

from typing import Optional

import pytest

from schedmesh.api.load import admit_all, load_text
from schedmesh.api.types import PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER, Pod
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code, NodeToStatus, PostFilterResult, Status
from schedmesh.plugins.default_preemption import DefaultPreemption, DefaultPreemptionArgs
from schedmesh.preemption.evaluator import PreemptionDecision
from schedmesh.preemption.testkit import (HIGH, LARGE, LOW, MEDIUM, MID, NODE_RES, ONE_POD, SMALL, VERY_HIGH,
                                          VERY_LARGE, all_unschedulable, build_framework, make_node, make_pdb,
                                          make_pod, run_pre_filter, statuses, topo_node)

U, UU = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
FIT = "NodeResourcesFit"
VIOLATING = {"test.kubernetes.io/is-violating-pdb": "violating"}
NON_VIOLATING = {"test.kubernetes.io/is-violating-pdb": "non-violating"}


class FakeExtender:
    """tf.FakeExtender reduced to what preemption uses: a node predicate decides which
    candidates survive ProcessPreemption; a predicate that raises makes it fail."""

    def __init__(self, name: str, predicate, ignorable: bool = False, interested: bool = True) -> None:
        self.name, self.predicate, self.ignorable, self.interested = name, predicate, ignorable, interested

    def supports_preemption(self) -> bool:
        return True

    def is_interested(self, pod: Pod) -> bool:
        return self.interested

    def is_ignorable(self) -> bool:
        return self.ignorable

    def process_preemption(self, pod, victims_by_node):
        return {node: v for node, v in victims_by_node.items() if self.predicate(node)}


def true_predicate(node: str) -> bool:
    return True


def false_predicate(node: str) -> bool:
    return False


def node1_predicate(node: str) -> bool:
    return node == "node1"


def error_predicate(node: str) -> bool:
    raise RuntimeError("some error")


class RecordingExecutor:
    def __init__(self, fail: Optional[str] = None, running: frozenset[str] = frozenset()) -> None:
        self.calls: list[tuple[str, PreemptionDecision, str]] = []
        self.fail = fail
        self.running = running

    def prepare_candidate(self, preemptor: Pod, decision: PreemptionDecision, plugin_name: str) -> Optional[Status]:
        self.calls.append((preemptor.name, decision, plugin_name))
        return Status.as_error(self.fail) if self.fail else None

    def is_pod_running_preemption(self, pod_uid: str) -> bool:
        return pod_uid in self.running


def plugin_of(fw) -> DefaultPreemption:
    return fw.plugins["DefaultPreemption"]


def post_filter(fw, snap, pod, node_to_status):
    return plugin_of(fw).post_filter(run_pre_filter(fw, pod, snap), pod, node_to_status)


# ---------------------------------------------------------------------------------------------
# TestPostFilter
# ---------------------------------------------------------------------------------------------
POST_FILTER_CASES = [
    ("higher-priority-made-schedulable", make_pod("p", priority=HIGH), [make_pod("p1", "node1")], [],
     [make_node("node1", ONE_POD)], statuses(node1=U), None,
     PostFilterResult("node1", ["default/p1"]), Status(Code.SUCCESS)),
    ("tied-priority-still-unschedulable", make_pod("p"), [make_pod("p1", "node1")], [],
     [make_node("node1", ONE_POD)], statuses(node1=U), None, PostFilterResult(""),
     Status.unschedulable("preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")),
    ("respects-unresolvable-status", make_pod("p", priority=HIGH), [make_pod("p1", "node1")], [],
     [make_node("node1", ONE_POD)], statuses(node1=UU), None, PostFilterResult(""),
     Status.unschedulable("preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")),
    ("absent-entry-is-unresolvable", make_pod("p", priority=HIGH), [make_pod("p1", "node1")], [],
     [make_node("node1", ONE_POD)], NodeToStatus(), None, PostFilterResult(""),
     Status.unschedulable("preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")),
    ("schedulable-on-one-node", make_pod("p", priority=MID),
     [make_pod("p1", "node1", HIGH), make_pod("p2", "node2", LOW)], [],
     [make_node("node1", ONE_POD), make_node("node2", ONE_POD)], statuses(node1=U, node2=U), None,
     PostFilterResult("node2", ["default/p2"]), Status(Code.SUCCESS)),
    ("min-highest-priority-node-with-pdbs", make_pod("p", priority=VERY_HIGH),
     [make_pod("p1", "node1", HIGH, labels=NON_VIOLATING), make_pod("p2", "node1", LOW, labels=VIOLATING),
      make_pod("p3", "node2", MID, labels=VIOLATING)],
     [make_pdb("violating-pdb", VIOLATING, allowed=0), make_pdb("non-violating-pdb", NON_VIOLATING, allowed=2**31 - 1)],
     [make_node("node1", ONE_POD), make_node("node2", ONE_POD)], statuses(node1=U, node2=U), None,
     PostFilterResult("node2", ["default/p3"]), Status(Code.SUCCESS)),
    ("filtered-by-extender", make_pod("p", priority=HIGH),
     [make_pod("p1", "node1"), make_pod("p2", "node2")], [],
     [make_node("node1", ONE_POD), make_node("node2", ONE_POD)], statuses(node1=U, node2=U),
     [FakeExtender("FakeExtender1", node1_predicate)], PostFilterResult("node1", ["default/p1"]), Status(Code.SUCCESS)),
    ("not-enough-resource-after-removing-low-priority", make_pod("p", priority=HIGH, req=LARGE),
     [make_pod("p1", "node1"), make_pod("p2", "node2")], [],
     [make_node("node1", NODE_RES), make_node("node2", NODE_RES)], statuses(node1=U, node2=U), None,
     PostFilterResult(""), Status.unschedulable("preemption: 0/2 nodes are available: 2 Insufficient cpu.")),
    ("mixed-reasons-no-victims-and-no-cpu", make_pod("p", priority=HIGH, req=LARGE),
     [make_pod("p1", "node1", HIGH), make_pod("p2", "node2"), make_pod("p3", "node3", HIGH)], [],
     [make_node("node1", ONE_POD), make_node("node2", NODE_RES), make_node("node3", ONE_POD)],
     statuses(node1=U, node2=U, node3=U), None, PostFilterResult(""),
     Status.unschedulable("preemption: 0/3 nodes are available: 1 Insufficient cpu, "
                          "2 No preemption victims found for incoming pod.")),
    ("mixed-reasons-unresolvable-and-no-cpu", make_pod("p", priority=HIGH, req=LARGE),
     [make_pod("p1", "node1"), make_pod("p2", "node2")], [],
     [make_node(f"node{i}", NODE_RES) for i in range(1, 5)], statuses(node1=U, node2=U, node4=UU), None,
     PostFilterResult(""),
     Status.unschedulable("preemption: 0/4 nodes are available: 2 Insufficient cpu, "
                          "2 Preemption is not helpful for scheduling.")),
    ("only-node-fails-in-remove-pod", make_pod("p", priority=HIGH, req=LARGE), [make_pod("p1", "node1")], [],
     [make_node("node1", LARGE, labels={"error": "true"})], statuses(node1=U), None, None,
     Status(Code.ERROR, ('preemption: running RemovePod on PreFilter plugin "test-plugin": failed to remove pod: p',))),
    ("one-node-errors-other-is-candidate", make_pod("p", priority=HIGH, req=LARGE),
     [make_pod("p1", "node1"), make_pod("p2", "node2", req=MEDIUM)], [],
     [make_node("node1", LARGE, labels={"error": "true"}), make_node("node2", LARGE)], statuses(node1=U, node2=U),
     None, PostFilterResult("node2", ["default/p2"]), Status(Code.SUCCESS)),
    ("preempt-never", make_pod("p", priority=HIGH, policy=PREEMPT_NEVER), [make_pod("p1", "node1")], [],
     [make_node("node1", ONE_POD)], statuses(node1=U), None, None,
     Status.unschedulable("preemption: not eligible due to preemptionPolicy=Never.")),
    ("no-nodes-are-unschedulable-absent-status", make_pod("p", priority=HIGH), [make_pod("p1", "node1")], [],
     [make_node("node1", ONE_POD), make_node("node2", ONE_POD)], statuses(node1=UU), None, PostFilterResult(""),
     Status.unschedulable("preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")),
]


@pytest.mark.parametrize("pod,bound,pdbs,nodes,node_to_status,extenders,want_result,want_status",
                         [c[1:] for c in POST_FILTER_CASES], ids=[c[0] for c in POST_FILTER_CASES])
def test_post_filter(pod, bound, pdbs, nodes, node_to_status, extenders, want_result, want_status):
    services = {"pdbs": pdbs}
    if extenders:
        services["extenders"] = extenders
    fw, snap = build_framework(nodes, bound, [FIT, "test-plugin"], services=services)
    result, status = post_filter(fw, snap, pod, node_to_status)
    assert result == want_result
    assert status.code == want_status.code
    assert status.reasons == want_status.reasons


def test_post_filter_through_the_runtime_names_the_plugin():
    fw, snap = build_framework([make_node("node1", ONE_POD)], [make_pod("p1", "node1")], [FIT])
    pod = make_pod("p", priority=HIGH)
    result, st = fw.run_post_filter(run_pre_filter(fw, pod, snap), pod, statuses(node1=U))
    assert (result.nominated_node_name, result.victims) == ("node1", ["default/p1"])
    assert st.is_success() and st.plugin == "DefaultPreemption" and st.message() == ""


# ---------------------------------------------------------------------------------------------
# TestPreempt (with the executor hook standing in for the API calls)
# ---------------------------------------------------------------------------------------------
SPREAD_FOO = {"topologySpreadConstraints": [
    {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
     "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}} for key in ("zone", "hostname")]}
FOO = {"foo": ""}


def _basic_pods():
    return [make_pod("p1.1", "node1", LOW, SMALL), make_pod("p1.2", "node1", LOW, SMALL),
            make_pod("p2.1", "node2", HIGH, LARGE), make_pod("p3.1", "node3", MID, MEDIUM)]


def _extender_pods(third: str = "node3"):
    return [make_pod("p1.1", "node1", MID, SMALL), make_pod("p1.2", "node1", LOW, SMALL),
            make_pod("p2.1", third, MID, LARGE)]


N3 = ["node1", "node2", "node3"]
PREEMPT_CASES = [
    ("basic", make_pod("p", priority=HIGH, req=VERY_LARGE, policy=PREEMPT_LOWER_PRIORITY), _basic_pods(), N3,
     [FIT], None, "node1", ["p1.1", "p1.2"]),
    ("topology-spread", make_pod("p", priority=HIGH, labels=FOO, spec=SPREAD_FOO),
     [make_pod("p-a1", "node-a", HIGH, labels=FOO), make_pod("p-a2", "node-a", HIGH, labels=FOO),
      make_pod("p-b1", "node-b", LOW, labels=FOO), make_pod("p-x1", "node-x", HIGH, labels=FOO),
      make_pod("p-x2", "node-x", HIGH, labels=FOO)], ["node-a/zone1", "node-b/zone1", "node-x/zone2"],
     ["PodTopologySpread"], None, "node-b", ["p-b1"]),
    ("extenders-allow-only-node1", make_pod("p", priority=HIGH, req=VERY_LARGE), _extender_pods(), N3, [FIT],
     [FakeExtender("FakeExtender1", true_predicate), FakeExtender("FakeExtender2", node1_predicate)],
     "node1", ["p1.1", "p1.2"]),
    ("extenders-allow-no-preemption", make_pod("p", priority=HIGH, req=VERY_LARGE), _extender_pods("node2"), N3, [FIT],
     [FakeExtender("FakeExtender1", false_predicate)], None, []),
    ("ignorable-extender-error-skipped", make_pod("p", priority=HIGH, req=VERY_LARGE), _extender_pods("node2"), N3,
     [FIT], [FakeExtender("FakeExtender1", error_predicate, ignorable=True),
             FakeExtender("FakeExtender2", node1_predicate)], "node1", ["p1.1", "p1.2"]),
    ("uninterested-extender-ignored", make_pod("p", priority=HIGH, req=VERY_LARGE), _extender_pods("node2"),
     ["node1", "node2"], [FIT], [FakeExtender("FakeExtender1", node1_predicate, interested=False),
                                 FakeExtender("FakeExtender2", true_predicate)], "node2", ["p2.1"]),
    ("preempt-never", make_pod("p", priority=HIGH, req=VERY_LARGE, policy=PREEMPT_NEVER), _basic_pods(), N3, [FIT],
     None, None, []),
    ("preemption-policy-unset", make_pod("p", priority=HIGH, req=VERY_LARGE), _basic_pods(), N3, [FIT], None,
     "node1", ["p1.1", "p1.2"]),
]


@pytest.mark.parametrize("pod,bound,node_specs,plugins,extenders,want_node,want_victims",
                         [c[1:] for c in PREEMPT_CASES], ids=[c[0] for c in PREEMPT_CASES])
def test_preempt(pod, bound, node_specs, plugins, extenders, want_node, want_victims):
    nodes = [topo_node(s, VERY_LARGE) for s in node_specs]
    executor = RecordingExecutor()
    services = {"preemption_executor": executor}
    if extenders:
        services["extenders"] = extenders
    fw, snap = build_framework(nodes, bound, plugins, services=services)
    result, status = post_filter(fw, snap, pod, all_unschedulable(nodes))
    assert status.code in (Code.SUCCESS, Code.UNSCHEDULABLE)
    if want_node is None:
        assert result is None or not result.nominated_node_name
        assert executor.calls == []
        return
    assert result.nominated_node_name == want_node
    (_, decision, plugin_name), = executor.calls
    assert plugin_name == "DefaultPreemption" and decision.node_name == want_node
    assert sorted(p.name for p in decision.victims) == sorted(want_victims)
    assert result.victims == [p.key for p in decision.victims]

    # The victims now terminate (DisruptionTarget set by the executor) and the pod is nominated:
    # a second attempt must not preempt again.
    for v in decision.victims:
        v.meta.deletion_timestamp = 1.0
        v.conditions = [*v.conditions, *load_text(
            '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c"}]},'
            '"status":{"conditions":[{"type":"DisruptionTarget","status":"True","reason":"PreemptionByScheduler"}]}}'
        ).pods[0].conditions]
    pod.nominated_node_name = want_node
    result, status = post_filter(fw, snap, pod, all_unschedulable(nodes))
    assert result is None
    assert status.reasons == ("preemption: not eligible due to a terminating pod on the nominated node.",)
    assert len(executor.calls) == 1


def test_extender_error_fails_preemption():
    nodes = [make_node(n, VERY_LARGE) for n in ("node1", "node2")]
    fw, snap = build_framework(nodes, _extender_pods("node2"), [FIT],
                               services={"extenders": [FakeExtender("e", error_predicate)]})
    result, status = post_filter(fw, snap, make_pod("p", priority=HIGH, req=VERY_LARGE), all_unschedulable(nodes))
    assert result is None
    assert (status.code, status.reasons) == (Code.ERROR, ("preemption: some error",))


def test_extender_without_victims_on_a_node_is_an_error():
    class Emptying(FakeExtender):
        def process_preemption(self, pod, victims_by_node):
            return {n: type(v)([], 0) for n, v in victims_by_node.items()}

    nodes = [make_node("node1", VERY_LARGE)]
    fw, snap = build_framework(nodes, _extender_pods("node1"), [FIT], services={"extenders": [Emptying("e", None)]})
    result, status = post_filter(fw, snap, make_pod("p", priority=HIGH, req=VERY_LARGE), all_unschedulable(nodes))
    assert result is None
    assert status.reasons == ('preemption: expected at least one victim pod on node "node1"',)


def test_executor_failure_leaves_the_pod_unnominated():
    executor = RecordingExecutor(fail="cannot delete")
    fw, snap = build_framework([make_node("node1", ONE_POD)], [make_pod("p1", "node1")], [FIT],
                               services={"preemption_executor": executor})
    result, status = post_filter(fw, snap, make_pod("p", priority=HIGH), statuses(node1=U))
    assert result is None
    assert (status.code, status.reasons) == (Code.ERROR, ("preemption: cannot delete",))
    assert len(executor.calls) == 1


def test_without_executor_the_plugin_only_decides():
    fw, snap = build_framework([make_node("node1", ONE_POD)], [make_pod("p1", "node1")], [FIT])
    result, status = post_filter(fw, snap, make_pod("p", priority=HIGH), statuses(node1=U))
    assert status.is_success() and result.nominated_node_name == "node1"
    assert [pi.pod.name for pi in snap.get("node1").pods] == ["p1"]
    decision = plugin_of(fw).last_outcome.decision
    assert [p.name for p in decision.victims] == ["p1"]


def test_all_candidates_switch_dry_runs_every_node_from_offset_zero():
    nodes = [make_node(f"node{i:03d}", VERY_LARGE) for i in range(150)]
    bound = [make_pod(f"v{i:03d}", f"node{i:03d}", LOW, LARGE) for i in range(150)]
    fw, snap = build_framework(nodes, bound, [FIT], services={"preemption_all_candidates": True})
    pl = plugin_of(fw)

    class NoRandom:
        def randrange(self, n):
            raise AssertionError("no random offset with preemption_all_candidates")

    pl.policy.rng = NoRandom()
    pod = make_pod("p", priority=HIGH, req=LARGE)
    dry = pl.evaluator.find_candidates(run_pre_filter(fw, pod, snap), snap.node_info_list, pod, all_unschedulable(nodes))
    assert len(dry.candidates) == 150
    result, _ = post_filter(fw, snap, pod, all_unschedulable(nodes))
    assert result.nominated_node_name == "node000"  # every criterion ties: smallest name


def test_default_sampling_stops_at_num_candidates():
    nodes = [make_node(f"node{i:03d}", VERY_LARGE) for i in range(150)]
    bound = [make_pod(f"v{i:03d}", f"node{i:03d}", LOW, LARGE) for i in range(150)]
    fw, snap = build_framework(nodes, bound, [FIT])
    pod = make_pod("p", priority=HIGH, req=LARGE)
    dry = plugin_of(fw).evaluator.find_candidates(run_pre_filter(fw, pod, snap), snap.node_info_list, pod,
                                                  all_unschedulable(nodes))
    assert len(dry.candidates) == 100  # max(150 * 10%, 100)


# ---------------------------------------------------------------------------------------------
# TestPreEnqueue and EventsToRegister (async preemption)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("async_enabled,running,pod_uid,want", [
    (False, {"p"}, "p", None),
    (True, {"p"}, "p", Status.unresolvable("waiting for the preemption for this pod to be finished")),
    (True, {"p"}, "p_other", None),
    (True, None, "p", None),
], ids=["async-disabled", "same-pod-running", "different-pod", "no-executor"])
def test_pre_enqueue(async_enabled, running, pod_uid, want):
    services = {} if running is None else {"preemption_executor": RecordingExecutor(running=frozenset(running))}
    fw, _ = build_framework([make_node("node1", ONE_POD)], [], [FIT], services=services)
    pl = DefaultPreemption(None, fw, enable_async_preemption=async_enabled)
    assert pl.pre_enqueue(make_pod(pod_uid, priority=HIGH)) == want


def test_events_to_register():
    fw, _ = build_framework([], [], [])
    assert DefaultPreemption(None, fw, enable_async_preemption=False).events_to_register() == []
    (ev,) = DefaultPreemption(None, fw).events_to_register()
    assert (ev.event.resource, ev.event.action) == (EventResource.POD, ActionType.DELETE)
    assert ev.hint(make_pod("p"), make_pod("q"), None) == QueueingHint.QUEUE_SKIP


def test_registered_at_pre_enqueue_and_post_filter_in_the_default_profile():
    from schedmesh.framework.profile import default_profile
    from schedmesh.framework.runtime import Framework
    fw = Framework(default_profile())
    assert fw.plugin_names("postFilter")[-1] == "DefaultPreemption"
    assert "DefaultPreemption" in fw.plugin_names("preEnqueue")


# ---------------------------------------------------------------------------------------------
# DefaultPreemptionArgs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,want", [
    (None, (10, 100)),
    ({}, (10, 100)),
    ({"minCandidateNodesPercentage": 40}, (40, 100)),
    ({"minCandidateNodesAbsolute": 0}, (10, 0)),
    ({"minCandidateNodesPercentage": 0}, (0, 100)),
    ({"minCandidateNodesPercentage": 100, "minCandidateNodesAbsolute": 1}, (100, 1)),
], ids=["nil", "empty", "percentage", "absolute-zero", "percentage-zero", "explicit"])
def test_args_defaults(args, want):
    a = DefaultPreemptionArgs.from_dict(args)
    assert (a.min_candidate_nodes_percentage, a.min_candidate_nodes_absolute) == want


@pytest.mark.parametrize("args,message", [
    ({"minCandidateNodesPercentage": -1}, "minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100]"),
    ({"minCandidateNodesPercentage": 101}, "minCandidateNodesPercentage: Invalid value: 101: not in valid range [0, 100]"),
    ({"minCandidateNodesAbsolute": -1}, "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)"),
    ({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
     "[minCandidateNodesPercentage: Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute, "
     "minCandidateNodesAbsolute: Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage]"),
    ({"minCandidateNodesPercentage": -1, "minCandidateNodesAbsolute": -1},
     "[minCandidateNodesPercentage: Invalid value: -1: not in valid range [0, 100], "
     "minCandidateNodesAbsolute: Invalid value: -1: not in valid range [0, inf)]"),
    ({"minCandidateNodesPercentage": "10"}, "minCandidateNodesPercentage: must be an integer"),
    ({"minCandidateNodesAbsolute": 2**31}, "minCandidateNodesAbsolute: 2147483648 does not fit in int32"),
    ({"minCandidates": 1}, "minCandidates: unknown field"),
], ids=["percentage-negative", "percentage-over-100", "absolute-negative", "both-zero", "both-invalid",
        "not-an-int", "int32-overflow", "unknown-field"])
def test_args_validation(args, message):
    with pytest.raises(ValueError) as e:
        DefaultPreemptionArgs.from_dict(args)
    assert str(e.value) == message


@pytest.mark.parametrize("pct,absolute,nodes,want", [
    (10, 100, 50, 50), (10, 100, 1000, 100), (10, 100, 5000, 500), (40, 1, 5, 2), (40, 2, 5, 2), (0, 3, 5, 3),
    (10, 0, 5, 0), (100, 0, 7, 7),
], ids=["few-nodes", "absolute-wins", "percentage-wins", "40pct-of-5", "40pct-min-2", "absolute-only",
        "rounds-to-zero", "all"])
def test_calculate_num_candidates(pct, absolute, nodes, want):
    fw, _ = build_framework([], [], [])
    pl = DefaultPreemption({"minCandidateNodesPercentage": pct, "minCandidateNodesAbsolute": absolute}, fw)
    assert pl.policy.calculate_num_candidates(nodes) == want
    offset, num = pl.policy.get_offset_and_num_candidates(nodes)
    assert 0 <= offset < nodes and num == want


# ---------------------------------------------------------------------------------------------
# End to end through `schedmesh explain`'s Explainer and the default profile
# ---------------------------------------------------------------------------------------------
CLUSTER = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: never}
value: 1000
preemptionPolicy: Never
---
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {capacity: {cpu: "2", memory: 4Gi, pods: "10"}}
---
apiVersion: v1
kind: Node
metadata: {name: node-b}
status: {capacity: {cpu: "2", memory: 4Gi, pods: "10"}}
---
apiVersion: v1
kind: Pod
metadata: {name: old, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {nodeName: node-a, containers: [{name: c, resources: {requests: {cpu: "1500m"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: young, creationTimestamp: "2026-01-01T01:00:00Z"}
spec: {nodeName: node-b, containers: [{name: c, resources: {requests: {cpu: "1500m"}}}]}
"""
PENDING = """
apiVersion: v1
kind: Pod
metadata: {name: urgent}
spec: {priorityClassName: high, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: polite}
spec: {priorityClassName: never, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
"""


def test_explain_end_to_end():
    from schedmesh.cli.explain import Explainer, fill_times
    from schedmesh.framework.profile import default_profile
    cluster, pending = load_text(CLUSTER), load_text(PENDING)
    admit_all(cluster)
    admit_all(pending, cluster.priority_classes)
    fill_times(cluster.pods, pending.pods)
    explainer = Explainer(cluster, [default_profile()])
    urgent, polite = (explainer.decide(p) for p in pending.pods)
    # Equal on every other criterion: the node whose victim started last is chosen.
    assert urgent.preemption == {"node": "node-b", "victims": ["default/young"]}
    assert urgent.message == "0/2 nodes are available: 2 Insufficient cpu."
    assert polite.preemption == {"node": None, "victims": []}
    assert polite.message.endswith("preemption: not eligible due to preemptionPolicy=Never.")
