"""NodeResourcesFit: PreFilter/Filter (per node and bulk), queueing hints, arguments.

Cases re-express kube-scheduler's fit_test.go (TestEnoughRequests, TestNotEnoughRequests,
TestStorageRequests, TestRestartableInitContainers, TestEventsToRegister,
Test_isSchedulableAfterPodChange, Test_isSchedulableAfterNodeChange, TestIsFit,
TestHaveAnyRequestedResourcesIncreased) plus edge cases. Scoring is in test_node_resources_scoring.py.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest

from schedmesh.framework.events import ActionType, ClusterEvent, EventResource, QueueingHint
from schedmesh.framework.interface import Code, CycleState, Status
from schedmesh.plugins.node_resources import Fit
from schedmesh.plugins.node_resources._test_builders import make_node, make_pod, sidecar, snapshot
from schedmesh.plugins.node_resources.args import parse_balanced_allocation_args, parse_fit_args
from schedmesh.plugins.node_resources.fit import (
    InsufficientResource,
    fits_request,
    have_any_requested_resources_increased,
    is_fit,
)
from schedmesh.plugins.node_resources.requests import fit_request

AAA, BBB = "example.com/aaa", "example.com/bbb"
KIO_A, KIO_B = "kubernetes.io/something", "subdomain.kubernetes.io/something"
HP = "hugepages-2Mi"
DRA_NAME = "extended.resource.dra.io/something"

# kube's makeAllocatableResources(10, 20, 32, 5, 20, 5): cpu 10m, memory 20, pods 32, aaa 5, eph 20, hugepages 5.
KUBE_NODE = {"cpu": "10m", "memory": 20, "pods": 32, AAA: 5, "ephemeral-storage": 20, HP: 5}

UNSCHED, UNRES = Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def r(cpu: int = 0, mem: int = 0, **scalars: int) -> dict:
    """kube's framework.Resource{MilliCPU, Memory, ScalarResources} as container requests."""
    out: dict[str, Any] = {"cpu": f"{cpu}m", "memory": mem}
    for k, v in scalars.items():
        out[{"aaa": AAA, "bbb": BBB, "kio_a": KIO_A, "kio_b": KIO_B, "hp": HP, "dra": DRA_NAME, "eph": "ephemeral-storage"}[k]] = v
    return out


def run_filter(pod, nodes, pods=(), args=None) -> tuple[list[Optional[Status]], list[Optional[Status]]]:
    """Per-node and bulk Filter over every node; asserts nothing, returns both."""
    snap = snapshot(nodes, pods)
    fit = Fit(args)
    state = CycleState()
    res, st = fit.pre_filter(state, pod, snap)
    assert res is None and st is None
    per_node = [fit.filter(state, pod, ni) for ni in snap.node_info_list]
    verdicts = fit.filter_nodes(state, pod, snap, snap.all_indices())
    bulk = [None if f < 0 else verdicts.statuses[f] for f in verdicts.failed]
    return per_node, bulk


def same_status(a: Optional[Status], b: Optional[Status]) -> bool:
    if a is None or b is None:
        return a is b
    return a.code == b.code and a.reasons == b.reasons


