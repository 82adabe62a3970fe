"""The scheduling loop waits on the queue: idle, it does not poll it; a pod added from another
thread is attempted at once; idle, it warms the plugins once per change to the cluster. A preemption service's answer wakes the follower for the records it
published, and a request waiting for the service carries the cache's offsets of when it is sent."""
from __future__ import annotations

import contextlib
import threading
import time
from types import SimpleNamespace

from schedmesh.mesh.scheduler.binding_cycle import BindingQueue
from schedmesh.mesh.scheduler.schedule_one import ScheduleOne
from schedmesh.queue.testing import make_pod, new_queue
from schedmesh.v1 import preemption_pb2


class Loop(ScheduleOne):
    """Just what _schedule_loop reads; an attempt records the pod."""

    def __init__(self) -> None:
        self.queue = new_queue()
        self._stop = threading.Event()
        self.loop_running = threading.Event()
        self._cycle_gate = threading.Lock()
        self._bind_queue = BindingQueue()
        self.evaluator = SimpleNamespace(filter_stubs=None)
        self.algo = SimpleNamespace(next_start_node_index=0)
        self.cache = SimpleNamespace(snapshot=SimpleNamespace(generation=0), lock=threading.Lock())
        self.warmed_at: list[int] = []  # the snapshot generations the profile was warmed at
        self.frameworks = {"default-scheduler": SimpleNamespace(
            warm=lambda snapshot: self.warmed_at.append(snapshot.generation))}
        self._warmed = (None, -1)
        self.attempted: list[tuple[str, float]] = []
        self.pops = 0
        try_pop = self.queue.try_pop

        def counted():
            self.pops += 1
            return try_pop()
        self.queue.try_pop = counted

    def _prepare_run(self, run, start):
        return None

    def _attempt_run(self, run, batch=None, next_start=None) -> None:
        for qpi, _cycle in run:
            self.attempted.append((qpi.pod.name, time.monotonic()))
            self.queue.done(qpi.pod.uid)


@contextlib.contextmanager
def running(loop: Loop):
    """The loop on a thread of its own, stopped and joined after."""
    thread = threading.Thread(target=loop._schedule_loop, daemon=True)
    thread.start()
    try:
        assert loop.loop_running.wait(5)
        yield
    finally:
        loop._stop.set()
        loop.queue.close()
        thread.join(5)
    assert not thread.is_alive()


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_an_idle_loop_waits_on_the_queue_and_a_new_pod_wakes_it():
    loop = Loop()
    with running(loop):
        time.sleep(0.3)
        assert loop.pops <= 2, f"{loop.pops} pops of an empty queue in 0.3 s: polling"
        added = time.monotonic()
        loop.queue.add(make_pod("p"))
        wait_until(lambda: loop.attempted)
        [(name, at)] = loop.attempted
        assert name == "p" and at - added < 0.2


def test_an_idle_loop_warms_the_plugins_once_per_change_to_the_cluster():
    loop = Loop()
    with running(loop):
        wait_until(lambda: loop.warmed_at)
        loop.queue.add(make_pod("p"))  # wakes the loop: no change to the cluster, no warming
        wait_until(lambda: loop.attempted)
        idle = loop.pops
        wait_until(lambda: loop.pops >= idle + 2)  # idle again, and warmed in between if at all
        assert [n for n, _ in loop.attempted] == ["p"] and loop.warmed_at == [0]
        with loop.cache.lock:
            loop.cache.snapshot.generation = 3
        loop.queue.add(make_pod("q"))
        wait_until(lambda: len(loop.warmed_at) == 2)
        idle = loop.pops
        wait_until(lambda: loop.pops >= idle + 2)
        assert loop.warmed_at == [0, 3]


class ShardedLoop(Loop):
    """With shards: runs of node-local pods (up to 16), each run's preparation recorded with the
    pods attempted by then; `on_attempt` runs after each attempt."""

    def __init__(self) -> None:
        super().__init__()
        self.evaluator = SimpleNamespace(filter_stubs=[object()], use_batch=lambda batch: None,
                                         end_batch=lambda: None)
        self.cfg = SimpleNamespace(shard_batch_size=16, extenders=[])
        self._early_roots = {}
        self.prepared: list[tuple[list[str], list[str]]] = []
        self.on_attempt = lambda name: None

    def _batchable(self, qpi) -> bool:
        return True

    def _prepare_run(self, run, start):
        self.prepared.append(([q.pod.name for q, _ in run], [n for n, _ in self.attempted]))
        return None

    _attempt_run = ScheduleOne._attempt_run

    def _attempt(self, qpi, cycle=None) -> None:
        self.attempted.append((qpi.pod.name, time.monotonic()))
        self.queue.done(qpi.pod.uid)
        self.on_attempt(qpi.pod.name)


