"""PodTopologySpread against kube's podtopologyspread tests (filtering_test.go, scoring_test.go,
plugin_test.go re-expressed; cases for the feature-gate-disabled variants are left out since
v1.35 has those gates on), edge cases, bulk-vs-per-node agreement and the golden scenarios."""
from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from schedmesh.api.labels import LabelSelector, LabelSelectorRequirement
from schedmesh.api.load import load_text
from schedmesh.api.types import TopologySpreadConstraint, WorkloadSelector
from schedmesh.cache.node_info import PodInfo
from schedmesh.cache.snapshot import LabelColumn, Snapshot
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code, CycleState
from schedmesh.plugins.pod_topology_spread import (ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
                                                   PodTopologySpread, StaticSelectorSources, WorkloadSelectors,
                                                   WorkloadSelectorSources)
from schedmesh.plugins.pod_topology_spread.common import count_pods_match_selector
from schedmesh.plugins.pod_topology_spread.filtering import (MAX_INT32, PRE_FILTER_STATE_KEY, CriticalPaths,
                                                             initial_critical_paths)
from schedmesh.plugins.pod_topology_spread.pod_index import PodLabelIndex
from schedmesh.plugins.helper.gomath import go_log
from schedmesh.plugins.pod_topology_spread.scoring import PRE_SCORE_STATE_KEY, topology_normalizing_weight

DNS, SA = "DoNotSchedule", "ScheduleAnyway"
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}
UNSCHEDULABLE_TAINT = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
LIST = {"defaultingType": "List"}


# ---- builders: plain manifests, read through the loader ------------------------------------------

def node(name: str, labels: Optional[dict] = None, taints: Optional[list] = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": taints or []}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def zn(name: str, zone: str, **extra: str) -> dict:
    """A node with labels zone=<zone> and node=<name> (kube's test nodes)."""
    return node(name, {"zone": zone, "node": name, **extra})


def sc(max_skew: int, key: str, when: str, selector: Optional[dict] = None, min_domains: Optional[int] = None,
       affinity_policy: Optional[str] = None, taints_policy: Optional[str] = None,
       match_label_keys: Optional[list] = None) -> dict:
    c: dict = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    if selector is not None:
        c["labelSelector"] = selector
    if min_domains is not None:
        c["minDomains"] = min_domains
    if affinity_policy:
        c["nodeAffinityPolicy"] = affinity_policy
    if taints_policy:
        c["nodeTaintsPolicy"] = taints_policy
    if match_label_keys:
        c["matchLabelKeys"] = match_label_keys
    return c


def pod(name: str, on: str = "", labels: Optional[dict] = None, ns: str = "default", constraints: Optional[list] = None,
        terminating: bool = False, node_selector: Optional[dict] = None, affinity: Optional[dict] = None,
        tolerations: Optional[list] = None, owner: Optional[dict] = None) -> dict:
    meta: dict = {"name": name, "namespace": ns, "labels": labels or {}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner:
        meta["ownerReferences"] = [dict(owner, controller=True)]
    spec: dict = {"containers": [{"name": "c", "image": "pause"}]}
    if on:
        spec["nodeName"] = on
    if constraints:
        spec["topologySpreadConstraints"] = constraints
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [affinity]}]}}}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def not_in(key: str, values: list) -> dict:
    return {"key": key, "operator": "NotIn", "values": values}


def in_(key: str, values: list) -> dict:
    return {"key": key, "operator": "In", "values": values}


def _req(key: str, op: str, values=()) -> LabelSelectorRequirement:
    return LabelSelectorRequirement(key, op, tuple(values))


def load(*docs: dict):
    return load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}))


def the_pod(d: dict):
    return load(d).pods[0]


def snapshot(nodes: list, pods: list) -> Snapshot:
    m = load(*nodes, *pods)
    return Snapshot(m.nodes, m.pods)


def rows_of(snap: Snapshot, names: list) -> np.ndarray:
    return np.array([snap.cols.index_of(n) for n in names], dtype=np.int64)


def sorted_paths(p: list) -> list:
    """kube's criticalPaths.sort(): names of equal counts in alphabetical order."""
    (v0, n0), (v1, n1) = p
    if n0 == n1 and v0 > v1:
        v0, v1 = v1, v0
    return [(v0, n0), (v1, n1)]


def state_dicts(s) -> tuple[list, list]:
    return [d.as_dict() for d in s.domains], [sorted_paths(p.as_tuples()) for p in s.paths]