# (id, pod, pod already on the node, plugin args, want insufficient resources, want code)
IR = InsufficientResource
ENOUGH_REQUESTS = [
    ("no resources requested always fits", make_pod(), make_pod(r(10, 20)), None, [], None),
    ("too many resources fails", make_pod(r(1, 1)), make_pod(r(10, 20)), None,
     [IR("cpu", "Insufficient cpu", 1, 10, 10), IR("memory", "Insufficient memory", 1, 20, 20)], UNSCHED),
    ("too many resources fails due to init container cpu", make_pod(r(1, 1), init=[r(3, 1)]), make_pod(r(8, 19)),
     None, [IR("cpu", "Insufficient cpu", 3, 8, 10)], UNSCHED),
    ("too many resources fails due to highest init container cpu", make_pod(r(1, 1), init=[r(3, 1), r(2, 1)]),
     make_pod(r(8, 19)), None, [IR("cpu", "Insufficient cpu", 3, 8, 10)], UNSCHED),
    ("too many resources fails due to init container memory", make_pod(r(1, 1), init=[r(1, 3)]),
     make_pod(r(9, 19)), None, [IR("memory", "Insufficient memory", 3, 19, 20)], UNSCHED),
    ("too many resources fails due to highest init container memory", make_pod(r(1, 1), init=[r(1, 3), r(1, 2)]),
     make_pod(r(9, 19)), None, [IR("memory", "Insufficient memory", 3, 19, 20)], UNSCHED),
    ("init container fits because it's the max, not sum", make_pod(r(1, 1), init=[r(1, 1)]), make_pod(r(9, 19)),
     None, [], None),
    ("multiple init containers fit because it's the max, not sum", make_pod(r(1, 1), init=[r(1, 1), r(1, 1)]),
     make_pod(r(9, 19)), None, [], None),
    ("both resources fit", make_pod(r(1, 1)), make_pod(r(5, 5)), None, [], None),
    ("one resource memory fits", make_pod(r(2, 1)), make_pod(r(9, 5)), None,
     [IR("cpu", "Insufficient cpu", 2, 9, 10)], UNSCHED),
    ("one resource cpu fits", make_pod(r(1, 2)), make_pod(r(5, 19)), None,
     [IR("memory", "Insufficient memory", 2, 19, 20)], UNSCHED),
    ("equal edge case", make_pod(r(5, 1)), make_pod(r(5, 19)), None, [], None),
    ("equal edge case for init container", make_pod(r(4, 1), init=[r(5, 1)]), make_pod(r(5, 19)), None, [], None),
    ("extended resource fits", make_pod(r(aaa=1)), make_pod(r()), None, [], None),
    ("extended resource fits for init container", make_pod(r(), init=[r(aaa=1)]), make_pod(r()), None, [], None),
    ("extended resource capacity enforced", make_pod(r(1, 1, aaa=10)), make_pod(r(aaa=0)), None,
     [IR(AAA, f"Insufficient {AAA}", 10, 0, 5, True)], UNRES),
    ("extended resource capacity enforced for init container", make_pod(r(), init=[r(1, 1, aaa=10)]),
     make_pod(r(aaa=0)), None, [IR(AAA, f"Insufficient {AAA}", 10, 0, 5, True)], UNRES),
    ("extended resource allocatable enforced", make_pod(r(1, 1, aaa=1)), make_pod(r(aaa=5)), None,
     [IR(AAA, f"Insufficient {AAA}", 1, 5, 5)], UNSCHED),
    ("extended resource allocatable enforced for init container", make_pod(r(), init=[r(1, 1, aaa=1)]),
     make_pod(r(aaa=5)), None, [IR(AAA, f"Insufficient {AAA}", 1, 5, 5)], UNSCHED),
    ("extended resource allocatable enforced for multiple containers", make_pod(r(1, 1, aaa=3), r(1, 1, aaa=3)),
     make_pod(r(aaa=2)), None, [IR(AAA, f"Insufficient {AAA}", 6, 2, 5, True)], UNRES),
    ("extended resource allocatable admits multiple init containers", make_pod(r(), init=[r(1, 1, aaa=3), r(1, 1, aaa=3)]),
     make_pod(r(aaa=2)), None, [], None),
    ("extended resource allocatable enforced for multiple init containers",
     make_pod(r(), init=[r(1, 1, aaa=6), r(1, 1, aaa=3)]), make_pod(r(aaa=2)), None,
     [IR(AAA, f"Insufficient {AAA}", 6, 2, 5, True)], UNRES),
    ("extended resource allocatable enforced for unknown resource", make_pod(r(1, 1, bbb=1)), make_pod(r()), None,
     [IR(BBB, f"Insufficient {BBB}", 1, 0, 0, True)], UNRES),
    ("extended resource allocatable enforced for unknown resource for init container",
     make_pod(r(), init=[r(1, 1, bbb=1)]), make_pod(r()), None, [IR(BBB, f"Insufficient {BBB}", 1, 0, 0, True)], UNRES),
    ("kubernetes.io resource capacity enforced", make_pod(r(1, 1, kio_a=10)), make_pod(r()), None,
     [IR(KIO_A, f"Insufficient {KIO_A}", 10, 0, 0, True)], UNRES),
    ("kubernetes.io resource capacity enforced for init container", make_pod(r(), init=[r(1, 1, kio_b=10)]),
     make_pod(r()), None, [IR(KIO_B, f"Insufficient {KIO_B}", 10, 0, 0, True)], UNRES),
    ("hugepages resource capacity enforced", make_pod(r(1, 1, hp=10)), make_pod(r(hp=0)), None,
     [IR(HP, f"Insufficient {HP}", 10, 0, 5, True)], UNRES),
    ("hugepages resource capacity enforced for init container", make_pod(r(), init=[r(1, 1, hp=10)]),
     make_pod(r(hp=0)), None, [IR(HP, f"Insufficient {HP}", 10, 0, 5, True)], UNRES),
    ("hugepages resource allocatable enforced for multiple containers", make_pod(r(1, 1, hp=3), r(1, 1, hp=3)),
     make_pod(r(hp=2)), None, [IR(HP, f"Insufficient {HP}", 6, 2, 5, True)], UNRES),
    ("skip checking ignored extended resource", make_pod(r(1, 1, bbb=1)), make_pod(r()),
     {"ignoredResources": [BBB]}, [], None),
    ("resources + pod overhead fits", make_pod(r(1, 1), overhead={"cpu": "3m", "memory": 13}), make_pod(r(5, 5)),
     None, [], None),
    ("requests + overhead does not fit for memory", make_pod(r(1, 1), overhead={"cpu": "1m", "memory": 15}),
     make_pod(r(5, 5)), None, [IR("memory", "Insufficient memory", 16, 5, 20)], UNSCHED),
    ("skip checking ignored extended resource via resource groups", make_pod(r(1, 1, bbb=1, kio_a=1)), make_pod(r()),
     {"ignoredResourceGroups": ["example.com"]}, [IR(KIO_A, f"Insufficient {KIO_A}", 1, 0, 0, True)], UNRES),
    ("skip checking extended resource request with quantity zero", make_pod(r(1, 1, aaa=0)), make_pod(r(aaa=6)),
     None, [], None),
    ("skip checking resource request with quantity zero", make_pod(r(aaa=1)), make_pod(r(20, 30, aaa=1)), None, [],
     None),
    ("both pod-level and container-level resources fit", make_pod(r(1, 1), pod_requests={"cpu": "1m", "memory": 2}),
     make_pod(r(5, 5)), None, [], None),
    ("pod-level cpu resource not fit", make_pod(r(1, 1), pod_requests={"cpu": "7m", "memory": 2}), make_pod(r(5, 5)),
     None, [IR("cpu", "Insufficient cpu", 7, 5, 10)], UNSCHED),
    ("pod-level memory resource not fit", make_pod(r(1, 1), pod_requests={"cpu": "3m", "memory": 2}),
     make_pod(r(5, 19)), None, [IR("memory", "Insufficient memory", 2, 19, 20)], UNSCHED),
    ("pod-level hugepages resource fit", make_pod({}, pod_requests={"cpu": "3m", "memory": 2, HP: 5}), None, None,
     [], None),
    ("both pod-level and container-level hugepages resource fit",
     make_pod(r(1, 1, hp=3), pod_requests={"cpu": "3m", "memory": 2, HP: 5}), None, None, [], None),
    ("pod-level hugepages resource not fit", make_pod({}, pod_requests={"cpu": "3m", "memory": 2, HP: 10}), None, None,
     [IR(HP, f"Insufficient {HP}", 10, 0, 5, True)], UNRES),
    ("one pod-level cpu resource fits and all init and non-init containers resources fit",
     make_pod(r(1, 1), init=[r(1, 1)], pod_requests={"cpu": "3m", "memory": 2}), make_pod(r(5, 19)), None,
     [IR("memory", "Insufficient memory", 2, 19, 20)], UNSCHED),
    ("extended resource backed by DRA not enabled", make_pod(r(1, 1, dra=1)), make_pod(r()), None,
     [IR(DRA_NAME, f"Insufficient {DRA_NAME}", 1, 0, 0, True)], UNRES),
    # Edge cases beyond kube's table.
    ("hugepages cannot be ignored as an extended resource", make_pod(r(1, 1, hp=10)), None,
     {"ignoredResources": [HP], "ignoredResourceGroups": ["hugepages-2Mi"]},
     [IR(HP, f"Insufficient {HP}", 10, 0, 5, True)], UNRES),
    ("kubernetes.io prefixed resource is not ignorable by group", make_pod(r(1, 1, kio_a=1)), None,
     {"ignoredResourceGroups": ["kubernetes.io"]}, [IR(KIO_A, f"Insufficient {KIO_A}", 1, 0, 0, True)], UNRES),
    ("every failing resource is reported, scalars sorted", make_pod(r(11, 21, bbb=1, aaa=6, eph=21)), None, None,
     [IR("cpu", "Insufficient cpu", 11, 0, 10, True), IR("memory", "Insufficient memory", 21, 0, 20, True),
      IR("ephemeral-storage", "Insufficient ephemeral-storage", 21, 0, 20, True),
      IR(AAA, f"Insufficient {AAA}", 6, 0, 5, True), IR(BBB, f"Insufficient {BBB}", 1, 0, 0, True)], UNRES),
    ("sidecar requests add to containers", make_pod(r(6, 1), init=[sidecar(r(5, 1))]), None, None,
     [IR("cpu", "Insufficient cpu", 11, 0, 10, True)], UNRES),
    ("existing requests above allocatable: resolvable by preemption", make_pod(r(1, 1)), make_pod(r(30, 1)), None,
     [IR("cpu", "Insufficient cpu", 1, 30, 10)], UNSCHED),
]


