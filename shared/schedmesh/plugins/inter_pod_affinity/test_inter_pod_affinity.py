"""InterPodAffinity tests: kube's filtering_test.go / scoring_test.go / plugin_test.go tables
re-expressed, edge cases, per-node vs bulk agreement, and a randomized comparison with a
direct port of kube's loops (no index, namespaceSelectors merged the way kube merges them)."""
from __future__ import annotations

import random
from typing import Optional

import numpy as np
import pytest

from schedmesh.cache.node_info import PodInfo
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code, CycleState, PluginError, Status
from schedmesh.plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityArgs
from schedmesh.plugins.inter_pod_affinity.filtering import (ERR_REASON_AFFINITY_RULES_NOT_MATCH as AFF,
                                                            ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH as ANTI,
                                                            ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH as EXIST,
                                                            PRE_FILTER_STATE_KEY)
from schedmesh.plugins.inter_pod_affinity.plugin import (is_schedulable_after_node_change,
                                                         is_schedulable_after_pod_change)
from schedmesh.plugins.inter_pod_affinity.scoring import normalize
from schedmesh.plugins.inter_pod_affinity.testkit import (NIL, Exists, In, NotIn, cluster, expr, namespace, node,
                                                          pod, sel, term, the_node, the_pod, weighted)

UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
UNSCHED = Code.UNSCHEDULABLE
SKIP = "skip"

# kube's test namespaces (scoring_test.go); "" there is "default" here.
NAMESPACES = [namespace("subteam1.team1", team="team1"), namespace("subteam2.team1", team="team1"),
              namespace("subteam1.team2", team="team2"), namespace("subteam2.team2", team="team2")]
TEAM1 = sel(expr("team", "In", "team1"))


# ---- harness ----------------------------------------------------------------------------------

