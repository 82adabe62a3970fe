"""NodeAffinity and the node selector matcher, re-expressing kube's node_affinity_test.go and
component-helpers' nodeaffinity_test.go cases, plus edge cases and bulk == per-node checks."""
from __future__ import annotations

import random
from typing import Optional

import numpy as np
import pytest

from schedmesh.api.load import load_text
from schedmesh.api.types import (Affinity, Node, NodeAffinity as NodeAffinitySpec, NodeSelector,
                                 NodeSelectorRequirement, NodeSelectorTerm, ObjectMeta, Pod, PreferredSchedulingTerm)
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code, CycleState, PreFilterResult
from schedmesh.plugins.node_affinity import (NodeAffinity, compile_node_selector, compile_preferred_terms,
                                             required_node_affinity)
from schedmesh.plugins.node_affinity.matcher import parse_int64

NAME_FIELD = "metadata.name"
ERR_POD = "node(s) didn't match Pod's node affinity/selector"
ERR_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
ERR_CONFLICT = "pod affinity terms conflict"


def req(key: str, op: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key, op, list(values))


def term(*exprs: NodeSelectorRequirement, fields: tuple = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(list(exprs), list(fields))


def node(name: str = "node", **labels: str) -> Node:
    return Node(meta=ObjectMeta(name=name, labels=dict(labels)))


def lnode(name: str, labels: Optional[dict]) -> Node:
    return Node(meta=ObjectMeta(name=name, labels=dict(labels or {})))


def pod(required: Optional[list[NodeSelectorTerm]] = None, node_selector: Optional[dict] = None,
        preferred: Optional[list[tuple[int, NodeSelectorTerm]]] = None, affinity_without_required: bool = False) -> Pod:
    aff = None
    if required is not None or preferred or affinity_without_required:
        aff = Affinity(node_affinity=NodeAffinitySpec(
            NodeSelector(required) if required is not None else None,
            [PreferredSchedulingTerm(w, t) for w, t in (preferred or [])]))
    return Pod(meta=ObjectMeta(name="p", namespace="default", uid="uid-p"), node_selector=dict(node_selector or {}),
               affinity=aff)


class _Handle:
    def __init__(self, snap: Optional[Snapshot] = None) -> None:
        self.snap = snap

    def snapshot(self) -> Snapshot:
        return self.snap


# ---- parse_int64 (strconv.ParseInt) ---------------------------------------------------------------

@pytest.mark.parametrize("s,want", [
    ("0", 0), ("0206", 206), ("+7", 7), ("-3", -3), ("9223372036854775807", 2**63 - 1),
    ("9223372036854775808", None), ("-9223372036854775808", -2**63), ("", None), ("1_000", None),
    (" 1", None), ("1.0", None), ("abc", None), ("１", None),
], ids=["zero", "leading-zeros", "plus", "minus", "int64-max", "overflow", "int64-min", "empty", "underscore",
        "space", "decimal", "letters", "fullwidth-digit"])
def test_parse_int64(s, want):
    assert parse_int64(s) == want


# ---- requirement semantics --------------------------------------------------------------------------

REQUIREMENT_CASES = [
    ("in-match", req("foo", "In", "bar", "value2"), {"foo": "bar"}, True),
    ("in-no-match", req("foo", "In", "value1", "value2"), {"foo": "bar"}, False),
    ("in-missing-label", req("foo", "In", "bar"), {}, False),
    ("notin-match", req("mem-type", "NotIn", "DDR", "DDR2"), {"mem-type": "DDR3"}, True),
    ("notin-missing-label-matches", req("mem-type", "NotIn", "DDR"), {}, True),
    ("notin-value-listed", req("mem-type", "NotIn", "DDR"), {"mem-type": "DDR"}, False),
    ("exists", req("GPU", "Exists"), {"GPU": "NVIDIA-GRID-K1"}, True),
    ("exists-empty-value", req("GPU", "Exists"), {"GPU": ""}, True),
    ("exists-missing", req("GPU", "Exists"), {}, False),
    ("doesnotexist", req("GPU", "DoesNotExist"), {}, True),
    ("doesnotexist-present", req("GPU", "DoesNotExist"), {"GPU": "x"}, False),
    ("gt-leading-zeros", req("kernel-version", "Gt", "0204"), {"kernel-version": "0206"}, True),
    ("gt-equal-is-not-greater", req("v", "Gt", "5"), {"v": "5"}, False),
    ("lt", req("v", "Lt", "5"), {"v": "-1"}, True),
    ("lt-plus-sign-label", req("v", "Lt", "5"), {"v": "+4"}, True),
    ("gt-non-integer-label", req("v", "Gt", "1"), {"v": "2.5"}, False),
    ("gt-missing-label", req("v", "Gt", "1"), {}, False),
    ("lt-missing-label", req("v", "Lt", "1"), {}, False),
    ("gt-non-integer-value-is-invalid", req("v", "Gt", "abc"), {"v": "5"}, False),
    ("gt-two-values-invalid", req("v", "Gt", "1", "2"), {"v": "5"}, False),
    ("in-empty-values-invalid", req("foo", "In"), {"foo": ""}, False),
    ("exists-with-values-invalid", req("foo", "Exists", "bar"), {"foo": "bar"}, False),
    ("invalid-label-value", req("foo", "NotIn", "invalid value: ___@#$%^"), {"foo": "bar"}, False),
    ("invalid-key", req("invalid key", "In", "v"), {"invalid key": "v"}, False),
    ("unknown-operator", req("foo", "Like", "bar"), {"foo": "bar"}, False),
    ("value-too-long", req("foo", "In", "a" * 64), {"foo": "a" * 64}, False),
    ("empty-value-is-valid", req("foo", "In", ""), {"foo": ""}, True),
    ("prefixed-key", req("topology.kubernetes.io/zone", "In", "z1"), {"topology.kubernetes.io/zone": "z1"}, True),
]


@pytest.mark.parametrize("name,r,labels,want", REQUIREMENT_CASES, ids=[c[0] for c in REQUIREMENT_CASES])
def test_requirement(name, r, labels, want):
    sel = compile_node_selector(NodeSelector([term(r)]))
    n = lnode("n", labels)
    assert sel.match(n) is want
    snap = Snapshot([n, lnode("other", {})])
    assert bool(sel.match_columns(snap.cols)[snap.cols.index_of("n")]) is want


# ---- NodeSelector match (component-helpers TestNodeSelectorMatch) -----------------------------------------

def test_invalid_terms_report_errors():
    sel = compile_node_selector(NodeSelector([
        term(fields=(req(NAME_FIELD, "In", "host_1", "host_2"),)),
        term(req("label_1", "In", "label_1_val"), fields=(req(NAME_FIELD, "In", "host_1"),)),
        term(req("invalid key", "In", "label_value")),
    ]))
    errs = sel.errors
    assert len(errs) == 2
    assert errs[0].startswith("nodeSelectorTerms[0].matchFields[0].values: Invalid value") and "must have one element" in errs[0]
    assert errs[1].startswith("nodeSelectorTerms[2].matchExpressions[0].key: Invalid value")
    # The valid middle term is still usable (lazy errors).
    assert sel.match(lnode("host_1", {"label_1": "label_1_val"}))
    matched, lazy_errors = sel.match_lazy(lnode("host_2", {}))
    assert not matched and len(lazy_errors) == 2


SELECTOR_CASES = [
    ("nil-node", [term(req("a", "Exists"))], None, False),
    ("field-matches-labels-do-not", [term(req("label_1", "In", "label_1_val"), fields=(req(NAME_FIELD, "In", "host_1"),))],
     lnode("host_1", {}), False),
    ("field-and-labels-match", [term(req("label_1", "In", "label_1_val"), fields=(req(NAME_FIELD, "In", "host_1"),))],
     lnode("host_1", {"label_1": "label_1_val"}), True),
    ("second-term-matches", [term(req("label_1", "In", "label_1_val")), term(fields=(req(NAME_FIELD, "In", "host_1"),))],
     lnode("host_1", {}), True),
    ("field-notin", [term(fields=(req(NAME_FIELD, "NotIn", "host_1"),))], lnode("host_2", {}), True),
    ("field-notin-self", [term(fields=(req(NAME_FIELD, "NotIn", "host_1"),))], lnode("host_1", {}), False),
    ("unknown-field-reads-empty-in", [term(fields=(req("metadata.uid", "In", "x"),))], lnode("host_1", {}), False),
    ("unknown-field-reads-empty-notin", [term(fields=(req("metadata.uid", "NotIn", "x"),))], lnode("host_1", {}), True),
    ("field-unsupported-operator", [term(fields=(req(NAME_FIELD, "Exists"),))], lnode("host_1", {}), False),
    ("empty-term-matches-nothing", [term()], lnode("n", {"a": "b"}), False),
    ("no-terms-match-nothing", [], lnode("n", {"a": "b"}), False),
    ("empty-term-skipped-other-matches", [term(), term(req("a", "In", "b"))], lnode("n", {"a": "b"}), True),
    ("anded-requirements", [term(req("GPU", "Exists"), req("GPU", "NotIn", "AMD", "INTER"))],
     lnode("n", {"GPU": "NVIDIA-GRID-K1"}), True),
    ("anded-requirements-fail", [term(req("GPU", "Exists"), req("GPU", "In", "AMD", "INTER"))],
     lnode("n", {"GPU": "NVIDIA-GRID-K1"}), False),
    ("unnamed-node-skips-fields", [term(fields=(req(NAME_FIELD, "In", "host_1"),))], lnode("", {}), True),
]


@pytest.mark.parametrize("name,terms,n,want", SELECTOR_CASES, ids=[c[0] for c in SELECTOR_CASES])
def test_node_selector_match(name, terms, n, want):
    sel = compile_node_selector(NodeSelector(terms))
    assert sel.match(n) is want
    if n is not None:
        snap = Snapshot([n, lnode("zz-other", {})])
        assert bool(sel.match_columns(snap.cols)[snap.cols.index_of(n.meta.name)]) is want


# ---- PreferredSchedulingTerms ------------------------------------------------------------------------------

def test_preferred_terms_score():
    terms = [PreferredSchedulingTerm(5, term(fields=(req(NAME_FIELD, "In", "host_1"),))),
             PreferredSchedulingTerm(7, term(req("unknown_label", "In", "unknown_label_val"))),
             PreferredSchedulingTerm(11, term(req("label_1", "In", "label_1_val")))]
    pt = compile_preferred_terms(terms)
    assert not pt.errors
    n = lnode("host_1", {"label_1": "label_1_val"})
    assert pt.score(n) == 16
    snap = Snapshot([n, lnode("host_2", {"label_1": "label_1_val"})])
    assert pt.score_columns(snap.cols).tolist() == [16, 11]


def test_preferred_terms_errors_and_zero_weight():
    bad = compile_preferred_terms([
        PreferredSchedulingTerm(1, term(fields=(req(NAME_FIELD, "In", "host_1", "host_2"),))),
        PreferredSchedulingTerm(1, term(req("invalid key", "In", "label_value"))),
    ])
    assert len(bad.errors) == 2 and bad.errors[0].startswith("[0].matchFields[0].values")
    zero = compile_preferred_terms([PreferredSchedulingTerm(0, term(fields=(req(NAME_FIELD, "In", "a", "b"),)))])
    assert not zero.errors and zero.score(lnode("a", {})) == 0


# ---- RequiredNodeAffinity: match == match_columns on a random cluster ------------------------------------

def test_match_columns_agrees_with_match_on_random_cluster():
    rng = random.Random(11)
    keys = ["zone", "gpu", "tier", "version"]
    vals = ["a", "b", "c", "1", "07", "-3", "x.y"]
    nodes = [lnode(f"n{i:03d}", {k: rng.choice(vals) for k in keys if rng.random() < 0.6}) for i in range(80)]
    snap = Snapshot(nodes)
    ops = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]

    def rand_req():
        op = rng.choice(ops)
        k = rng.choice(keys)
        if op in ("Exists", "DoesNotExist"):
            return req(k, op)
        if op in ("Gt", "Lt"):
            return req(k, op, rng.choice(["0", "2", "-5", "x"]))
        return req(k, op, *rng.sample(vals, rng.randint(1, 3)))

    for _ in range(150):
        terms = []
        for _ in range(rng.randint(0, 3)):
            fields = ()
            if rng.random() < 0.2:
                fields = (req(NAME_FIELD, rng.choice(["In", "NotIn"]), rng.choice(nodes).meta.name),)
            terms.append(term(*[rand_req() for _ in range(rng.randint(0, 3))], fields=fields))
        ns = {rng.choice(keys): rng.choice(vals)} if rng.random() < 0.3 else None
        p = pod(required=terms if rng.random() < 0.9 else None, node_selector=ns)
        r = required_node_affinity(p)
        bulk = r.match_columns(snap.cols)
        assert bulk.tolist() == [r.match(ni.node) for ni in snap.node_info_list]
        pref = compile_preferred_terms([PreferredSchedulingTerm(rng.randint(1, 100), t) for t in terms])
        if not pref.errors:
            assert pref.score_columns(snap.cols).tolist() == [pref.score(ni.node) for ni in snap.node_info_list]