@pytest.mark.parametrize("pod,existing,args,want,code", [c[1:] for c in ENOUGH_REQUESTS],
                         ids=[c[0] for c in ENOUGH_REQUESTS])
def test_enough_requests(pod, existing, args, want, code):
    node = make_node("node", KUBE_NODE)
    if existing is not None:
        existing.node_name = "node"
    pods = [existing] if existing is not None else []
    per_node, bulk = run_filter(pod, [node], pods, args)
    assert same_status(per_node[0], bulk[0])
    if code is None:
        assert per_node[0] is None
    else:
        assert per_node[0].code == code
        assert list(per_node[0].reasons) == [w.reason for w in want]
    fa = parse_fit_args(args)
    ni = snapshot([node], pods).node_info_list[0]
    assert fits_request(fit_request(pod), ni, fa.ignored_resources, fa.ignored_resource_groups) == want


NOT_ENOUGH = [
    ("even without specified resources, predicate fails when there's no space for additional pod",
     make_pod(), make_pod(r(10, 20))),
    ("even if both resources fit, predicate fails when there's no space for additional pod",
     make_pod(r(1, 1)), make_pod(r(5, 5))),
    ("even for equal edge case, predicate fails when there's no space for additional pod",
     make_pod(r(5, 1)), make_pod(r(5, 19))),
    ("even for equal edge case, predicate fails when there's no space for additional pod due to init container",
     make_pod(r(5, 1), init=[r(5, 1)]), make_pod(r(5, 19))),
]


