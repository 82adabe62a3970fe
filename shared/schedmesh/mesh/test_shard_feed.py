"""A shard's snapshot, kept by its caller's feeds, is the caller's: the same nodes in the same
order, the same pods on them, the same namespaces; feeds apply in their order; a shard that cannot
apply one refuses, and the whole cluster follows."""
from __future__ import annotations

import dataclasses
import threading

import pytest

from schedmesh.api.types import Pod, PodCondition
from schedmesh.bench.workloads import make_node, make_pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.mesh.shard_feed import FedCluster, FeedNotReady, FeedRefused, ShardFeed, SharedFeed
from schedmesh.v1 import scheduling_pb2 as spb


def state_of(snap: Snapshot) -> tuple:
    rows = [(ni.name, ni.node.meta.labels, sorted(pi.pod.meta.uid for pi in ni.pods),
             ni.requested.milli_cpu, ni.requested.memory, len(ni.pods)) for ni in snap.node_info_list]
    return rows, snap.cols.order_digest, dict(snap.namespace_labels)


def take(feed: ShardFeed, snap: Snapshot) -> spb.ShardFeed:
    out = spb.ShardFeed()
    feed.take(snap, out)
    return out


def pods_sent(f: spb.ShardFeed) -> int:
    """Pods a feed carries, whole or as a replica of a template the shard holds."""
    return len(f.pods) + len(f.replica_metadata)


def apply(shard: FedCluster, f: spb.ShardFeed) -> Snapshot:
    with shard.at(f) as snap:
        return snap


def cluster() -> Snapshot:
    snap = Snapshot([make_node(i, zone=None) for i in range(9)])
    for i in range(12):
        snap.add_pod(make_pod(f"p{i}"), f"node-{i % 7:05d}")
    snap.set_namespace_labels("team-a", {"team": "a"})
    return snap


def test_the_first_feed_carries_the_whole_cluster_and_the_next_only_what_changed():
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    first = take(feed, qm)
    assert first.from_generation == 0 and len(first.node_ops) == 9 and pods_sent(first) == 12
    assert state_of(apply(shard, first)) == state_of(qm)

    qm.add_pod(make_pod("new", cpu="700m"), "node-00008")
    gone = next(pi.pod for pi in qm.get("node-00001").pods)
    qm.remove_pod(gone)
    delta = take(feed, qm)
    assert delta.from_generation == first.generation and not delta.node_ops
    assert sorted(r.node for r in delta.rows) == ["node-00001", "node-00008"] and pods_sent(delta) == 1
    assert state_of(apply(shard, delta)) == state_of(qm)


def test_a_binding_or_status_sends_no_pod_and_a_spec_change_sends_it_again():
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    apply(shard, take(feed, qm))
    ni = qm.get("node-00002")
    pod = ni.pods[0].pod
    running = dataclasses.replace(pod, phase="Running", conditions=[PodCondition("Ready", "True")])
    qm.add_pod(running, "node-00002")
    other = make_pod("other")
    qm.add_pod(other, "node-00002")  # the row is sent again; the Running pod is not
    delta = take(feed, qm)
    assert [r.node for r in delta.rows] == ["node-00002"] and pods_sent(delta) == 1
    assert state_of(apply(shard, delta)) == state_of(qm)
    bigger = make_pod(other.meta.name, cpu="2")
    bigger.meta.uid = other.meta.uid
    qm.add_pod(bigger, "node-00002")
    delta = take(feed, qm)
    assert pods_sent(delta) == 1
    assert state_of(apply(shard, delta)) == state_of(qm)