# ---- PreFilter + Filter (kube TestNodeAffinity) -------------------------------------------------------------

FILTER_CASES = [
    # name, pod, node name, labels, args, want prefilter status, want prefilter names, want filter reason
    ("missing-labels", pod(node_selector={"foo": "bar"}), "node1", None, None, None, None, ERR_POD),
    ("same-labels", pod(node_selector={"foo": "bar"}), "node1", {"foo": "bar"}, None, None, None, None),
    ("node-labels-superset", pod(node_selector={"foo": "bar"}), "node1", {"foo": "bar", "baz": "blah"}, None, None, None, None),
    ("node-labels-subset", pod(node_selector={"foo": "bar", "baz": "blah"}), "node1", {"foo": "bar"}, None, None, None, ERR_POD),
    ("in-matches", pod([term(req("foo", "In", "bar", "value2"))]), "node1", {"foo": "bar"}, None, None, None, None),
    ("gt-matches", pod([term(req("kernel-version", "Gt", "0204"))]), "node1", {"kernel-version": "0206"}, None, None, None, None),
    ("notin-matches", pod([term(req("mem-type", "NotIn", "DDR", "DDR2"))]), "node1", {"mem-type": "DDR3"}, None, None, None, None),
    ("exists-matches", pod([term(req("GPU", "Exists"))]), "node1", {"GPU": "NVIDIA-GRID-K1"}, None, None, None, None),
    ("affinity-does-not-match", pod([term(req("foo", "In", "value1", "value2"))]), "node1", {"foo": "bar"}, None, None, None, ERR_POD),
    ("empty-match-expressions-match-nothing", pod([term()]), "node1", {"foo": "bar"}, None, None, None, ERR_POD),
    ("empty-terms-match-nothing", pod([]), "node1", {"foo": "bar"}, None, None, None, ERR_POD),
    ("no-affinity-skips", pod(), "node1", {"foo": "bar"}, None, "Skip", None, None),
    ("affinity-without-required-skips", pod(affinity_without_required=True), "node1", {"foo": "bar"}, None, "Skip", None, None),
    ("anded-expressions-match", pod([term(req("GPU", "Exists"), req("GPU", "NotIn", "AMD", "INTER"))]), "node1",
     {"GPU": "NVIDIA-GRID-K1"}, None, None, None, None),
    ("anded-expressions-fail", pod([term(req("GPU", "Exists"), req("GPU", "In", "AMD", "INTER"))]), "node1",
     {"GPU": "NVIDIA-GRID-K1"}, None, None, None, ERR_POD),
    ("ored-terms", pod([term(req("foo", "In", "bar", "value2")), term(req("diffkey", "In", "wrong", "value2"))]), "node1",
     {"foo": "bar"}, None, None, None, None),
    ("selector-and-affinity-both-satisfied", pod([term(req("foo", "Exists"))], node_selector={"foo": "bar"}), "node1",
     {"foo": "bar"}, None, None, None, None),
    ("affinity-ok-selector-not", pod([term(req("foo", "Exists"))], node_selector={"foo": "bar"}), "node1",
     {"foo": "barrrrrr"}, None, None, None, ERR_POD),
    ("invalid-value-in-term", pod([term(req("foo", "NotIn", "invalid value: ___@#$%^"))]), "node1", {"foo": "bar"},
     None, None, None, ERR_POD),
    ("match-fields-in-matches", pod([term(fields=(req(NAME_FIELD, "In", "node1"),))]), "node1", None, None, None,
     {"node1"}, None),
    ("match-fields-in-other-node", pod([term(fields=(req(NAME_FIELD, "In", "node1"),))]), "node2", None, None, None,
     {"node1"}, ERR_POD),
    ("two-terms-fields-miss-expressions-match", pod([
        term(fields=(req(NAME_FIELD, "In", "node1"), req(NAME_FIELD, "In", "node2"))),
        term(req("foo", "In", "bar"))]), "node2", {"foo": "bar"}, None, None, None, None),
    ("one-term-fields-miss-expressions-match", pod([
        term(req("foo", "In", "bar"), fields=(req(NAME_FIELD, "In", "node1"),))]), "node2", {"foo": "bar"}, None, None,
     {"node1"}, ERR_POD),
    ("one-term-fields-and-expressions-match", pod([
        term(req("foo", "In", "bar"), fields=(req(NAME_FIELD, "In", "node1"),))]), "node1", {"foo": "bar"}, None, None,
     {"node1"}, None),
    ("two-terms-nothing-matches", pod([term(fields=(req(NAME_FIELD, "In", "node1"),)),
                                       term(req("foo", "In", "not-match-to-bar"))]), "node2", {"foo": "bar"}, None,
     None, None, ERR_POD),
    ("two-terms-of-node-names", pod([term(fields=(req(NAME_FIELD, "In", "node1"),)),
                                     term(fields=(req(NAME_FIELD, "In", "node2"),))]), "node2", None, None, None,
     {"node1", "node2"}, None),
    ("conflicting-match-fields", pod([term(fields=(req(NAME_FIELD, "In", "node1"), req(NAME_FIELD, "In", "node2")))]),
     "node2", {"foo": "bar"}, None, ERR_CONFLICT, None, ERR_POD),
    ("notin-field-does-not-narrow", pod([term(fields=(req(NAME_FIELD, "NotIn", "node1"),))]), "node2", None, None, None,
     None, None),
    ("matches-added-and-pod-affinity", pod([term(req("zone", "In", "foo"))]), "node2", {"zone": "foo"},
     {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchFields": [{"key": NAME_FIELD, "operator": "In", "values": ["node2"]}]}]}}}, None, None, None),
    ("matches-added-not-pod", pod([term(req("zone", "In", "bar"))]), "node2", {"zone": "foo"},
     {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchFields": [{"key": NAME_FIELD, "operator": "In", "values": ["node2"]}]}]}}}, None, None, ERR_POD),
    ("does-not-match-added", pod(), "node2", {"zone": "foo"},
     {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["bar"]}]}]}}}, None, None, ERR_ENFORCED),
]


