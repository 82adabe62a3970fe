"""TaintToleration and the toleration helpers, re-expressing kube's taint_toleration_test.go,
toleration_test.go and helper/normalize_score_test.go cases plus edge cases."""
from __future__ import annotations

import random

import numpy as np
import pytest

from schedmesh.api.load import load_text
from schedmesh.api.types import Node, ObjectMeta, Pod, Taint, Toleration
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code, CycleState
from schedmesh.plugins.taint_toleration import (TaintToleration, count_intolerable_prefer_no_schedule,
                                                do_not_schedule_taints_filter, find_matching_untolerated_taint,
                                                toleration_tolerates_taint)
from schedmesh.plugins.helper.normalize import default_normalize_score

NS, PNS, NE = "NoSchedule", "PreferNoSchedule", "NoExecute"


def node(name: str, *taints: Taint) -> Node:
    return Node(meta=ObjectMeta(name=name), taints=list(taints))


def pod(*tolerations: Toleration, uid: str = "uid-1") -> Pod:
    return Pod(meta=ObjectMeta(name="p", namespace="default", uid=uid), tolerations=list(tolerations))


def tol(key: str = "", value: str = "", effect: str = "", operator: str = "Equal") -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect)


class _Handle:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def snapshot(self) -> Snapshot:
        return self.snap


# ---- Toleration.ToleratesTaint ------------------------------------------------------------------

@pytest.mark.parametrize("toleration,taint,enable_cmp,want", [
    (tol("foo", "bar", NS), Taint("foo", NS, "bar"), False, True),
    (tol("foo", "bar", NS), Taint("foo", NS, "baz"), False, False),
    (tol("foo", "", "", "Exists"), Taint("foo", NE, "anything"), False, True),
    (tol("", "", "", "Exists"), Taint("any.key/x", NS, "v"), False, True),
    (tol("", "", NS, "Exists"), Taint("any", NE), False, False),
    (tol("foo", "bar", ""), Taint("foo", PNS, "bar"), False, True),
    (tol("foo", "bar", PNS), Taint("foo", NS, "bar"), False, False),
    (tol("foo", "", NS), Taint("foo", NS, ""), False, True),
    (tol("foo", "bar", NS, operator=""), Taint("foo", NS, "bar"), False, True),
    (tol("other", "", NS, "Exists"), Taint("foo", NS), False, False),
    (tol("foo", "x", NS, "Bogus"), Taint("foo", NS, "x"), False, False),
    (tol("sla", "750", NS, "Gt"), Taint("sla", NS, "950"), False, False),
    (tol("sla", "750", NS, "Gt"), Taint("sla", NS, "950"), True, True),
    (tol("sla", "950", NS, "Gt"), Taint("sla", NS, "800"), True, False),
    (tol("sla", "950", NS, "Lt"), Taint("sla", NS, "800"), True, True),
    (tol("sla", "800", NS, "Lt"), Taint("sla", NS, "950"), True, False),
    (tol("sla", "950", NS, "Gt"), Taint("sla", NS, "high"), True, False),
    (tol("sla", "0950", NS, "Lt"), Taint("sla", NS, "1"), True, False),
    (tol("sla", "5", NS, "Gt"), Taint("sla", NS, "+7"), True, False),
    (tol("sla", "-5", NS, "Gt"), Taint("sla", NS, "-0"), True, False),
    (tol("sla", "-5", NS, "Gt"), Taint("sla", NS, "0"), True, True),
    (tol("sla", "5", NS, "Lt"), Taint("sla", NS, "-9223372036854775809"), True, False),
    (tol("sla", "5", NS, "Lt"), Taint("sla", NS, "-9223372036854775808"), True, True),
], ids=[
    "equal-key-value-effect", "equal-value-differs", "exists-any-value", "empty-key-exists-matches-all",
    "empty-key-exists-effect-differs", "empty-effect-matches-prefer", "effect-differs", "equal-empty-values",
    "empty-operator-means-equal", "exists-other-key", "unknown-operator", "gt-gate-off", "gt-greater",
    "gt-not-greater", "lt-less", "lt-not-less", "gt-non-numeric-taint", "lt-leading-zero-not-canonical",
    "gt-plus-sign-not-canonical", "gt-minus-zero-not-canonical", "gt-negative-bound", "lt-below-int64",
    "lt-int64-min",
])
def test_toleration_tolerates_taint(toleration, taint, enable_cmp, want):
    assert toleration_tolerates_taint(toleration, taint, enable_cmp) is want