def test_node_changes_keep_the_callers_node_order():
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    apply(shard, take(feed, qm))
    relabelled = make_node(3, zone=None)
    relabelled.meta.labels["disk"] = "ssd"
    qm.update_node(relabelled)
    qm.remove_node("node-00001")  # its pods wait for it, as the caller's do
    qm.add_node(make_node(20, zone=None))
    qm.add_node(make_node(1, zone="zone-z"))  # back, in a zone of its own: the order changes
    qm.set_namespace_labels("team-a", None)
    qm.set_namespace_labels("team-b", {"team": "b"})
    delta = take(feed, qm)
    assert delta.namespaces_changed and len(delta.node_ops) == 4
    assert state_of(apply(shard, delta)) == state_of(qm)
    qm.remove_node("node-00005")
    assert state_of(apply(shard, take(feed, qm))) == state_of(qm)


def test_feeds_apply_in_their_order():
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    apply(shard, take(feed, qm))
    qm.add_pod(make_pod("a"), "node-00000")
    first = take(feed, qm)
    qm.add_pod(make_pod("b"), "node-00000")
    second = take(feed, qm)
    seen = []
    t = threading.Thread(target=lambda: seen.append(state_of(apply(shard, second))))
    t.start()  # waits for `first`
    t.join(0.2)
    assert t.is_alive() and not seen
    apply(shard, first)
    t.join(5)
    assert seen == [state_of(qm)]


def test_without_waiting_only_changes_that_follow_at_once_apply():
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    whole = take(feed, qm)
    with pytest.raises(FeedNotReady):  # the whole cluster: not applied without waiting
        with shard.at(whole, wait=False):
            pass
    assert shard.generation == 0
    apply(shard, whole)
    qm.add_pod(make_pod("a"), "node-00000")
    first = take(feed, qm)
    qm.add_pod(make_pod("b"), "node-00001")
    second = take(feed, qm)
    for ahead in ((second, ()), (second, (take(ShardFeed(), qm).SerializeToString(),))):
        with pytest.raises(FeedNotReady):  # follows one not applied, or a chain that skips one
            with shard.at(ahead[0], ahead[1], wait=False):
                pass
    assert shard.generation == whole.generation
    holder_in, holder_out = threading.Event(), threading.Event()

    def hold() -> None:
        with shard._cond:
            holder_in.set()
            holder_out.wait(5)
    t = threading.Thread(target=hold)
    t.start()
    holder_in.wait(5)
    with pytest.raises(FeedNotReady, match="holds"):  # another request has the cluster
        with shard.at(first, wait=False):
            pass
    holder_out.set()
    t.join(5)
    with shard.at(second, (first.SerializeToString(),), wait=False) as snap:
        assert state_of(snap) == state_of(qm)


def test_a_shard_that_missed_a_feed_refuses_and_the_whole_cluster_follows():
    qm, feed, shard = cluster(), ShardFeed(), FedCluster(wait_timeout=0.1)
    apply(shard, take(feed, qm))
    qm.add_pod(make_pod("lost"), "node-00000")
    take(feed, qm)  # never arrives
    qm.add_pod(make_pod("next"), "node-00001")
    with pytest.raises(FeedRefused, match="does not follow"):
        apply(shard, take(feed, qm))
    feed.reset()  # what the caller does when a call fails
    again = take(feed, qm)
    assert again.from_generation == 0
    assert state_of(apply(shard, again)) == state_of(qm)
    # A restarted shard knows no feed: it refuses a delta; a new caller starts over.
    with pytest.raises(FeedRefused):
        qm.add_pod(make_pod("later"), "node-00002")
        apply(FedCluster(wait_timeout=0.1), take(feed, qm))
    assert state_of(apply(shard, take(ShardFeed(), qm))) == state_of(qm)


def test_a_stale_whole_cluster_feed_is_refused():
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    old = take(feed, qm)
    feed.reset()
    newer = take(feed, qm)
    apply(shard, newer)
    with pytest.raises(FeedRefused, match="older"):
        apply(shard, old)


def anti_affinity_pod(name: str) -> Pod:
    from schedmesh.api.types import Affinity, LabelSelector, PodAffinity, PodAffinityTerm
    pod = make_pod(name, labels={"app": "db"})
    term = PodAffinityTerm(topology_key="topology.kubernetes.io/zone", label_selector=LabelSelector.of({"app": "db"}))
    pod.affinity = Affinity(None, None, PodAffinity(required=[term]))
    return pod