@pytest.mark.parametrize("pod,existing", [c[1:] for c in NOT_ENOUGH], ids=[c[0] for c in NOT_ENOUGH])
def test_not_enough_requests(pod, existing):
    node = make_node("node", {"cpu": "10m", "memory": 20, "pods": 1})
    existing.node_name = "node"
    per_node, bulk = run_filter(pod, [node], [existing])
    assert same_status(per_node[0], bulk[0])
    assert per_node[0].code == UNSCHED and per_node[0].reasons == ("Too many pods",)


STORAGE = [
    ("empty storage requested, and pod fits", make_pod(r(1, 1)), r(2, 10), None),
    ("storage ephemeral local storage request exceeds allocatable", make_pod(r(eph=25)), r(2, 2),
     (UNRES, "Insufficient ephemeral-storage")),
    ("ephemeral local storage is sufficient", make_pod(r(eph=5)), r(2, 2, eph=10), None),
    ("pod fits", make_pod(r(eph=10)), r(2, 2), None),
]


@pytest.mark.parametrize("pod,existing,want", [c[1:] for c in STORAGE], ids=[c[0] for c in STORAGE])
def test_storage_requests(pod, existing, want):
    per_node, bulk = run_filter(pod, [make_node("node", KUBE_NODE)], [make_pod(existing, node="node")])
    assert same_status(per_node[0], bulk[0])
    assert (None if per_node[0] is None else (per_node[0].code, *per_node[0].reasons)) == want