def test_find_matching_untolerated_taint_returns_first_filtered():
    taints = [Taint("a", PNS), Taint("b", NS, "1"), Taint("c", NE)]
    assert find_matching_untolerated_taint(taints, [], do_not_schedule_taints_filter) == Taint("b", NS, "1")
    assert find_matching_untolerated_taint(taints, [tol("b", "1")], do_not_schedule_taints_filter) == Taint("c", NE)
    assert find_matching_untolerated_taint(taints, [tol(operator="Exists")], do_not_schedule_taints_filter) is None
    assert find_matching_untolerated_taint(taints, []) == Taint("a", PNS)  # no filter: every taint counts


# ---- Filter -------------------------------------------------------------------------------------

FILTER_CASES = [
    ("no-tolerations-tainted-node", [], [Taint("dedicated", NS, "user1")], False),
    ("toleration-matches", [tol("dedicated", "user1", NS)], [Taint("dedicated", NS, "user1")], True),
    ("toleration-value-differs", [tol("dedicated", "user2", NS)], [Taint("dedicated", NS, "user1")], False),
    ("exists-toleration", [tol("foo", "", NS, "Exists")], [Taint("foo", NS, "bar")], True),
    ("all-taints-tolerated", [tol("dedicated", "user2", NS), tol("foo", "", NS, "Exists")],
     [Taint("dedicated", NS, "user2"), Taint("foo", NS, "bar")], True),
    ("effect-mismatch", [tol("foo", "bar", PNS)], [Taint("foo", NS, "bar")], False),
    ("empty-effect-tolerates-noschedule", [tol("foo", "bar")], [Taint("foo", NS, "bar")], True),
    ("prefer-no-schedule-never-filters", [tol("dedicated", "user2", NS)], [Taint("dedicated", PNS, "user1")], True),
    ("no-toleration-prefer-only", [], [Taint("dedicated", PNS, "user1")], True),
    ("no-execute-untolerated", [tol("k", "v", NS)], [Taint("k", NE, "v")], False),
    ("no-taints", [], [], True),
    ("gt-ignored-gate-off", [tol("dedicated", "user1", NS), tol("sla", "750", NS, "Gt")],
     [Taint("dedicated", NS, "user1"), Taint("sla", NS, "950")], False),
    ("equal-honoured-gate-off", [tol("dedicated", "user1", NS), tol("sla", "750", NS, "Gt")],
     [Taint("dedicated", NS, "user1")], True),
]