MAXP = ("", MAX_INT32)
NODES_4 = [zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")]


# ---- PreFilter state (TestPreFilterState) -----------------------------------------------------

def _foo_pods(spec: str) -> list:
    """'a1 a2 b1' -> pods p-a1 on node-a ... labelled foo."""
    return [pod(f"p-{s}", on=f"node-{s[0]}", labels={"foo": ""}) for s in spec.split()]


PREFILTER_CASES = [
    dict(id="clean cluster with one spreadConstraint",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(5, "zone", DNS, {"matchLabels": {"foo": "bar"}})]),
         nodes=NODES_4, pods=[], want=[{"zone1": 0, "zone2": 0}], paths=[[("zone1", 0), ("zone2", 0)]]),
    dict(id="normal case with one spreadConstraint",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4, pods=_foo_pods("a1 a2 b1 y1 y2"),
         want=[{"zone1": 3, "zone2": 2}], paths=[[("zone2", 2), ("zone1", 3)]]),
    dict(id="normal case with null label selector",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS)]),
         nodes=NODES_4, pods=_foo_pods("a1 a2 b1 y1 y2"),
         want=[{"zone1": 0, "zone2": 0}], paths=[[("zone1", 0), ("zone2", 0)]]),
    dict(id="one spreadConstraint on a 3-zone cluster",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4 + [zn("node-o", "zone3"), zn("node-p", "zone3")], pods=_foo_pods("a1 a2 b1 y1 y2"),
         want=[{"zone1": 3, "zone2": 2, "zone3": 0}], paths=[[("zone3", 0), ("zone2", 2)]]),
    dict(id="namespace mismatch doesn't count",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4,
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-a2", "node-a", {"foo": ""}, ns="ns1"),
               pod("p-b1", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""}, ns="ns2"),
               pod("p-y2", "node-y", {"foo": ""})],
         want=[{"zone1": 2, "zone2": 1}], paths=[[("zone2", 1), ("zone1", 2)]]),
    dict(id="normal case with two spreadConstraints",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, FOO)]),
         nodes=NODES_4, pods=_foo_pods("a1 a2 b1 y1 y2 y3 y4"),
         want=[{"zone1": 3, "zone2": 4}, {"node-a": 2, "node-b": 1, "node-x": 0, "node-y": 4}],
         paths=[[("zone1", 3), ("zone2", 4)], [("node-x", 0), ("node-b", 1)]]),
    dict(id="soft spreadConstraints should be bypassed",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", SA, FOO), sc(1, "zone", DNS, FOO),
                                                       sc(1, "node", SA, FOO), sc(1, "node", DNS, FOO)]),
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-y", "zone2")],
         pods=_foo_pods("a1 a2 b1 y1 y2 y3 y4"),
         want=[{"zone1": 3, "zone2": 4}, {"node-a": 2, "node-b": 1, "node-y": 4}],
         paths=[[("zone1", 3), ("zone2", 4)], [("node-b", 1), ("node-a", 2)]]),
    dict(id="different labelSelectors - simple version",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, BAR)]),
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-y", "zone2")],
         pods=[pod("p-a", "node-a", {"foo": ""}), pod("p-b", "node-b", {"bar": ""})],
         want=[{"zone1": 1, "zone2": 0}, {"node-a": 0, "node-b": 1, "node-y": 0}],
         paths=[[("zone2", 0), ("zone1", 1)], [("node-a", 0), ("node-y", 0)]]),
    dict(id="different labelSelectors - complex pods",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, BAR)]),
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-y", "zone2")],
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-a2", "node-a", {"foo": "", "bar": ""}),
               pod("p-b1", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""}),
               pod("p-y2", "node-y", {"foo": "", "bar": ""}), pod("p-y3", "node-y", {"foo": ""}),
               pod("p-y4", "node-y", {"foo": "", "bar": ""})],
         want=[{"zone1": 3, "zone2": 4}, {"node-a": 1, "node-b": 0, "node-y": 2}],
         paths=[[("zone1", 3), ("zone2", 4)], [("node-b", 0), ("node-a", 1)]]),
    dict(id="two spreadConstraints, and with podAffinity",
         pod=pod("p", labels={"foo": ""}, affinity=not_in("node", ["node-x"]),
                 constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, FOO)]),
         nodes=NODES_4, pods=_foo_pods("a1 a2 b1 y1 y2 y3 y4"),
         want=[{"zone1": 3, "zone2": 4}, {"node-a": 2, "node-b": 1, "node-y": 4}],
         paths=[[("zone1", 3), ("zone2", 4)], [("node-b", 1), ("node-a", 2)]]),
    dict(id="default constraints and a service",
         pod=pod("p", labels={"foo": "bar", "baz": "kar"}),
         args={"defaultingType": "List", "defaultConstraints": [
             sc(3, "node", DNS), sc(2, "node", SA), sc(5, "rack", DNS)]},
         sources=StaticSelectorSources(service_selectors={"default": [{"foo": "bar"}]}),
         nodes=[], pods=[], want=[{}, {}], paths=[[MAXP, MAXP], [MAXP, MAXP]],
         selectors=[LabelSelector.of({"foo": "bar"})] * 2),
    dict(id="default constraints and a service that doesn't match",
         pod=pod("p", labels={"foo": "bar"}),
         args={"defaultingType": "List", "defaultConstraints": [sc(3, "node", DNS)]},
         sources=StaticSelectorSources(service_selectors={"default": [{"baz": "kep"}]}),
         nodes=[], pods=[], skip=True),
    dict(id="default constraints and a service, but pod has constraints",
         pod=pod("p", labels={"foo": "bar", "baz": "tar"},
                 constraints=[sc(1, "zone", DNS, {"matchLabels": {"baz": "tar"}}),
                              sc(2, "planet", SA, {"matchLabels": {"fot": "rok"}})]),
         args={"defaultingType": "List", "defaultConstraints": [sc(2, "node", DNS)]},
         sources=StaticSelectorSources(service_selectors={"default": [{"foo": "bar"}]}),
         nodes=[], pods=[], want=[{}], paths=[[MAXP, MAXP]], selectors=[LabelSelector.of({"baz": "tar"})]),
    dict(id="default soft constraints and a service",
         pod=pod("p", labels={"foo": "bar"}),
         args={"defaultingType": "List", "defaultConstraints": [sc(2, "node", SA)]},
         sources=StaticSelectorSources(service_selectors={"default": [{"foo": "bar"}]}),
         nodes=[], pods=[], skip=True),
    dict(id="NodeAffinityPolicy honored with labelSelectors",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""}, constraints=[sc(1, "node", DNS, BAR)]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-c", {"node": "node-c", "bar": ""})],
         pods=[pod("p-a", "node-a", {"bar": ""}), pod("p-b", "node-b", {"bar": ""}),
               pod("p-c", "node-b", {"bar": ""}), pod("p-d", "node-c")],
         want=[{"node-a": 1, "node-b": 2}], paths=[[("node-a", 1), ("node-b", 2)]]),
    dict(id="NodeAffinityPolicy ignored with labelSelectors",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""}, constraints=[sc(1, "node", DNS, BAR, None, "Ignore")]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-c", {"node": "node-c", "bar": ""})],
         pods=[pod("p-a", "node-a", {"bar": ""}), pod("p-b", "node-b", {"bar": ""}),
               pod("p-c", "node-b", {"bar": ""}), pod("p-d", "node-c")],
         want=[{"node-a": 1, "node-b": 2, "node-c": 0}], paths=[[("node-c", 0), ("node-a", 1)]]),
    dict(id="NodeAffinityPolicy honored with nodeAffinity",
         pod=pod("p", labels={"foo": ""}, affinity=in_("foo", [""]), constraints=[sc(1, "node", DNS, BAR)]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-c", {"node": "node-c", "bar": ""})],
         pods=[pod("p-a", "node-a", {"bar": ""}), pod("p-c", "node-b", {"bar": ""}),
               pod("p-d", "node-b", {"bar": ""}), pod("p-e", "node-c")],
         want=[{"node-a": 1, "node-b": 2}], paths=[[("node-a", 1), ("node-b", 2)]]),
    dict(id="NodeAffinityPolicy ignored with nodeAffinity",
         pod=pod("p", labels={"foo": ""}, affinity=in_("foo", [""]), constraints=[sc(1, "node", DNS, BAR, None, "Ignore")]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-c", {"node": "node-c", "bar": ""})],
         pods=[pod("p-a", "node-a", {"bar": ""}), pod("p-b", "node-b", {"bar": ""}),
               pod("p-c", "node-b", {"bar": ""}), pod("p-d", "node-c")],
         want=[{"node-a": 1, "node-b": 2, "node-c": 0}], paths=[[("node-c", 0), ("node-a", 1)]]),
    dict(id="NodeTaintsPolicy ignored",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, BAR)]),
         nodes=[node("node-a", {"node": "node-a"}), node("node-b", {"node": "node-b"}),
                node("node-c", {"node": "node-c", "bar": ""}, UNSCHEDULABLE_TAINT)],
         pods=[pod("p-a", "node-a", {"bar": ""}), pod("p-b", "node-b", {"bar": ""}),
               pod("p-c", "node-b", {"bar": ""}), pod("p-d", "node-c")],
         want=[{"node-a": 1, "node-b": 2, "node-c": 0}], paths=[[("node-c", 0), ("node-a", 1)]]),
    dict(id="NodeTaintsPolicy honored",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, BAR, None, None, "Honor")]),
         nodes=[node("node-a", {"node": "node-a"}), node("node-b", {"node": "node-b"}),
                node("node-c", {"node": "node-c", "bar": ""}, UNSCHEDULABLE_TAINT)],
         pods=[pod("p-a", "node-a", {"bar": ""}), pod("p-b", "node-b", {"bar": ""}),
               pod("p-c", "node-b", {"bar": ""}), pod("p-d", "node-c")],
         want=[{"node-a": 1, "node-b": 2}], paths=[[("node-a", 1), ("node-b", 2)]]),
    dict(id="NodeTaintsPolicy honored with tolerated taints",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, BAR, None, None, "Honor")],
                 tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
         nodes=[node("node-a", {"node": "node-a"}), node("node-b", {"node": "node-b"}),
                node("node-c", {"node": "node-c", "bar": ""}, UNSCHEDULABLE_TAINT)],
         pods=[pod("p-a", "node-a", {"bar": ""}), pod("p-b", "node-b", {"bar": ""}),
               pod("p-c", "node-b", {"bar": ""}), pod("p-d", "node-c")],
         want=[{"node-a": 1, "node-b": 2, "node-c": 0}], paths=[[("node-c", 0), ("node-a", 1)]]),
    dict(id="two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""},
                 constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, FOO, None, "Ignore")]),
         nodes=[zn("node-a", "zone1", foo=""), zn("node-b", "zone1"), zn("node-x", "zone2", foo="")],
         pods=_foo_pods("b1 b2 x1"),
         want=[{"zone1": 0, "zone2": 1}, {"node-a": 0, "node-b": 2, "node-x": 1}],
         paths=[[("zone1", 0), ("zone2", 1)], [("node-a", 0), ("node-x", 1)]]),
    dict(id="two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
         pod=pod("p", labels={"foo": ""},
                 constraints=[sc(1, "zone", DNS, FOO, None, None, "Honor"), sc(1, "node", DNS, FOO)]),
         nodes=[zn("node-a", "zone1", foo=""), dict(zn("node-b", "zone1"), spec={"taints": UNSCHEDULABLE_TAINT}),
                zn("node-x", "zone2", foo="")],
         pods=_foo_pods("b1 b2 x1"),
         want=[{"zone1": 0, "zone2": 1}, {"node-a": 0, "node-b": 2, "node-x": 1}],
         paths=[[("zone1", 0), ("zone2", 1)], [("node-a", 0), ("node-x", 1)]]),
    dict(id="two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""},
                 constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, FOO)]),
         nodes=[zn("node-a", "zone1"), dict(zn("node-b", "zone1", foo=""), spec={"taints": UNSCHEDULABLE_TAINT}),
                zn("node-x", "zone2", foo=""), zn("node-y", "zone2")],
         pods=_foo_pods("a1 a2 x1 y1"),
         want=[{"zone1": 0, "zone2": 1}, {"node-b": 0, "node-x": 1}],
         paths=[[("zone1", 0), ("zone2", 1)], [("node-b", 0), ("node-x", 1)]]),
    dict(id="two node inclusion Constraints, zone: ignore/ignore, node: honor/honor",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""},
                 constraints=[sc(1, "zone", DNS, FOO, None, "Ignore"), sc(1, "node", DNS, FOO, None, None, "Honor")]),
         nodes=[zn("node-a", "zone1"), dict(zn("node-b", "zone1", foo=""), spec={"taints": UNSCHEDULABLE_TAINT}),
                zn("node-x", "zone2", foo=""), zn("node-y", "zone2", foo="")],
         pods=_foo_pods("a1 a2 x1 x2 y1"),
         want=[{"zone1": 2, "zone2": 3}, {"node-x": 2, "node-y": 1}],
         paths=[[("zone1", 2), ("zone2", 3)], [("node-y", 1), ("node-x", 2)]]),
    dict(id="matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
         pod=pod("p", labels={"foo": "", "bar": "a"}, constraints=[sc(1, "zone", DNS, FOO, match_label_keys=["bar"])]),
         nodes=NODES_4,
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-a2", "node-a", {"foo": "", "bar": "a"}),
               pod("p-b1", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": "", "bar": "a"}),
               pod("p-y2", "node-y", {"bar": ""})],
         want=[{"zone1": 1, "zone2": 1}], paths=[[("zone1", 1), ("zone2", 1)]]),
    dict(id="matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
         pod=pod("p", labels={"foo": "a"}, constraints=[sc(1, "zone", DNS, {}, match_label_keys=["foo"])]),
         nodes=NODES_4, pods=[pod(f"p-{s}", f"node-{s[0]}", {"foo": "a"}) for s in "a1 a2 b1 y1 y2".split()],
         want=[{"zone1": 3, "zone2": 2}], paths=[[("zone2", 2), ("zone1", 3)]]),
    dict(id="key in matchLabelKeys is ignored when LabelSelector is nil",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, None, match_label_keys=["bar"])]),
         nodes=NODES_4, pods=[pod(f"p-{s}", f"node-{s[0]}", {"foo": "a"}) for s in "a1 a2 b1 y1 y2".split()],
         want=[{"zone1": 0, "zone2": 0}], paths=[[("zone1", 0), ("zone2", 0)]]),
    dict(id="key in matchLabelKeys is ignored when it isn't in pod.labels",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO, match_label_keys=["bar"])]),
         nodes=NODES_4, pods=[pod(f"p-{s}", f"node-{s[0]}", {"foo": "a"}) for s in "a1 a2 b1 y1 y2".split()],
         want=[{"zone1": 3, "zone2": 2}], paths=[[("zone2", 2), ("zone1", 3)]]),
    dict(id="two spreadConstraints with the same topologyKey",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "zone", DNS, BAR)]),
         nodes=NODES_4,
         pods=[pod("p-a1", "node-a", {"foo": "", "bar": ""}), pod("p-b1", "node-b", {"foo": ""}),
               pod("p-x1", "node-x", {"bar": ""}), pod("p-y1", "node-y", {"foo": "", "bar": ""}),
               pod("p-y2", "node-y", {"bar": ""})],
         want=[{"zone1": 2, "zone2": 1}, {"zone1": 1, "zone2": 3}],
         paths=[[("zone2", 1), ("zone1", 2)], [("zone1", 1), ("zone2", 3)]]),
    dict(id="skip if not specified", pod=pod("p", labels={"foo": ""}), nodes=[zn("node-a", "zone1")], pods=[],
         skip=True),
    # edge cases beyond kube's table
    dict(id="terminating pods are not counted",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4, pods=_foo_pods("a1 x1") + [pod("p-y1", "node-y", {"foo": ""}, terminating=True)],
         want=[{"zone1": 1, "zone2": 1}], paths=[[("zone1", 1), ("zone2", 1)]]),
    dict(id="empty selector counts nothing",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, {})]),
         nodes=NODES_4, pods=_foo_pods("a1 a2 x1"),
         want=[{"zone1": 0, "zone2": 0}], paths=[[("zone1", 0), ("zone2", 0)]]),
    dict(id="nodes missing any constraint's key are not counted for any constraint",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "rack", DNS, FOO)]),
         nodes=[zn("node-a", "zone1", rack="r1"), zn("node-b", "zone1"), zn("node-x", "zone2", rack="r2")],
         pods=_foo_pods("a1 b1 b2 x1 x2"),
         want=[{"zone1": 1, "zone2": 2}, {"r1": 1, "r2": 2}],
         paths=[[("zone1", 1), ("zone2", 2)], [("r1", 1), ("r2", 2)]]),
]


def _plugin(case: dict) -> PodTopologySpread:
    args = dict(case.get("args", LIST))
    if case.get("sources") is not None:
        args["selectorSources"] = case["sources"]
    return PodTopologySpread(args, None)


@pytest.mark.parametrize("case", PREFILTER_CASES, ids=[c["id"] for c in PREFILTER_CASES])
def test_pre_filter_state(case):
    pl = _plugin(case)
    snap = snapshot(case["nodes"], case["pods"])
    state = CycleState()
    _, status = pl.pre_filter(state, the_pod(case["pod"]), snap)
    if case.get("skip"):
        assert status is not None and status.code == Code.SKIP
        assert state.get(PRE_FILTER_STATE_KEY) is None
        return
    assert status is None
    s = state.read(PRE_FILTER_STATE_KEY)
    counts, paths = state_dicts(s)
    assert counts == case["want"]
    assert paths == [sorted_paths(p) for p in case["paths"]]
    if "selectors" in case:
        assert [c.selector for c in s.constraints] == case["selectors"]


def test_pre_filter_constraint_defaults():
    """minDomains nil -> 1, nodeAffinityPolicy nil -> Honor, nodeTaintsPolicy nil -> Ignore."""
    pl = PodTopologySpread(LIST)
    state = CycleState()
    pl.pre_filter(state, the_pod(pod("p", constraints=[sc(2, "zone", DNS, FOO)])), snapshot(NODES_4, []))
    c = state.read(PRE_FILTER_STATE_KEY).constraints[0]
    assert (c.max_skew, c.topology_key, c.min_domains, c.node_affinity_policy, c.node_taints_policy) == (
        2, "zone", 1, "Honor", "Ignore")


# ---- AddPod / RemovePod (TestPreFilterStateAddPod / RemovePod) --------------------------------

def _node_zone_constraints():
    return [sc(1, "zone", DNS, FOO), sc(1, "node", DNS, FOO)]