@pytest.mark.parametrize("name,p,node_name,labels,args,want_pf_status,want_pf_names,want_reason", FILTER_CASES,
                         ids=[c[0] for c in FILTER_CASES])
def test_prefilter_and_filter(name, p, node_name, labels, args, want_pf_status, want_pf_names, want_reason):
    n = lnode(node_name, labels)
    snap = Snapshot([n])
    pl = NodeAffinity(args, _Handle(snap))
    state = CycleState()
    result, status = pl.pre_filter(state, p, snap)
    if want_pf_status is None:
        assert status is None
    elif want_pf_status == "Skip":
        assert status is not None and status.code == Code.SKIP
    else:
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and status.reasons == (want_pf_status,)
    if want_pf_names is None:
        assert result is None
    else:
        assert result == PreFilterResult(frozenset(want_pf_names))
    for st in (state, CycleState()):  # with PreFilter state, and the fallback without it
        got = pl.filter(st, p, snap.get(node_name))
        if want_reason is None:
            assert got is None
        else:
            assert got.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE and got.reasons == (want_reason,)
        v = pl.filter_nodes(st, p, snap, snap.all_indices())
        assert (v.statuses[v.failed[0]].reasons[0] if v.failed[0] >= 0 else None) == want_reason


def test_filter_nodes_mixes_enforced_and_pod_failures():
    args = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["main"]}]}]}}}
    nodes = [lnode("a", {"pool": "main", "zone": "z1"}), lnode("b", {"pool": "spare", "zone": "z1"}),
             lnode("c", {"pool": "main", "zone": "z2"}), lnode("d", {})]
    snap = Snapshot(nodes)
    pl = NodeAffinity(args, _Handle(snap))
    p = pod([term(req("zone", "In", "z1"))])
    state = CycleState()
    pl.pre_filter(state, p, snap)
    rows = snap.all_indices()
    v = pl.filter_nodes(state, p, snap, rows)
    got = {snap.cols.names[r]: (v.statuses[v.failed[i]].reasons[0] if v.failed[i] >= 0 else None)
           for i, r in enumerate(rows)}
    assert got == {"a": None, "b": ERR_ENFORCED, "c": ERR_POD, "d": ERR_ENFORCED}
    for ni in snap.node_info_list:
        st = pl.filter(state, p, ni)
        assert (st.reasons[0] if st else None) == got[ni.name]