def test_pods_arriving_during_a_run_start_the_next_runs_batch_before_the_run_ends():
    """Pods come in bursts (an Apply's at a time): once a quarter of a run has arrived behind the
    run being decided, the shards are asked about them then, not after the run ends."""
    loop = ShardedLoop()
    first = [f"a{i}" for i in range(8)]
    for name in first:
        loop.queue.add(make_pod(name))
    arrivals = {2: ["b0", "b1", "b2"], 4: ["b3", "b4", "b5"]}  # after that many attempts; 3 < 16 // 4 <= 6

    def arrive(name: str) -> None:
        for new in arrivals.get(len(loop.attempted), ()):
            loop.queue.add(make_pod(new))
    loop.on_attempt = arrive
    with running(loop):
        wait_until(lambda: len(loop.attempted) == 14)
    order = [n for n, _ in loop.attempted]  # (the queue's order among equals is its own)
    assert sorted(order[:8]) == first and sorted(order[8:]) == [f"b{i}" for i in range(6)]
    assert loop.prepared == [(order[:8], []), (order[8:], order[:4])]


class Preempting(ScheduleOne):
    """Just what _preempt reads; the service answers with a nomination."""

    def __init__(self) -> None:
        self.woken: list[str] = []
        self.unschedulable: list[str] = []
        self.cfg = SimpleNamespace(preemption_timeout=5.0)
        self.offsets = {"schedmesh.pods/0": 7}  # the cache's, when the request is sent
        self.sent: list[dict[str, int]] = []  # the offsets each request carried
        self.cache = SimpleNamespace(expect_records=lambda now=True: self.woken.append("woken"),
                                     view_offsets=lambda: dict(self.offsets))

        def preempt(req, timeout, metadata):
            self.sent.append(dict(req.view.offsets))
            return preemption_pb2.PreemptResponse(code=0, has_result=True, nominated_node_name="n1",
                                                  victims=["default/v"], deleting_uids=["uid-v"])
        self.preemption = SimpleNamespace(Preempt=preempt)
        self.preemptions = SimpleNamespace(answered=lambda uid, deleting: None)
        self.waiting_pods = {}

    def _unschedulable(self, qpi, cycle, err, trace_id, span, nominating=None) -> None:
        self.unschedulable.append(qpi.pod.name)


def test_a_preemption_answer_wakes_the_follower_for_the_victims_records():
    """The victims' deletions come back through a follower that may be dozing
    (bus.consumer.idle_poll_ms); the preemptor waits for them."""
    p = Preempting()
    span = SimpleNamespace(end=lambda: None, set_attribute=lambda *a: None)
    err = SimpleNamespace(diagnosis=SimpleNamespace(post_filter_msg=""))
    p._preempt(SimpleNamespace(pod=make_pod("p")), 1, None, None, err, preemption_pb2.PreemptRequest(), "", span, ())
    assert p.woken == ["woken"] and p.unschedulable == ["p"]


def test_a_preemption_request_carries_the_caches_offsets_when_sent_not_when_made():
    """A request that waited in the pool across a broker restart carried the lost broker's offsets:
    the service waited its whole timeout for each such request (a mesh's log, 32 pods 5 s apart)."""
    p = Preempting()
    span = SimpleNamespace(end=lambda: None, set_attribute=lambda *a: None)
    err = SimpleNamespace(diagnosis=SimpleNamespace(post_filter_msg=""))
    req = preemption_pb2.PreemptRequest()
    req.view.offsets.update({"schedmesh.pods/0": 124, "schedmesh.nodes/0": 3})  # made before the restart
    p._preempt(SimpleNamespace(pod=make_pod("p")), 1, None, None, err, req, "", span, ())
    assert p.sent == [{"schedmesh.pods/0": 7}]