def run_filter(pod_d: dict, snapshot: Snapshot, args: Optional[dict] = None):
    """PreFilter then Filter on every node, per node and in bulk (which must agree).
    Returns SKIP or {node name: None | (code, reasons)}."""
    pl = InterPodAffinity(args)
    p = the_pod(pod_d)
    state = CycleState()
    res, st = pl.pre_filter(state, p, snapshot)
    assert res is None
    if st is not None and st.code == Code.SKIP:
        return SKIP
    assert st is None
    infos = snapshot.node_info_list
    per_node = {ni.name: _as_tuple(pl.filter(state, p, ni)) for ni in infos}
    rows = snapshot.all_indices()
    v = pl.filter_nodes(state, p, snapshot, rows)
    bulk = {infos[r].name: (None if v.failed[i] < 0 else _as_tuple(v.statuses[v.failed[i]]))
            for i, r in enumerate(rows)}
    assert bulk == per_node, "bulk Filter disagrees with per-node Filter"
    # A shuffled subset of candidates gives the same verdicts.
    sub = rows[::-1][: max(1, len(rows) // 2)]
    v2 = pl.filter_nodes(state, p, snapshot, sub)
    for i, r in enumerate(sub):
        got = None if v2.failed[i] < 0 else _as_tuple(v2.statuses[v2.failed[i]])
        assert got == per_node[infos[r].name]
    return per_node


def _as_tuple(st: Optional[Status]):
    return None if st is None else (st.code, st.reasons)


def run_score(pod_d: dict, snapshot: Snapshot, args: Optional[dict] = None):
    """PreScore, Score (per node and bulk, which must agree), NormalizeScore over all nodes.
    Returns SKIP or {node name: normalized score}."""
    pl = InterPodAffinity(args)
    p = the_pod(pod_d)
    state = CycleState()
    rows = snapshot.all_indices()
    st = pl.pre_score(state, p, snapshot, rows)
    if st is not None and st.code == Code.SKIP:
        return SKIP
    assert st is None
    infos = snapshot.node_info_list
    per_node = []
    for ni in infos:
        s, sst = pl.score(state, p, ni)
        assert sst is None
        per_node.append(s)
    bulk = pl.score_nodes(state, p, snapshot, rows)
    assert bulk.dtype == np.int64
    assert list(bulk) == per_node, "bulk Score disagrees with per-node Score"
    assert pl.normalize_score(state, p, bulk) is None
    return {ni.name: int(bulk[i]) for i, ni in enumerate(infos)}


def F(code, reason):
    return (code, (reason,))


# ---- kube TestRequiredAffinitySingleNode ------------------------------------------------------

POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
NODE1 = node("node1", region="r1", zone="z11")
SECURITY_SCAN = In("service", "securityscan", "value2")
ANTIVIRUS = In("service", "antivirusscan", "value2")

SINGLE_NODE = [
    ("no required affinity, no pods", pod(), [], SKIP),
    ("affinity In matches the existing pod",
     pod(labels=POD_LABEL2, affinity=[term("region", SECURITY_SCAN)]), [pod(labels=POD_LABEL, node="node1")], None),
    ("affinity NotIn matches the existing pod",
     pod(labels=POD_LABEL2, affinity=[term("region", NotIn("service", "securityscan3", "value3"))]),
     [pod(labels=POD_LABEL, node="node1")], None),
    ("affinity does not match: existing pod in another namespace",
     pod(labels=POD_LABEL2, affinity=[term("region", SECURITY_SCAN, namespaces=["DiffNameSpace"])]),
     [pod(ns="ns", labels=POD_LABEL, node="node1")], F(UNRES, AFF)),
    ("affinity selector does not match the existing pod",
     pod(labels=POD_LABEL, affinity=[term("region", ANTIVIRUS)]), [pod(labels=POD_LABEL, node="node1")],
     F(UNRES, AFF)),
    ("several affinity terms with different operators all match",
     pod(labels=POD_LABEL2, affinity=[
         term("region", sel(expr("service", "Exists"), expr("wrongkey", "DoesNotExist"))),
         term("region", sel(expr("service", "In", "securityscan"), expr("service", "NotIn", "WrongValue")))]),
     [pod(labels=POD_LABEL, node="node1")], None),
    ("matchExpressions are ANDed: one requirement fails",
     pod(labels=POD_LABEL2, affinity=[
         term("region", sel(expr("service", "Exists"), expr("wrongkey", "DoesNotExist"))),
         term("region", sel(expr("service", "In", "securityscan2"), expr("service", "NotIn", "WrongValue")))]),
     [pod(labels=POD_LABEL, node="node1")], F(UNRES, AFF)),
    ("affinity and anti-affinity both satisfied",
     pod(labels=POD_LABEL2, affinity=[term("region", SECURITY_SCAN)], anti=[term("node", ANTIVIRUS)]),
     [pod(labels=POD_LABEL, node="node1")], None),
    ("affinity, anti-affinity and existing pod's anti-affinity satisfied",
     pod(labels=POD_LABEL2, affinity=[term("region", SECURITY_SCAN)], anti=[term("node", ANTIVIRUS)]),
     [pod(labels=POD_LABEL, node="node1", anti=[term("node", ANTIVIRUS)])], None),
    ("affinity satisfied, anti-affinity not",
     pod(labels=POD_LABEL2, affinity=[term("region", SECURITY_SCAN)], anti=[term("zone", SECURITY_SCAN)]),
     [pod(labels=POD_LABEL, node="node1")], F(UNSCHED, ANTI)),
    ("existing pod's anti-affinity (symmetry) not satisfied",
     pod(labels=POD_LABEL, affinity=[term("region", SECURITY_SCAN)], anti=[term("node", ANTIVIRUS)]),
     [pod(labels=POD_LABEL, node="node1", anti=[term("zone", SECURITY_SCAN)])], F(UNSCHED, EXIST)),
    ("pod matches its own NotIn term but an existing pod elsewhere blocks nothing",
     pod(labels=POD_LABEL, affinity=[term("region", NotIn("service", "securityscan", "value2"))]),
     [pod(labels=POD_LABEL, node="node2")], F(UNRES, AFF)),
    ("existing anti-affinity respected without incoming terms",
     pod(labels=POD_LABEL), [pod(labels=POD_LABEL, node="node1", anti=[term("zone", SECURITY_SCAN)])],
     F(UNSCHED, EXIST)),
    ("existing anti-affinity not matching: skip",
     pod(labels=POD_LABEL),
     [pod(labels=POD_LABEL, node="node1", anti=[term("zone", NotIn("service", "securityscan", "value2"))])], SKIP),
    ("incoming anti-affinity matches existing pod, not the reverse",
     pod(labels=POD_LABEL, anti=[term("region", Exists("service")), term("region", Exists("security"))]),
     [pod(labels=POD_LABEL2, node="node1", anti=[term("zone", Exists("security"))])], F(UNSCHED, ANTI)),
    ("symmetry a1",
     pod(labels=POD_LABEL, anti=[term("zone", Exists("service")), term("zone", Exists("security"))]),
     [pod(labels=POD_LABEL2, node="node1", anti=[term("zone", Exists("security"))])], F(UNSCHED, ANTI)),
    ("symmetry a2",
     pod(labels=POD_LABEL2, anti=[term("zone", Exists("security"))]),
     [pod(labels=POD_LABEL, node="node1", anti=[term("zone", Exists("service")), term("zone", Exists("security"))])],
     F(UNSCHED, EXIST)),
    ("symmetry b1",
     pod(labels={"abc": "", "xyz": ""}, anti=[term("zone", Exists("abc")), term("zone", Exists("def"))]),
     [pod(labels={"def": "", "xyz": ""}, node="node1", anti=[term("zone", Exists("abc")), term("zone", Exists("def"))])],
     F(UNSCHED, ANTI)),
    ("symmetry b2",
     pod(labels={"def": "", "xyz": ""}, anti=[term("zone", Exists("abc")), term("zone", Exists("def"))]),
     [pod(labels={"abc": "", "xyz": ""}, node="node1", anti=[term("zone", Exists("abc")), term("zone", Exists("def"))])],
     F(UNSCHED, ANTI)),
    ("affinity with matching namespaceSelector",
     pod(labels=POD_LABEL2, affinity=[term("region", SECURITY_SCAN, ns_selector=TEAM1)]),
     [pod(ns="subteam1.team1", labels=POD_LABEL, node="node1")], None),
    ("affinity with non-matching namespaceSelector",
     pod(labels=POD_LABEL2, affinity=[term("region", SECURITY_SCAN, ns_selector=TEAM1)]),
     [pod(ns="subteam1.team2", labels=POD_LABEL, node="node1")], F(UNRES, AFF)),
    ("anti-affinity with matching namespaceSelector",
     pod(ns="subteam1.team1", labels=POD_LABEL2, anti=[term("zone", SECURITY_SCAN, ns_selector=TEAM1)]),
     [pod(ns="subteam2.team1", labels=POD_LABEL, node="node1")], F(UNSCHED, ANTI)),
    ("anti-affinity with namespaceSelector {} matching all namespaces",
     pod(ns="subteam1.team1", labels=POD_LABEL2, anti=[term("zone", SECURITY_SCAN, ns_selector=sel())]),
     [pod(ns="subteam2.team1", labels=POD_LABEL, node="node1")], F(UNSCHED, ANTI)),
    ("anti-affinity with non-matching namespaceSelector",
     pod(ns="subteam1.team1", labels=POD_LABEL2, anti=[term("zone", SECURITY_SCAN, ns_selector=TEAM1)]),
     [pod(ns="subteam1.team2", labels=POD_LABEL, node="node1")], None),
]


@pytest.mark.parametrize("incoming,pods,want", [c[1:] for c in SINGLE_NODE], ids=[c[0] for c in SINGLE_NODE])
def test_required_affinity_single_node(incoming, pods, want):
    got = run_filter(incoming, cluster([NODE1], pods, NAMESPACES))
    assert got == (SKIP if want == SKIP else {"node1": want})


# ---- kube TestRequiredAffinityMultipleNodes ---------------------------------------------------

CHINA = {"region": "China"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
INDIA = {"region": "India"}


def three(a="node1", b="node2", c="node3"):
    return [node(a, **CHINA), node(b, **CHINA_AZ1), node(c, **INDIA)]


def hosts(*zones_regions):
    return [node(n, region=r, zone=z, hostname=n) for n, r, z in zones_regions]


AB_SAME_ZONE = hosts(("nodeA", "r1", "z1"), ("nodeB", "r1", "z1"))
AB_TWO_ZONES = hosts(("nodeA", "r1", "z1"), ("nodeB", "r1", "z2"))

MULTI_NODE = [
    ("nodes sharing the topology value of a matching pod pass",
     pod(affinity=[term("region", In("foo", "bar"))]), [pod(labels={"foo": "bar"}, node="node1")], three(),
     {"node1": None, "node2": None, "node3": F(UNRES, AFF)}),
    ("first pod of a collection is not blocked",
     pod(labels={"foo": "bar", "service": "securityscan"},
         affinity=[term("zone", In("foo", "bar")), term("zone", In("service", "securityscan"))]),
     [pod(labels={"foo": "bar"}, node="nodeA")],
     [node("nodeA", zone="az1", hostname="h1"), node("nodeB", zone="az2", hostname="h2")],
     {"nodeA": None, "nodeB": None}),
    ("first pod of a collection only on nodes with the topology keys",
     pod(labels={"foo": "bar", "service": "securityscan"},
         affinity=[term("zone", In("foo", "bar")), term("zone", In("service", "securityscan"))]),
     [pod(labels={"foo": "bar"}, node="nodeA")],
     [node("nodeA", zoneLabel="az1", hostname="h1"), node("nodeB", zoneLabel="az2", hostname="h2")],
     {"nodeA": F(UNRES, AFF), "nodeB": F(UNRES, AFF)}),
    ("anti-affinity blocks every node of the region",
     pod(anti=[term("region", In("foo", "abc"))]), [pod(labels={"foo": "abc"}, node="nodeA")],
     [node("nodeA", region="r1", hostname="nodeA"), node("nodeB", region="r1", hostname="nodeB")],
     {"nodeA": F(UNSCHED, ANTI), "nodeB": F(UNSCHED, ANTI)}),
    ("anti-affinity matches when any term matches",
     pod(anti=[term("region", In("foo", "abc")), term("zone", In("service", "securityscan"))]),
     [pod(labels={"foo": "abc", "service": "securityscan"}, node="nodeA")],
     hosts(("nodeA", "r1", "z1"), ("nodeB", "r1", "z2")),
     {"nodeA": F(UNSCHED, ANTI), "nodeB": F(UNSCHED, ANTI)}),
    ("anti-affinity: other region is free",
     pod(anti=[term("region", In("foo", "abc"))]), [pod(labels={"foo": "abc"}, node="nodeA")],
     three("nodeA", "nodeB", "nodeC"),
     {"nodeA": F(UNSCHED, ANTI), "nodeB": F(UNSCHED, ANTI), "nodeC": None}),
    ("anti-affinity: matching pod in another namespace is ignored",
     pod(ns="NS1", labels={"foo": "123"}, anti=[term("region", In("foo", "bar"))]),
     [pod(ns="NS1", labels={"foo": "bar"}, node="nodeA"),
      pod(ns="NS2", node="nodeC", anti=[term("region", In("foo", "123"))])],
     three("nodeA", "nodeB", "nodeC"),
     {"nodeA": F(UNSCHED, ANTI), "nodeB": F(UNSCHED, ANTI), "nodeC": None}),
    ("existing anti-affinity on a topology key no node has: skip",
     pod(labels={"foo": ""}), [pod(node="nodeA", anti=[term("invalid-node-label", Exists("foo"))])],
     AB_SAME_ZONE, SKIP),
    ("incoming anti-affinity on a topology key no node has",
     pod(anti=[term("invalid-node-label", Exists("foo"))]), [pod(labels={"foo": ""}, node="nodeA")],
     AB_SAME_ZONE, {"nodeA": None, "nodeB": None}),
    ("incoming pod violates each existing pod's terms",
     pod(labels={"foo": "", "bar": ""}),
     [pod(node="nodeA", anti=[term("zone", Exists("foo"))]), pod(node="nodeA", anti=[term("region", Exists("bar"))])],
     AB_TWO_ZONES, {"nodeA": F(UNSCHED, EXIST), "nodeB": F(UNSCHED, EXIST)}),
    ("incoming anti-affinity: one violated term is enough",
     pod(anti=[term("zone", Exists("foo")), term("region", Exists("bar"))]),
     [pod(labels={"foo": ""}, node="nodeA"), pod(labels={"bar": ""}, node="nodeB")],
     AB_TWO_ZONES, {"nodeA": F(UNSCHED, ANTI), "nodeB": F(UNSCHED, ANTI)}),
    ("existing anti-affinity: label selector and topology key must both match",
     pod(labels={"foo": "", "bar": ""}),
     [pod(node="nodeA", anti=[term("invalid-node-label", Exists("foo")), term("zone", Exists("bar"))])],
     AB_TWO_ZONES, {"nodeA": F(UNSCHED, EXIST), "nodeB": None}),
    ("incoming anti-affinity: label selector and topology key must both match",
     pod(anti=[term("invalid-node-label", Exists("foo")), term("zone", Exists("bar"))]),
     [pod(labels={"foo": "", "bar": ""}, node="nodeA")],
     AB_TWO_ZONES, {"nodeA": F(UNSCHED, ANTI), "nodeB": None}),
    ("existing anti-affinity: all terms have valid keys",
     pod(labels={"foo": "", "bar": ""}),
     [pod(node="nodeA", anti=[term("region", Exists("foo")), term("zone", Exists("bar"))])],
     AB_TWO_ZONES, {"nodeA": F(UNSCHED, EXIST), "nodeB": F(UNSCHED, EXIST)}),
    ("incoming anti-affinity: all terms have valid keys",
     pod(anti=[term("region", Exists("foo")), term("zone", Exists("bar"))]),
     [pod(labels={"foo": "", "bar": ""}, node="nodeA")],
     AB_TWO_ZONES, {"nodeA": F(UNSCHED, ANTI), "nodeB": F(UNSCHED, ANTI)}),
    ("existing anti-affinity leaves only nodeC",
     pod(labels={"foo": "", "bar": ""}),
     [pod(node="nodeA", anti=[term("zone", Exists("foo")), term("zone", Exists("labelA"))]),
      pod(node="nodeB", anti=[term("zone", Exists("bar")), term("zone", Exists("labelB"))])],
     hosts(("nodeA", "r1", "z1"), ("nodeB", "r1", "z2"), ("nodeC", "r1", "z3")),
     {"nodeA": F(UNSCHED, EXIST), "nodeB": F(UNSCHED, EXIST), "nodeC": None}),
    ("affinity: one pod matching all terms, then topology keys",
     pod(affinity=[term("region", Exists("foo")), term("zone", Exists("bar"))]),
     [pod(labels={"foo": "", "bar": ""}, node="nodeA")], AB_SAME_ZONE, {"nodeA": None, "nodeB": None}),
    ("affinity: terms must be matched by the same pod",
     pod(affinity=[term("region", Exists("foo")), term("zone", Exists("bar"))]),
     [pod(labels={"foo": ""}, node="nodeA"), pod(labels={"bar": ""}, node="nodeB")],
     AB_TWO_ZONES, {"nodeA": F(UNRES, AFF), "nodeB": F(UNRES, AFF)}),
]


@pytest.mark.parametrize("incoming,pods,nodes,want", [c[1:] for c in MULTI_NODE], ids=[c[0] for c in MULTI_NODE])
def test_required_affinity_multiple_nodes(incoming, pods, nodes, want):
    assert run_filter(incoming, cluster(nodes, pods, [namespace("NS1")])) == want


# ---- edge cases of Filter ---------------------------------------------------------------------

EDGE_NODES = [node("n1", zone="z1"), node("n2", zone="z2"), node("n3")]  # n3 has no zone label

FILTER_EDGES = [
    ("preferred terms only: PreFilter skips",
     pod(pref_affinity=[weighted(5, term("zone", Exists("app")))]), [pod(labels={"app": "x"}, node="n1")], SKIP),
    ("empty podAffinity object: skip", pod(affinity=[]), [pod(labels={"app": "x"}, node="n1")], SKIP),
    ("empty label selector {} matches every pod of the namespace",
     pod(affinity=[term("zone", sel())]), [pod(labels={"app": "x"}, node="n2")],
     {"n1": F(UNRES, AFF), "n2": None, "n3": F(UNRES, AFF)}),
    ("empty label selector {} does not reach other namespaces",
     pod(affinity=[term("zone", sel())]), [pod(ns="other", labels={"app": "x"}, node="n2")],
     # no match anywhere, but the pod matches its own {} term: first pod of a collection
     {"n1": None, "n2": None, "n3": F(UNRES, AFF)}),
    ("missing label selector matches nothing, not even the pod itself",
     pod(labels={"app": "x"}, affinity=[term("zone", NIL)]), [pod(labels={"app": "x"}, node="n1")],
     {"n1": F(UNRES, AFF), "n2": F(UNRES, AFF), "n3": F(UNRES, AFF)}),
    ("missing label selector in anti-affinity matches nothing",
     pod(anti=[term("zone", NIL)]), [pod(labels={"app": "x"}, node="n1")], {"n1": None, "n2": None, "n3": None}),
    ("namespaceSelector {} on affinity reaches every namespace",
     pod(affinity=[term("zone", In("app", "x"), ns_selector=sel())]), [pod(ns="far", labels={"app": "x"}, node="n1")],
     {"n1": None, "n2": F(UNRES, AFF), "n3": F(UNRES, AFF)}),
    ("namespaces and namespaceSelector are ORed",
     pod(affinity=[term("zone", In("app", "x"), namespaces=["subteam1.team2"], ns_selector=TEAM1)]),
     [pod(ns="subteam1.team2", labels={"app": "x"}, node="n1"), pod(ns="subteam2.team1", labels={"app": "x"}, node="n2")],
     {"n1": None, "n2": None, "n3": F(UNRES, AFF)}),
    ("namespaceSelector on the metadata.name label of an unlisted namespace",
     pod(anti=[term("zone", In("app", "x"), ns_selector=sel(**{"kubernetes.io/metadata.name": "unlisted"}))]),
     [pod(ns="unlisted", labels={"app": "x"}, node="n1"), pod(ns="listed", labels={"app": "x"}, node="n2")],
     {"n1": F(UNSCHED, ANTI), "n2": None, "n3": None}),
    ("namespaceSelector with DoesNotExist: namespaces without the label",
     pod(anti=[term("zone", In("app", "x"), ns_selector=sel(expr("team", "DoesNotExist")))]),
     [pod(ns="subteam1.team1", labels={"app": "x"}, node="n1"), pod(ns="plain", labels={"app": "x"}, node="n2")],
     {"n1": None, "n2": F(UNSCHED, ANTI), "n3": None}),
    ("existing anti-affinity with namespaceSelector uses the incoming pod's namespace labels",
     pod(ns="subteam1.team1", labels={"app": "x"}),
     [pod(ns="elsewhere", node="n1", anti=[term("zone", In("app", "x"), ns_selector=TEAM1)]),
      pod(ns="elsewhere", node="n2", anti=[term("zone", In("app", "x"), ns_selector=sel(team="team2"))])],
     {"n1": F(UNSCHED, EXIST), "n2": None, "n3": None}),
    ("existing anti-affinity with a missing topology label on the incoming node",
     pod(labels={"app": "x"}), [pod(node="n3", anti=[term("zone", In("app", "x"))])], SKIP),
    ("affinity failure comes before anti-affinity failure",
     pod(labels={"app": "y"}, affinity=[term("zone", In("app", "x"))], anti=[term("zone", In("app", "x"))]),
     [pod(labels={"app": "x"}, node="n1")], {"n1": F(UNSCHED, ANTI), "n2": F(UNRES, AFF), "n3": F(UNRES, AFF)}),
    ("anti-affinity failure comes before existing anti-affinity failure",
     pod(labels={"app": "y"}, anti=[term("zone", In("app", "x"))]),
     [pod(labels={"app": "x"}, node="n1", anti=[term("zone", In("app", "y"))]),
      pod(labels={"app": "z"}, node="n2", anti=[term("zone", In("app", "y"))])],
     {"n1": F(UNSCHED, ANTI), "n2": F(UNSCHED, EXIST), "n3": None}),
    ("self anti-affinity on hostname spreads one pod per node",
     pod(labels={"app": "web"}, anti=[term("kubernetes.io/hostname", In("app", "web"))]),
     [pod(labels={"app": "web"}, node="h1")],
     None),  # nodes given in the test
]


@pytest.mark.parametrize("incoming,pods,want", [c[1:] for c in FILTER_EDGES], ids=[c[0] for c in FILTER_EDGES])
def test_filter_edge_cases(incoming, pods, want):
    nodes = EDGE_NODES
    if want is None:
        nodes = [node(h, **{"kubernetes.io/hostname": h}) for h in ("h1", "h2")]
        want = {"h1": F(UNSCHED, ANTI), "h2": None}
    assert run_filter(incoming, cluster(nodes, pods, NAMESPACES + [namespace("listed", team="x")])) == want


# ---- kube TestPreFilterStateAddRemovePod / TestGetTPMapMatchingIncomingAffinityAntiAffinity ----

R1Z11, R1Z12, R2Z21 = {"region": "r1", "zone": "z11"}, {"region": "r1", "zone": "z12"}, {"region": "r2", "zone": "z21"}
ABC_NODES = [node("nodeA", **R1Z11), node("nodeB", **R1Z12), node("nodeC", **R2Z21)]
ANTI_FOO_BAR = [term("region", In("foo", "bar"))]
COMPLEX = [term("region", In("foo", "bar", "buzz")), term("zone", NotIn("service", "bar", "security", "test"))]

ADD_REMOVE = [
    ("anti-affinity counts after adding and removing a pod",
     pod(name="pending", labels={"foo": "bar"}, anti=ANTI_FOO_BAR),
     [pod(name="p1", labels={"foo": "bar"}, node="nodeA"), pod(name="p2", node="nodeC", anti=ANTI_FOO_BAR)],
     pod(name="added", labels={"foo": "bar"}, node="nodeB", anti=ANTI_FOO_BAR),
     {("region", "r1"): 2}, {}),
    ("complex anti-affinity counts after adding and removing a pod",
     pod(name="pending", labels={"foo": "bar"}, anti=COMPLEX),
     [pod(name="p1", labels={"foo": "bar"}, node="nodeA"), pod(name="p2", node="nodeC", anti=ANTI_FOO_BAR)],
     pod(name="added", labels={"foo": "bar"}, node="nodeA", anti=COMPLEX),
     {("region", "r1"): 2, ("zone", "z11"): 2, ("zone", "z21"): 1}, {}),
    ("affinity counts after adding and removing a pod",
     pod(name="pending", labels={"foo": "bar"}, affinity=COMPLEX),
     [pod(name="p1", labels={"foo": "bar"}, node="nodeA"),
      pod(name="p2", node="nodeC", anti=ANTI_FOO_BAR, affinity=COMPLEX)],
     pod(name="added", labels={"foo": "bar"}, node="nodeA", anti=COMPLEX),
     {}, {("region", "r1"): 2, ("zone", "z11"): 2}),
]


def _state(pl, incoming, snapshot):
    state = CycleState()
    _, st = pl.pre_filter(state, incoming, snapshot)
    assert st is None
    return state, state.read(PRE_FILTER_STATE_KEY)


def _counts(s):
    return (s.existing_anti_affinity.as_dict(), s.affinity.as_dict(), s.anti_affinity.as_dict())


@pytest.mark.parametrize("pending,existing,added,want_anti,want_aff", [c[1:] for c in ADD_REMOVE],
                         ids=[c[0] for c in ADD_REMOVE])
def test_pre_filter_state_add_remove_pod(pending, existing, added, want_anti, want_aff):
    pl = InterPodAffinity()
    incoming = the_pod(pending)
    _, all_state = _state(pl, incoming, cluster(ABC_NODES, existing + [added]))
    snap = cluster(ABC_NODES, existing)
    state, s = _state(pl, incoming, snap)
    original = _counts(s.clone())
    added_pod = the_pod(added)
    ni = snap.get(added_pod.node_name)
    assert pl.add_pod(state, incoming, PodInfo(added_pod), ni) is None
    assert s.anti_affinity.as_dict() == want_anti
    assert s.affinity.as_dict() == want_aff
    assert _counts(s) == _counts(all_state)
    assert pl.remove_pod(state, incoming, PodInfo(added_pod), ni) is None
    assert _counts(s) == original


def test_pre_filter_state_clone_is_deep():
    pl = InterPodAffinity()
    snap = cluster(ABC_NODES, [pod(labels={"foo": "bar"}, node="nodeA")])
    state, s = _state(pl, the_pod(pod(anti=ANTI_FOO_BAR)), snap)
    c = state.clone().read(PRE_FILTER_STATE_KEY)
    assert c is not s and _counts(c) == _counts(s)
    c.update_with_pod(PodInfo(the_pod(pod(labels={"foo": "bar"}, node="nodeC"))), snap.get("nodeC").node.labels, 1)
    assert _counts(c) != _counts(s)


def _normal(*keys):
    return pod(name="normal", labels={k: "" for k in keys}, node="nodeA")


INCOMING_COUNTS = [
    ("nil test", [], pod(), {}, {}),
    ("incoming pod without affinity is a no-op", [_normal("aaa")], pod(), {}, {}),
    ("no pod has a label that violates the incoming terms", [_normal("bbb")],
     pod(affinity=[term("hostname", Exists("aaa"))], anti=[term("hostname", Exists("aaa"))]), {}, {}),
    ("existing pod matches affinity and anti-affinity, single term", [_normal("aaa")],
     pod(affinity=[term("hostname", Exists("aaa"))], anti=[term("hostname", Exists("aaa"))]),
     {("hostname", "nodeA"): 1}, {("hostname", "nodeA"): 1}),
    ("existing pod matches affinity and anti-affinity, multiple terms", [_normal("aaa", "bbb")],
     pod(affinity=[term("hostname", Exists("aaa")), term("hostname", Exists("bbb"))],
         anti=[term("hostname", Exists("aaa"))]),
     {("hostname", "nodeA"): 2}, {("hostname", "nodeA"): 1}),
    ("existing pod matches anti-affinity but not all affinity terms", [_normal("aaa")],
     pod(affinity=[term("hostname", Exists("aaa")), term("hostname", Exists("bbb"))],
         anti=[term("hostname", Exists("aaa")), term("hostname", Exists("bbb"))]),
     {}, {("hostname", "nodeA"): 1}),
    ("anti-affinity partially violated, case 1", [_normal("aaa", "bbb")],
     pod(affinity=[term("hostname", Exists("aaa")), term("hostname", Exists("ccc"))],
         anti=[term("hostname", Exists("aaa")), term("hostname", Exists("ccc"))]),
     {}, {("hostname", "nodeA"): 1}),
    ("anti-affinity partially violated, case 2", [_normal("bbb")],
     pod(affinity=[term("hostname", Exists("aaa")), term("hostname", Exists("bbb"))],
         anti=[term("hostname", Exists("aaa")), term("hostname", Exists("bbb"))]),
     {}, {("hostname", "nodeA"): 1}),
]


@pytest.mark.parametrize("existing,incoming,want_aff,want_anti", [c[1:] for c in INCOMING_COUNTS],
                         ids=[c[0] for c in INCOMING_COUNTS])
def test_incoming_affinity_anti_affinity_counts(existing, incoming, want_aff, want_anti):
    snap = cluster([node("nodeA", hostname="nodeA")], existing)
    state = CycleState()
    _, st = InterPodAffinity().pre_filter(state, the_pod(incoming), snap)
    if st is not None:
        assert st.code == Code.SKIP and want_aff == {} and want_anti == {}
        return
    s = state.read(PRE_FILTER_STATE_KEY)
    assert s.affinity.as_dict() == want_aff
    assert s.anti_affinity.as_dict() == want_anti


def test_filter_without_pre_filter_state_is_an_error():
    pl = InterPodAffinity()
    snap = cluster([node("n1")])
    st = pl.filter(CycleState(), the_pod(pod()), snap.get("n1"))
    assert st.code == Code.ERROR
    assert st.message() == 'error reading "PreFilterInterPodAffinity" from cycleState: not found'
    v = pl.filter_nodes(CycleState(), the_pod(pod()), snap, snap.all_indices())
    assert list(v.failed) == [0] and v.statuses[0].code == Code.ERROR
    assert pl.add_pod(CycleState(), the_pod(pod()), PodInfo(the_pod(pod())), snap.get("n1")).code == Code.ERROR


def test_nominated_pod_added_through_extension_blocks_node():
    """AddPod makes a nominated pod count, as RunFilterPluginsWithNominatedPods uses it."""
    pl = InterPodAffinity()
    snap = cluster([node("n1", zone="z1"), node("n2", zone="z2")])
    incoming = the_pod(pod(labels={"app": "web"}, anti=[term("zone", In("app", "web"))]))
    state, _ = _state(pl, incoming, snap)
    assert pl.filter(state, incoming, snap.get("n1")) is None
    nominated = PodInfo(the_pod(pod(labels={"app": "web"}, node="n1")))
    with_nominated, info = state.clone(), snap.get("n1").clone()
    info.add_pod_info(nominated)
    pl.add_pod(with_nominated, incoming, nominated, info)
    assert _as_tuple(pl.filter(with_nominated, incoming, info)) == F(UNSCHED, ANTI)
    assert pl.filter(state, incoming, snap.get("n1")) is None  # the original state is untouched


# ---- kube TestPreferredAffinity -----------------------------------------------------------------

S1, S2 = {"security": "S1"}, {"security": "S2"}
AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}
STAY_S1_REGION = dict(pref_affinity=[weighted(5, term("region", In("security", "S1")))])
STAY_S2_REGION = dict(pref_affinity=[weighted(6, term("region", In("security", "S2")))])
AFFINITY3 = dict(pref_affinity=[
    weighted(8, term("region", sel(expr("security", "NotIn", "S1"), expr("security", "In", "S2")))),
    weighted(2, term("region", sel(expr("security", "Exists"), expr("wrongkey", "DoesNotExist"))))])
HARD_AFFINITY = dict(affinity=[term("region", In("security", "S1", "value2")),
                               term("region", sel(expr("security", "Exists"), expr("wrongkey", "DoesNotExist")))])
AWAY_S1_AZ = dict(pref_anti=[weighted(5, term("az", In("security", "S1")))])
AWAY_S2_AZ = dict(pref_anti=[weighted(5, term("az", In("security", "S2")))])
STAY_S1_AWAY_S2 = dict(pref_affinity=[weighted(8, term("region", In("security", "S1")))],
                       pref_anti=[weighted(5, term("az", In("security", "S2")))])
NS_SEL_TERM = term("region", In("security", "S1"), namespaces=["subteam2.team2"], ns_selector=TEAM1)
AFFINITY_NS_SELECTOR = dict(pref_affinity=[weighted(5, NS_SEL_TERM)])
ANTI_NS_SELECTOR = dict(pref_anti=[weighted(5, NS_SEL_TERM)])


def nodes_of(*labels):
    return [node(f"node{i + 1}", **lb) for i, lb in enumerate(labels)]


def P(node_name, labels=None, ns="default", **aff):
    return pod(labels=labels, node=node_name, ns=ns, **aff)


PREFERRED = [
    ("no affinity anywhere: skip", pod(labels=S1), [], nodes_of(CHINA, INDIA, AZ1), {}, SKIP),
    ("affinity: matching pod and topology key score high",
     pod(labels=S1, **STAY_S1_REGION), [P("node1", S1), P("node2", S2), P("node3", S1)],
     nodes_of(CHINA, INDIA, AZ1), {}, [100, 0, 0]),
    ("nodes sharing the topology value score the same",
     pod(**STAY_S1_REGION), [P("node1", S1)], nodes_of(CHINA, CHINA_AZ1, INDIA), {}, [100, 100, 0]),
    ("the region with more matching pods scores higher",
     pod(labels=S1, **STAY_S2_REGION),
     [P("node1", S2), P("node1", S2), P("node2", S2), P("node3", S2), P("node4", S2), P("node5", S2)],
     nodes_of(CHINA, INDIA, CHINA, CHINA, INDIA), {}, [100, 0, 100, 100, 0]),
    ("different operators, some failing", pod(labels=S1, **AFFINITY3),
     [P("node1", S1), P("node2", S2), P("node3", S1)], nodes_of(CHINA, INDIA, AZ1), {}, [20, 100, 0]),
    ("symmetry: existing pods' preferred affinity", pod(labels=S2),
     [P("node1", S1, **STAY_S1_REGION), P("node2", S2, **STAY_S2_REGION)], nodes_of(CHINA, INDIA, AZ1), {},
     [0, 100, 0]),
    ("symmetry with namespaceSelector", pod(ns="subteam1.team1", labels=S1),
     [P("node1", S1, **AFFINITY_NS_SELECTOR), P("node2", S2, **STAY_S2_REGION)], nodes_of(CHINA, INDIA, AZ1), {},
     [100, 0, 0]),
    ("anti-affinity symmetry with namespaceSelector", pod(ns="subteam1.team1", labels=S1),
     [P("node1", S1, **ANTI_NS_SELECTOR), P("node2", S2, **STAY_S2_REGION)], nodes_of(CHINA, INDIA, AZ1), {},
     [0, 100, 100]),
    ("symmetry: existing pods' required affinity", pod(labels=S1),
     [P("node1", S1, **HARD_AFFINITY), P("node2", S2, **HARD_AFFINITY)], nodes_of(CHINA, INDIA, AZ1), {},
     [100, 100, 0]),
    ("anti-affinity: node without matching pods scores high", pod(labels=S1, **AWAY_S1_AZ),
     [P("node1", S1), P("node2", S2)], nodes_of(AZ1, CHINA), {}, [0, 100]),
    ("anti-affinity: node without the topology key scores high", pod(labels=S1, **AWAY_S1_AZ),
     [P("node1", S1), P("node2", S1)], nodes_of(AZ1, CHINA), {}, [0, 100]),
    ("anti-affinity: more matching pods score lower", pod(labels=S1, **AWAY_S1_AZ),
     [P("node1", S1), P("node1", S1), P("node2", S2)], nodes_of(AZ1, INDIA), {}, [0, 100]),
    ("anti-affinity symmetry", pod(labels=S2),
     [P("node1", S1, **AWAY_S2_AZ), P("node2", S2, **AWAY_S1_AZ)], nodes_of(AZ1, AZ2), {}, [0, 100]),
    ("affinity and anti-affinity", pod(labels=S1, **STAY_S1_AWAY_S2),
     [P("node1", S1), P("node2", S1)], nodes_of(CHINA, AZ1), {}, [100, 0]),
    ("affinity and anti-affinity, same labels as existing pods", pod(labels=S1, **STAY_S1_AWAY_S2),
     [P("node1", S1), P("node1", S1), P("node2", S1), P("node3", S1), P("node3", S1), P("node4", S1), P("node5", S1)],
     nodes_of(CHINA_AZ1, INDIA, CHINA, CHINA, INDIA), {}, [100, 0, 100, 100, 0]),
    ("affinity, anti-affinity and symmetry together", pod(labels=S1, **STAY_S1_AWAY_S2),
     [P("node1", S1), P("node2", S2), P("node3", None, **STAY_S1_AWAY_S2), P("node4", None, **AWAY_S1_AZ)],
     nodes_of(CHINA, AZ1, INDIA, AZ2), {}, [100, 0, 100, 0]),
    ("partial nodes of a topology have pods with affinity", pod(labels=S1),
     [P("node1", S1), P("node2", None, **STAY_S1_AWAY_S2)], nodes_of(CHINA, CHINA), {}, [0, 0]),
    ("affinity with pods matching namespaceSelector", pod(ns="subteam1.team1", labels=S1, **AFFINITY_NS_SELECTOR),
     [P("node1", S1, "subteam1.team1"), P("node1", S1, "subteam1.team1"), P("node1", S1, "subteam1.team2"),
      P("node2", S1, "subteam2.team1")], nodes_of(CHINA, INDIA), {}, [100, 0]),
    ("affinity with pods matching namespaceSelector and namespaces",
     pod(ns="subteam1.team1", labels=S1, **AFFINITY_NS_SELECTOR),
     [P("node1", S1, "subteam1.team1"), P("node1", S1, "subteam1.team1"), P("node1", S1, "subteam2.team2"),
      P("node2", S1, "subteam2.team1")], nodes_of(CHINA, INDIA), {}, [100, 0]),
    ("anti-affinity with pods matching namespaceSelector", pod(ns="subteam1.team1", labels=S1, **ANTI_NS_SELECTOR),
     [P("node1", S1, "subteam1.team1"), P("node1", S1, "subteam1.team1"), P("node1", S1, "subteam1.team2"),
      P("node2", S1, "subteam2.team1")], nodes_of(CHINA, INDIA), {}, [0, 100]),
    ("anti-affinity with pods matching namespaceSelector and namespaces",
     pod(ns="subteam1.team1", labels=S1, **ANTI_NS_SELECTOR),
     [P("node1", S1, "subteam1.team1"), P("node1", S1, "subteam1.team1"), P("node1", S1, "subteam2.team2"),
      P("node2", S1, "subteam2.team1")], nodes_of(CHINA, INDIA), {}, [0, 100]),
    ("ignore preferred terms of existing pods: skip", pod(labels=S2),
     [P("node1", S1, **STAY_S1_AWAY_S2), P("node2", S2, **STAY_S2_REGION)], nodes_of(CHINA, INDIA),
     {"ignorePreferredTermsOfExistingPods": True}, SKIP),
    ("do not ignore preferred terms of existing pods", pod(labels=S2),
     [P("node1", S1, **STAY_S1_AWAY_S2), P("node2", S2, **STAY_S2_REGION)], nodes_of(CHINA, INDIA),
     {"ignorePreferredTermsOfExistingPods": False}, [0, 100]),
    ("no nodes to score", pod(labels=S2), [], [], {}, SKIP),
    # Beyond kube's table:
    ("ignore preferred terms of existing pods still counts them when the pod has its own",
     pod(labels=S2, pref_affinity=[weighted(1, term("region", In("security", "none")))]),
     [P("node1", S1, **STAY_S1_AWAY_S2), P("node2", S2, **STAY_S2_REGION)], nodes_of(CHINA, INDIA),
     {"ignorePreferredTermsOfExistingPods": True}, [0, 100]),
    ("contributions summing to zero still run the plugin (all zero, no skip)",
     pod(labels=S1, pref_affinity=[weighted(5, term("az", In("security", "S1")))],
         pref_anti=[weighted(5, term("az", In("security", "S1")))]),
     [P("node1", S1)], nodes_of(AZ1, AZ2), {}, [0, 0]),
    ("matching pod only on a node without the topology key: skip",
     pod(labels=S1, **STAY_S1_REGION), [P("node1", S1)], nodes_of(AZ1, CHINA), {}, SKIP),
    ("negative raw scores normalise from the minimum",
     pod(labels=S1, pref_anti=[weighted(5, term("az", In("security", "S1"))), weighted(3, term("region", Exists("security")))]),
     [P("node1", S1), P("node2", S2), P("node2", S2), P("node3", S1)],
     nodes_of({"az": "az1", "region": "r1"}, {"az": "az2", "region": "r2"}, {"region": "r1"}, {}), {},
     # raw: node1 -5-3*2=-11, node2 -3*2=-6, node3 -6, node4 0 -> (x+11)/11*100
     [0, 45, 45, 100]),
    ("empty label selector in a preferred term matches every pod of the namespace",
     pod(labels=S1, pref_affinity=[weighted(7, term("region", sel()))]),
     [P("node1", S2), P("node2", S2, "other")], nodes_of(CHINA, INDIA), {}, [100, 0]),
    ("missing label selector in a preferred term matches nothing: skip",
     pod(labels=S1, pref_affinity=[weighted(7, term("region", NIL))]), [P("node1", S1)], nodes_of(CHINA, INDIA), {},
     SKIP),
]


@pytest.mark.parametrize("incoming,pods,nodes,args,want", [c[1:] for c in PREFERRED], ids=[c[0] for c in PREFERRED])
def test_preferred_affinity(incoming, pods, nodes, args, want):
    got = run_score(incoming, cluster(nodes, pods, NAMESPACES), dict(args, hardPodAffinityWeight=1))
    if want == SKIP:
        assert got == SKIP
    else:
        assert got == {f"node{i + 1}": w for i, w in enumerate(want)}


HARD_POD_AFFINITY = dict(affinity=[term("region", In("service", "S1"), namespaces=["default", "subteam2.team2"],
                                        ns_selector=TEAM1)])
HARD_WEIGHT = [
    ("with default weight", "default", None, [100, 100, 0]),
    ("with zero weight", "default", 0, SKIP),
    ("with no matching namespace", "subteam1.team2", None, SKIP),
    ("with matching namespaceSelector", "subteam1.team1", None, [100, 100, 0]),
    ("with matching namespaces", "subteam2.team2", None, [100, 100, 0]),
]


@pytest.mark.parametrize("ns,weight,want", [c[1:] for c in HARD_WEIGHT], ids=[c[0] for c in HARD_WEIGHT])
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(ns, weight, want):
    snap = cluster(nodes_of(CHINA, INDIA, AZ1), [P("node1", **HARD_POD_AFFINITY), P("node2", **HARD_POD_AFFINITY)],
                   NAMESPACES)
    args = {} if weight is None else {"hardPodAffinityWeight": weight}
    got = run_score(pod(ns=ns, labels={"service": "S1"}), snap, args)
    assert got == (SKIP if want == SKIP else {f"node{i + 1}": w for i, w in enumerate(want)})


def test_hard_pod_affinity_weight_scales_raw_scores():
    snap = cluster(nodes_of(CHINA, INDIA), [P("node1", **HARD_POD_AFFINITY), P("node2", S1, **STAY_S1_REGION)],
                   NAMESPACES)
    p = the_pod(pod(labels={"service": "S1", "security": "S1"}))
    for weight, want in ((1, [1, 5]), (7, [7, 5]), (100, [100, 5])):
        pl = InterPodAffinity({"hardPodAffinityWeight": weight})
        state = CycleState()
        assert pl.pre_score(state, p, snap, snap.all_indices()) is None
        assert list(pl.score_nodes(state, p, snap, snap.all_indices())) == want


@pytest.mark.parametrize("scores,want", [
    ([], []),
    ([0, 0, 0], [0, 0, 0]),
    ([7, 7], [0, 0]),
    ([-5, -5], [0, 0]),
    ([0, 1, 2], [0, 50, 100]),
    ([1, 2, 3], [0, 50, 100]),
    ([0, 1, 3], [0, 33, 100]),
    ([-11, -6, 0], [0, 45, 100]),
    ([0, 2, 3], [0, 66, 100]),
    ([0, 29, 100], [0, 28, 100]),  # 100 * (29/100) is 28.999999999999996 in float64
    ([10, 15, 40], [0, 16, 100]),
], ids=lambda v: str(v))
def test_normalize(scores, want):
    arr = np.array(scores, np.int64)
    normalize(arr)
    assert list(arr) == want


def test_score_without_pre_score_state_is_an_error():
    pl = InterPodAffinity()
    snap = cluster([node("n1")])
    s, st = pl.score(CycleState(), the_pod(pod()), snap.get("n1"))
    assert st.code == Code.ERROR
    assert st.message() == 'failed to read "PreScoreInterPodAffinity" from cycleState: not found'
    with pytest.raises(PluginError):
        pl.score_nodes(CycleState(), the_pod(pod()), snap, snap.all_indices())
    assert pl.normalize_score(CycleState(), the_pod(pod()), np.zeros(1, np.int64)).code == Code.ERROR


# ---- args -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,want", [
    (None, InterPodAffinityArgs(1, False)),
    ({}, InterPodAffinityArgs(1, False)),
    ({"hardPodAffinityWeight": None}, InterPodAffinityArgs(1, False)),
    ({"hardPodAffinityWeight": 0}, InterPodAffinityArgs(0, False)),
    ({"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": True}, InterPodAffinityArgs(100, True)),
    ({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "InterPodAffinityArgs", "hardPodAffinityWeight": 5},
     InterPodAffinityArgs(5, False)),
], ids=["none", "empty", "null weight", "zero", "max and ignore", "with type meta"])
def test_args(args, want):
    assert InterPodAffinity(args).config == want