def test_prefilter_from_yaml_manifest():
    m = load_text("""
apiVersion: v1
kind: Pod
metadata: {name: pinned}
spec:
  containers: [{name: c, image: i}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchFields: [{key: metadata.name, operator: In, values: [node-a]}]
        - matchFields: [{key: metadata.name, operator: In, values: [node-b]}]
""")
    pl = NodeAffinity()
    result, status = pl.pre_filter(CycleState(), m.pods[0], Snapshot())
    assert status is None and result == PreFilterResult(frozenset({"node-a", "node-b"}))


# ---- PreScore / Score (kube TestNodeAffinityPriority) ---------------------------------------------------

LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}
AFFINITY1 = [(2, term(req("foo", "In", "bar")))]
AFFINITY2 = [(2, term(req("foo", "In", "bar"))), (4, term(req("key", "In", "value"))),
             (5, term(req("foo", "In", "bar"), req("key", "In", "value"), req("az", "In", "az1")))]
ADDED_PREF_KEY3 = {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 3, "preference": {"matchExpressions": [{"key": "key", "operator": "In", "values": ["value"]}]}}]}}
ADDED_PREF_FOO2 = {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 2, "preference": {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}}]}}

SCORE_CASES = [
    ("no-affinity-skips", pod(), [("node1", LABEL1), ("node2", LABEL2)], None, None),
    ("no-node-matches-preferred", pod(preferred=AFFINITY1), [("node1", LABEL4), ("node2", LABEL2), ("node3", LABEL3)],
     None, {"node1": 0, "node2": 0, "node3": 0}),
    ("only-node1-matches", pod(preferred=AFFINITY1), [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL3)],
     None, {"node1": 100, "node2": 0, "node3": 0}),
    ("different-priorities", pod(preferred=AFFINITY2), [("node1", LABEL1), ("node5", LABEL5), ("node2", LABEL2)],
     None, {"node1": 18, "node5": 100, "node2": 36}),
    ("added-affinity", pod(), [("node1", LABEL1), ("node2", LABEL2)], ADDED_PREF_FOO2, {"node1": 100, "node2": 0}),
    ("added-and-pod-affinity", pod(preferred=AFFINITY1), [("node1", LABEL1), ("node2", LABEL2), ("node3", LABEL5)],
     ADDED_PREF_KEY3, {"node1": 40, "node2": 60, "node3": 100}),
    ("required-only-skips", pod([term(req("foo", "Exists"))]), [("node1", LABEL1)], None, None),
]