ADD_CASES = [
    dict(id="node a and b both impact current min match",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]),
         added=pod("p-a1", "node-a", {"foo": ""}), pods=[], node="node-a",
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1")],
         want=[{"node-a": 1, "node-b": 0}], paths=[[("node-b", 0), ("node-a", 1)]]),
    dict(id="only node a impacts current min match",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]),
         added=pod("p-a1", "node-a", {"foo": ""}), pods=_foo_pods("b1"), node="node-a",
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1")],
         want=[{"node-a": 1, "node-b": 1}], paths=[[("node-a", 1), ("node-b", 1)]]),
    dict(id="add a pod in a different namespace doesn't change topologyKeyToMinPodsMap",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]),
         added=pod("p-a1", "node-a", {"foo": ""}, ns="ns1"), pods=_foo_pods("b1"), node="node-a",
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1")],
         want=[{"node-a": 0, "node-b": 1}], paths=[[("node-a", 0), ("node-b", 1)]]),
    dict(id="add pod on non-critical node won't trigger re-calculation",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]),
         added=pod("p-b2", "node-b", {"foo": ""}), pods=_foo_pods("b1"), node="node-b",
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1")],
         want=[{"node-a": 0, "node-b": 2}], paths=[[("node-a", 0), ("node-b", 2)]]),
    dict(id="node a and x both impact topologyKeyToMinPodsMap on zone and node",
         preemptor=pod("p", labels={"foo": ""}, constraints=_node_zone_constraints()),
         added=pod("p-a1", "node-a", {"foo": ""}), pods=[], node="node-a",
         nodes=[zn("node-a", "zone1"), zn("node-x", "zone2")],
         want=[{"zone1": 1, "zone2": 0}, {"node-a": 1, "node-x": 0}],
         paths=[[("zone2", 0), ("zone1", 1)], [("node-x", 0), ("node-a", 1)]]),
    dict(id="only node a impacts topologyKeyToMinPodsMap on zone and node",
         preemptor=pod("p", labels={"foo": ""}, constraints=_node_zone_constraints()),
         added=pod("p-a1", "node-a", {"foo": ""}), pods=_foo_pods("x1"), node="node-a",
         nodes=[zn("node-a", "zone1"), zn("node-x", "zone2")],
         want=[{"zone1": 1, "zone2": 1}, {"node-a": 1, "node-x": 1}],
         paths=[[("zone1", 1), ("zone2", 1)], [("node-a", 1), ("node-x", 1)]]),
    dict(id="node a impacts the node paths, node x the zone paths",
         preemptor=pod("p", labels={"foo": ""}, constraints=_node_zone_constraints()),
         added=pod("p-a1", "node-a", {"foo": ""}), pods=_foo_pods("b1 b2 x1"), node="node-a",
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")],
         want=[{"zone1": 3, "zone2": 1}, {"node-a": 1, "node-b": 2, "node-x": 1}],
         paths=[[("zone2", 1), ("zone1", 3)], [("node-a", 1), ("node-x", 1)]]),
    dict(id="Constraints hold different labelSelectors, node a impacts the zone",
         preemptor=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, BAR)]),
         added=pod("p-a1", "node-a", {"foo": ""}),
         pods=[pod("p-b1", "node-b", {"foo": "", "bar": ""}), pod("p-x1", "node-x", {"foo": "", "bar": ""}),
               pod("p-x2", "node-x", {"bar": ""})], node="node-a",
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")],
         want=[{"zone1": 2, "zone2": 1}, {"node-a": 0, "node-b": 1, "node-x": 2}],
         paths=[[("zone2", 1), ("zone1", 2)], [("node-a", 0), ("node-b", 1)]]),
    dict(id="Constraints hold different labelSelectors, node a impacts both zone and node",
         preemptor=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, BAR)]),
         added=pod("p-a1", "node-a", {"foo": "", "bar": ""}),
         pods=[pod("p-b1", "node-b", {"bar": ""}), pod("p-x1", "node-x", {"foo": "", "bar": ""}),
               pod("p-x2", "node-x", {"bar": ""})], node="node-a",
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")],
         want=[{"zone1": 1, "zone2": 1}, {"node-a": 1, "node-b": 1, "node-x": 2}],
         paths=[[("zone1", 1), ("zone2", 1)], [("node-a", 1), ("node-b", 1)]]),
    dict(id="add a pod when scheduling a node affinity unmatched pod",
         preemptor=pod("p", labels={"foo": ""}, affinity=not_in("foo", ["bar"]), constraints=[sc(1, "zone", DNS, FOO)]),
         added=pod("p-a1", "node-a", {"foo": "", "zone": "zone1"}),
         pods=[pod("p-a2", "node-a", {"foo": "", "zone": "zone1"}), pod("p-b1", "node-b", {"foo": "", "zone": "zone2"})],
         node="node-a", nodes=[zn("node-a", "zone1", foo="bar"), zn("node-b", "zone2", foo="")],
         want=[{"zone2": 1}], paths=[[("zone2", 1), MAXP]]),
    dict(id="add a pod when scheduling a node affinity matched pod",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         added=pod("p-b1", "node-b", {"foo": "", "zone": "zone2"}),
         pods=[pod("p-a1", "node-a", {"foo": "", "zone": "zone1"}), pod("p-b2", "node-b", {"foo": "", "zone": "zone2"})],
         node="node-b", nodes=[zn("node-a", "zone1", foo="bar"), zn("node-b", "zone2", foo="")],
         want=[{"zone1": 1, "zone2": 2}], paths=[[("zone1", 1), ("zone2", 2)]]),
    dict(id="add a label selector not matched pod",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         added=pod("p-b1", "node-b", {"zone": "zone2"}),
         pods=[pod("p-a1", "node-a", {"foo": "", "zone": "zone1"}), pod("p-b2", "node-b", {"foo": "", "zone": "zone2"})],
         node="node-b", nodes=[zn("node-a", "zone1", foo="bar"), zn("node-b", "zone2", foo="")],
         want=[{"zone1": 1, "zone2": 1}], paths=[[("zone1", 1), ("zone2", 1)]]),
    dict(id="add a pod when scheduling a taint untolerated pod (taints ignored by default)",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         added=pod("p-b1", "node-b", {"foo": ""}),
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""})],
         node="node-b", nodes=[node("node-a", {"zone": "zone1", "node": "node-a"}, UNSCHEDULABLE_TAINT), zn("node-b", "zone2")],
         want=[{"zone1": 1, "zone2": 2}], paths=[[("zone1", 1), ("zone2", 2)]]),
    dict(id="add a pod on a tainted node with nodeTaintsPolicy Honor is not counted",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO, None, None, "Honor")]),
         added=pod("p-a2", "node-a", {"foo": ""}),
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-b1", "node-b", {"foo": ""})],
         node="node-a", nodes=[node("node-a", {"zone": "zone1", "node": "node-a"}, UNSCHEDULABLE_TAINT), zn("node-b", "zone2")],
         want=[{"zone2": 1}], paths=[[("zone2", 1), MAXP]]),
]


def _run_extension(case: dict, op: str):
    pl = PodTopologySpread(LIST)
    snap = snapshot(case["nodes"], case["pods"])
    preemptor = the_pod(case["preemptor"])
    state = CycleState()
    _, st = pl.pre_filter(state, preemptor, snap)
    assert st is None
    ni = snap.get(case["node"])
    moved = case["added"] if op == "add" else case["removed"]
    pi = PodInfo(the_pod(moved)) if isinstance(moved, dict) else PodInfo(moved)
    ext = pl.pre_filter_extensions()
    before = state.read(PRE_FILTER_STATE_KEY).clone()
    assert (ext.add_pod if op == "add" else ext.remove_pod)(state, preemptor, pi, ni) is None
    return state.read(PRE_FILTER_STATE_KEY), before


@pytest.mark.parametrize("case", ADD_CASES, ids=[c["id"] for c in ADD_CASES])
def test_add_pod(case):
    s, _ = _run_extension(case, "add")
    counts, paths = state_dicts(s)
    assert counts == case["want"]
    assert paths == [sorted_paths(p) for p in case["paths"]]


REMOVE_CASES = [
    dict(id="one spreadConstraint on zone, topologyKeyToMinPodsMap unchanged",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")],
         pods=_foo_pods("a1 b1 x1"), removed=0, node="node-a",
         want=[{"zone1": 1, "zone2": 1}], paths=[[("zone1", 1), ("zone2", 1)]]),
    dict(id="one spreadConstraint on node, topologyKeyToMinPodsMap changed",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4, pods=_foo_pods("a1 b1 x1 y1"), removed=0, node="node-a",
         want=[{"zone1": 1, "zone2": 2}], paths=[[("zone1", 1), ("zone2", 2)]]),
    dict(id="delete an irrelevant pod won't help",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4, pods=[pod("p-a0", "node-a", {"bar": ""})] + _foo_pods("a1 b1 x1 y1"), removed=0, node="node-a",
         want=[{"zone1": 2, "zone2": 2}], paths=[[("zone1", 2), ("zone2", 2)]]),
    dict(id="delete a non-existing pod won't help",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4, pods=_foo_pods("a1 b1 x1 y1"), removed=pod("p-a0", "node-a", {"bar": ""}), node="node-a",
         want=[{"zone1": 2, "zone2": 2}], paths=[[("zone1", 2), ("zone2", 2)]]),
    dict(id="two spreadConstraints",
         preemptor=pod("p", labels={"foo": ""}, constraints=_node_zone_constraints()),
         nodes=[zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")],
         pods=_foo_pods("a1 a2 b1 x1 x2"), removed=3, node="node-x",
         want=[{"zone1": 3, "zone2": 1}, {"node-a": 2, "node-b": 1, "node-x": 1}],
         paths=[[("zone2", 1), ("zone1", 3)], [("node-b", 1), ("node-x", 1)]]),
    dict(id="remove a pod when scheduling a node affinity unmatched pod",
         preemptor=pod("p", labels={"foo": ""}, affinity=not_in("foo", ["bar"]), constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=[zn("node-a", "zone1", foo="bar"), zn("node-b", "zone2", foo="")],
         pods=[pod("p-a2", "node-a", {"foo": ""}), pod("p-b1", "node-b", {"foo": ""})],
         removed=pod("p-a1", "node-a", {"foo": ""}), node="node-a",
         want=[{"zone2": 1}], paths=[[("zone2", 1), MAXP]]),
    dict(id="remove a pod when scheduling a node affinity matched pod",
         preemptor=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=[zn("node-a", "zone1", foo="bar"), zn("node-b", "zone2", foo="")],
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""})],
         removed=pod("p-b1", "node-b", {"foo": ""}), node="node-b",
         want=[{"zone1": 1, "zone2": 0}], paths=[[("zone2", 0), ("zone1", 1)]]),
]


@pytest.mark.parametrize("case", REMOVE_CASES, ids=[c["id"] for c in REMOVE_CASES])
def test_remove_pod(case):
    if isinstance(case["removed"], int):
        case = dict(case, removed=case["pods"][case["removed"]])
    s, _ = _run_extension(case, "remove")
    counts, paths = state_dicts(s)
    assert counts == case["want"]
    assert paths == [sorted_paths(p) for p in case["paths"]]


def test_add_pod_leaves_clone_untouched_and_terminating_pods_count():
    """Preemption works on clones; updateWithPod does not skip terminating pods."""
    case = dict(ADD_CASES[0], added=pod("p-a1", "node-a", {"foo": ""}, terminating=True))
    s, before = _run_extension(case, "add")
    assert state_dicts(s)[0] == [{"node-a": 1, "node-b": 0}]
    assert state_dicts(before)[0] == [{"node-a": 0, "node-b": 0}]


def test_extensions_error_without_pre_filter_state():
    pl = PodTopologySpread(LIST)
    snap = snapshot(NODES_4, [])
    st = pl.pre_filter_extensions().add_pod(CycleState(), the_pod(pod("p")), PodInfo(the_pod(pod("q"))),
                                            snap.get("node-a"))
    assert st is not None and st.code == Code.ERROR


# ---- Filter (TestSingleConstraint / TestMultipleConstraints) ----------------------------------

S, U, UU = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE

FILTER_CASES = [
    dict(id="no existing pods", pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4, pods=[], want={"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
    dict(id="no existing pods, incoming pod doesn't match itself",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, BAR)]),
         nodes=NODES_4, pods=[], want={"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
    dict(id="existing pods in a different namespace do not count",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]), nodes=NODES_4,
         pods=[pod("p-a1", "node-a", {"foo": ""}, ns="ns1"), pod("p-b1", "node-a", {"foo": ""}, ns="ns2")]
         + _foo_pods("x1 y1"),
         want={"node-a": S, "node-b": S, "node-x": U, "node-y": U}),
    dict(id="existing pods do not match null selector",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS)]), nodes=NODES_4, pods=_foo_pods("x1 y1"),
         want={"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
    dict(id="pods spread across zones as 3/3, all nodes fit",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]), nodes=NODES_4,
         pods=_foo_pods("a1 a2 b1 y1 y2 y3"), want={"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
    dict(id="pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=[zn("node-a", "zone1"), node("node-b", {"zon": "zone1", "node": "node-b"}), zn("node-x", "zone2"),
                zn("node-y", "zone2")],
         pods=_foo_pods("a1 b1 x1 y1"), want={"node-a": S, "node-b": UU, "node-x": U, "node-y": U}),
    dict(id="pod cannot be scheduled as all nodes don't have label 'rack'",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "rack", DNS, FOO)]),
         nodes=[zn("node-a", "zone1"), zn("node-x", "zone2")], pods=[], want={"node-a": UU, "node-x": UU}),
    dict(id="pods spread across nodes as 2/1/0/3, only node-x fits",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]), nodes=NODES_4,
         pods=_foo_pods("a1 a2 b1 y1 y2 y3"), want={"node-a": U, "node-b": U, "node-x": S, "node-y": U}),
    dict(id="pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(2, "node", DNS, FOO)]), nodes=NODES_4,
         pods=_foo_pods("a1 a2 b1 y1 y2 y3"), want={"node-a": U, "node-b": S, "node-x": S, "node-y": U}),
    dict(id="pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
         pod=pod("p", labels={"bar": ""}, constraints=[sc(1, "node", DNS, FOO)]), nodes=NODES_4,
         pods=_foo_pods("a1 a2 b1 y1 y2 y3"), want={"node-a": U, "node-b": S, "node-x": S, "node-y": U}),
    dict(id="incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
         pod=pod("p", labels={"foo": ""}, affinity=in_("node", ["node-a", "node-y"]),
                 constraints=[sc(1, "node", DNS, FOO)]), nodes=NODES_4,
         pods=_foo_pods("a1 a2 b1 y1 y2 y3"), want={"node-a": S, "node-b": S, "node-x": S, "node-y": U}),
    dict(id="terminating Pods should be excluded",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]),
         nodes=[node("node-a", {"node": "node-a"}), node("node-b", {"node": "node-b"})],
         pods=[pod("p-a", "node-a", {"foo": ""}, terminating=True), pod("p-b", "node-b", {"foo": ""})],
         want={"node-a": S, "node-b": U}),
    dict(id="incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
         pod=pod("p", labels={"foo": ""}, affinity=not_in("node", ["node-b"]), constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=NODES_4, pods=_foo_pods("b1 b2 y1"), want={"node-a": S, "node-b": S, "node-x": U, "node-y": U}),
    dict(id="pods spread across nodes as 2/2/1, maxSkew is 2, fewer domains than minDomains, the third node fits",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(2, "node", DNS, FOO, 4)]),
         nodes=[node(f"node-{c}", {"node": f"node-{c}"}) for c in "abc"], pods=_foo_pods("a1 a2 b1 b2 c1"),
         want={"node-a": U, "node-b": U, "node-c": S}),
    dict(id="pods spread across nodes as 2/2/1, maxSkew is 2, more domains than minDomains, all nodes fit",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(2, "node", DNS, FOO, 2)]),
         nodes=[node(f"node-{c}", {"node": f"node-{c}"}) for c in "abc"], pods=_foo_pods("a1 a2 b1 b2 c1"),
         want={"node-a": S, "node-b": S, "node-c": S}),
    dict(id="pods spread across zones as 2/1, maxSkew 2, fewer domains than minDomains, zone2 fits",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(2, "zone", DNS, FOO, 3)]), nodes=NODES_4,
         pods=[pod("p-b1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""})],
         want={"node-a": U, "node-b": U, "node-x": S, "node-y": S}),
    dict(id="pods spread across zones as 2/1, maxSkew 2, domains >= minDomains, all nodes fit",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(2, "zone", DNS, FOO, 1)]), nodes=NODES_4,
         pods=[pod("p-b1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""})],
         want={"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
    dict(id="NodeAffinityPolicy honored with labelSelectors",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-x", {"node": "node-x", "foo": ""}), node("node-y", {"node": "node-y"})],
         pods=[pod("p-b1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""})],
         want={"node-a": U, "node-b": U, "node-x": S, "node-y": S}),
    dict(id="NodeAffinityPolicy ignored with labelSelectors",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""}, constraints=[sc(1, "node", DNS, FOO, None, "Ignore")]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-x", {"node": "node-x", "foo": ""}), node("node-y", {"node": "node-y"})],
         pods=[pod("p-b1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""})],
         want={"node-a": U, "node-b": U, "node-x": S, "node-y": U}),
    dict(id="NodeAffinityPolicy honored with nodeAffinity",
         pod=pod("p", labels={"foo": ""}, affinity=in_("foo", [""]), constraints=[sc(1, "node", DNS, FOO)]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-x", {"node": "node-x", "foo": ""}), node("node-y", {"node": "node-y"})],
         pods=[pod("p-b1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""})],
         want={"node-a": U, "node-b": U, "node-x": S, "node-y": S}),
    dict(id="NodeAffinityPolicy ignored with nodeAffinity",
         pod=pod("p", labels={"foo": ""}, affinity=in_("foo", [""]), constraints=[sc(1, "node", DNS, FOO, None, "Ignore")]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-x", {"node": "node-x", "foo": ""}), node("node-y", {"node": "node-y"})],
         pods=[pod("p-b1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""})],
         want={"node-a": U, "node-b": U, "node-x": S, "node-y": U}),
    dict(id="NodeTaintsPolicy honored",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO, None, None, "Honor")]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-x", {"node": "node-x", "foo": ""}), node("node-y", {"node": "node-y"}, UNSCHEDULABLE_TAINT)],
         pods=[pod("p-b1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""})],
         want={"node-a": U, "node-b": U, "node-x": S, "node-y": S}),
    dict(id="NodeTaintsPolicy ignored",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-x", {"node": "node-x", "foo": ""}), node("node-y", {"node": "node-y"}, UNSCHEDULABLE_TAINT)],
         pods=[pod("p-b1", "node-a", {"foo": ""}), pod("p-b2", "node-b", {"foo": ""}), pod("p-y1", "node-y", {"foo": ""})],
         want={"node-a": U, "node-b": U, "node-x": S, "node-y": U}),
    # TestMultipleConstraints
    dict(id="two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
         pod=pod("p", labels={"foo": ""}, constraints=_node_zone_constraints()), nodes=NODES_4,
         pods=_foo_pods("a1 a2 b1 y1 y2 y3"), want={"node-a": U, "node-b": U, "node-x": S, "node-y": U}),
    dict(id="two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
         pod=pod("p", labels={"foo": ""}, constraints=_node_zone_constraints()), nodes=NODES_4,
         pods=_foo_pods("a1 a2 b1 y1 y2 y3 y4"), want={"node-a": U, "node-b": U, "node-x": U, "node-y": U}),
    dict(id="Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, BAR)]),
         nodes=NODES_4, pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-y1", "node-y", {"bar": ""})],
         want={"node-a": U, "node-b": U, "node-x": S, "node-y": U}),
    dict(id="Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, BAR)]),
         nodes=NODES_4, pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-x1", "node-x", {"bar": ""}),
                              pod("p-y1", "node-y", {"bar": ""})],
         want={"node-a": U, "node-b": U, "node-x": U, "node-y": U}),
    # edge cases
    dict(id="the first failing constraint decides: skew before a missing label",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "rack", DNS, FOO)]),
         nodes=[zn("node-a", "zone1", rack="r1"), zn("node-b", "zone1"), zn("node-c", "zone2", rack="r2")],
         pods=_foo_pods("a1 a2"), want={"node-a": U, "node-b": U, "node-c": S}),
    dict(id="the first failing constraint decides: a missing label before skew",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "rack", DNS, FOO), sc(1, "zone", DNS, FOO)]),
         nodes=[zn("node-a", "zone1", rack="r1"), zn("node-b", "zone1"), zn("node-c", "zone2", rack="r2")],
         pods=_foo_pods("a1 a2"), want={"node-a": U, "node-b": UU, "node-c": S}),
    dict(id="minDomains above the domain count makes the global minimum 0",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO, 5)]), nodes=NODES_4,
         pods=_foo_pods("a1 x1"), want={"node-a": U, "node-b": U, "node-x": U, "node-y": U}),
    dict(id="empty selector: counts are 0 but the pod matches itself",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, {})]), nodes=NODES_4,
         pods=_foo_pods("a1 a2 a3"), want={"node-a": S, "node-b": S, "node-x": S, "node-y": S}),
    dict(id="a domain with no eligible node reads 0 matches",
         pod=pod("p", labels={"foo": ""}, node_selector={"pool": "x"}, constraints=[sc(1, "zone", DNS, FOO)]),
         nodes=[zn("node-a", "zone1", pool="x"), zn("node-b", "zone2")], pods=_foo_pods("b1 b2 b3"),
         want={"node-a": S, "node-b": S}),
]


@pytest.mark.parametrize("case", FILTER_CASES, ids=[c["id"] for c in FILTER_CASES])
def test_filter(case):
    pl = PodTopologySpread(LIST)
    snap = snapshot(case["nodes"], case["pods"])
    p = the_pod(case["pod"])
    state = CycleState()
    _, st = pl.pre_filter(state, p, snap)
    assert st is None
    rows = snap.all_indices()
    bulk = pl.filter_nodes(state, p, snap, rows)
    for i, ni in enumerate(snap.node_info_list):
        got = pl.filter(state, p, ni)
        code = Code.SUCCESS if got is None else got.code
        assert code == case["want"][ni.name], ni.name
        bulk_st = None if bulk.failed[i] < 0 else bulk.statuses[bulk.failed[i]]
        assert (bulk_st is None and got is None) or (bulk_st.code, bulk_st.reasons) == (got.code, got.reasons)
        if code == U:
            assert got.reasons == (ERR_REASON_CONSTRAINTS_NOT_MATCH,)
        elif code == UU:
            assert got.reasons == (ERR_REASON_NODE_LABEL_NOT_MATCH,)


def test_filter_reason_strings():
    assert ERR_REASON_CONSTRAINTS_NOT_MATCH == "node(s) didn't match pod topology spread constraints"
    assert ERR_REASON_NODE_LABEL_NOT_MATCH == "node(s) didn't match pod topology spread constraints (missing required label)"


def test_filter_without_pre_filter_state_is_an_error():
    pl = PodTopologySpread(LIST)
    snap = snapshot(NODES_4, [])
    st = pl.filter(CycleState(), the_pod(pod("p")), snap.node_info_list[0])
    assert st is not None and st.code == Code.ERROR


def test_filter_after_add_pod_uses_updated_counts():
    """Preemption's what-if: adding a matching pod to node-x makes node-x too skewed."""
    pl = PodTopologySpread(LIST)
    snap = snapshot(NODES_4, _foo_pods("a1 b1 y1"))
    p = the_pod(pod("p", labels={"foo": ""}, constraints=[sc(1, "node", DNS, FOO)]))
    state = CycleState()
    pl.pre_filter(state, p, snap)
    x = snap.get("node-x")
    assert pl.filter(state, p, x) is None
    clone = state.clone()
    pl.pre_filter_extensions().add_pod(clone, p, PodInfo(the_pod(pod("p-x1", "node-x", {"foo": ""}))), x)
    assert pl.filter(clone, p, x) is None  # min is now 1 everywhere: 1 + 1 - 1 = 1
    pl.pre_filter_extensions().add_pod(clone, p, PodInfo(the_pod(pod("p-x2", "node-x", {"foo": ""}))), x)
    assert pl.filter(clone, p, x).code == Code.UNSCHEDULABLE
    bulk = pl.filter_nodes(clone, p, snap, snap.all_indices())
    assert [bool(f >= 0) for f in bulk.failed] == [pl.filter(clone, p, ni) is not None for ni in snap.node_info_list]
    assert pl.filter(state, p, x) is None  # the original state is untouched


# ---- PreScore state (TestPreScoreStateEmptyNodes) ---------------------------------------------

def _pre_score(pl, p, snap, names):
    state = CycleState()
    st = pl.pre_score(state, p, snap, rows_of(snap, names))
    return state, st


def test_pre_score_skip_without_soft_constraints():
    pl = PodTopologySpread(LIST)
    snap = snapshot([node("node-a", {HOST: "node-a"}), node("node-b", {HOST: "node-b"})], [])
    _, st = _pre_score(pl, the_pod(pod("p")), snap, ["node-a", "node-b"])
    assert st is not None and st.code == Code.SKIP