RESTARTABLE = [
    ("allow pod without restartable init containers", make_pod({}), None),
    ("allow pod with restartable init containers", make_pod({}, init=[sidecar()]), None),
    ("allow pod if the total requested resources do not exceed the node's allocatable resources",
     make_pod({"cpu": "1m"}, init=[sidecar({"cpu": "1m"})]), None),
    ("not allow pod if the total requested resources do exceed the node's allocatable resources",
     make_pod({"cpu": "1m"}, init=[sidecar({"cpu": "2m"})]), (UNRES, "Insufficient cpu")),
]


@pytest.mark.parametrize("pod,want", [c[1:] for c in RESTARTABLE], ids=[c[0] for c in RESTARTABLE])
def test_restartable_init_containers(pod, want):
    # SidecarContainers is GA: PreFilter never rejects restartable init containers.
    per_node, bulk = run_filter(pod, [make_node("node", {"cpu": "2m", "memory": 0, "pods": 1})])
    assert same_status(per_node[0], bulk[0])
    assert (None if per_node[0] is None else (per_node[0].code, *per_node[0].reasons)) == want


def test_zero_allocatable_node():
    node = make_node("empty", {})
    per_node, bulk = run_filter(make_pod({"cpu": "100m"}), [node])
    assert same_status(per_node[0], bulk[0])
    assert per_node[0].code == UNRES and per_node[0].reasons == ("Too many pods", "Insufficient cpu")
    per_node, _ = run_filter(make_pod({}), [node])
    assert per_node[0].code == UNSCHED and per_node[0].reasons == ("Too many pods",)


def test_filter_without_prefilter_is_an_error():
    snap = snapshot([make_node("n", KUBE_NODE)])
    fit = Fit(None)
    st = fit.filter(CycleState(), make_pod(), snap.node_info_list[0])
    assert st.code == Code.ERROR and "PreFilterNodeResourcesFit" in st.message()
    v = fit.filter_nodes(CycleState(), make_pod(), snap, snap.all_indices())
    assert v.failed.tolist() == [0] and v.statuses[0].code == Code.ERROR


def test_bulk_filter_on_unordered_subset_and_shared_statuses():
    nodes = [make_node(f"n{i}", {"cpu": f"{i}", "memory": "1Gi", "pods": 2 if i % 2 else 0}) for i in range(6)]
    pods = [make_pod({"cpu": "1"}, node="n3")]
    snap = snapshot(nodes, pods)
    fit = Fit(None)
    pod = make_pod({"cpu": "2", "memory": "2Gi"})
    state = CycleState()
    fit.pre_filter(state, pod, snap)
    rows = np.array([5, 0, 3, 2], np.int64)
    v = fit.filter_nodes(state, pod, snap, rows)
    for k, row in enumerate(rows):
        want = fit.filter(state, pod, snap.node_info_list[row])
        got = None if v.failed[k] < 0 else v.statuses[v.failed[k]]
        assert same_status(want, got)
    # Nodes failing the same way share one Status.
    assert len(v.statuses) == len({(s.code, s.reasons) for s in v.statuses})


# ---- queueing hints ---------------------------------------------------------------------------

def test_events_to_register():
    events = Fit(None).events_to_register()
    assert [e.event for e in events] == [
        ClusterEvent(EventResource.POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN),
        ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE),
    ]
    assert all(e.hint is not None for e in events)