@pytest.mark.parametrize("name,p,nodes,args,want", SCORE_CASES, ids=[c[0] for c in SCORE_CASES])
def test_score(name, p, nodes, args, want):
    snap = Snapshot([lnode(n, l) for n, l in nodes])
    pl = NodeAffinity(args, _Handle(snap))
    rows = snap.all_indices()
    state = CycleState()
    st = pl.pre_score(state, p, snap, rows)
    if want is None:
        assert st is not None and st.code == Code.SKIP
        return
    assert st is None
    for s in (state, CycleState()):  # also without PreScore state, as kube's fallback
        bulk = pl.score_nodes(s, p, snap, rows)
        assert bulk.tolist() == [pl.score(s, p, ni)[0] for ni in snap.node_info_list]
        pl.normalize_score(s, p, bulk)
        assert dict(zip(snap.cols.names, bulk.tolist())) == want


def test_prescore_error_on_invalid_preferred_term():
    p = pod(preferred=[(1, term(req("v", "Gt", "abc")))])
    st = NodeAffinity().pre_score(CycleState(), p, Snapshot(), np.zeros(0, np.int64))
    assert st.code == Code.ERROR and "for 'Gt', 'Lt' operators, the value must be an integer" in st.message()


def test_prescore_not_skipped_with_added_zero_weight_terms():
    args = {"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}]}}
    snap = Snapshot([lnode("n", {"a": "1"})])
    pl = NodeAffinity(args, _Handle(snap))
    state = CycleState()
    assert pl.pre_score(state, pod(), snap, snap.all_indices()) is None
    assert pl.score_nodes(state, pod(), snap, snap.all_indices()).tolist() == [0]


# ---- args ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,fragment", [
    ({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]}]}}},
     "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]"),
    ({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchFields": [{"key": NAME_FIELD, "operator": "In", "values": ["a", "b"]}]}}]}},
     "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].matchFields[0].values"),
    ({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "Sometimes"}]}]}}},
     "operator: Unsupported value"),
    ({"addedAffinity": "nope"}, "addedAffinity: expected an object"),
], ids=["invalid-gt-value", "field-two-values", "unknown-operator", "not-an-object"])
def test_invalid_args(args, fragment):
    with pytest.raises(ValueError, match=None) as e:
        NodeAffinity(args)
    assert fragment in str(e.value)