@pytest.mark.parametrize("args,message", [
    ({"hardPodAffinityWeight": -1}, "hardPodAffinityWeight: Invalid value: -1: not in valid range [0, 100]"),
    ({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"),
    ({"hardPodAffinityWeight": "1"}, "hardPodAffinityWeight: Invalid value: '1': must be an integer"),
    ({"hardPodAffinityWeight": True}, "hardPodAffinityWeight: Invalid value: True: must be an integer"),
    ({"ignorePreferredTermsOfExistingPods": "yes"},
     "ignorePreferredTermsOfExistingPods: Invalid value: 'yes': must be a boolean"),
    ({"hardPodAffinityWeigth": 1}, 'strict decoding error: unknown field "hardPodAffinityWeigth"'),
], ids=["negative", "above 100", "string", "bool", "ignore not bool", "unknown field"])
def test_invalid_args(args, message):
    with pytest.raises(ValueError) as e:
        InterPodAffinity(args)
    assert str(e.value) == message


# ---- kube plugin_test.go: queueing hints ------------------------------------------------------------

Q, QS = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
AFF_SVC = dict(affinity=[term("region", In("service", "securityscan", "value2"))])
ANTI_SVC = dict(anti=[term("region", In("service", "securityscan", "value2"))])
AFF_AB = dict(affinity=[term("hostname", Exists("aaa")), term("hostname", Exists("bbb"))])

POD_HINTS = [
    ("add a pod which matches the pod affinity", pod(**AFF_SVC), None, pod(node="n", labels={"service": "securityscan"}), Q),
    ("add an unscheduled pod", pod(**AFF_SVC), None, pod(labels={"service": "securityscan"}), QS),
    ("add a pod which doesn't match the pod affinity", pod(**AFF_SVC), None, pod(node="n", labels={"aaa": "a"}), QS),
    ("update a pod from non-match to match", pod(**AFF_SVC), pod(node="n", labels={"aaa": "a"}),
     pod(node="n", labels={"service": "securityscan"}), Q),
    ("updated pod matches before and after", pod(**AFF_SVC), pod(node="n", labels={"service": "value2"}),
     pod(node="n", labels={"service": "securityscan"}), QS),
    ("update an unscheduled pod", pod(**AFF_SVC), pod(labels={"aaa": "a"}), pod(labels={"service": "securityscan"}), QS),
    ("update a pod from match to non-match", pod(**AFF_SVC), pod(node="n", labels={"service": "securityscan"}),
     pod(node="n", labels={"aaa": "a"}), QS),
    ("match to non-match, multiple terms", pod(**AFF_AB), pod(node="n", labels={"aaa": "a"}),
     pod(node="n", labels={"service": "securityscan"}), QS),
    ("non-match to match, multiple terms", pod(**AFF_AB), pod(node="n", labels={"aaa": "a"}),
     pod(node="n", labels={"aaa": "", "bbb": ""}), Q),
    # kube master queues here; v1.35.4 (vendored) skips any unscheduled pod first.
    ("updated pod is the target pod (unscheduled): v1.35 skips", pod(labels={"foo": "baz"}), pod(labels={"foo": "bar"}),
     pod(labels={"foo": "baz"}), QS),
    ("label change stops matching anti-affinity", pod(**ANTI_SVC), pod(node="n", labels={"service": "securityscan"}),
     pod(node="n", labels={"service": "aaaa"}), Q),
    ("label change starts matching anti-affinity", pod(**ANTI_SVC), pod(node="n", labels={"service": "bbb"}),
     pod(node="n", labels={"service": "securityscan"}), QS),
    ("delete a pod which doesn't match anti-affinity", pod(**ANTI_SVC), pod(node="n", labels={"aaa": "a"}), None, QS),
    ("delete a pod which matches anti-affinity", pod(**ANTI_SVC), pod(node="n", labels={"service": "securityscan"}),
     None, Q),
    # kube master also queues when the deleted pod's own anti-affinity matched; v1.35.4 does not.
    ("delete a pod whose anti-affinity matches the pending pod: v1.35 skips", pod(labels={"service": "securityscan"}),
     pod(node="n", **ANTI_SVC), None, QS),
    ("delete a pod with anti-affinity that doesn't match", pod(labels={"service": "foo"}), pod(node="n", **ANTI_SVC),
     None, QS),
    ("delete a pod matching neither way", pod(labels={"service": "foo"}, **ANTI_SVC),
     pod(node="n", labels={"service": "foo"}, **ANTI_SVC), None, QS),
    ("anti-affinity with namespaceSelector {} sees every namespace",
     pod(anti=[term("region", In("service", "x"), ns_selector=sel())]),
     pod(ns="other", node="n", labels={"service": "x"}), None, Q),
    ("namespaceSelector with requirements sees no namespace labels in the hint",
     pod(anti=[term("region", In("service", "x"), ns_selector=TEAM1)]),
     pod(ns="subteam1.team1", node="n", labels={"service": "x"}), None, QS),
]


@pytest.mark.parametrize("target,old,new,want", [c[1:] for c in POD_HINTS], ids=[c[0] for c in POD_HINTS])
def test_is_schedulable_after_pod_change(target, old, new, want):
    conv = lambda d: None if d is None else the_pod(d)  # noqa: E731
    assert is_schedulable_after_pod_change(conv(target), conv(old), conv(new)) == want


AFF_ZONE = dict(affinity=[term("zone", In("service", "securityscan", "value2"))])
AFF_REGION = dict(affinity=[term("region", In("service", "securityscan", "value2"))])
ANTI_ZONE = dict(anti=[term("zone", sel(another="label"))])

NODE_HINTS = [
    ("add a node with the affinity topology key", AFF_ZONE, None, node("a", zone="zone1"), Q),
    ("add a node without the affinity topology key", AFF_REGION, None, node("a", zone="zone1"), QS),
    ("update a label that is not the topology key", AFF_ZONE, node("a", aaa="a"), node("a", aaa="b"), QS),
    ("update an unrelated label", AFF_ZONE, node("a", zone="zone1"), node("a", zone="zone1", unrelated="x"), QS),
    ("affinity topology value changes", AFF_ZONE, node("a", zone="zone1"), node("a", zone="zone2"), Q),
    ("node gains the affinity topology key", AFF_ZONE, node("a", aaa="a"), node("a", zone="zone1"), Q),
    ("add a node with the anti-affinity topology key", ANTI_ZONE, None, node("a", zone="zone1"), Q),
    ("add a node without the anti-affinity topology key", ANTI_ZONE, None, node("a"), Q),
    ("unrelated label change, anti-affinity", ANTI_ZONE, node("a", zone="zone1"),
     node("a", zone="zone1", unrelated="x"), QS),
    ("anti-affinity topology value changes", ANTI_ZONE, node("a", zone="zone1"), node("a", zone="zone2"), Q),
    ("node gains the anti-affinity topology key", ANTI_ZONE, node("a", aaa="a"), node("a", zone="zone1"), QS),
    ("node loses the anti-affinity topology key", ANTI_ZONE, node("a", zone="zone1"), node("a", aaa="a"), Q),
    ("pod without affinity", {}, None, node("a", zone="zone1"), QS),
]


@pytest.mark.parametrize("aff,old,new,want", [c[1:] for c in NODE_HINTS], ids=[c[0] for c in NODE_HINTS])
def test_is_schedulable_after_node_change(aff, old, new, want):
    target = the_pod(pod(**aff))
    assert is_schedulable_after_node_change(target, None if old is None else the_node(old), the_node(new)) == want


def test_events_to_register():
    ev = InterPodAffinity().events_to_register()
    assert [(e.event.resource, e.event.action) for e in ev] == [
        (EventResource.POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE),
        (EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)]
    assert ev[0].hint is is_schedulable_after_pod_change and ev[1].hint is is_schedulable_after_node_change


# ---- randomized comparison with a direct port of kube's loops ----------------------------------------

class KubeReference:
    """kube's PreFilter/Filter/PreScore/Score/NormalizeScore written as kube writes them: loops over
    every pod, the incoming pod's namespaceSelectors merged into namespace names of the known
    namespaces (mergeAffinityTermNamespacesIfNotEmpty), maps keyed by (key, value)."""

    def __init__(self, snapshot: Snapshot, hard_weight: int = 1, ignore_preferred: bool = False) -> None:
        self.snap, self.hard, self.ignore = snapshot, hard_weight, ignore_preferred
        namespaces = set(snapshot.namespace_labels) | {pi.pod.meta.namespace for pi in snapshot.pods()}
        self.ns_labels = {ns: snapshot.namespace_labels_of(ns) for ns in namespaces}

    def merged(self, t):
        from schedmesh.cache.node_info import AffinityTerm
        if t.namespace_selector is not None and t.namespace_selector.is_empty():
            return t  # Everything stays
        names = set(t.namespaces)
        if t.namespace_selector is not None:
            names |= {ns for ns, lb in self.ns_labels.items() if t.namespace_selector.matches(lb)}
        return AffinityTerm(frozenset(names), t.selector, t.topology_key, None)

    @staticmethod
    def all_match(terms, p):
        return bool(terms) and all(t.matches(p, {}) for t in terms)

    def pre_filter(self, p):
        pi = PodInfo(p)
        aff = [self.merged(t) for t in pi.required_affinity_terms]
        anti = [self.merged(t) for t in pi.required_anti_affinity_terms]
        nsl = self.snap.namespace_labels_of(p.meta.namespace)
        existing, affc, antic = {}, {}, {}

        def bump(m, labels, key):
            if key in labels:
                m[(key, labels[key])] = m.get((key, labels[key]), 0) + 1

        for ni in self.snap.node_info_list:
            labels = ni.node.meta.labels
            for e in ni.pods_with_required_anti_affinity:
                for t in e.required_anti_affinity_terms:
                    if t.matches(p, nsl):
                        bump(existing, labels, t.topology_key)
            for e in ni.pods:
                if self.all_match(aff, e.pod):
                    for t in aff:
                        bump(affc, labels, t.topology_key)
                for t in anti:
                    if t.matches(e.pod, {}):
                        bump(antic, labels, t.topology_key)
        if not existing and not aff and not anti:
            return None
        return dict(aff=aff, anti=anti, existing=existing, affc=affc, antic=antic, own=self.all_match(aff, p))

    @staticmethod
    def filter(s, labels):
        exist = True
        for t in s["aff"]:
            if t.topology_key not in labels:
                return F(UNRES, AFF)
            if s["affc"].get((t.topology_key, labels[t.topology_key]), 0) <= 0:
                exist = False
        if not exist and not (not s["affc"] and s["own"]):
            return F(UNRES, AFF)
        for t in s["anti"]:
            if t.topology_key in labels and s["antic"].get((t.topology_key, labels[t.topology_key]), 0) > 0:
                return F(UNSCHED, ANTI)
        for k, v in labels.items():
            if s["existing"].get((k, v), 0) > 0:
                return F(UNSCHED, EXIST)
        return None

    def scores(self, p, rows):
        a = p.affinity
        has = a is not None and ((a.pod_affinity is not None and a.pod_affinity.preferred)
                                 or (a.pod_anti_affinity is not None and a.pod_anti_affinity.preferred))
        if self.ignore and not has:
            return SKIP
        pi = PodInfo(p)
        pref = [(self.merged(w.term), w.weight) for w in pi.preferred_affinity_terms]
        pref_anti = [(self.merged(w.term), -w.weight) for w in pi.preferred_anti_affinity_terms]
        nsl = self.snap.namespace_labels_of(p.meta.namespace)
        topo: dict[str, dict[str, int]] = {}

        def process(t, w, other, labels_for_match, node_labels):
            if t.matches(other, labels_for_match) and t.topology_key in node_labels:
                d = topo.setdefault(t.topology_key, {})
                v = node_labels[t.topology_key]
                d[v] = d.get(v, 0) + w

        for ni in self.snap.node_info_list:
            node_labels = ni.node.meta.labels
            for e in (ni.pods if has else ni.pods_with_affinity):
                if not node_labels:
                    continue
                for t, w in pref + pref_anti:
                    process(t, w, e.pod, {}, node_labels)
                if self.hard > 0:
                    for t in e.required_affinity_terms:
                        process(t, self.hard, p, nsl, node_labels)
                for w in e.preferred_affinity_terms:
                    process(w.term, w.weight, p, nsl, node_labels)
                for w in e.preferred_anti_affinity_terms:
                    process(w.term, -w.weight, p, nsl, node_labels)
        if not topo:
            return SKIP
        infos = self.snap.node_info_list
        raw = [sum(d.get(infos[r].node.meta.labels.get(k), 0) for k, d in topo.items()
                   if k in infos[r].node.meta.labels) for r in rows]
        lo, hi = (min(raw), max(raw)) if raw else (0, 0)
        return [int(100.0 * ((x - lo) / float(hi - lo))) if hi > lo else 0 for x in raw]


VOCAB_KEYS = ("app", "tier", "team")
VOCAB_VALUES = ("a", "b", "c")
TOPO_KEYS = ("region", "zone", "kubernetes.io/hostname", "rack", "absent")
NS_NAMES = ("default", "team-a", "team-b", "team-c")


def _random_selector(rng: random.Random):
    r = rng.random()
    if r < 0.08:
        return NIL
    if r < 0.16:
        return sel()
    exprs = []
    for _ in range(rng.randint(1, 2)):
        k = rng.choice(VOCAB_KEYS)
        op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
        vals = rng.sample(VOCAB_VALUES, rng.randint(1, 2)) if op in ("In", "NotIn") else []
        exprs.append(expr(k, op, *vals))
    if rng.random() < 0.3:
        return sel(*exprs, **{rng.choice(VOCAB_KEYS): rng.choice(VOCAB_VALUES)})
    return sel(*exprs)


def _random_term(rng: random.Random):
    ns = None if rng.random() < 0.6 else rng.sample(NS_NAMES, rng.randint(0, 2))
    r = rng.random()
    ns_sel = None if r < 0.6 else sel() if r < 0.7 else sel(expr("env", rng.choice(["In", "NotIn"]), "prod"))
    return term(rng.choice(TOPO_KEYS), _random_selector(rng), ns, ns_sel)


def _random_pod(rng: random.Random, node_name: str = "", affinity_rate: float = 0.4):
    labels = {k: rng.choice(VOCAB_VALUES) for k in VOCAB_KEYS if rng.random() < 0.6}
    kw = {}
    if rng.random() < affinity_rate:
        for field in ("affinity", "anti"):
            if rng.random() < 0.5:
                kw[field] = [_random_term(rng) for _ in range(rng.randint(1, 2))]
        for field in ("pref_affinity", "pref_anti"):
            if rng.random() < 0.4:
                kw[field] = [weighted(rng.randint(1, 100), _random_term(rng)) for _ in range(rng.randint(1, 2))]
    return pod(ns=rng.choice(NS_NAMES), labels=labels, node=node_name, **kw)


def _random_node(rng: random.Random, i: int):
    labels = {"kubernetes.io/hostname": f"n{i}"}
    if rng.random() < 0.85:
        labels["region"] = rng.choice(["r1", "r2"])
    if rng.random() < 0.8:
        labels["zone"] = rng.choice(["z1", "z2", "z3"])
    if rng.random() < 0.3:
        labels["rack"] = rng.choice(["k1", "k2"])
    if rng.random() < 0.05:
        labels = {}
    return node(f"n{i}", **labels)


def _check_against_reference(snapshot: Snapshot, incoming, hard: int, ignore: bool) -> None:
    ref = KubeReference(snapshot, hard, ignore)
    p = the_pod(incoming)
    s = ref.pre_filter(p)
    got = run_filter(incoming, snapshot)
    if s is None:
        assert got == SKIP
    else:
        assert got == {ni.name: ref.filter(s, ni.node.meta.labels) for ni in snapshot.node_info_list}
    args = {"hardPodAffinityWeight": hard, "ignorePreferredTermsOfExistingPods": ignore}
    want = ref.scores(p, snapshot.all_indices())
    got_scores = run_score(incoming, snapshot, args)
    if want == SKIP:
        assert got_scores == SKIP
    else:
        assert got_scores == {ni.name: want[i] for i, ni in enumerate(snapshot.node_info_list)}


@pytest.mark.parametrize("seed", range(40))
def test_random_clusters_match_kube_reference(seed):
    """Random clusters and pods; the snapshot is changed between pods (pods bound and removed,
    nodes added, relabelled and removed) so the pod index is exercised incrementally."""
    rng = random.Random(seed)
    nodes = [_random_node(rng, i) for i in range(rng.randint(3, 14))]
    names = [n["metadata"]["name"] for n in nodes]
    pods = [_random_pod(rng, rng.choice(names)) for _ in range(rng.randint(0, 40))]
    nss = [namespace("team-a", env="prod"), namespace("team-b", env="dev")]
    snap = cluster(nodes, pods, nss)
    hard, ignore = rng.choice([0, 1, 1, 5]), rng.random() < 0.2
    for step in range(8):
        if rng.random() < 0.3:  # the index built ahead, as an idle queue-manager does
            InterPodAffinity().warm(snap)
        incoming = _random_pod(rng, affinity_rate=0.9)
        _check_against_reference(snap, incoming, hard, ignore)
        r = rng.random()
        if r < 0.5:  # bind the pod somewhere, as the scheduler assumes it
            snap.add_pod(the_pod(incoming), rng.choice([ni.name for ni in snap.node_info_list]))
        elif r < 0.7:
            victims = list(snap.pods())
            if victims:
                snap.remove_pod(rng.choice(victims).pod)
        elif r < 0.8:
            i = len(names)
            names.append(f"n{i}")
            snap.add_node(the_node(_random_node(rng, i)))
        elif r < 0.9:
            relabel = rng.choice(names)
            if snap.get(relabel) is not None:
                snap.update_node(the_node(_random_node(rng, int(relabel[1:]))))
        elif len(snap.node_info_list) > 2:
            snap.remove_node(rng.choice(snap.node_info_list).name)


def test_index_follows_snapshot_changes():
    """A cached index gives what a fresh snapshot of the same cluster gives."""
    nodes = [node("n1", zone="z1"), node("n2", zone="z2")]
    snap = cluster(nodes)
    incoming = pod(labels={"app": "w"}, anti=[term("zone", In("app", "w"))])
    assert run_filter(incoming, snap) == {"n1": None, "n2": None}
    web = the_pod(pod(labels={"app": "w"}, node="n1"))
    snap.add_pod(web)
    assert run_filter(incoming, snap) == {"n1": F(UNSCHED, ANTI), "n2": None}
    snap.update_node(the_node(node("n1", zone="z2")))  # n1 moves into z2
    assert run_filter(incoming, snap) == {"n1": F(UNSCHED, ANTI), "n2": F(UNSCHED, ANTI)}
    snap.remove_pod(web)
    assert run_filter(incoming, snap) == {"n1": None, "n2": None}


def test_add_pod_on_a_node_outside_the_snapshot():
    """Counts for topology values no snapshot node carries are kept apart but still count."""
    pl = InterPodAffinity()
    snap = cluster([node("n1", zone="z1")])
    incoming = the_pod(pod(labels={"app": "w"}, anti=[term("zone", In("app", "w"))]))
    state, s = _state(pl, incoming, snap)
    outside = Snapshot([the_node(node("far", zone="z9"))]).get("far")
    pl.add_pod(state, incoming, PodInfo(the_pod(pod(labels={"app": "w"}, node="far"))), outside)
    assert s.anti_affinity.as_dict() == {("zone", "z9"): 1} and not s.anti_affinity.is_empty()
    assert _as_tuple(pl.filter(state, incoming, outside)) == F(UNSCHED, ANTI)
    assert pl.filter(state, incoming, snap.get("n1")) is None
    v = pl.filter_nodes(state, incoming, snap, snap.all_indices())
    assert list(v.failed) == [-1]
    pl.remove_pod(state, incoming, PodInfo(the_pod(pod(labels={"app": "w"}, node="far"))), outside)
    assert s.anti_affinity.is_empty()


def test_plain_pods_cost_nothing():
    """Without terms on either side nothing is indexed; with existing terms only, the
    all-pods label groups are still not built."""
    from schedmesh.plugins.inter_pod_affinity.pod_index import _INDEXES
    plain = pod(labels={"app": "x"})
    snap = cluster([node("n1", zone="z1")], [pod(labels={"app": "y"}, node="n1")])
    assert run_filter(plain, snap) == SKIP and run_score(plain, snap) == SKIP
    assert snap not in _INDEXES
    snap.add_pod(the_pod(pod(labels={"app": "z"}, node="n1", anti=[term("zone", In("app", "x"))],
                             pref_affinity=[weighted(3, term("zone", In("app", "x")))])))
    assert run_filter(plain, snap) == {"n1": F(UNSCHED, EXIST)}
    assert run_score(plain, snap) == {"n1": 0}
    idx = _INDEXES[snap]
    assert idx.by_labels == {} and len(idx.by_anti_terms) == 1 and len(idx.by_affinity_terms) == 1


def _index_groups(idx) -> dict:
    """(kind, key) -> {node name: pods}, for every group of a PodIndex."""
    out = {}
    for kind, groups in (("labels", idx.by_labels), ("anti", idx.by_anti_terms), ("affinity", idx.by_affinity_terms)):
        for key, g in groups.items():
            rows, counts = g.placement(idx.token)
            out[(kind, key)] = {idx.token[r].name: int(c) for r, c in zip(rows, counts)}
    return out


@pytest.mark.parametrize("seed", range(6))
def test_first_sync_builds_the_groups_pods_joining_one_by_one_build(seed):
    """The first sync reads every node at once (pod_index._Part._build); an index synced
    before the pods came, then after each pod joined, holds the same groups."""
    from schedmesh.plugins.inter_pod_affinity.pod_index import PodIndex
    rng = random.Random(seed)
    nodes = [_random_node(rng, i) for i in range(rng.randint(3, 14))]
    names = [n["metadata"]["name"] for n in nodes]
    pods = [_random_pod(rng, rng.choice(names), affinity_rate=0.6) for _ in range(rng.randint(1, 40))]
    at_once, whole = PodIndex(), cluster(nodes, pods)
    at_once.sync(whole, labels=True)
    # the node list is now the one followed: a sync with nothing changed reads no node again
    assert at_once._labels._source is whole.node_info_list is at_once._terms._source
    one_by_one, snap = PodIndex(), cluster(nodes)
    one_by_one.sync(snap, labels=True)
    for p in pods:
        snap.add_pod(the_pod(p))
        if rng.random() < 0.5:
            one_by_one.sync(snap, labels=True)
    one_by_one.sync(snap, labels=True)
    assert _index_groups(at_once) == _index_groups(one_by_one) != {}


@pytest.mark.parametrize("seed", range(6))
def test_pods_joining_and_leaving_leave_the_groups_a_fresh_index_builds(seed):
    """An index synced now and then while pods join and leave nodes (a node's row re-read:
    only its changed counts applied) holds the groups, and the sums per zone, of an index
    built at once over the cluster that results."""
    from schedmesh.plugins.inter_pod_affinity.pod_index import PodIndex
    rng = random.Random(100 + seed)
    nodes = [_random_node(rng, i) for i in range(rng.randint(3, 10))]
    names = [n["metadata"]["name"] for n in nodes]
    followed, snap, placed = PodIndex(), cluster(nodes), []
    followed.sync(snap, labels=True)
    for _ in range(rng.randint(20, 80)):
        if placed and rng.random() < 0.35:
            snap.remove_pod(placed.pop(rng.randrange(len(placed))))
        else:
            p = the_pod(_random_pod(rng, rng.choice(names), affinity_rate=0.6))
            snap.add_pod(p)
            placed.append(p)
        if rng.random() < 0.5:
            followed.sync(snap, labels=True)
    followed.sync(snap, labels=True)
    rebuilt = PodIndex()
    rebuilt.sync(_same_cluster(snap), labels=True)
    assert _index_groups(followed) == _index_groups(rebuilt)
    zone = snap.cols.label("zone")
    for kind in ("by_labels", "by_anti_terms", "by_affinity_terms"):
        for key, g in getattr(followed, kind).items():
            per_code, labeled = g.totals(followed.token, "zone", zone)
            rows, counts = g.placement(followed.token)
            codes = zone.codes[rows]
            want = np.zeros(len(zone.values) + 1, np.int64)
            np.add.at(want, codes[codes >= 0], counts[codes >= 0])
            assert per_code.tolist() == want.tolist() and labeled == int((codes >= 0).sum())


def _same_cluster(snap: Snapshot) -> Snapshot:
    """A new snapshot of the same nodes and pods, in the same node order."""
    infos = snap.node_info_list
    return Snapshot([ni.node for ni in infos], [pi.pod for ni in infos for pi in ni.pods])


def test_warm_builds_the_label_groups_where_pods_have_terms():
    """Idle, the queue-manager warms the plugins: the label groups a pod with terms needs are
    built where pods with terms run, never in a cluster without any."""
    from schedmesh.plugins.inter_pod_affinity.pod_index import _INDEXES
    plain = cluster([node("n1", zone="z1")], [pod(labels={"app": "y"}, node="n1")])
    InterPodAffinity().warm(plain)
    assert plain not in _INDEXES
    snap = cluster([node("n1", zone="z1"), node("n2", zone="z2")],
                   [pod(labels={"app": "y"}, node="n1"),
                    pod(labels={"app": "w"}, node="n2", anti=[term("zone", In("app", "w"))])])
    assert not snap.cols._labels
    InterPodAffinity().warm(snap)
    groups = _INDEXES[snap].by_labels
    assert {k[1] for k in groups} == {(("app", "y"),), (("app", "w"),)}
    # and the node label column of the terms' topology key, which every such pod's cycle reads
    assert list(snap.cols._labels) == [next(iter(_INDEXES[snap].by_anti_terms))[0].topology_key]
    InterPodAffinity().warm(snap)  # nothing changed: the same groups
    assert _INDEXES[snap].by_labels is groups and all(groups[k] is g for k, g in groups.items())
    incoming = pod(labels={"app": "w"}, anti=[term("zone", In("app", "y"))])
    assert run_filter(incoming, snap) == {"n1": F(UNSCHED, ANTI), "n2": F(UNSCHED, EXIST)}


def test_group_placement_follows_changes_in_place():
    """Rows and counts after any sequence of changes are those of the surviving nodes; arrays
    handed out earlier do not change; a rebuilt node list re-reads every row."""
    from schedmesh.plugins.inter_pod_affinity.pod_index import Group
    snap = cluster([node(f"n{i}", zone="z1") for i in range(6)])
    infos = snap.node_info_list
    rng = random.Random(7)
    g, want = Group(None), {}
    for _ in range(300):
        ni = rng.choice(infos)
        delta = -want[ni.name] if ni.name in want and rng.random() < 0.3 else rng.randint(1, 3)
        before = g.placement(infos)
        frozen = (before[0].copy(), before[1].copy())
        g.change(ni, delta)
        want[ni.name] = want.get(ni.name, 0) + delta
        if want[ni.name] == 0:
            del want[ni.name]
        rows, counts = g.placement(infos)
        assert {infos[r].name: int(c) for r, c in zip(rows, counts)} == want
        assert len(rows) == len(want) and g.empty() == (not want)
        assert (before[0] == frozen[0]).all() and (before[1] == frozen[1]).all()
    snap.add_node(the_node(node("a0", zone="z0")))  # a new zone first: every node moves
    rebuilt = snap.node_info_list
    assert rebuilt is not infos
    rows, counts = g.placement(rebuilt)
    assert {rebuilt[r].name: int(c) for r, c in zip(rows, counts)} == want


def test_group_totals_follow_changes_as_adding_each_row_would():
    """Group.totals (pod counts summed per topology value, kept as pods come and go) equals
    summing the group's placement row by row, after any sequence of joins, leaves and counts
    back to zero, whether or not it was asked in between; nodes without the label count in
    neither the sums nor `labeled`; a rebuilt node list (new codes) is summed again."""
    from schedmesh.plugins.inter_pod_affinity.pod_index import Group
    snap = cluster([node(f"n{i}", zone=f"z{i % 3}") for i in range(9)] + [node("bare"), node("bare2")])
    rng = random.Random(11)
    g, want = Group(None), {}

    def check(infos):
        column = snap.cols.label("zone")
        per_code, labeled = g.totals(infos, "zone", column)
        rows = {ni.name: ni.index for ni in infos}
        expected = np.zeros(len(column.values) + 1, np.int64)
        for name, count in want.items():
            code = column.codes[rows[name]]
            if code >= 0:
                expected[code] += count
        assert per_code.tolist() == expected.tolist()
        assert labeled == sum(1 for name in want if column.codes[rows[name]] >= 0)

    infos = snap.node_info_list
    for _ in range(400):
        ni = rng.choice(infos)
        delta = -want[ni.name] if ni.name in want and rng.random() < 0.3 else rng.randint(1, 3)
        g.change(ni, delta)
        want[ni.name] = want.get(ni.name, 0) + delta
        if want[ni.name] == 0:
            del want[ni.name]
        if rng.random() < 0.6:  # else several changes come before the next question
            check(infos)
    check(infos)
    snap.add_node(the_node(node("a0", zone="z0")))  # a new node first: every row and code moves
    rebuilt = snap.node_info_list
    assert rebuilt is not infos
    ni = next(ni for ni in rebuilt if ni.name == "a0")
    g.change(ni, 2)  # (before the sums are asked for the new list)
    want["a0"] = 2
    check(rebuilt)
    g.change(ni, -2)
    del want["a0"]
    check(rebuilt)


def test_snapshot_lists_of_nodes_with_affinity_pods_follow_membership():
    """The lists change only when a node gains its first or loses its last such pod."""
    snap = cluster([node("n1", zone="z1"), node("n2", zone="z2")])
    anti = [term("zone", In("app", "w"))]
    a1 = the_pod(pod(name="a1", labels={"app": "w"}, node="n1", anti=anti))
    a2 = the_pod(pod(name="a2", labels={"app": "w"}, node="n1", anti=anti))
    plain = the_pod(pod(name="plain", node="n2"))
    assert snap.have_pods_with_affinity() == [] and snap.have_pods_with_required_anti_affinity() == []
    snap.add_pod(a1)
    first = snap.have_pods_with_required_anti_affinity()
    assert [ni.name for ni in first] == ["n1"] == [ni.name for ni in snap.have_pods_with_affinity()]
    snap.add_pod(a2)
    snap.add_pod(plain)
    assert snap.have_pods_with_required_anti_affinity() is first  # n1 was already listed
    snap.remove_pod(a1)
    assert [ni.name for ni in snap.have_pods_with_required_anti_affinity()] == ["n1"]
    snap.remove_pod(a2)
    assert snap.have_pods_with_required_anti_affinity() == [] and snap.have_pods_with_affinity() == []
    snap.add_pod(a1, "n2")
    assert [ni.name for ni in snap.have_pods_with_affinity()] == ["n2"]


def test_snapshot_knows_whether_any_node_has_affinity_pods_as_its_lists_say():
    """any_pods_with_* (asked every cycle) agree with the lists through joins, leaves, pods
    with only preferred terms, and node removal, asked between every change or not at all."""
    for ask_between in (True, False):
        snap = cluster([node("n1", zone="z1"), node("n2", zone="z2")])
        anti = [term("zone", In("app", "w"))]
        a1 = the_pod(pod(name="a1", labels={"app": "w"}, node="n1", anti=anti))
        a2 = the_pod(pod(name="a2", labels={"app": "w"}, node="n2", anti=anti))
        plain = the_pod(pod(name="plain", node="n2"))
        steps = [lambda: snap.add_pod(a1), lambda: snap.add_pod(plain), lambda: snap.add_pod(a2),
                 lambda: snap.remove_pod(a1), lambda: snap.remove_node("n2"),
                 lambda: snap.add_node(the_node(node("n2", zone="z2"))), lambda: snap.remove_pod(a2)]
        for step in steps:
            step()
            if ask_between or step is steps[-1]:
                assert snap.any_pods_with_affinity() == bool(snap.have_pods_with_affinity())
                assert (snap.any_pods_with_required_anti_affinity()
                        == bool(snap.have_pods_with_required_anti_affinity()))
        assert not snap.any_pods_with_required_anti_affinity()


def test_a_term_remembers_its_hash_only_in_its_own_process():
    """AffinityTerm keeps its hash once asked (the index hashes terms at every node re-read), is
    built without hashing anything (a selector that cannot be hashed is only refused when used as
    a key, as before), and crosses processes without it (string hashes differ between them)."""
    import pickle

    from schedmesh.api.labels import LabelSelector
    from schedmesh.cache.node_info import AffinityTerm
    t = AffinityTerm(frozenset({"ns"}), LabelSelector.of({"app": "w"}), "zone", None)
    assert t._hash is None and hash(t) == t._hash == hash(AffinityTerm(*pickle.loads(pickle.dumps(t)).__reduce__()[1]))
    moved = pickle.loads(pickle.dumps(t))
    assert moved == t and moved._hash is None
    AffinityTerm(frozenset({"ns"}), LabelSelector(match_labels={"app": "w"}), "zone", None)  # not hashed here