def test_a_shard_is_fed_its_own_nodes_pods_and_elsewhere_only_pods_with_affinity_terms():
    from schedmesh.mesh.partition import shard_of
    qm = cluster()
    qm.add_pod(anti_affinity_pod("db-0"), "node-00004")
    feeds = [ShardFeed(shard_index=i, shard_count=2) for i in range(2)]
    shards = [FedCluster() for _ in range(2)]

    def check():
        for i, (feed, shard) in enumerate(zip(feeds, shards)):
            snap = apply(shard, take(feed, qm))
            assert snap.cols.order_digest == qm.cols.order_digest
            for ni in qm.node_info_list:
                got = sorted(pi.pod.meta.uid for pi in snap.get(ni.name).pods)
                mine = shard_of(ni.name, 2) == i
                want = sorted(pi.pod.meta.uid for pi in (ni.pods if mine else ni.pods_with_affinity))
                assert got == want, (i, ni.name)
                if mine:
                    assert snap.get(ni.name).requested.milli_cpu == ni.requested.milli_cpu
            assert len(snap.have_pods_with_required_anti_affinity()) == len(qm.have_pods_with_required_anti_affinity())

    check()
    # A pod without terms on a node of shard 0 is news to shard 0 only.
    node0 = next(ni.name for ni in qm.node_info_list if shard_of(ni.name, 2) == 0)
    qm.add_pod(make_pod("plain"), node0)
    deltas = [take(f, qm) for f in feeds]
    assert [r.node for r in deltas[0].rows] == [node0] and not deltas[1].rows
    for shard, d in zip(shards, deltas):
        apply(shard, d)
    qm.add_pod(anti_affinity_pod("db-1"), node0)  # news to both
    qm.remove_pod(next(pi.pod for pi in qm.get("node-00004").pods if pi.pod.meta.name == "db-0"))
    check()
    # An affinity pod changed in place (its labels) is sent again to the shards that hold it.
    relabelled = anti_affinity_pod("db-1")
    relabelled.meta.labels["tier"] = "gold"
    qm.add_pod(relabelled, node0)
    for feed, shard in zip(feeds, shards):
        snap = apply(shard, take(feed, qm))
        assert next(pi.pod for pi in snap.get(node0).pods if pi.pod.meta.name == "db-1").meta.labels["tier"] == "gold"


def test_a_partly_fed_shard_refuses_pods_that_are_not_node_local_and_feeds_for_another_shard():
    from schedmesh.api import convert
    from schedmesh.framework.profile import default_profile
    from schedmesh.framework.runtime import build_frameworks
    from schedmesh.mesh.shard import NodeShard
    qm = cluster()
    shard = NodeShard(FedCluster(), build_frameworks([default_profile()]), 1, 2)
    feed = ShardFeed(shard_index=1, shard_count=2)

    def request(pod) -> spb.FilterRequest:
        req = spb.FilterRequest(pod=convert.pod_to_proto(pod), scheduler_name="default-scheduler", evaluate_all=True)
        feed.take(qm, req.view.shard_feed)
        return req

    assert shard.filter(request(make_pod("plain"))).feasible
    with pytest.raises(ValueError, match="not node-local"):
        shard.filter(request(anti_affinity_pod("db")))
    wrong = NodeShard(FedCluster(), build_frameworks([default_profile()]), 0, 2)
    with pytest.raises(FeedRefused, match="shard 0 of 2, but was fed as shard 1 of 2"):
        wrong.filter(request(make_pod("plain")))