def test_pre_score_skip_when_replicaset_does_not_exist():
    sources = StaticSelectorSources(replica_sets={("default", "rs1"): LabelSelector.of(match_expressions=[])})
    pl = PodTopologySpread({"defaultingType": "List", "defaultConstraints": [sc(2, "planet", SA)],
                            "selectorSources": sources})
    p = the_pod(pod("p", labels={"foo": "bar", "baz": "sup"},
                    owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs2"}))
    _, st = _pre_score(pl, p, snapshot([node("node-a", {"planet": "mars"})], []), ["node-a"])
    assert st is not None and st.code == Code.SKIP


def test_pre_score_skip_with_no_nodes():
    pl = PodTopologySpread(LIST)
    snap = snapshot([], [])
    state = CycleState()
    st = pl.pre_score(state, the_pod(pod("p", constraints=[sc(1, "zone", SA, FOO)])), snap, np.zeros(0, np.int64))
    assert st.code == Code.SKIP


PRE_SCORE_CASES = [
    dict(id="normal case",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", SA, FOO), sc(1, HOST, SA, FOO)]),
         nodes=[node(n, {"zone": z, HOST: n}) for n, z in (("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"))],
         args=LIST, ignored=set(), sizes=[2, 3], buckets=[{"zone1", "zone2"}, None]),
    dict(id="null selector",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", SA)]),
         nodes=[node(n, {"zone": z, HOST: n}) for n, z in (("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"))],
         args=LIST, ignored=set(), sizes=[2], buckets=[{"zone1", "zone2"}]),
    dict(id="node-x doesn't have label zone",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", SA, FOO), sc(1, HOST, SA, BAR)]),
         nodes=[node("node-a", {"zone": "zone1", HOST: "node-a"}), node("node-b", {"zone": "zone1", HOST: "node-b"}),
                node("node-x", {HOST: "node-x"})],
         args=LIST, ignored={"node-x"}, sizes=[1, 2], buckets=[{"zone1"}, None]),
    dict(id="system default constraints and a replicaset: nodes without zone are a domain",
         pod=pod("p", labels={"foo": "tar", "baz": "sup"}, owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1"}),
         nodes=[node("node-a", {HOST: "node-a", ZONE: "mars"}), node("node-b", {HOST: "node-b", ZONE: "mars"}),
                node("node-c", {HOST: "node-c"}), node("node-d", {HOST: "node-d"})],
         args={}, sources=StaticSelectorSources(replica_sets={("default", "rs1"): LabelSelector.of(
             match_expressions=[_req("foo", "Exists")])}),
         ignored=set(), sizes=[4, 2], buckets=[None, {"mars", ""}], keys=[HOST, ZONE], skews=[3, 5]),
    dict(id="default constraints and a replicaset",
         pod=pod("p", labels={"foo": "tar", "baz": "sup"}, owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1"}),
         nodes=[node("node-a", {"rack": "rack1", HOST: "node-a", "planet": "mars"})],
         args={"defaultingType": "List", "defaultConstraints": [sc(1, HOST, SA), sc(2, "rack", DNS), sc(2, "planet", SA)]},
         sources=StaticSelectorSources(replica_sets={("default", "rs1"): LabelSelector.of({"foo": "tar"})}),
         ignored=set(), sizes=[1, 1], buckets=[None, {"mars"}], keys=[HOST, "planet"], skews=[1, 2]),
    dict(id="default constraints and a replicaset, but pod has constraints",
         pod=pod("p", labels={"foo": "bar", "baz": "sup"}, owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1"},
                 constraints=[sc(1, "zone", DNS, BAR), sc(2, "planet", SA, {"matchLabels": {"baz": "sup"}})]),
         nodes=[node("node-a", {"planet": "mars", "galaxy": "andromeda"})],
         args={"defaultingType": "List", "defaultConstraints": [sc(2, "galaxy", SA)]},
         sources=StaticSelectorSources(replica_sets={("default", "rs1"): LabelSelector.of({"foo": "bar"})}),
         ignored=set(), sizes=[1], buckets=[{"mars"}], keys=["planet"], skews=[2]),
    dict(id="NodeAffinityPolicy honored with labelSelectors",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""}, constraints=[sc(1, "zone", SA, BAR)]),
         nodes=[node("node-a", {"zone": "zone1", "foo": "", HOST: "node-a"}),
                node("node-b", {"zone": "zone1", "foo": "", HOST: "node-b"}), node("node-x", {"zone": "zone2", HOST: "node-x"})],
         args=LIST, ignored=set(), sizes=[2], buckets=[{"zone1", "zone2"}]),
    dict(id="NodeTaintsPolicy honored",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", SA, BAR, None, None, "Honor")]),
         nodes=[node("node-a", {"zone": "zone1", "foo": "", HOST: "node-a"}),
                node("node-b", {"zone": "zone1", "foo": "", HOST: "node-b"}),
                node("node-x", {"zone": "zone2", HOST: "node-x"}, UNSCHEDULABLE_TAINT)],
         args=LIST, ignored=set(), sizes=[2], buckets=[{"zone1", "zone2"}]),
]


@pytest.mark.parametrize("case", PRE_SCORE_CASES, ids=[c["id"] for c in PRE_SCORE_CASES])
def test_pre_score_state(case):
    args = dict(case["args"])
    if case.get("sources"):
        args["selectorSources"] = case["sources"]
    pl = PodTopologySpread(args)
    snap = snapshot(case["nodes"], [])
    names = [n["metadata"]["name"] for n in case["nodes"]]
    state, st = _pre_score(pl, the_pod(case["pod"]), snap, names)
    assert st is None
    s = state.read(PRE_SCORE_STATE_KEY)
    assert set(s.ignored_names) == case["ignored"]
    assert s.weights == [topology_normalizing_weight(n) for n in case["sizes"]]
    for i, want in enumerate(case["buckets"]):
        if want is None:
            assert s.buckets[i] is None
            continue
        col = s.cols[i]
        values = col.values + [""]
        assert {values[b] for b in np.unique(s.buckets[i][rows_of(snap, [n for n in names if n not in case["ignored"]])])} == want
    if "keys" in case:
        assert [c.topology_key for c in s.constraints] == case["keys"]
        assert [c.max_skew for c in s.constraints] == case["skews"]


# ---- Score + NormalizeScore (TestPodTopologySpreadScore) --------------------------------------

def _host_nodes(names: str) -> list:
    return [node(f"node-{c}", {HOST: f"node-{c}"}) for c in names.split()]


def _zone_host_nodes(spec: str) -> list:
    """'a:zone1 b:zone1' -> nodes with zone and hostname labels."""
    out = []
    for item in spec.split():
        c, z = item.split(":")
        out.append(node(f"node-{c}", {"zone": z, HOST: f"node-{c}"}))
    return out


SCORE_CASES = [
    dict(id="one constraint on node, no existing pods",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA, FOO)]),
         nodes=_host_nodes("a b"), pods=[], want={"node-a": 100, "node-b": 100}),
    dict(id="one constraint on node, only one node is candidate",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA, FOO)]),
         nodes=_host_nodes("a"), failed=_host_nodes("b"), pods=_foo_pods("a1 a2 b1"), want={"node-a": 100}),
    dict(id="one constraint on node, all nodes have the same number of matching pods",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA, FOO)]),
         nodes=_host_nodes("a b"), pods=_foo_pods("a1 b1"), want={"node-a": 100, "node-b": 100}),
    dict(id="one constraint on node, all 4 nodes are candidates",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA, FOO)]),
         nodes=_host_nodes("a b c d"), pods=_foo_pods("a1 a2 b1 d1 d2 d3"),
         want={"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0}),
    dict(id="one constraint on node, null selector",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA)]),
         nodes=_host_nodes("a b c d"), pods=_foo_pods("a1 a2 b1 d1 d2 d3"),
         want={"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100}),
    dict(id="one constraint on node, all 4 nodes are candidates, maxSkew=2",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(2, HOST, SA, FOO)]),
         nodes=_host_nodes("a b c d"), pods=_foo_pods("a1 a2 b1 d1 d2 d3"),
         want={"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16}),
    dict(id="one constraint on node, all 4 nodes are candidates, maxSkew=3",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(3, HOST, SA, FOO)]),
         nodes=_host_nodes("a b c d"), pods=_foo_pods("a1 a2 a3 a4 b1 b2 b3 c1 c2 d1"),
         want={"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}),
    dict(id="system defaulting, nodes don't have zone, pods match service",
         pod=pod("p", labels={"foo": ""}), args={},
         sources=StaticSelectorSources(service_selectors={"default": [{"foo": ""}]}),
         nodes=_host_nodes("a b c d"), pods=_foo_pods("a1 a2 a3 a4 b1 b2 b3 c1 c2 d1"),
         want={"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}),
    dict(id="one constraint on node, 3 out of 4 nodes are candidates",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA, FOO)]),
         nodes=_host_nodes("a b x"), failed=_host_nodes("y"), pods=_foo_pods("a1 a2 a3 a4 b1 b2 x1 y1 y2 y3"),
         want={"node-a": 33, "node-b": 83, "node-x": 100}),
    dict(id="one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA, FOO)]),
         nodes=[node("node-a", {HOST: "node-a"}), node("node-b", {"n": "node-b"}), node("node-x", {HOST: "node-x"})],
         failed=_host_nodes("y"), pods=_foo_pods("a1 a2 a3 a4 b1 b2 x1 y1 y2 y3"),
         want={"node-a": 16, "node-b": 0, "node-x": 100}),
    dict(id="one constraint on zone, 3 out of 4 nodes are candidates",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", SA, FOO)]),
         nodes=_zone_host_nodes("a:zone1 b:zone1 x:zone2"), failed=_zone_host_nodes("y:zone2"),
         pods=_foo_pods("a1 a2 a3 a4 b1 b2 x1 y1 y2 y3"), want={"node-a": 75, "node-b": 75, "node-x": 100}),
    dict(id="two Constraints on zone and node, 2 out of 4 nodes are candidates",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", SA, FOO), sc(1, HOST, SA, FOO)]),
         nodes=_zone_host_nodes("a:zone1 x:zone2"), failed=_zone_host_nodes("b:zone1 y:zone2"),
         pods=_foo_pods("a1 a2 b1 x1 x2 y1 y2 y3 y4"), want={"node-a": 100, "node-x": 63}),
    dict(id="two Constraints on zone, 2 out of 4 nodes are candidates",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", SA, FOO), sc(1, "zone", SA, BAR)]),
         nodes=[node("node-a", {"zone": "zone1"}), node("node-x", {"zone": "zone2"})],
         failed=[node("node-b", {"zone": "zone1"}), node("node-y", {"zone": "zone2"})],
         pods=[pod("p-a1", "node-a", {"foo": "", "bar": ""}), pod("p-a2", "node-a", {"foo": ""}),
               pod("p-b1", "node-b", {"foo": "", "bar": ""}), pod("p-y1", "node-y", {"foo": ""}),
               pod("p-y2", "node-y", {"foo": "", "bar": ""}), pod("p-y3", "node-y", {"foo": ""})],
         want={"node-a": 85, "node-x": 100}),
    dict(id="two Constraints on zone and node, with different labelSelectors",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", SA, FOO), sc(1, HOST, SA, BAR)]),
         nodes=_zone_host_nodes("a:zone1 b:zone1 x:zone2 y:zone2"),
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-b1", "node-b", {"foo": "", "bar": ""}),
               pod("p-y1", "node-y", {"foo": ""}), pod("p-y2", "node-y", {"bar": ""})],
         want={"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60}),
    dict(id="two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", SA, FOO), sc(1, HOST, SA, BAR)]),
         nodes=_zone_host_nodes("a:zone1 b:zone1 x:zone2 y:zone2"),
         pods=[pod("p-b1", "node-b", {"bar": ""}), pod("p-x1", "node-x", {"foo": ""}),
               pod("p-y1", "node-y", {"foo": "", "bar": ""})],
         want={"node-a": 100, "node-b": 60, "node-x": 40, "node-y": 0}),
    dict(id="two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", SA, FOO), sc(1, HOST, SA, BAR)]),
         nodes=_zone_host_nodes("a:zone1 b:zone1 x:zone2"), failed=_zone_host_nodes("y:zone2"),
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-b1", "node-b", {"foo": "", "bar": ""}),
               pod("p-y1", "node-y", {"foo": ""}), pod("p-y2", "node-y", {"bar": ""})],
         want={"node-a": 50, "node-b": 25, "node-x": 100}),
    dict(id="existing pods in a different namespace do not count",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA, FOO)]), nodes=_host_nodes("a b"),
         pods=[pod("p-a1", "node-a", {"foo": ""}, ns="ns1")] + _foo_pods("a2 b1 b2"),
         want={"node-a": 100, "node-b": 33}),
    dict(id="terminating Pods should be excluded",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, HOST, SA, FOO)]), nodes=_host_nodes("a b"),
         pods=[pod("p-a", "node-a", {"foo": ""}, terminating=True), pod("p-b", "node-b", {"foo": ""})],
         want={"node-a": 100, "node-b": 0}),
    dict(id="minDomains has no effect when ScheduleAnyway",
         # The API server refuses minDomains with ScheduleAnyway, so it is set after loading.
         pod=pod("p", labels={"foo": ""}, constraints=[sc(2, "node", SA, FOO)]), min_domains_after_load=10,
         nodes=[node(f"node-{c}", {"node": f"node-{c}"}) for c in "abc"], pods=_foo_pods("a1 a2 b1 b2 c1"),
         want={"node-a": 75, "node-b": 75, "node-c": 100}),
    dict(id="NodeAffinityPolicy honored with labelSelectors",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""}, constraints=[sc(1, "node", SA, FOO)]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-c", {"node": "node-c"})],
         pods=_foo_pods("a1 a2 b1 c1"), want={"node-a": 0, "node-b": 33, "node-c": 100}),
    dict(id="NodeAffinityPolicy ignored with labelSelectors",
         pod=pod("p", labels={"foo": ""}, node_selector={"foo": ""}, constraints=[sc(1, "node", SA, FOO, None, "Ignore")]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-c", {"node": "node-c"})],
         pods=_foo_pods("a1 a2 b1 c1"), want={"node-a": 66, "node-b": 100, "node-c": 100}),
    dict(id="NodeAffinityPolicy honored with nodeAffinity",
         pod=pod("p", labels={"foo": ""}, affinity=in_("foo", [""]), constraints=[sc(1, "node", SA, FOO)]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-c", {"node": "node-c"})],
         pods=_foo_pods("a1 a2 b1 c1"), want={"node-a": 0, "node-b": 33, "node-c": 100}),
    dict(id="NodeAffinityPolicy ignored with nodeAffinity",
         pod=pod("p", labels={"foo": ""}, affinity=in_("foo", [""]), constraints=[sc(1, "node", SA, FOO, None, "Ignore")]),
         nodes=[node("node-a", {"node": "node-a", "foo": ""}), node("node-b", {"node": "node-b", "foo": ""}),
                node("node-c", {"node": "node-c"})],
         pods=_foo_pods("a1 a2 b1 c1"), want={"node-a": 66, "node-b": 100, "node-c": 100}),
    dict(id="NodeTaintsPolicy honored",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", SA, FOO, None, None, "Honor")]),
         nodes=[node("node-a", {"node": "node-a"}), node("node-b", {"node": "node-b"}),
                node("node-c", {"node": "node-c"}, UNSCHEDULABLE_TAINT)],
         pods=_foo_pods("a1 a2 b1 c1"), want={"node-a": 0, "node-b": 33, "node-c": 100}),
    dict(id="NodeTaintsPolicy ignored",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "node", SA, FOO)]),
         nodes=[node("node-a", {"node": "node-a"}), node("node-b", {"node": "node-b"}),
                node("node-c", {"node": "node-c"}, UNSCHEDULABLE_TAINT)],
         pods=_foo_pods("a1 a2 b1 c1"), want={"node-a": 66, "node-b": 100, "node-c": 100}),
    dict(id="matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
         pod=pod("p", labels={"foo": "", "bar": ""}, constraints=[sc(1, "zone", SA, {}, match_label_keys=["foo"]),
                                                                 sc(1, HOST, SA, {}, match_label_keys=["bar"])]),
         nodes=_zone_host_nodes("a:zone1 b:zone1 c:zone2 d:zone2"),
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-b1", "node-b", {"foo": "", "bar": ""}),
               pod("p-y1", "node-c", {"foo": ""}), pod("p-y2", "node-c", {"bar": ""})],
         want={"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100}),
    dict(id="matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
         pod=pod("p", labels={"foo": "", "bar": "", "baz": ""}, constraints=[sc(1, "zone", SA, FOO),
                                                                            sc(1, HOST, SA, BAR, match_label_keys=["baz"])]),
         nodes=_zone_host_nodes("a:zone1 b:zone1 c:zone2 d:zone2"),
         pods=[pod("p-a1", "node-a", {"foo": ""}), pod("p-b1", "node-b", {"foo": "", "bar": "", "baz": ""}),
               pod("p-c1", "node-c", {"foo": ""}), pod("p-c2", "node-c", {"bar": ""}),
               pod("p-d3", "node-c", {"bar": "", "baz": ""})],
         want={"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100}),
    # edge cases
    dict(id="system defaulting: a node without zone is still spread by hostname",
         pod=pod("p", labels={"app": "w"}), args={},
         sources=StaticSelectorSources(service_selectors={"default": [{"app": "w"}]}),
         nodes=[node("node-a", {HOST: "node-a", ZONE: "z1"}), node("node-b", {HOST: "node-b", ZONE: "z1"}),
                node("node-c", {HOST: "node-c"})],
         pods=[pod("w1", "node-a", {"app": "w"}), pod("w2", "node-a", {"app": "w"}), pod("w3", "node-c", {"app": "w"})],
         want={"node-a": 33, "node-b": 58, "node-c": 100}),
    dict(id="List defaulting with no default constraints skips", args=LIST,
         pod=pod("p", labels={"foo": ""}), nodes=_host_nodes("a b"), pods=[], want=None),
]


@pytest.mark.parametrize("case", SCORE_CASES, ids=[c["id"] for c in SCORE_CASES])
def test_score(case):
    args = dict(case.get("args", {"defaultingType": "System"}))
    if case.get("sources"):
        args["selectorSources"] = case["sources"]
    pl = PodTopologySpread(args)
    snap = snapshot(case["nodes"] + case.get("failed", []), case["pods"])
    p = the_pod(case["pod"])
    if case.get("min_domains_after_load"):
        p.topology_spread_constraints[0].min_domains = case["min_domains_after_load"]
    names = [n["metadata"]["name"] for n in case["nodes"]]
    state, st = _pre_score(pl, p, snap, names)
    if case["want"] is None:
        assert st is not None and st.code == Code.SKIP
        return
    assert st is None
    rows = rows_of(snap, names)
    per_node = np.array([pl.score(state, p, snap.get(n))[0] for n in names], dtype=np.int64)
    bulk = pl.score_nodes(state, p, snap, rows)
    assert list(bulk) == list(per_node)
    assert pl.normalize_score(state, p, bulk) is None
    assert dict(zip(names, bulk.tolist())) == case["want"]


def test_normalize_without_pre_score_state_is_an_error():
    st = PodTopologySpread(LIST).normalize_score(CycleState(), the_pod(pod("p")), np.zeros(2, np.int64))
    assert st is not None and st.code == Code.ERROR


# ---- Go float64 math ------------------------------------------------------------------------------

@pytest.mark.parametrize("x,bits", [
    (2.0, 0x3FE62E42FEFA39EF),  # ln 2
    (3.0, 0x3FF193EA7AAD030A),  # Go prints 1.0986122886681096; the correctly rounded log(3) is ...030B
    (4.0, 0x3FF62E42FEFA39EF),
    (1.0, 0x0),
], ids=["log2", "log3-go-ulp", "log4", "log1"])
def test_go_log_bits(x, bits):
    import struct
    assert struct.unpack("<Q", struct.pack("<d", go_log(x)))[0] == bits


def test_go_log_close_to_math_log():
    for n in range(2, 10002):
        assert abs(go_log(float(n)) - math.log(n)) <= 2 * math.ulp(math.log(n))


# ---- critical paths ---------------------------------------------------------------------------

def test_critical_paths_closed_form_matches_update_loop():
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 8)
        values = [f"v{i}" for i in range(n)] + ([""] if rng.random() < 0.3 else [])
        counts = np.array([rng.randint(0, 4) for _ in values], dtype=np.int64)
        present = np.array([rng.random() < 0.8 for _ in values], dtype=bool)
        got = initial_critical_paths(values, counts, present)
        loop = CriticalPaths()
        for i in np.flatnonzero(present).tolist():
            loop.update(values[i], int(counts[i]))
        assert got.as_tuples() == loop.as_tuples(), (values, counts, present)


def test_critical_paths_update_keeps_minimum_first():
    p = CriticalPaths()
    for v, n in (("a", 3), ("b", 1), ("c", 2)):
        p.update(v, n)
    assert p.as_tuples() == [("b", 1), ("c", 2)]
    p.update("b", 5)  # the current minimum grows: paths swap
    assert p.as_tuples() == [("c", 2), ("b", 5)]


# ---- pod index --------------------------------------------------------------------------------

def test_pod_index_matches_brute_force_and_follows_changes():
    rng = random.Random(3)
    nodes = [node(f"n{i}", {"zone": f"z{i % 3}"}) for i in range(12)]
    pods = [pod(f"p{i}", f"n{rng.randrange(12)}", {"app": rng.choice("abc"), "tier": rng.choice("xy")},
                ns=rng.choice(["default", "other"]), terminating=rng.random() < 0.1) for i in range(80)]
    snap = snapshot(nodes, pods)
    idx = PodLabelIndex()
    sels = [LabelSelector.of({"app": "a"}), LabelSelector.of({"app": "b", "tier": "x"}),
            LabelSelector.of({"app": "rare"}),
            LabelSelector.of(match_expressions=[_req("app", "NotIn", ["a"])]),
            LabelSelector.of(match_expressions=[_req("tier", "Exists")]),
            LabelSelector.of(match_expressions=[_req("app", "In", ["a", "c"])]),
            LabelSelector.of(), None]

    def check():
        idx.refresh(snap)
        for ns in ("default", "other"):
            for sel in sels:
                want = [count_pods_match_selector(ni.pods, sel, ns) for ni in snap.node_info_list]
                assert idx.node_counts(ns, sel).tolist() == want

    check()
    extra = load(*[pod(f"q{i}", f"n{i % 12}", {"app": "a", "tier": "y"}) for i in range(5)]).pods
    for p in extra:
        snap.add_pod(p)
    check()
    snap.remove_pod(extra[0])
    snap.remove_pod(snap.node_info_list[0].pods[0].pod)
    check()
    snap.add_node(load(node("n99", {"zone": "z9"})).nodes[0])
    check()
    # many small moves, answered between each (the per-posting counts follow row by row),
    # including a label value whose every pod goes and comes back
    for step in range(60):
        live = [pi.pod for ni in snap.node_info_list for pi in ni.pods]
        if live and rng.random() < 0.5:
            snap.remove_pod(rng.choice(live))
        else:
            label = "rare" if step % 7 == 0 else rng.choice("abc")
            snap.add_pod(load(pod(f"r{step}", f"n{rng.randrange(12)}", {"app": label, "tier": "x"})).pods[0])
        check()


# ---- bulk vs per-node on random clusters --------------------------------------------------------

def test_pre_filter_state_when_every_node_has_the_keys_is_the_general_computation(monkeypatch):
    """PreFilter skips the per-node eligibility mask when every node carries every constraint's
    key (no row is left out, every domain is present): the same state as the general
    computation, with and without node inclusion policies."""
    rng = random.Random(29)
    for trial in range(40):
        nodes = []
        for i in range(rng.randint(1, 14)):
            labels = {HOST: f"n{i}", ZONE: rng.choice(["z1", "z2", "z3"])}
            if rng.random() < 0.5:
                labels["pool"] = rng.choice(["a", "b"])
            nodes.append(node(f"n{i}", labels, UNSCHEDULABLE_TAINT if rng.random() < 0.2 else []))
        pods = [pod(f"p{j}", f"n{rng.randrange(len(nodes))}", {"app": rng.choice(["w", "v"])},
                    terminating=rng.random() < 0.1) for j in range(rng.randint(0, 30))]
        constraints = [sc(rng.randint(1, 3), key, DNS, {"matchLabels": {"app": "w"}},
                          rng.choice([None, 2]), rng.choice([None, "Ignore"]), rng.choice([None, "Honor"]))
                       for key in rng.sample([HOST, ZONE], rng.randint(1, 2))]
        p = the_pod(pod("incoming", labels={"app": "w"}, constraints=constraints,
                        node_selector={"pool": "a"} if rng.random() < 0.3 else None))

        def pre_filter_state() -> tuple[list, list]:
            state = CycleState()
            _, st = PodTopologySpread(LIST).pre_filter(state, p, snapshot(nodes, pods))
            assert st is None
            return state_dicts(state.read(PRE_FILTER_STATE_KEY))

        fast = pre_filter_state()
        with monkeypatch.context() as m:
            m.setattr(LabelColumn, "on_every_node", lambda self: False)
            assert pre_filter_state() == fast, trial


def test_bulk_and_per_node_agree_on_random_clusters():
    rng = random.Random(11)
    for trial in range(25):
        nodes = []
        for i in range(rng.randint(1, 14)):
            labels = {HOST: f"n{i}"}
            if rng.random() < 0.85:
                labels[ZONE] = rng.choice(["z1", "z2", "z3", ""])
            if rng.random() < 0.5:
                labels["pool"] = rng.choice(["a", "b"])
            taints = UNSCHEDULABLE_TAINT if rng.random() < 0.2 else []
            nodes.append(node(f"n{i}", labels, taints))
        pods = [pod(f"p{j}", f"n{rng.randrange(len(nodes))}", {"app": rng.choice(["w", "v"])},
                    terminating=rng.random() < 0.1) for j in range(rng.randint(0, 30))]
        constraints = []
        for key in rng.sample([HOST, ZONE, "pool"], rng.randint(1, 3)):
            constraints.append(sc(rng.randint(1, 3), key, rng.choice([DNS, SA]), {"matchLabels": {"app": "w"}},
                                  None, rng.choice([None, "Ignore"]), rng.choice([None, "Honor"])))
        for c in constraints:
            if c["whenUnsatisfiable"] == DNS and rng.random() < 0.4:
                c["minDomains"] = rng.randint(1, 5)
        p = the_pod(pod("incoming", labels={"app": "w"}, constraints=constraints,
                        node_selector={"pool": "a"} if rng.random() < 0.3 else None))
        snap = snapshot(nodes, pods)
        pl = PodTopologySpread({"defaultingType": rng.choice(["System", "List"])})
        state = CycleState()
        _, st = pl.pre_filter(state, p, snap)
        rows = snap.all_indices()
        if st is None:
            bulk = pl.filter_nodes(state, p, snap, rows)
            for i, ni in enumerate(snap.node_info_list):
                per = pl.filter(state, p, ni)
                b = None if bulk.failed[i] < 0 else bulk.statuses[bulk.failed[i]]
                assert (per is None) == (b is None)
                if per is not None:
                    assert (per.code, per.reasons) == (b.code, b.reasons)
        feasible = rows[rng.random() < 0.5:] if len(rows) else rows
        st2 = pl.pre_score(state, p, snap, feasible)
        if st2 is None:
            bulk_scores = pl.score_nodes(state, p, snap, feasible)
            per_scores = [pl.score(state, p, snap.node_info_list[r])[0] for r in feasible]
            assert bulk_scores.tolist() == per_scores
            pl.normalize_score(state, p, bulk_scores)
            assert all(0 <= s <= 100 for s in bulk_scores.tolist())


# ---- default selector ---------------------------------------------------------------------------

DEFAULT_SELECTOR_CASES = [
    dict(id="no sources: nothing selects the pod", pod=pod("p", labels={"app": "w"}),
         sources=StaticSelectorSources(), want=[]),
    dict(id="matching services merge", pod=pod("p", labels={"app": "w", "tier": "x"}),
         sources=StaticSelectorSources(service_selectors={"default": [{"app": "w"}, {"tier": "x"}, {"app": "v"}, None]}),
         want=[("match_labels", (("app", "w"), ("tier", "x")))]),
    dict(id="services of another namespace don't count", pod=pod("p", labels={"app": "w"}, ns="other"),
         sources=StaticSelectorSources(service_selectors={"default": [{"app": "w"}]}), want=[]),
    dict(id="replicaset selector adds requirements",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}),
         sources=StaticSelectorSources(replica_sets={("default", "rs"): LabelSelector.of({"app": "w"}, [_req("t", "Exists")])}),
         want=[("match_expressions", (_req("app", "In", ["w"]), _req("t", "Exists")))]),
    dict(id="statefulset selector adds requirements",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ss"}),
         sources=StaticSelectorSources(stateful_sets={("default", "ss"): LabelSelector.of({"app": "w"})}),
         want=[("match_expressions", (_req("app", "In", ["w"]),))]),
    dict(id="replication controller selector merges into the label set",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "v1", "kind": "ReplicationController", "name": "rc"}),
         sources=StaticSelectorSources(replication_controllers={("default", "rc"): {"app": "w"}}),
         want=[("match_labels", (("app", "w"),))]),
    dict(id="owner without apps/v1 group is not a ReplicaSet",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "", "kind": "ReplicaSet", "name": "rs"}),
         sources=StaticSelectorSources(replica_sets={("default", "rs"): LabelSelector.of({"app": "w"})}), want=[]),
    dict(id="nil replicaset selector adds nothing",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}),
         sources=StaticSelectorSources(replica_sets={("default", "rs"): None}), want=[]),
    dict(id="a workload's replicaset (the mesh's and explain's sources)",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}),
         sources=WorkloadSelectorSources(WorkloadSelectors([
             WorkloadSelector("ReplicaSet", "default", "rs", LabelSelector.of({"app": "w"}))])),
         want=[("match_expressions", (_req("app", "In", ["w"]),))]),
    dict(id="a workload's statefulset",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "ss"}),
         sources=WorkloadSelectorSources(WorkloadSelectors([
             WorkloadSelector("StatefulSet", "default", "ss", LabelSelector.of({"app": "w"}))])),
         want=[("match_expressions", (_req("app", "In", ["w"]),))]),
    dict(id="a workload's replication controller merges into the Services' label set",
         pod=pod("p", labels={"app": "w", "tier": "x"},
                 owner={"apiVersion": "v1", "kind": "ReplicationController", "name": "rc"}),
         sources=WorkloadSelectorSources(WorkloadSelectors([
             WorkloadSelector("Service", "default", "s", LabelSelector.of({"tier": "x"})),
             WorkloadSelector("ReplicationController", "default", "rc", LabelSelector.of({"app": "w"})),
             WorkloadSelector("ReplicationController", "other", "rc", LabelSelector.of({"z": "1"}))])),
         want=[("match_labels", (("app", "w"), ("tier", "x"))), ("match_expressions", ())]),
    dict(id="a loaded replication controller's default selector (its template's labels)",
         pod=pod("p", labels={"app": "w", "tier": "x"},
                 owner={"apiVersion": "v1", "kind": "ReplicationController", "name": "rc"}),
         sources=WorkloadSelectorSources(WorkloadSelectors(load_text("""
apiVersion: v1
kind: ReplicationController
metadata: {name: rc}
spec:
  template:
    metadata: {labels: {app: w, tier: x}}
    spec: {containers: [{name: c}]}
""").workloads)),
         want=[("match_labels", (("app", "w"), ("tier", "x")))]),
    dict(id="a Job is no source: its selector is never read",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "batch/v1", "kind": "Job", "name": "j"}),
         sources=WorkloadSelectorSources(WorkloadSelectors([
             WorkloadSelector("Job", "default", "j", LabelSelector.of({"app": "w"}))])),
         want=[]),
    dict(id="the Services applied that select the pod merge; another namespace's do not",
         pod=pod("p", labels={"app": "w", "tier": "x"}),
         sources=WorkloadSelectorSources(WorkloadSelectors([
             WorkloadSelector("Service", "default", "a", LabelSelector.of({"app": "w"})),
             WorkloadSelector("Service", "default", "b", LabelSelector.of({"tier": "x"})),
             WorkloadSelector("Service", "default", "c", None),
             WorkloadSelector("Service", "other", "d", LabelSelector.of({"z": "1"}))])),
         want=[("match_labels", (("app", "w"), ("tier", "x")))]),
    dict(id="a workload of another kind or namespace is not the owner",
         pod=pod("p", labels={"app": "w"}, owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}),
         sources=WorkloadSelectorSources(WorkloadSelectors([
             WorkloadSelector("StatefulSet", "default", "rs", LabelSelector.of({"app": "w"})),
             WorkloadSelector("ReplicaSet", "other", "rs", LabelSelector.of({"app": "w"}))])),
         want=[]),
]


