"""HeapFreezer: a follower's long-lived state is frozen out of the cyclic collector's scans as
the cache grows, and freezing it loses nothing (the cache's structures hold no reference cycles,
so what it deletes later is freed all the same)."""
from __future__ import annotations

import ast
import collections
import gc
import subprocess
import sys
from dataclasses import replace

import pytest

from schedmesh.bench.workloads import build_shaped
from schedmesh.bus.records import Record
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import TOPIC_NODES, TOPIC_PODS, ClusterCache
from schedmesh.mesh.runtime import CacheFollower, HeapFreezer
from schedmesh.mesh.scheduler.scheduler import QueueManager
from schedmesh.mesh.scheduler.state import QueueManagerConfig


@pytest.fixture
def freezes(monkeypatch):
    calls = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(1))
    return calls


def test_the_heap_is_frozen_each_time_the_cache_grew_by_a_quarter(freezes, monkeypatch):
    """By a quarter of what it held at the last freeze, and by at least `minimum` objects."""
    monkeypatch.delenv("SCHEDMESH_GC_FREEZE", raising=False)
    size = [0]
    heap = HeapFreezer(lambda: size[0], growth=0.25, minimum=1000)
    steps = [(10, False), (999, False), (1000, True), (1999, False), (2000, True), (2999, False), (3000, True),
             (4000, True), (5000, True), (6249, False), (6250, True), (400, False), (7812, False), (7813, True)]
    for n, froze in steps:
        size[0] = n
        assert heap.after_apply() is froze, n
    assert len(freezes) == heap.freezes == 7 and heap.frozen_at == 7813


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_freezing_is_turned_off_by_the_environment(freezes, monkeypatch, value):
    monkeypatch.setenv("SCHEDMESH_GC_FREEZE", value)
    heap = HeapFreezer(lambda: 100_000)
    assert not heap.enabled and heap.after_apply() is False and not freezes
    monkeypatch.setenv("SCHEDMESH_GC_FREEZE", "on")
    assert HeapFreezer(lambda: 0).enabled


def test_a_bad_freezing_setting_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("SCHEDMESH_GC_FREEZE", "sometimes")
    with pytest.raises(SystemExit, match="SCHEDMESH_GC_FREEZE='sometimes'"):
        HeapFreezer(lambda: 0)


def test_a_cache_follower_freezes_once_its_cache_has_grown(freezes, monkeypatch):
    monkeypatch.delenv("SCHEDMESH_GC_FREEZE", raising=False)
    follower = CacheFollower("127.0.0.1:1", ClusterCache(), client_id="test")  # (connects only at start)
    nodes = build_shaped("SchedulingBasic", nodes=1500, init_pods=0, pods=1).nodes
    one_by_one = [Record(TOPIC_NODES, 0, i, None, records.node_record(n)[2]) for i, n in enumerate(nodes)]
    follower.apply_records(one_by_one[:999])
    assert not freezes
    follower.apply_records(one_by_one[999:1000])
    assert len(freezes) == 1 and follower.heap.frozen_at == 1000
    follower.apply_records(one_by_one[1000:])
    assert len(follower.cache.snapshot.node_info_map) == 1500 and len(freezes) == 1


def _cache_through_attempts(w):
    """A queue-manager whose cache read the workload's nodes and pods and attempted the pods."""
    qm = QueueManager(QueueManagerConfig([], [], "127.0.0.1:1", tie_break="name"), "127.0.0.1:1")
    offset = iter(range(10**6))

    def feed(topic, recs):
        for _t, _k, value in recs:
            qm.cache.apply(topic, value, next(offset))
    feed(TOPIC_NODES, records.node_batch_records(w.nodes))
    init = [replace(p, meta=replace(p.meta, uid=f"init-{i}")) for i, p in enumerate(w.init)]
    feed(TOPIC_PODS, records.pod_batch_records(records.pod_message(p) for p in init))
    pods = [replace(p, meta=replace(p.meta, uid=f"m-{i}")) for i, p in enumerate(w.measured)]
    feed(TOPIC_PODS, records.pod_batch_records(records.pod_message(p) for p in pods))
    attempted = 0
    while (qpi := qm.queue.try_pop()) is not None:
        qm._attempt(qpi)  # assumed, Reserved, handed to the (not started) binding cycle
        attempted += 1
    assert attempted == len(pods) and qm._bind_queue.qsize() == len(pods)
    for fw in qm.frameworks.values():
        fw.warm(qm.cache.snapshot)
    return qm, feed


def _delete_everything(qm, feed) -> None:
    while not qm._bind_queue.empty():
        qm._bind_queue.get_nowait()
    qm.assumed.clear()
    feed(TOPIC_PODS, records.pod_batch_records(records.pod_message(p, deleted=True) for p in list(qm.cache.pods.values())))
    feed(TOPIC_NODES, [records.node_record(ni.node, deleted=True) for ni in list(qm.cache.snapshot.node_info_list)])
    for fw in qm.frameworks.values():
        fw.warm(qm.cache.snapshot)
    assert not qm.cache.pods and not qm.cache.snapshot.node_info_list


def cycles_left_by_a_frozen_cache() -> tuple[int, list]:
    """What the collector finds after a queue-manager's cache (after real attempts) was frozen,
    then deleted everything: the count of objects in reference cycles and their commonest types."""
    w = build_shaped("TopologySpreading", nodes=300, init_pods=300, pods=200)
    _delete_everything(*_cache_through_attempts(w))  # first: the modules' one-time garbage (their classes)
    gc.collect()
    gc.disable()  # nothing else is collected meanwhile: what is found at the end is the cache's
    qm, feed = _cache_through_attempts(w)
    gc.freeze()
    _delete_everything(qm, feed)
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)  # (to name what was left, should anything be)
    found = gc.collect()
    return found, collections.Counter(type(o).__name__ for o in gc.garbage).most_common(8)


def test_what_a_frozen_cache_deletes_is_freed_all_the_same():
    """Everything the queue-manager's cache, snapshot, plugin indexes and queue hold for pods and
    nodes is freed by reference counting when deleted: no cycle among them needs the collector,
    so freezing them keeps nothing alive for good. In a process of its own: in the test run's,
    threads left by other tests make garbage of their own while the collector is off."""
    probe = ("from schedmesh.mesh.test_heap_freezer import cycles_left_by_a_frozen_cache as probe; "
             "print(repr(probe()))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found, left = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert found == 0, f"the cache left reference cycles behind: {left}"