def test_random_changes_keep_every_shard_the_callers_and_a_pod_bound_next_to_many_sends_one():
    """Adds, removals, status updates, spec and label changes, moves, nodes removed and added
    again, in random order: after each feed every shard holds what the caller's snapshot has of
    what it reads (the rows' fast path, pods only added after those sent, and its fallbacks)."""
    import random
    from schedmesh.mesh.partition import shard_of
    rng = random.Random(7)
    qm = cluster()
    nodes = {ni.name: ni.node for ni in qm.node_info_list}
    feeds = [ShardFeed()] + [ShardFeed(shard_index=i, shard_count=2) for i in range(2)]
    shards = [FedCluster() for _ in feeds]
    serial = 0

    def placed() -> list:
        return [(pi.pod, ni.name) for ni in qm.node_info_list for pi in ni.pods]

    def check() -> None:
        for feed, shard in zip(feeds, shards):
            snap = apply(shard, take(feed, qm))
            assert snap.cols.order_digest == qm.cols.order_digest
            for ni in qm.node_info_list:
                mine = not feed.shard_count or shard_of(ni.name, feed.shard_count) == feed.shard_index
                want = sorted((pi.pod.meta.uid, pi.pod.meta.labels.get("v"), pi.pod.containers[0].requests["cpu"])
                              for pi in (ni.pods if mine else ni.pods_with_affinity))
                got = sorted((pi.pod.meta.uid, pi.pod.meta.labels.get("v"), pi.pod.containers[0].requests["cpu"])
                             for pi in snap.get(ni.name).pods)
                assert got == want, (feed.shard_index, feed.shard_count, ni.name)
                if mine:
                    assert snap.get(ni.name).requested.milli_cpu == ni.requested.milli_cpu

    check()
    for step in range(300):
        op = rng.randrange(7)
        pods = placed()
        if op <= 1 or not pods:
            serial += 1
            pod = anti_affinity_pod(f"a{serial}") if rng.random() < 0.2 else make_pod(f"n{serial}")
            qm.add_pod(pod, rng.choice(sorted(nodes)))
        elif op == 2:
            qm.remove_pod(rng.choice(pods)[0])
        elif op == 3:  # a status update: a new object, nothing a shard reads changed
            pod, node = rng.choice(pods)
            qm.add_pod(dataclasses.replace(pod, phase="Running", conditions=[PodCondition("Ready", "True")]), node)
        elif op == 4:  # labels or requests changed in place
            pod, node = rng.choice(pods)
            changed = dataclasses.replace(pod, meta=dataclasses.replace(pod.meta, labels={**pod.meta.labels, "v": str(step)}))
            if rng.random() < 0.5:
                changed.containers = [dataclasses.replace(pod.containers[0],
                                                          requests={**pod.containers[0].requests, "cpu": step})]
            qm.add_pod(changed, node)
        elif op == 5:  # moved to another node
            pod, _ = rng.choice(pods)
            qm.remove_pod(pod)
            qm.add_pod(pod, rng.choice(sorted(nodes)))
        elif rng.random() < 0.3:  # a node removed (its pods kept aside) and, later, added again
            name = rng.choice(sorted(nodes))
            if qm.get(name) is not None:
                qm.remove_node(name)
            else:
                qm.add_node(nodes[name])
        if rng.random() < 0.4:
            check()
    for name, node in nodes.items():
        if qm.get(name) is None:
            qm.add_node(node)
    check()

    # A pod bound on a node that has many: one pod and one row sent.
    crowded = "node-00003"
    for i in range(40):
        qm.add_pod(make_pod(f"crowd-{i}"), crowded)
    check()
    qm.add_pod(make_pod("one-more"), crowded)
    delta = take(feeds[0], qm)
    assert [r.node for r in delta.rows] == [crowded] and pods_sent(delta) == 1
    assert state_of(apply(shards[0], delta)) == state_of(qm)