@pytest.mark.parametrize("case", DEFAULT_SELECTOR_CASES, ids=[c["id"] for c in DEFAULT_SELECTOR_CASES])
def test_default_constraints_selector(case):
    pl = PodTopologySpread({"selectorSources": case["sources"]})
    cs = pl.constraints_for(the_pod(case["pod"]), SA)
    if not case["want"]:
        assert cs == []
        return
    assert [(c.topology_key, c.max_skew) for c in cs] == [(HOST, 3), (ZONE, 5)]
    for attr, value in case["want"]:
        assert getattr(cs[0].selector, attr) == value
    assert pl.constraints_for(the_pod(case["pod"]), DNS) == []


@pytest.mark.parametrize("case", DEFAULT_SELECTOR_CASES, ids=[c["id"] for c in DEFAULT_SELECTOR_CASES])
@pytest.mark.parametrize("args", [{}, {"defaultingType": "List", "defaultConstraints": []},
                                  {"defaultingType": "List", "defaultConstraints": [
                                      {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]}],
                         ids=["system defaults", "no defaults", "listed hard default"])
def test_node_local_exactly_when_no_constraint_applies(case, args):
    """node_local (the mesh's batches and shard feeds) is True exactly when the pod has no
    constraint of either action, its own or a default one, however it is worked out."""
    pl = PodTopologySpread({**args, "selectorSources": case["sources"]})
    p = the_pod(case["pod"])
    assert pl.node_local(p) == (not pl.constraints_for(p, DNS) and not pl.constraints_for(p, SA))
    own = dataclasses.replace(p, topology_spread_constraints=[
        TopologySpreadConstraint(1, ZONE, "ScheduleAnyway", LabelSelector.of({"app": "w"}))])
    assert not pl.node_local(own)


def test_selector_sources_from_handle():
    class Handle:
        services = {"spread_selector_sources": StaticSelectorSources(service_selectors={"default": [{"app": "w"}]})}
    pl = PodTopologySpread({}, Handle())
    assert len(pl.constraints_for(the_pod(pod("p", labels={"app": "w"})), SA)) == 2


# ---- args ---------------------------------------------------------------------------------------

ARGS_CASES = [
    dict(id="defaults to System", args=None, ok=True),
    dict(id="List with constraints", args={"defaultingType": "List", "defaultConstraints": [sc(1, ZONE, SA)]}, ok=True),
    dict(id="System with constraints",
         args={"defaultingType": "System", "defaultConstraints": [sc(1, ZONE, SA)]},
         err='defaultingType: Invalid value: "System": when .defaultConstraints are not empty'),
    dict(id="unknown defaulting type", args={"defaultingType": "Foo"},
         err='defaultingType: Unsupported value: "Foo": supported values: "System", "List"'),
    dict(id="maxSkew 0", args={"defaultingType": "List", "defaultConstraints": [sc(0, ZONE, SA)]},
         err="defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)"),
    dict(id="empty topologyKey", args={"defaultingType": "List", "defaultConstraints": [sc(1, "", SA)]},
         err="defaultConstraints[0].topologyKey: Required value: can not be empty"),
    dict(id="bad whenUnsatisfiable", args={"defaultingType": "List", "defaultConstraints": [sc(1, ZONE, "Maybe")]},
         err='defaultConstraints[0].whenUnsatisfiable: Unsupported value: "Maybe": supported values: '
             '"DoNotSchedule", "ScheduleAnyway"'),
    dict(id="labelSelector forbidden",
         args={"defaultingType": "List", "defaultConstraints": [sc(1, ZONE, SA, {"matchLabels": {"a": "b"}})]},
         err="defaultConstraints[0].labelSelector: Forbidden: constraint must not define a selector, "
             "as they deduced for each pod"),
    dict(id="duplicate constraint",
         args={"defaultingType": "List", "defaultConstraints": [sc(1, ZONE, SA), sc(2, ZONE, SA)]},
         err='defaultConstraints[1]: Duplicate value: "{topology.kubernetes.io/zone, ScheduleAnyway}"'),
    dict(id="several errors are aggregated",
         args={"defaultingType": "List", "defaultConstraints": [sc(0, "", SA)]},
         err="[defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf), "
             "defaultConstraints[0].topologyKey: Required value: can not be empty]"),
]


@pytest.mark.parametrize("case", ARGS_CASES, ids=[c["id"] for c in ARGS_CASES])
def test_args(case):
    if case.get("ok"):
        PodTopologySpread(case["args"])
        return
    with pytest.raises(ValueError) as e:
        PodTopologySpread(case["args"])
    assert str(e.value) == case["err"]


def test_list_default_constraints_apply_to_pods_without_constraints():
    pl = PodTopologySpread({"defaultingType": "List", "defaultConstraints": [sc(1, "zone", DNS)],
                            "selectorSources": StaticSelectorSources(service_selectors={"default": [{"app": "w"}]})})
    snap = snapshot(NODES_4, [pod("w1", "node-a", {"app": "w"})])
    p = the_pod(pod("p", labels={"app": "w"}))
    state = CycleState()
    _, st = pl.pre_filter(state, p, snap)
    assert st is None
    got = {ni.name: pl.filter(state, p, ni) is None for ni in snap.node_info_list}
    assert got == {"node-a": False, "node-b": False, "node-x": True, "node-y": True}


# ---- events and queueing hints (plugin_test.go) ------------------------------------------------

def test_events_to_register():
    evs = PodTopologySpread(LIST).events_to_register()
    assert [(e.event.resource, e.event.action) for e in evs] == [
        (EventResource.POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.UPDATE_POD_TOLERATION
         | ActionType.DELETE),
        (EventResource.NODE, ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL
         | ActionType.UPDATE_NODE_TAINT)]
    assert all(e.hint is not None for e in evs)


Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
ONE_ZONE = [sc(1, "zone", DNS, FOO)]
ZONE_NODE = [sc(1, "zone", DNS, FOO), sc(1, "node", DNS, FOO)]

NODE_HINT_CASES = [
    dict(id="node updates label which matches topologyKey", constraints=ONE_ZONE,
         old=node("node-a", {"zone": "zone1"}), new=node("node-a", {"zone": "zone2"}), want=Q),
    dict(id="node that doesn't match topologySpreadConstraints updates non-related label", constraints=ONE_ZONE,
         old=node("node-a", {"foo": "bar1"}), new=node("node-a", {"foo": "bar2"}), want=SKIP),
    dict(id="node that match topologySpreadConstraints adds non-related label", constraints=ZONE_NODE,
         old=node("node-a", {"zone": "zone1", "node": "node1", "foo": "bar"}),
         new=node("node-a", {"zone": "zone1", "node": "node1"}), want=SKIP),
    dict(id="create node with non-related labels", constraints=ONE_ZONE, old=None,
         new=node("node-a", {"foo": "bar"}), want=SKIP),
    dict(id="create node with related labels", constraints=ONE_ZONE, old=None, new=node("node-a", {"zone": "zone1"}),
         want=Q),
    dict(id="delete node with non-related labels", constraints=ONE_ZONE, old=node("node-a", {"foo": "bar"}),
         new=None, want=SKIP),
    dict(id="delete node with related labels", constraints=ONE_ZONE, old=node("node-a", {"zone": "zone1"}),
         new=None, want=Q),
    dict(id="add node with related labels that only match one of topologySpreadConstraints", constraints=ZONE_NODE,
         old=None, new=node("node-a", {"zone": "zone1"}), want=SKIP),
    dict(id="add node with related labels that match all topologySpreadConstraints", constraints=ZONE_NODE,
         old=None, new=node("node-a", {"zone": "zone1", "node": "node1"}), want=Q),
    dict(id="update node with related labels that only match one of topologySpreadConstraints", constraints=ZONE_NODE,
         old=node("node-a", {"zone": "zone1"}), new=node("node-a", {"zone": "zone1"}), want=SKIP),
    dict(id="update node with related labels that match all topologySpreadConstraints", constraints=ZONE_NODE,
         old=node("node-a", {"zone": "zone1", "node": "node1"}), new=node("node-a", {"zone": "zone1", "node": "node2"}),
         want=Q),
    dict(id="matching node changes its taints", constraints=ONE_ZONE,
         old=node("node-a", {"zone": "zone1"}), new=node("node-a", {"zone": "zone1"}, UNSCHEDULABLE_TAINT), want=Q),
    # No hard constraint means no key to miss: nodeLabelsMatchSpreadConstraints is vacuously true.
    dict(id="pod without hard constraints requeues on any node add", constraints=[sc(1, "zone", SA, FOO)],
         old=None, new=node("node-a", {"other": "x"}), want=Q),
]


@pytest.mark.parametrize("case", NODE_HINT_CASES, ids=[c["id"] for c in NODE_HINT_CASES])
def test_node_change_hint(case):
    pl = PodTopologySpread(LIST)
    p = the_pod(pod("p", constraints=case["constraints"]))
    old = load(case["old"]).nodes[0] if case["old"] else None
    new = load(case["new"]).nodes[0] if case["new"] else None
    assert pl.is_schedulable_after_node_change(p, old, new) == case["want"]


P_FOO = pod("p", labels={"foo": ""}, constraints=ONE_ZONE)
P_FOO_BAR = pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO), sc(1, "node", DNS, BAR)])