Q, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP
POD_EVENTS = [
    ("backoff-wrong-old-object", make_pod(), "not-a-pod", None, Q),
    ("backoff-wrong-new-object", make_pod(), None, "not-a-pod", Q),
    ("queue-on-other-pod-deleted", make_pod({"cpu": "1"}), make_pod({"cpu": "1"}, node="fake"), None, Q),
    ("skip-queue-on-unscheduled-pod-deleted", make_pod(), make_pod(), None, SKIP),
    ("queue-on-nominated-pod-deleted", make_pod({"cpu": "1"}), make_pod({"cpu": "1"}, nominated="fake"), None, Q),
    ("skip-queue-on-other-unscheduled-pod", make_pod({"cpu": "1"}, uid="uid0"),
     make_pod({"cpu": "2"}, uid="uid1"), make_pod({"cpu": "1"}, uid="uid1"), SKIP),
    ("skip-queue-on-other-pod-unrelated-resource-scaled-down", make_pod({"cpu": "1"}, uid="pod1"),
     make_pod({"memory": "2"}, node="fake", uid="pod2"), make_pod({"memory": "1"}, node="fake", uid="pod2"), SKIP),
    ("skip-queue-on-other-pod-unrelated-pod-level-resource-scaled-down",
     make_pod({}, pod_requests={"cpu": "1"}, uid="pod1"),
     make_pod({}, pod_requests={"memory": "2"}, node="fake", uid="pod2"),
     make_pod({}, pod_requests={"memory": "1"}, node="fake", uid="pod2"), SKIP),
    ("queue-on-other-pod-some-resource-scale-down", make_pod({"cpu": "1"}, uid="pod1"),
     make_pod({"cpu": "2"}, node="fake", uid="pod2"), make_pod({"cpu": "1"}, node="fake", uid="pod2"), Q),
    ("queue-on-other-pod-some-pod-level-resource-scale-down", make_pod({}, pod_requests={"cpu": "1"}, uid="pod1"),
     make_pod({}, pod_requests={"cpu": "2"}, node="fake", uid="pod2"),
     make_pod({}, pod_requests={"cpu": "1"}, node="fake", uid="pod2"), Q),
    ("queue-on-target-pod-some-resource-scale-down", make_pod({"cpu": "1"}, uid="pod1"),
     make_pod({"cpu": "2"}, uid="pod1"), make_pod({"cpu": "1"}, uid="pod1"), Q),
    ("queue-on-target-pod-some-pod-level-resource-scale-down", make_pod({}, pod_requests={"cpu": "1"}, uid="pod1"),
     make_pod({}, pod_requests={"cpu": "2"}, uid="pod1"), make_pod({}, pod_requests={"cpu": "1"}, uid="pod1"), Q),
    ("queue-on-other-pod-extended-resource-scale-down", make_pod({AAA: 1}, uid="pod1"),
     make_pod({AAA: 2}, node="fake", uid="pod2"), make_pod({AAA: 1}, node="fake", uid="pod2"), Q),
]


@pytest.mark.parametrize("pod,old,new,want", [c[1:] for c in POD_EVENTS], ids=[c[0] for c in POD_EVENTS])
def test_is_schedulable_after_pod_event(pod, old, new, want):
    assert Fit(None).is_schedulable_after_pod_event(pod, old, new) == want


NODE_EVENTS = [
    ("backoff-wrong-new-object", make_pod(), None, "not-a-node", Q),
    ("backoff-wrong-old-object", make_pod(), "not-a-node", make_node("n"), Q),
    ("skip-queue-on-node-add-without-sufficient-resources", make_pod(r(mem=2)), None,
     make_node("n", {"pods": 32, "memory": 1}), SKIP),
    ("skip-queue-on-node-add-without-required-resource-type", make_pod(r(aaa=1)), None,
     make_node("n", {"pods": 32, BBB: 1}), SKIP),
    ("queue-on-node-add-with-sufficient-resources", make_pod(r(mem=2, aaa=1)), None,
     make_node("n", {"pods": 32, "memory": 4, AAA: 2}), Q),
    ("skip-queue-on-node-unrelated-changes", make_pod(r(mem=2, aaa=1)), make_node("n", {"pods": 32, "memory": 2, AAA: 2}),
     make_node("n", {"pods": 32, "memory": 2, AAA: 1, BBB: 2}), SKIP),
    ("queue-on-pod-requested-resources-increase", make_pod(r(mem=2, aaa=1)),
     make_node("n", {"pods": 32, "memory": 2, AAA: 1}), make_node("n", {"pods": 32, "memory": 2, AAA: 2}), Q),
    ("skip-queue-on-node-changes-from-suitable-to-unsuitable", make_pod(r(mem=2, aaa=1)),
     make_node("n", {"pods": 32, "memory": 4, AAA: 2}), make_node("n", {"pods": 32, "memory": 1, AAA: 2}), SKIP),
    ("queue-on-node-changes-from-unsuitable-to-suitable", make_pod(r(mem=2, aaa=1)),
     make_node("n", {"pods": 32, "memory": 1, AAA: 2}), make_node("n", {"pods": 32, "memory": 4, AAA: 2}), Q),
    ("skip-queue-on-node-delete", make_pod(r(mem=2)), make_node("n", {"pods": 32, "memory": 4}), None, SKIP),
]