def test_a_pod_with_affinity_terms_deleted_while_its_node_was_away_is_gone_from_other_shards_when_it_returns():
    """Another shard's node keeps, on this shard, only its pods with affinity terms; removed, the
    node's pods wait aside on the shard as in any snapshot. One deleted meanwhile must not come
    back with the node: its anti-affinity would still reject pods across its topology domain.
    (The feed sent no row for such a node when it had no such pod left, and the shard kept it.)"""
    from schedmesh.mesh.partition import shard_of
    qm = cluster()
    away = next(ni.name for ni in qm.node_info_list if shard_of(ni.name, 2) == 1)
    db = anti_affinity_pod("db-0")
    qm.add_pod(db, away)
    feed, shard = ShardFeed(shard_index=0, shard_count=2), FedCluster()
    assert [pi.pod.meta.name for pi in apply(shard, take(feed, qm)).get(away).pods] == ["db-0"]
    node = qm.get(away).node
    qm.remove_node(away)
    apply(shard, take(feed, qm))
    qm.remove_pod(db)
    apply(shard, take(feed, qm))
    qm.add_node(node)
    snap = apply(shard, take(feed, qm))
    assert snap.get(away).pods == [] and not snap.have_pods_with_required_anti_affinity()


def test_replicas_go_as_their_metadata_and_decode_as_their_whole_encoding_would():
    """Pods whose encodings differ only in their metadata go as that metadata over the first one
    sent (a template); each is then, field for field, what decoding it whole gives."""
    from schedmesh.api import convert
    from schedmesh.mesh.shard_feed import encode_pod
    from schedmesh.v1 import objects_pb2 as pb
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    first = take(feed, qm)
    assert len(first.pods) == 1 and len(first.replica_metadata) == 11 and list(first.pod_templates) == [1]
    apply(shard, first)
    labelled = make_pod("labelled")
    labelled.meta.labels = {"app": "web", "tier": "front"}
    bigger = make_pod("bigger", cpu="2")
    for pod in (labelled, make_pod("plain"), bigger, make_pod("bigger-2", cpu="2")):
        qm.add_pod(pod, "node-00004")
    delta = take(feed, qm)
    assert len(delta.pods) == 1 and len(delta.replica_metadata) == 3  # a new template for cpu 2
    snap = apply(shard, delta)
    for ni in qm.node_info_list:
        for pi in ni.pods:
            data = encode_pod(pi.pod)
            whole = convert.pod_from_proto(pb.Pod.FromString(data), data)
            got = next(p.pod for p in snap.get(ni.name).pods if p.pod.meta.uid == pi.pod.meta.uid)
            assert [getattr(got, f.name) for f in dataclasses.fields(Pod)] == \
                [getattr(whole, f.name) for f in dataclasses.fields(Pod)]  # (Pod compares by identity)


def test_a_replica_of_a_template_the_shard_does_not_hold_is_refused_and_the_whole_cluster_follows():
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    apply(shard, take(feed, qm))
    qm.add_pod(make_pod("late"), "node-00005")
    delta = take(feed, qm)
    assert len(delta.replica_metadata) == 1
    delta.replica_templates[0] = 99
    with pytest.raises(FeedRefused, match="template 99"):
        apply(shard, delta)
    feed.reset()
    assert state_of(apply(shard, take(feed, qm))) == state_of(qm)


def test_templates_numbered_up_to_a_bound_then_forgotten_on_both_sides(monkeypatch):
    from schedmesh.mesh import shard_feed
    monkeypatch.setattr(shard_feed, "TEMPLATES_MAX", 3)
    qm, feed, shard = cluster(), ShardFeed(), FedCluster()
    apply(shard, take(feed, qm))
    for i in range(6):  # six specs: three numbered, three sent whole unnumbered
        qm.add_pod(make_pod(f"s{i}", cpu=f"{i + 2}"), "node-00006")
    delta = take(feed, qm)
    assert list(delta.pod_templates) == [2, 3, 0, 0, 0, 0] and not delta.templates_reset
    assert state_of(apply(shard, delta)) == state_of(qm)
    qm.add_pod(make_pod("s-again", cpu="7"), "node-00006")  # a spec of the unnumbered ones
    delta = take(feed, qm)
    assert delta.templates_reset and list(delta.pod_templates) == [1] and not delta.replica_metadata
    snap = apply(shard, delta)
    assert state_of(snap) == state_of(qm) and set(shard._templates) == {1}
    qm.add_pod(make_pod("s-thrice", cpu="7"), "node-00007")
    delta = take(feed, qm)
    assert list(delta.replica_templates) == [1] and not delta.pods
    assert state_of(apply(shard, delta)) == state_of(qm)


