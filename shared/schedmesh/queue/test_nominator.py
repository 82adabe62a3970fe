"""The nominator and the queue's NominatedPodsForNode (kube's TestPriorityQueue_Add nominations,
NominatedPodsForNode, NominatedPodDeleted, UpdateNominatedPodForNode)."""
from __future__ import annotations

from typing import Optional

import pytest

from schedmesh.api.types import Pod
from schedmesh.cache.node_info import PodInfo
from schedmesh.queue import NominatingInfo, NominatingMode, PriorityQueue
from schedmesh.queue.nominator import Nominator, PodRef
from schedmesh.queue.testing import clone, fake_clock, make_pod, priority_sort_less

HIGH, MEDIUM, LOW = 1000, 500, 0


def pods():
    return dict(
        hpp=make_pod("hpp", "ns1", uid="hppns1", priority=HIGH),
        hpp_nominated=make_pod("hpp", "ns1", uid="hppns1", priority=HIGH, nominated_node_name="node1"),
        mpp=make_pod("mpp", "ns2", uid="mppns2", priority=MEDIUM, nominated_node_name="node1",
                     annotations={"annot2": "val2"}),
        up=make_pod("up", "ns1", uid="upns1", priority=LOW, nominated_node_name="node1", annotations={"annot2": "val2"}),
        ne=make_pod("ne", "ns1", uid="nens1"),
        sp=make_pod("sp", "ns1", uid="spns1", node_name="foo"),
    )


def lister_of(*objs: Pod):
    store = {(p.namespace, p.name): p for p in objs}

    def get(namespace: str, name: str) -> Optional[Pod]:
        return store.get((namespace, name))
    return get


def state(q: PriorityQueue) -> tuple[dict, dict]:
    n = q.nominator
    return ({node: [r.name for r in refs] for node, refs in n.nominated_pods.items()}, dict(n.nominated_pod_to_node))


def test_add_records_nominations_from_the_pod_and_keeps_them_after_pop():
    p = pods()
    q = PriorityQueue(priority_sort_less, clock=fake_clock())
    for pod in (p["mpp"], p["up"], p["hpp"]):
        q.add(pod)
    assert state(q) == ({"node1": ["mpp", "up"]}, {"mppns2": "node1", "upns1": "node1"})
    assert [q.try_pop().pod.name for _ in range(3)] == ["hpp", "mpp", "up"]
    assert state(q)[0] == {"node1": ["mpp", "up"]}


def test_nominated_pods_for_node_in_insertion_order_from_the_queues():
    p = pods()
    q = PriorityQueue(priority_sort_less, clock=fake_clock())
    for pod in (p["mpp"], p["up"], p["hpp"]):
        q.add(pod)
    assert q.try_pop().pod is p["hpp"]
    got = q.nominated_pods_for_node("node1")
    assert [pi.pod for pi in got] == [p["mpp"], p["up"]]
    assert all(isinstance(pi, PodInfo) for pi in got)
    assert q.nominated_pods_for_node("node2") == []
    assert q.nominated_node_names() == ["node1"]


def test_nominated_pod_not_in_any_queue_is_a_bare_pod_as_in_kube():
    p = pods()
    q = PriorityQueue(priority_sort_less, clock=fake_clock())
    q.add(p["mpp"])
    q.try_pop()  # in flight: no longer in a queue, still nominated
    (pi,) = q.nominated_pods_for_node("node1")
    assert (pi.pod.name, pi.pod.namespace, pi.pod.uid, pi.pod.priority) == ("mpp", "ns2", "mppns2", 0)


@pytest.mark.parametrize("pod_name, deleted, want_len", [
    pytest.param("mpp", False, 1, id="alive-pod-nominated"),
    pytest.param("hpp_nominated", True, 0, id="deleted-pod-not-nominated"),
    pytest.param("hpp", False, 0, id="no-nominated-node-name"),
])
def test_nominating_checks_the_pod_still_exists(pod_name, deleted, want_len):
    p = pods()
    pod = p[pod_name]
    q = PriorityQueue(priority_sort_less, clock=fake_clock(), pod_lister=lister_of(*(() if deleted else (pod,))))
    q.add_nominated_pod(PodInfo(pod))
    assert len(q.nominated_pods_for_node(pod.nominated_node_name)) == want_len