@pytest.mark.parametrize("name,tolerations,taints,fits", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_filter(name, tolerations, taints, fits):
    n = node("n1", *taints)
    snap = Snapshot([n])
    pl = TaintToleration(None, _Handle(snap))
    p = pod(*tolerations)
    st = pl.filter(CycleState(), p, snap.get("n1"))
    if fits:
        assert st is None
    else:
        assert st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert st.reasons == ("node(s) had untolerated taint(s)",)
    v = pl.filter_nodes(CycleState(), p, snap, snap.all_indices())
    assert bool(v.failed[0] == -1) is fits


def test_filter_with_comparison_operators_enabled():
    n = node("n1", Taint("sla", NS, "950"))
    snap = Snapshot([n])
    on = TaintToleration(None, _Handle(snap), enable_comparison_operators=True)
    off = TaintToleration(None, _Handle(snap))
    p = pod(tol("sla", "750", NS, "Gt"))
    assert on.filter(CycleState(), p, snap.get("n1")) is None
    assert off.filter(CycleState(), p, snap.get("n1")) is not None


# ---- Score --------------------------------------------------------------------------------------

SCORE_CASES = [
    ("tolerated-beats-intolerable", [tol("foo", "bar", PNS)],
     {"nodeA": [Taint("foo", PNS, "bar")], "nodeB": [Taint("foo", PNS, "blah")]}, {"nodeA": 100, "nodeB": 0}),
    ("count-of-tolerated-taints-does-not-matter", [tol("cpu-type", "arm64", PNS), tol("disk-type", "ssd", PNS)],
     {"nodeA": [], "nodeB": [Taint("cpu-type", PNS, "arm64")],
      "nodeC": [Taint("cpu-type", PNS, "arm64"), Taint("disk-type", PNS, "ssd")]},
     {"nodeA": 100, "nodeB": 100, "nodeC": 100}),
    ("more-intolerable-lower-score", [tol("foo", "bar", PNS)],
     {"nodeA": [], "nodeB": [Taint("cpu-type", PNS, "arm64")],
      "nodeC": [Taint("cpu-type", PNS, "arm64"), Taint("disk-type", PNS, "ssd")]},
     {"nodeA": 100, "nodeB": 50, "nodeC": 0}),
    ("only-prefer-no-schedule-counts", [tol("cpu-type", "arm64", NS), tol("disk-type", "ssd", NS)],
     {"nodeA": [], "nodeB": [Taint("cpu-type", NS, "arm64")],
      "nodeC": [Taint("cpu-type", PNS, "arm64"), Taint("disk-type", PNS, "ssd")]},
     {"nodeA": 100, "nodeB": 100, "nodeC": 0}),
    ("no-tolerations", [], {"nodeA": [], "nodeB": [Taint("cpu-type", PNS, "arm64")]}, {"nodeA": 100, "nodeB": 0}),
    ("empty-effect-toleration-counts", [tol("cpu-type", "arm64")],
     {"nodeA": [Taint("cpu-type", PNS, "arm64")], "nodeB": [Taint("x", PNS)]}, {"nodeA": 100, "nodeB": 0}),
    ("all-zero-reversed-to-max", [], {"nodeA": [], "nodeB": [Taint("k", NS)]}, {"nodeA": 100, "nodeB": 100}),
    ("three-way-truncation", [],
     {"a": [Taint("1", PNS)], "b": [Taint("1", PNS), Taint("2", PNS)], "c": [Taint(str(i), PNS) for i in range(3)]},
     {"a": 67, "b": 34, "c": 0}),
]


@pytest.mark.parametrize("name,tolerations,nodes,want", SCORE_CASES, ids=[c[0] for c in SCORE_CASES])
def test_score(name, tolerations, nodes, want):
    snap = Snapshot([node(n, *t) for n, t in nodes.items()])
    pl = TaintToleration(None, _Handle(snap))
    p = pod(*tolerations)
    rows = snap.all_indices()
    st = CycleState()
    assert pl.pre_score(st, p, snap, rows) is None
    bulk = pl.score_nodes(st, p, snap, rows)
    per_node = np.array([pl.score(st, p, ni)[0] for ni in snap.node_info_list], dtype=np.int64)
    assert bulk.tolist() == per_node.tolist()
    pl.normalize_score(st, p, bulk)
    assert dict(zip(snap.cols.names, bulk.tolist())) == want


def test_score_without_prescore_is_an_error():
    snap = Snapshot([node("n1")])
    pl = TaintToleration(None, _Handle(snap))
    s, st = pl.score(CycleState(), pod(), snap.get("n1"))
    assert st is not None and st.code == Code.ERROR


def test_count_intolerable_ignores_non_prefer_tolerations_via_prescore_filtering():
    taints = [Taint("k", PNS, "v")]
    # The raw helper counts with whatever tolerations it is given; PreScore keeps only
    # PreferNoSchedule / empty-effect ones, so a NoSchedule toleration does not help.
    assert count_intolerable_prefer_no_schedule(taints, [tol("k", "v", NS)]) == 1
    snap = Snapshot([node("n1", *taints)])
    pl = TaintToleration(None, _Handle(snap))
    st = CycleState()
    pl.pre_score(st, pod(tol("k", "v", NS)), snap, snap.all_indices())
    assert pl.score(st, pod(tol("k", "v", NS)), snap.get("n1"))[0] == 1


# ---- DefaultNormalizeScore ----------------------------------------------------------------------

@pytest.mark.parametrize("scores,reverse,want", [
    ([], False, []),
    ([0, 0, 0], False, [0, 0, 0]),
    ([0, 0, 0], True, [100, 100, 100]),
    ([1, 2, 3, 4, 5], False, [20, 40, 60, 80, 100]),
    ([1, 2, 3, 4, 5], True, [80, 60, 40, 20, 0]),
    ([3, 7, 10], False, [30, 70, 100]),
    ([1, 2, 3], False, [33, 66, 100]),
    ([1, 2, 3], True, [67, 34, 0]),
    ([1000, 10, 20, 30], False, [100, 1, 2, 3]),
], ids=["empty", "zeros", "zeros-reversed", "linear", "linear-reversed", "exact", "truncates",
        "truncates-then-reverses", "small-values-scale-down"])
def test_default_normalize_score(scores, reverse, want):
    a = np.array(scores, dtype=np.int64)
    default_normalize_score(a, reverse)
    assert a.tolist() == want


# ---- bulk == per node over a varied cluster ---------------------------------------------------------

def test_bulk_matches_per_node_on_random_cluster():
    rng = random.Random(7)
    keys = ["dedicated", "gpu", "zone", "node.kubernetes.io/unschedulable"]
    nodes = []
    for i in range(60):
        taints = {}
        for _ in range(rng.randint(0, 3)):
            t = Taint(rng.choice(keys), rng.choice([NS, PNS, NE]), rng.choice(["", "a", "b"]))
            taints[(t.key, t.effect)] = t
        nodes.append(node(f"n{i:02d}", *taints.values()))
    snap = Snapshot(nodes)
    pl = TaintToleration(None, _Handle(snap))
    rows = snap.all_indices()
    for _ in range(40):
        tols = [Toleration(key=rng.choice(keys + [""]), operator=op, value="" if op == "Exists" else rng.choice(["a", "b"]),
                           effect=rng.choice(["", NS, PNS, NE]))
                for op in (rng.choice(["Equal", "Exists"]) for _ in range(rng.randint(0, 3)))]
        tols = [t for t in tols if t.key or t.operator == "Exists"]
        p = pod(*tols)
        st = CycleState()
        v = pl.filter_nodes(st, p, snap, rows)
        for i, ni in enumerate(snap.node_info_list):
            assert (pl.filter(st, p, ni) is None) == (v.failed[i] == -1)
        pl.pre_score(st, p, snap, rows)
        assert pl.score_nodes(st, p, snap, rows).tolist() == [pl.score(st, p, ni)[0] for ni in snap.node_info_list]
    # A subset of candidates keeps alignment.
    sub = rows[::3]
    v = pl.filter_nodes(CycleState(), pod(), snap, sub)
    assert len(v.failed) == len(sub)


# ---- queueing hints -------------------------------------------------------------------------------

def test_events_to_register():
    events = TaintToleration().events_to_register()
    assert [(e.event.resource, e.event.action) for e in events] == [
        (EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
        (EventResource.POD, ActionType.UPDATE_POD_TOLERATION)]
    assert all(e.hint is not None for e in events)


HINT_CASES = [
    ("wrong-new-object", None, "not-a-node", QueueingHint.QUEUE),
    ("wrong-old-object", "not-a-node", node("nodeA", Taint("dedicated", NS, "user1")), QueueingHint.QUEUE),
    ("skip-untolerated-taint-node-added", None, node("nodeA", Taint("dedicated", NS, "user1")), QueueingHint.QUEUE_SKIP),
    ("queue-tolerated-taint-node-added", None, node("nodeA", Taint("dedicated", NS, "user2")), QueueingHint.QUEUE),
    ("skip-unrelated-change", node("nodeA", Taint("dedicated", NS, "user1")),
     node("nodeA", Taint("dedicated", NS, "user1"), Taint("dedicated", NS, "user3")), QueueingHint.QUEUE_SKIP),
    ("queue-on-taint-change", node("nodeA", Taint("dedicated", NS, "user1")),
     node("nodeA", Taint("dedicated", NS, "user2")), QueueingHint.QUEUE),
    ("skip-already-tolerated", node("nodeA"), node("nodeA", Taint("x", PNS)), QueueingHint.QUEUE_SKIP),
]


@pytest.mark.parametrize("name,old,new,want", HINT_CASES, ids=[c[0] for c in HINT_CASES])
def test_is_schedulable_after_node_change(name, old, new, want):
    p = pod(tol("dedicated", "user2", NS))
    assert TaintToleration().is_schedulable_after_node_change(p, old, new) == want


def test_is_schedulable_after_pod_toleration_change():
    pl = TaintToleration()
    target = pod(uid="target")
    changed = pod(tol("foo", "", NS), uid="target")
    assert pl.is_schedulable_after_pod_toleration_change(target, pod(uid="target"), changed) == QueueingHint.QUEUE
    assert pl.is_schedulable_after_pod_toleration_change(target, None, pod(uid="other")) == QueueingHint.QUEUE_SKIP
    assert pl.is_schedulable_after_pod_toleration_change(target, None, "not-a-pod") == QueueingHint.QUEUE


def test_yaml_manifests_round_trip():
    m = load_text("""
apiVersion: v1
kind: Node
metadata: {name: tainted}
spec:
  taints: [{key: gpu, value: "true", effect: NoSchedule}, {key: spot, effect: PreferNoSchedule}]
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers: [{name: c, image: nginx}]
  tolerations: [{key: gpu, operator: Exists}]
""")
    snap = Snapshot(m.nodes)
    pl = TaintToleration(None, _Handle(snap))
    p = m.pods[0]
    assert pl.filter(CycleState(), p, snap.get("tainted")) is None
    st = CycleState()
    pl.pre_score(st, p, snap, snap.all_indices())
    assert pl.score(st, p, snap.get("tainted"))[0] == 1