# ---- one feed read by the filter and the score shard of the same nodes (SharedFeed) ----------
def sharing(readers: int) -> SharedFeed:
    """A feed whose readers' shards all said they apply earlier feeds."""
    shared = SharedFeed(ShardFeed, readers)
    for r in shared.readers:
        r.confirm(True)
    assert shared.sharing
    return shared


def read(reader, qm: Snapshot) -> spb.ClusterView:
    view = spb.ClusterView()
    reader.take(qm, view)
    return view


def apply_view(shard: FedCluster, view: spb.ClusterView) -> Snapshot:
    with shard.at(view.shard_feed, view.earlier_shard_feeds) as snap:
        return snap


def starts_whole(view: spb.ClusterView) -> bool:
    """Whether the first feed a request carries is the whole cluster (and only that one is)."""
    feeds = [spb.ShardFeed.FromString(b) for b in view.earlier_shard_feeds] + [view.shard_feed]
    return feeds[0].from_generation == 0 and all(f.from_generation for f in feeds[1:])


def both_sent_the_whole_cluster(qm: Snapshot, first: tuple, second: tuple) -> None:
    """The next request of each of two twins (reader, shard), in this order, starts with the whole
    cluster: the first's as its own feed, the second's as the earlier feed its twin was sent."""
    for reader, shard in (first, second):
        view = read(reader, qm)
        assert starts_whole(view) and len(view.earlier_shard_feeds) == (reader is second[0])
        assert state_of(apply_view(shard, view)) == state_of(qm)


def sent_in(view: spb.ClusterView) -> int:
    feeds = [spb.ShardFeed.FromString(b) for b in view.earlier_shard_feeds] + [view.shard_feed]
    return sum(pods_sent(f) for f in feeds)


def test_two_shards_of_the_same_nodes_read_one_feed_each_change_taken_once():
    qm = cluster()
    shared = sharing(2)
    filter_reader, score_reader = shared.readers
    filter_shard, score_shard = FedCluster(), FedCluster()
    first = read(filter_reader, qm)
    assert first.shard_feed.from_generation == 0 and not first.earlier_shard_feeds
    assert state_of(apply_view(filter_shard, first)) == state_of(qm)
    # The score shard's first request: the whole cluster its twin was sent, then the change since.
    qm.add_pod(make_pod("a"), "node-00000")
    view = read(score_reader, qm)
    assert len(view.earlier_shard_feeds) == 1 and view.shard_feed.from_generation == first.shard_feed.generation
    assert sent_in(view) == 12 + 1
    assert state_of(apply_view(score_shard, view)) == state_of(qm)
    # Runs: the filter feed taken, then the score feed; each pod goes into one feed only.
    sent = 0
    for k in range(3):
        qm.add_pod(make_pod(f"f{k}"), f"node-0000{k}")
        view = read(filter_reader, qm)
        assert len(view.earlier_shard_feeds) == 1  # what the score shard was sent last
        sent += pods_sent(view.shard_feed)
        assert state_of(apply_view(filter_shard, view)) == state_of(qm)
        qm.add_pod(make_pod(f"s{k}"), f"node-0000{k + 3}")
        view = read(score_reader, qm)
        sent += pods_sent(view.shard_feed)
        assert state_of(apply_view(score_shard, view)) == state_of(qm)
    assert sent == 6
    assert len(shared._log) == 1  # only what the filter shard has not had yet


