"""Snapshot.add_pod of a pod already on its node: a binding or a status update (a copy sharing the
pod's spec) is replaced in place, and must leave the node exactly as a remove and an add would."""
from __future__ import annotations

import pytest

from schedmesh.api.evolve import evolve
from schedmesh.api.types import (Affinity, Container, ContainerPort, Node, ObjectMeta, Pod, PodAffinity,
                                 PodAffinityTerm)
from schedmesh.api.labels import LabelSelector
from schedmesh.cache.node_info import same_accounting
from schedmesh.cache.snapshot import Snapshot


def _pod(name: str, cpu: int = 1, port: int = 0, anti: bool = False) -> Pod:
    aff = None
    if anti:
        aff = Affinity(pod_anti_affinity=PodAffinity(required=[PodAffinityTerm(
            LabelSelector.of({"app": name}), "kubernetes.io/hostname")]))
    return Pod(meta=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}", labels={"app": name}),
               containers=[Container("c", requests={"cpu": cpu},
                                     ports=[ContainerPort(80, port)] if port else [])],
               affinity=aff, node_name="n1")


def _state(snap: Snapshot) -> tuple:
    ni = snap.get("n1")
    return ([pi.pod.name for pi in ni.pods], [pi.pod.name for pi in ni.pods_with_affinity],
            [pi.pod.name for pi in ni.pods_with_required_anti_affinity], ni.requested.milli_cpu,
            ni.non_zero_requested.milli_cpu, len(ni.used_ports), ni.generation,
            [pi.pod.phase for pi in ni.pods],
            [int(getattr(snap.cols, c)[ni.index]) for c in ("req_cpu", "req_mem", "num_pods", "nz_cpu", "nz_mem")])


def _cluster() -> Snapshot:
    snap = Snapshot()
    snap.add_node(Node(meta=ObjectMeta(name="n1"), allocatable={"cpu": 64, "pods": 110}))
    for p in (_pod("a", port=8080, anti=True), _pod("b", 2), _pod("c", 3, anti=True), _pod("d", 4)):
        snap.add_pod(p)
    snap.cols  # built: the node's totals are kept in it too
    return snap


@pytest.mark.parametrize("updated", ["a", "b", "c", "d"])
def test_a_status_update_leaves_the_node_as_a_remove_and_an_add_would(updated):
    fast, slow = _cluster(), _cluster()
    old = next(pi.pod for pi in fast.get("n1").pods if pi.pod.name == updated)
    running = evolve(old, phase="Running", start_time=5.0)
    assert same_accounting(old, running)
    fast.add_pod(running)
    slow.remove_pod(old)
    slow.add_pod(running)
    assert _state(fast) == _state(slow)
    assert fast.get("n1").pods[-1].pod is running


def test_a_changed_request_is_removed_and_added_again():
    snap = _cluster()
    old = next(pi.pod for pi in snap.get("n1").pods if pi.pod.name == "b")
    bigger = evolve(old, containers=[Container("c", requests={"cpu": 10})])
    assert not same_accounting(old, bigger)
    before = snap.get("n1").requested.milli_cpu
    snap.add_pod(bigger)
    assert snap.get("n1").requested.milli_cpu == before + 8000


def test_a_status_update_does_not_dirty_watchers_that_ignore_them_but_a_resize_does():
    snap = _cluster()
    w = snap.watch_changes(ignore_status_updates=True)
    old = next(pi.pod for pi in snap.get("n1").pods if pi.pod.name == "d")
    snap.add_pod(evolve(old, phase="Running"))
    assert not w.rows
    snap.add_pod(evolve(old, containers=[Container("c", requests={"cpu": 1})]))
    assert w.rows == {snap.get("n1").index}


def test_a_pod_whose_copy_drops_its_affinity_terms_tells_watchers_a_pod_with_affinity_left():
    """The flag comes from the pod taken out, not from the copy that replaces it: else watchers
    reading beyond rows (and other shards' feeds) miss that the node's pods with affinity changed."""
    snap = _cluster()
    w = snap.watch_changes()
    feed = snap.watch_changes(by_name=True, owns={"n1": False})  # another shard's node
    old = next(pi.pod for pi in snap.get("n1").pods if pi.pod.name == "a")
    snap.add_pod(evolve(old, affinity=None))
    assert w.beyond_rows and feed.pod_nodes == {"n1"}
    assert [pi.pod.name for pi in snap.get("n1").pods_with_affinity] == ["c"]


def test_a_feed_hears_of_another_shards_node_only_when_its_pods_with_affinity_change():
    snap = _cluster()
    mine, other = snap.watch_changes(by_name=True, owns={"n1": True}), snap.watch_changes(by_name=True, owns={"n1": False})
    snap.add_pod(_pod("e"))
    assert mine.pod_nodes == {"n1"} and not other.pod_nodes
    snap.add_pod(_pod("f", anti=True))
    assert other.pod_nodes == {"n1"}


def test_watchers_added_and_removed_from_two_threads_at_once_are_none_lost():
    """A batch ends (unwatch) on the scheduling thread while the next one starts watching on
    another: neither may drop the other's watcher (its change log would go silent)."""
    import sys
    import threading

    snap = _cluster()
    kept: list = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        def churn(keep_every: int) -> None:
            for i in range(3000):
                w = snap.watch_changes()
                if i % keep_every:
                    snap.unwatch(w)
                else:
                    kept.append(w)
        threads = [threading.Thread(target=churn, args=(k,)) for k in (7, 11)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert set(map(id, snap._watchers)) == set(map(id, kept))