def test_update_nominated_pod_for_node_sequence():
    p = pods()
    q = PriorityQueue(priority_sort_less, clock=fake_clock(),
                      pod_lister=lister_of(p["mpp"], p["up"], p["hpp"], p["sp"]))
    q.add(p["mpp"])
    q.add_nominated_pod(PodInfo(p["up"]), NominatingInfo("node5"))
    q.add_nominated_pod(PodInfo(p["hpp"]), NominatingInfo("node2"))
    want = ({"node1": ["mpp"], "node5": ["up"], "node2": ["hpp"]},
            {"mppns2": "node1", "upns1": "node5", "hppns1": "node2"})
    assert state(q) == want
    assert q.try_pop().pod is p["mpp"]
    assert state(q) == want  # popping doesn't change nominations
    q.add_nominated_pod(PodInfo(p["hpp"]), NominatingInfo("node4"))
    want = ({"node1": ["mpp"], "node5": ["up"], "node4": ["hpp"]},
            {"mppns2": "node1", "upns1": "node5", "hppns1": "node4"})
    assert state(q) == want
    q.add_nominated_pod(PodInfo(p["ne"]), NominatingInfo("node1"))  # deleted from the informer cache
    assert state(q) == want
    q.add_nominated_pod(PodInfo(clone(p["sp"], node_name="")), NominatingInfo("node1"))  # already scheduled
    assert state(q) == want
    q.delete_nominated_pod_if_exists(p["hpp"])
    assert state(q) == ({"node1": ["mpp"], "node5": ["up"]}, {"mppns2": "node1", "upns1": "node5"})


@pytest.mark.parametrize("old_nnn, new_nnn, in_memory, want_node", [
    pytest.param("", "", "node9", "node9", id="update-without-nnn-keeps-in-memory-nomination"),
    pytest.param("", "node2", "node9", "node2", id="nnn-added"),
    pytest.param("node1", "node2", None, "node2", id="nnn-changed"),
    pytest.param("node1", "", None, None, id="nnn-removed"),
    pytest.param("", "", None, None, id="never-nominated"),
])
def test_update_nominated_pod(old_nnn, new_nnn, in_memory, want_node):
    n = Nominator()
    old = make_pod("p", nominated_node_name=old_nnn)
    new = clone(old, nominated_node_name=new_nnn)
    if in_memory:
        n.add_nominated_pod(old, NominatingInfo(in_memory))
    elif old_nnn:
        n.add_nominated_pod(old, None)
    n.update_nominated_pod(old, new)
    assert n.nominated_pod_to_node.get(old.uid) == want_node
    if want_node:
        assert n.nominated_refs_for_node(want_node) == [PodRef.of(new)]


def test_nominator_never_stores_a_pod_twice_and_noop_mode_uses_the_pod():
    n = Nominator()
    pod = make_pod("p", nominated_node_name="a")
    n.add_nominated_pod(pod, None)
    n.add_nominated_pod(pod, NominatingInfo("", NominatingMode.NOOP))
    assert n.nominated_pods == {"a": [PodRef.of(pod)]}
    n.add_nominated_pod(pod, NominatingInfo("b"))
    assert n.nominated_pods == {"b": [PodRef.of(pod)]} and n.node_names() == ["b"]
    n.delete(pod)
    n.delete(pod)
    assert n.nominated_pods == {} and n.nominated_pod_to_node == {}


def test_adding_a_pod_without_nomination_clears_an_old_one():
    # moveToActiveQ on Add/Update calls AddNominatedPod(nil): it first deletes the pod's entry.
    q = PriorityQueue(priority_sort_less, clock=fake_clock())
    pod = make_pod("p")
    q.add_nominated_pod(pod, NominatingInfo("node1"))
    q.update(None, clone(pod, annotations={"x": "y"}))
    assert q.nominated_node_names() == []


def test_delete_removes_the_nomination():
    p = pods()
    q = PriorityQueue(priority_sort_less, clock=fake_clock())
    q.update(p["hpp"], p["hpp_nominated"])  # not queued yet: added, nominated
    q.add(p["up"])
    q.delete(p["hpp_nominated"])
    assert q.queue_of(p["up"]) == "activeQ" and q.queue_of(p["hpp"]) is None
    assert state(q)[0] == {"node1": ["up"]}
    q.delete(p["up"])
    assert state(q) == ({}, {})