def test_a_quiet_cluster_leaves_twins_and_a_lone_reader_nothing_pending():
    """keep_fed sends a reader a feed when it is pending: twins fed an empty feed made each other
    pending again (the shared generation moved), and a lone reader was always pending, so every
    idle shard was sent an empty feed every second, forever."""
    qm = cluster()
    shared = sharing(2)
    filter_reader, score_reader = shared.readers
    filter_shard, score_shard = FedCluster(), FedCluster()
    assert filter_reader.pending(qm) and score_reader.pending(qm)  # (nothing sent yet)
    apply_view(filter_shard, read(filter_reader, qm))
    assert score_reader.pending(qm)  # its twin was sent the whole cluster
    apply_view(score_shard, read(score_reader, qm))
    for _ in range(3):  # the idle loop's turns: nothing changed, nothing to send either
        assert not filter_reader.pending(qm) and not score_reader.pending(qm)
    # A feed that changes nothing (a request of no pods) leaves the twin with nothing pending; its
    # next request still carries it, so its chain of feeds stays whole.
    apply_view(filter_shard, read(filter_reader, qm))
    assert not score_reader.pending(qm)
    qm.add_pod(make_pod("a"), "node-00000")
    assert filter_reader.pending(qm) and score_reader.pending(qm)
    apply_view(filter_shard, read(filter_reader, qm))
    assert score_reader.pending(qm)  # the change went to its twin's feed
    view = read(score_reader, qm)
    assert len(view.earlier_shard_feeds) == 2  # the empty feed, then the change
    assert state_of(apply_view(score_shard, view)) == state_of(qm)
    assert not filter_reader.pending(qm) and not score_reader.pending(qm)

    lone = SharedFeed(ShardFeed, readers=1)
    (only,) = lone.readers
    apply_view(FedCluster(), read(only, qm))
    assert not only.pending(qm)
    qm.add_pod(make_pod("b"), "node-00001")
    assert only.pending(qm)


def test_a_shard_left_unasked_is_sent_every_feed_it_missed_then_the_whole_cluster_past_the_log():
    qm = cluster()
    shared = sharing(2)
    busy, idle = shared.readers
    busy_shard, idle_shard = FedCluster(), FedCluster()
    apply_view(busy_shard, read(busy, qm))
    apply_view(idle_shard, read(idle, qm))
    for k in range(5):
        qm.add_pod(make_pod(f"p{k}"), "node-00008")
        apply_view(busy_shard, read(busy, qm))
    assert idle.pending(qm)
    view = read(idle, qm)
    assert len(view.earlier_shard_feeds) == 5
    assert state_of(apply_view(idle_shard, view)) == state_of(qm)
    # More feeds waiting than the log keeps: every reader is sent the whole cluster next.
    shared.LOG_MAX = 3
    for k in range(4):
        qm.add_pod(make_pod(f"q{k}"), "node-00007")
        apply_view(busy_shard, read(busy, qm))
    both_sent_the_whole_cluster(qm, (busy, busy_shard), (idle, idle_shard))


def test_a_failed_call_sends_both_shards_the_whole_cluster():
    qm = cluster()
    shared = sharing(2)
    a, b = shared.readers
    shard_a, shard_b = FedCluster(wait_timeout=0.1), FedCluster(wait_timeout=0.1)
    apply_view(shard_a, read(a, qm))
    apply_view(shard_b, read(b, qm))
    qm.add_pod(make_pod("lost"), "node-00000")
    read(a, qm)  # its call fails: shard a may not have applied it
    a.reset()
    qm.add_pod(make_pod("next"), "node-00001")
    both_sent_the_whole_cluster(qm, (b, shard_b), (a, shard_a))


def test_a_shard_refuses_feeds_that_skip_one_it_was_never_sent():
    qm = cluster()
    shared = sharing(2)
    a, b = shared.readers
    shard_b = FedCluster(wait_timeout=0.1)
    apply_view(shard_b, read(b, qm))
    qm.add_pod(make_pod("x"), "node-00000")
    read(a, qm)
    view = read(b, qm)
    del view.earlier_shard_feeds[:]  # the feed shard a was sent, lost on the way to b
    with pytest.raises(FeedRefused, match="does not follow"):
        apply_view(shard_b, view)
    view.earlier_shard_feeds.append(b"\xff\xff")
    with pytest.raises(FeedRefused, match="does not decode"):
        apply_view(shard_b, view)