@pytest.mark.parametrize("pod,old,new,want", [c[1:] for c in NODE_EVENTS], ids=[c[0] for c in NODE_EVENTS])
def test_is_schedulable_after_node_change(pod, old, new, want):
    assert Fit(None).is_schedulable_after_node_change(pod, old, new) == want


IS_FIT = [
    ("nil node", make_pod(), None, False),
    ("insufficient resource", make_pod({"cpu": "2"}), make_node("n", {"pods": 32, "cpu": "1"}), False),
    ("sufficient resource", make_pod({"cpu": "1"}), make_node("n", {"pods": 32, "cpu": "2"}), True),
    ("insufficient pod-level resource", make_pod({}, pod_requests={"cpu": "2"}),
     make_node("n", {"pods": 32, "cpu": "1"}), False),
    ("sufficient pod-level resource", make_pod({}, pod_requests={"cpu": "2"}),
     make_node("n", {"pods": 32, "cpu": "2"}), True),
    ("sufficient pod-level resource hugepages", make_pod({}, pod_requests={HP: "2Mi"}),
     make_node("n", {"pods": 32, HP: "2Mi"}), True),
    ("insufficient pod-level resource hugepages", make_pod({}, pod_requests={HP: "4Mi"}),
     make_node("n", {"pods": 32, HP: "2Mi"}), False),
    ("ignoredResources do not apply to hints", make_pod({BBB: 1}), make_node("n", {"pods": 32}), False),
]


@pytest.mark.parametrize("pod,node,want", [c[1:] for c in IS_FIT], ids=[c[0] for c in IS_FIT])
def test_is_fit(pod, node, want):
    assert is_fit(pod, node) is want


FULL = {"pods": 1, "cpu": 1, "memory": 1, "ephemeral-storage": 1, AAA: 1}
INCREASED = [
    ("no-requested-resources", make_pod(r()), FULL,
     {"pods": 1, "cpu": 2, "memory": 2, "ephemeral-storage": 2, AAA: 2}, False),
    ("no-requested-resources-pods-increased", make_pod(r()), FULL, {**FULL, "pods": 2}, True),
    ("scalar-resources-not-in-node", make_pod(r(2, 2, aaa=2, eph=2)),
     {"cpu": 1, "memory": 2, "ephemeral-storage": 3}, {"cpu": 1, "memory": 2, "ephemeral-storage": 1}, False),
    ("requested-resources-decreased", make_pod(r(2, 2, aaa=2, eph=2)),
     {"cpu": 1, "memory": 2, "ephemeral-storage": 3, AAA: 4}, {"cpu": 1, "memory": 2, "ephemeral-storage": 1, AAA: 1},
     False),
    ("requested-resources-increased", make_pod(r(2, 2, aaa=2, eph=2)),
     {"cpu": 1, "memory": 2, "ephemeral-storage": 3, AAA: 4}, {"cpu": 3, "memory": 4, "ephemeral-storage": 3, AAA: 4},
     True),
    ("non-requested-resources-decreased", make_pod(r(2, 2)),
     {"cpu": 1, "memory": 2, "ephemeral-storage": 3, AAA: 4}, {"cpu": 1, "memory": 2, "ephemeral-storage": 1, AAA: 1},
     False),
    ("non-requested-resources-increased", make_pod(r(2, 2)),
     {"cpu": 1, "memory": 2, "ephemeral-storage": 3, AAA: 4}, {"cpu": 1, "memory": 2, "ephemeral-storage": 5, AAA: 6},
     False),
    ("requested-extended-resource-increased", make_pod(r(aaa=1)), {AAA: 1}, {AAA: 2}, True),
]