def test_empty_args_are_fine():
    for args in (None, {}, {"addedAffinity": None}, {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "NodeAffinityArgs"}):
        pl = NodeAffinity(args)
        assert pl.added_node_selector is None and pl.added_preferred is None


# ---- queueing hints (kube Test_isSchedulableAfterNodeChange) -------------------------------------------------

ADDED_FOO_BAR = {"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}]}}}

HINT_CASES = [
    ("wrong-new-object", None, None, "not-a-node", QueueingHint.QUEUE),
    ("wrong-old-object", None, "not-a-node", node(), QueueingHint.QUEUE),
    ("skip-queue-on-add", None, None, node(), QueueingHint.QUEUE_SKIP),
    ("queue-on-add", None, None, node(foo="bar"), QueueingHint.QUEUE),
    ("skip-unrelated-changes", None, node(), node(), QueueingHint.QUEUE_SKIP),
    ("skip-unrelated-changes-on-labels", None, node(), node(k="v"), QueueingHint.QUEUE_SKIP),
    ("skip-labels-changes-on-suitable-node", None, node(foo="bar"), node(foo="bar", k="v"), QueueingHint.QUEUE_SKIP),
    ("skip-suitable-to-unsuitable", None, node(foo="bar"), node(k="v"), QueueingHint.QUEUE_SKIP),
    ("queue-on-labels-change-makes-pod-schedulable", None, node(), node(foo="bar"), QueueingHint.QUEUE),
    ("skip-add-not-matching-enforced", ADDED_FOO_BAR, None, node(), QueueingHint.QUEUE_SKIP),
    ("queue-add-matching-enforced", ADDED_FOO_BAR, None, node(foo="bar"), QueueingHint.QUEUE),
]


@pytest.mark.parametrize("name,args,old,new,want", HINT_CASES, ids=[c[0] for c in HINT_CASES])
def test_is_schedulable_after_node_change(name, args, old, new, want):
    p = pod([term(req("foo", "In", "bar"))])
    assert NodeAffinity(args).is_schedulable_after_node_change(p, old, new) == want


def test_hint_queues_on_parse_errors():
    p = pod([term(req("foo", "Gt", "abc"))])
    assert NodeAffinity().is_schedulable_after_node_change(p, None, node(foo="1")) == QueueingHint.QUEUE


def test_events_to_register():
    ev = NodeAffinity().events_to_register()
    assert [(e.event.resource, e.event.action) for e in ev] == [
        (EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)]
    assert ev[0].hint is not None