POD_HINT_CASES = [
    dict(id="add pod with labels match topologySpreadConstraints selector", pod=P_FOO, old=None,
         new=pod("q", "fake-node", {"foo": ""}), want=Q),
    dict(id="add un-scheduled pod", pod=P_FOO, old=None, new=pod("q", labels={"foo": ""}), want=SKIP),
    dict(id="update un-scheduled pod", pod=P_FOO, old=pod("q", labels={"bar": ""}), new=pod("q", labels={"foo": ""}),
         want=SKIP),
    dict(id="delete un-scheduled pod", pod=P_FOO, old=pod("q", labels={"foo": ""}), new=None, want=SKIP),
    dict(id="add pod with different namespace", pod=P_FOO, old=None,
         new=pod("q", "fake-node", {"foo": ""}, ns="fake-namespace"), want=SKIP),
    dict(id="add pod with labels don't match topologySpreadConstraints selector", pod=P_FOO, old=None,
         new=pod("q", "fake-node", {"bar": ""}), want=SKIP),
    dict(id="delete pod with labels that match topologySpreadConstraints selector", pod=P_FOO,
         old=pod("q", "fake-node", {"foo": ""}), new=None, want=Q),
    dict(id="delete pod with labels that don't match topologySpreadConstraints selector", pod=P_FOO,
         old=pod("q", "fake-node", {"bar": ""}), new=None, want=SKIP),
    dict(id="update pod's non-related label", pod=P_FOO, old=pod("q", "fake-node", {"foo": "", "bar": "bar1"}),
         new=pod("q", "fake-node", {"foo": "", "bar": "bar2"}), want=SKIP),
    dict(id="add pod's label that matches topologySpreadConstraints selector", pod=P_FOO,
         old=pod("q", "fake-node"), new=pod("q", "fake-node", {"foo": ""}), want=Q),
    dict(id="delete pod label that matches topologySpreadConstraints selector", pod=P_FOO,
         old=pod("q", "fake-node", {"foo": ""}), new=pod("q", "fake-node"), want=Q),
    dict(id="change pod's label that matches topologySpreadConstraints selector", pod=P_FOO,
         old=pod("q", "fake-node", {"foo": "foo1"}), new=pod("q", "fake-node", {"foo": "foo2"}), want=SKIP),
    dict(id="add label matching the second of multiple constraints", pod=P_FOO_BAR,
         old=pod("q", "fake-node", {"foo": ""}), new=pod("q", "fake-node", {"foo": "", "bar": "bar2"}), want=Q),
    dict(id="change label matching no constraint with multiple constraints", pod=P_FOO_BAR,
         old=pod("q", "fake-node", {"foo": ""}), new=pod("q", "fake-node", {"foo": "", "baz": ""}), want=SKIP),
    dict(id="change label value still matching with multiple constraints", pod=P_FOO_BAR,
         old=pod("q", "fake-node", {"foo": "", "bar": ""}), new=pod("q", "fake-node", {"foo": "", "bar": "bar2"}),
         want=SKIP),
    dict(id="the pod itself gains a toleration with nodeTaintsPolicy Honor",
         pod=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO, None, None, "Honor")]),
         old=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO, None, None, "Honor")]),
         new=pod("p", labels={"foo": ""}, constraints=[sc(1, "zone", DNS, FOO, None, None, "Honor")],
                 tolerations=[{"key": "k", "operator": "Exists"}]), want=Q),
    dict(id="the pod itself gains a toleration without nodeTaintsPolicy Honor", pod=P_FOO, old=P_FOO,
         new=dict(P_FOO, spec=dict(P_FOO["spec"], tolerations=[{"key": "k", "operator": "Exists"}])), want=SKIP),
]


