"""Event matching, pod-update events, and the queueing hint map built from a Framework."""
from __future__ import annotations

import pytest

from schedmesh.api.types import Toleration
from schedmesh.framework.events import ActionType as A
from schedmesh.framework.events import ClusterEvent, EventResource
from schedmesh.framework.events import EventResource as R
from schedmesh.queue.hints import (EVENT_ASSIGNED_POD_ADD, EVENT_UNSCHEDULED_POD_UPDATE, build_queueing_hint_map,
                                   default_queueing_hint, event_label, match_cluster_events,
                                   pod_scheduling_properties_change)
from schedmesh.queue.testing import FakeNodeFit, clone, make_framework, make_pod


def ev(resource: EventResource, action: A, label: str = "") -> ClusterEvent:
    return ClusterEvent(resource, action, label)


@pytest.mark.parametrize("registered, incoming, want", [
    pytest.param(ev(R.NODE, A.ADD), ev(R.NODE, A.ADD), True, id="same"),
    pytest.param(ev(R.NODE, A.UPDATE), ev(R.NODE, A.UPDATE_NODE_LABEL), True, id="general-covers-specific"),
    pytest.param(ev(R.NODE, A.UPDATE_NODE_LABEL), ev(R.NODE, A.UPDATE), False, id="specific-does-not-cover-general"),
    pytest.param(ev(R.NODE, A.UPDATE_NODE_LABEL), ev(R.NODE, A.UPDATE_NODE_TAINT), False, id="different-specific"),
    pytest.param(ev(R.NODE, A.ADD | A.UPDATE_NODE_TAINT), ev(R.NODE, A.UPDATE_NODE_TAINT), True, id="combined"),
    pytest.param(ev(R.NODE, A.ADD), ev(R.POD, A.ADD), False, id="other-resource"),
    pytest.param(ev(R.POD, A.ADD), ev(R.ASSIGNED_POD, A.ADD), True, id="pod-covers-assigned"),
    pytest.param(ev(R.POD, A.UPDATE), ev(R.UNSCHEDULED_POD, A.UPDATE_POD_LABEL), True, id="pod-covers-unscheduled"),
    pytest.param(ev(R.ASSIGNED_POD, A.ADD), ev(R.UNSCHEDULED_POD, A.ADD), False, id="assigned-not-unscheduled"),
    pytest.param(ev(R.WILDCARD, A.ADD), ev(R.NODE, A.ADD), True, id="wildcard-resource"),
    pytest.param(ev(R.WILDCARD, A.ALL), ev(R.NODE, A.UPDATE_NODE_LABEL | A.UPDATE_NODE_TAINT), True, id="wildcard"),
    pytest.param(ev(R.NODE, A.ALL), ev(R.WILDCARD, A.ALL, "UnschedulableTimeout"), False, id="incoming-wildcard"),
    pytest.param(ev(R.WILDCARD, A.ALL), ev(R.WILDCARD, A.ALL, "UnschedulableTimeout"), True, id="both-wildcard"),
])
def test_match_cluster_events(registered, incoming, want):
    assert match_cluster_events(registered, incoming) is want


@pytest.mark.parametrize("change, assigned, want", [
    pytest.param({}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE)], id="nothing-specific"),
    pytest.param({"annotations": {"a": "b"}}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE)], id="annotation-only"),
    pytest.param({"labels": {"x": "y"}}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE_POD_LABEL)], id="labels"),
    pytest.param({"labels": {"x": "y"}}, True, [ev(R.ASSIGNED_POD, A.UPDATE_POD_LABEL)], id="labels-assigned"),
    pytest.param({"cpu": "500m"}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE_POD_SCALE_DOWN)], id="scale-down"),
    pytest.param({"cpu": "2"}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE)], id="scale-up-is-generic"),
    pytest.param({"cpu": None}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE_POD_SCALE_DOWN)], id="request-removed"),
    pytest.param({"gates": []}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)],
                 id="gates-eliminated"),
    pytest.param({"gates": ["g2"]}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE)], id="gates-changed-not-eliminated"),
    pytest.param({"tolerations": [Toleration("k")]}, False, [ev(R.UNSCHEDULED_POD, A.UPDATE_POD_TOLERATION)],
                 id="toleration-added"),
    pytest.param({"labels": {"x": "y"}, "gates": [], "tolerations": [Toleration("k")]}, False,
                 [ev(R.UNSCHEDULED_POD, A.UPDATE_POD_LABEL),
                  ev(R.UNSCHEDULED_POD, A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
                  ev(R.UNSCHEDULED_POD, A.UPDATE_POD_TOLERATION)], id="several-in-kube-order"),
])
def test_pod_scheduling_properties_change(change, assigned, want):
    node = "n1" if assigned else ""
    old = make_pod("p", cpu="1", gates=["g1"], node_name=node)
    new = make_pod("p", cpu=change.get("cpu", "1"), gates=change.get("gates", ["g1"]), node_name=node,
                   labels=change.get("labels"), annotations=change.get("annotations"),
                   tolerations=change.get("tolerations", ()))
    assert pod_scheduling_properties_change(new, old) == want


def test_event_labels_follow_kube():
    assert event_label(ev(R.NODE, A.ADD)) == "NodeAdd"
    assert event_label(EVENT_UNSCHEDULED_POD_UPDATE) == "UnschedulablePodUpdate"
    assert event_label(EVENT_ASSIGNED_POD_ADD) == "AssignedPodAdd"
    assert event_label(ev(R.NODE, A.UPDATE_NODE_TAINT)) == "NodeUpdateNodeTaint"
    assert event_label(ev(R.WILDCARD, A.ALL, "UnschedulableTimeout")) == "UnschedulableTimeout"


def test_hint_map_from_framework():
    fw = make_framework()
    hints = build_queueing_hint_map(fw)
    by_event = {e: [(f.plugin_name, f.fn) for f in fns] for e, fns in hints.items()}
    gates = ev(R.POD, A.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
    assert [n for n, _ in by_event[gates]] == ["FakeSchedulingGates"]
    # FakeNodeFit registered NodeAdd with its hint ...
    assert by_event[ev(R.NODE, A.ADD)] == [("FakeNodeFit", FakeNodeFit._node_added)]
    # ... and, having no UpdateNodeTaint, gets it with the default (Queue) hint (kube #109437).
    assert by_event[ev(R.NODE, A.UPDATE_NODE_TAINT)] == [("FakeNodeFit", default_queueing_hint)]
    # A filter without EnqueueExtensions is interested in everything.
    assert by_event[ev(R.POD, A.ALL)] == [("FakeNoExtensionsFilter", default_queueing_hint)]
    assert by_event[ev(R.NODE, A.ALL)] == [("FakeNoExtensionsFilter", default_queueing_hint)]
    # Neither the queue-sort nor the bind plugin can reject a pod: no entries.
    assert {f.plugin_name for fns in hints.values() for f in fns} == {
        "FakeSchedulingGates", "FakeNodeFit", "FakeNoExtensionsFilter"}


def test_changing_a_pod_copy_does_not_touch_the_original():
    pod = make_pod("p", labels={"a": "1"})
    assert clone(pod, labels={"b": "2"}).labels == {"b": "2"} and pod.labels == {"a": "1"}