def test_a_feed_with_one_reader_keeps_no_log():
    qm = cluster()
    shared = SharedFeed(ShardFeed, readers=1)
    (only,) = shared.readers
    shard = FedCluster()
    apply_view(shard, read(only, qm))
    qm.add_pod(make_pod("a"), "node-00000")
    view = read(only, qm)
    assert not view.earlier_shard_feeds and not shared._log
    assert state_of(apply_view(shard, view)) == state_of(qm)


def test_twins_share_the_feed_only_once_both_shards_apply_earlier_feeds():
    qm = cluster()
    shared = SharedFeed(ShardFeed, readers=2)
    a, b = shared.readers
    shard_a, shard_b = FedCluster(wait_timeout=0.1), FedCluster(wait_timeout=0.1)
    # Until both said so (a shard of an older version ignores earlier feeds), each its own feed.
    for reader, shard in ((a, shard_a), (b, shard_b)):
        view = read(reader, qm)
        assert view.shard_feed.from_generation == 0 and not view.earlier_shard_feeds
        assert state_of(apply_view(shard, view)) == state_of(qm)
    a.confirm(True)
    qm.add_pod(make_pod("x"), "node-00000")
    views = [read(a, qm), read(b, qm)]
    assert not shared.sharing and not any(v.earlier_shard_feeds for v in views)
    assert all(pods_sent(v.shard_feed) == 1 for v in views)  # the change taken once for each
    assert all(state_of(apply_view(s, v)) == state_of(qm) for s, v in zip((shard_a, shard_b), views))
    b.confirm(True)  # both: one feed from now on, starting with the whole cluster for each
    assert shared.sharing
    qm.add_pod(make_pod("y"), "node-00001")
    first, second = read(a, qm), read(b, qm)
    assert starts_whole(first) and not first.earlier_shard_feeds and starts_whole(second)
    assert state_of(apply_view(shard_a, first)) == state_of(qm)
    assert state_of(apply_view(shard_b, second)) == state_of(qm)
    b.confirm(False)  # shard b rolled back: each its own feed again, the whole cluster first
    assert not shared.sharing
    qm.add_pod(make_pod("z"), "node-00002")
    for reader, shard in ((a, shard_a), (b, shard_b)):
        view = read(reader, qm)
        assert view.shard_feed.from_generation == 0 and not view.earlier_shard_feeds
        assert state_of(apply_view(shard, view)) == state_of(qm)


def test_shards_asked_first_with_an_empty_cluster_are_sent_the_whole_cluster_once():
    qm = cluster()
    shared = SharedFeed(ShardFeed, readers=2)
    shards = {r: FedCluster() for r in shared.readers}
    got: dict = {r: [] for r in shared.readers}  # every feed each shard was sent

    def send(reader, view: spb.ClusterView) -> Snapshot:
        got[reader] += [spb.ShardFeed.FromString(b) for b in view.earlier_shard_feeds] + [view.shard_feed]
        return apply_view(shards[reader], view)

    for r in shared.readers:  # what the idle feeder does first: an empty cluster, answered
        view = spb.ClusterView()
        assert r.probe(view) and not view.shard_feed.node_ops and not view.shard_feed.pods
        assert not send(r, view).node_info_list
        r.confirm(True)
    assert shared.sharing and not any(r.probe(spb.ClusterView()) for r in shared.readers)
    for k in range(3):
        qm.add_pod(make_pod(f"p{k}"), "node-00003")
        for r in shared.readers:
            assert state_of(send(r, read(r, qm))) == state_of(qm)
    for r in shared.readers:  # the cluster's nine nodes sent to each shard once
        assert sum(len(f.node_ops) for f in got[r]) == 9, [len(f.node_ops) for f in got[r]]