@pytest.mark.parametrize("case", POD_HINT_CASES, ids=[c["id"] for c in POD_HINT_CASES])
def test_pod_change_hint(case):
    pl = PodTopologySpread(LIST)
    old = the_pod(case["old"]) if case["old"] else None
    new = the_pod(case["new"]) if case["new"] else None
    assert pl.is_schedulable_after_pod_change(the_pod(case["pod"]), old, new) == case["want"]


# ---- golden scenarios ---------------------------------------------------------------------------

GOLDEN = Path(__file__).resolve().parents[4] / "tests" / "golden"  # the repo's copy
GOLDEN_NAMES = sorted(p.name[:-len(".in.json")] for p in GOLDEN.glob("*.in.json"))
assert GOLDEN_NAMES, f"no golden scenarios in {GOLDEN}"


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_scenarios(name):
    """Replays each scenario's pending pods (placing each on the recorded node) and checks every
    PodTopologySpread verdict the recording shows: nodes it rejected (same reasons), feasible
    nodes (must pass) and its weighted normalized scores (or its absence when PreScore skips)."""
    data = json.loads((GOLDEN / f"{name}.in.json").read_text())
    results = json.loads((GOLDEN / f"{name}.out.json").read_text())["results"]
    cluster = load(*data.get("nodes", []), *data.get("pods", []))
    pending = load(*data["pending"]).pods
    snap = Snapshot(cluster.nodes, cluster.pods)
    pl = PodTopologySpread(None)
    for p, res in zip(pending, results):
        assert res["pod"] == p.key
        verdicts = res["nodes"]
        infos = snap.node_info_list
        state = CycleState()
        _, st = pl.pre_filter(state, p, snap)
        if st is not None:
            assert st.code == Code.SKIP
            assert not any(v.get("plugin") == "PodTopologySpread" for v in verdicts.values())
        else:
            bulk = pl.filter_nodes(state, p, snap, snap.all_indices())
            for i, ni in enumerate(infos):
                v = verdicts[ni.name]
                mine = None if bulk.failed[i] < 0 else bulk.statuses[bulk.failed[i]]
                if v["feasible"]:
                    assert mine is None, ni.name
                elif v["plugin"] == "PodTopologySpread":
                    assert mine is not None and list(mine.reasons) == v["reasons"], ni.name
        feasible = np.array([i for i, ni in enumerate(infos) if verdicts[ni.name]["feasible"]], dtype=np.int64)
        if len(feasible):
            golden = [verdicts[infos[i].name]["scores"].get("PodTopologySpread") for i in feasible]
            st = pl.pre_score(state, p, snap, feasible)
            if st is not None:
                assert st.code == Code.SKIP and golden == [None] * len(golden)
            else:
                scores = pl.score_nodes(state, p, snap, feasible)
                pl.normalize_score(state, p, scores)
                assert (scores * 2).tolist() == golden
        if res.get("chosen"):
            p.node_name = res["chosen"]
            snap.add_pod(p)


def test_warm_builds_the_default_constraints_label_columns():
    """Idle, the queue-manager warms the plugins: the node label columns of the default
    constraints' keys (System defaulting: hostname and zone; List: the configured ones), which
    every pod they apply to reads, are built then; none when there are no default constraints."""
    snap = snapshot([node("a", {"kubernetes.io/hostname": "a", "topology.kubernetes.io/zone": "z1"})], [])
    PodTopologySpread(None, None).warm(snap)
    assert sorted(snap.cols._labels) == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert snap.cols.label("topology.kubernetes.io/zone").values == ["z1"]
    listed = snapshot([zn("a", "z1")], [])
    PodTopologySpread({"defaultingType": "List", "defaultConstraints": [sc(1, "zone", "ScheduleAnyway")]}, None).warm(listed)
    assert list(listed.cols._labels) == ["zone"]
    none = snapshot([zn("a", "z1")], [])
    PodTopologySpread(LIST, None).warm(none)
    assert not none.cols._labels