@pytest.mark.parametrize("pod,old,new,want", [c[1:] for c in INCREASED], ids=[c[0] for c in INCREASED])
def test_have_any_requested_resources_increased(pod, old, new, want):
    assert have_any_requested_resources_increased(pod, make_node("n", old), make_node("n", new)) is want


# ---- arguments --------------------------------------------------------------------------------

def test_fit_args_defaults():
    a = parse_fit_args(None)
    assert a.scoring_strategy.type == "LeastAllocated"
    assert [(x.name, x.weight) for x in a.scoring_strategy.resources] == [("cpu", 1), ("memory", 1)]
    a = parse_fit_args({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 0},
                                                                                    {"name": "memory", "weight": 3}]}})
    assert [(x.name, x.weight) for x in a.scoring_strategy.resources] == [("cpu", 1), ("memory", 3)]
    a = parse_fit_args({"scoringStrategy": {"type": "MostAllocated", "resources": []}})
    assert [(x.name, x.weight) for x in a.scoring_strategy.resources] == [("cpu", 1), ("memory", 1)]


BAD_FIT_ARGS = [
    ("resource with negative weight",
     {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "memory", "weight": -1}, {"name": "cpu", "weight": 1}]}},
     "scoringStrategy.resources[0].weight: Invalid value: -1: resource weight of memory not in valid range (0, 100]"),
    ("resource weight larger than MaxNodeScore",
     {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 101}]}},
     "scoringStrategy.resources[1].weight: Invalid value: 101"),
    ("unsupported strategy", {"scoringStrategy": {"type": "Random"}}, 'scoringStrategy.type: Unsupported value: "Random"'),
    ("missing strategy type", {"scoringStrategy": {}}, 'scoringStrategy.type: Unsupported value: ""'),
    ("RequestedToCapacityRatio without shape", {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
     "scoringStrategy.requestedToCapacityRatio: Required value"),
    ("empty shape", {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": []}}},
     "scoringStrategy.shape: Required value: at least one point must be specified"),
    ("unsorted shape", {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {
        "shape": [{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}]}}},
     "scoringStrategy.shape[1].utilization: Invalid value: 50: values must be sorted in increasing order"),
    ("shape out of range", {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {
        "shape": [{"utilization": 0, "score": 11}, {"utilization": 101, "score": 0}]}}},
     "[scoringStrategy.shape[0].score: Invalid value: 11: not in valid range [0, 10], "
     "scoringStrategy.shape[1].utilization: Invalid value: 101: not in valid range [0, 100]]"),
    ("resource group with slash", {"ignoredResourceGroups": ["example.com/aaa"]},
     'ignoredResourceGroups[0]: Invalid value: "example.com/aaa": resource group name can\'t contain \'/\''),
    ("ignored resource not a qualified name", {"ignoredResources": ["-bad-"]}, 'ignoredResources[0]: Invalid value: "-bad-"'),
]


@pytest.mark.parametrize("args,message", [c[1:] for c in BAD_FIT_ARGS], ids=[c[0] for c in BAD_FIT_ARGS])
def test_fit_args_validation(args, message):
    with pytest.raises(ValueError) as e:
        Fit(args)
    assert message in str(e.value)


def test_balanced_allocation_args():
    a = parse_balanced_allocation_args(None)
    assert [(x.name, x.weight) for x in a.resources] == [("cpu", 1), ("memory", 1)]
    a = parse_balanced_allocation_args({"resources": [{"name": "cpu"}, {"name": "nvidia.com/gpu", "weight": 0}]})
    assert [(x.name, x.weight) for x in a.resources] == [("cpu", 1), ("nvidia.com/gpu", 1)]
    with pytest.raises(ValueError, match=r'resources\[1\].name: Duplicate value: "cpu"'):
        parse_balanced_allocation_args({"resources": [{"name": "cpu"}, {"name": "cpu"}]})
    with pytest.raises(ValueError, match=r"resources\[0\].weight: Invalid value: 2: must be 1"):
        parse_balanced_allocation_args({"resources": [{"name": "cpu", "weight": 2}]})
