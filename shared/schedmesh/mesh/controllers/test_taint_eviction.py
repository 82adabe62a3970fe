"""The taint-eviction controller over a cache fed by records: NoExecute taints delete untolerating
pods at once, tolerating ones after tolerationSeconds, never those tolerating for ever; deletions
cancelled when the taint goes; kube's event words; the delta carries DisruptionTarget."""
from __future__ import annotations

from schedmesh.api.types import NO_EXECUTE, Taint, Toleration
from schedmesh.eviction.testkit import T0, node, pod
from schedmesh.mesh.controllers.taint_eviction import TaintEvictionController
from schedmesh.mesh.controllers.testkit import FedCache, bound
from schedmesh.mesh.records import node_record, node_update, pod_record
from schedmesh.v1 import events_pb2

UNREACHABLE = Taint("node.kubernetes.io/unreachable", NO_EXECUTE, time_added=T0)


def tolerating(name: str, seconds):
    return bound(pod(name, tolerations=[Toleration("node.kubernetes.io/unreachable", "Exists", "", NO_EXECUTE,
                                                   seconds)]), "n1")


def deleted(fed, recs):
    fed.apply(recs)
    out = {}
    for _t, _k, v in recs:
        if _t != "schedmesh.pods":
            continue
        msg = events_pb2.PodRecord.FromString(v)
        for r in (msg.batch if len(msg.batch) else [msg]):
            out[r.update.uid] = r.update
    return out


def test_no_execute_eviction_timing_and_words():
    fed = FedCache()
    fed.add(node("n1"), bound(pod("plain"), "n1"), tolerating("five", 5), tolerating("forever", None))
    tec = TaintEvictionController(fed.cache, source="cm")
    assert tec.sync(T0) == []  # no NoExecute taint yet
    fed.apply([node_update("n1", add_taints=[UNREACHABLE])])
    got = deleted(fed, tec.sync(T0 + 1))
    assert set(got) == {"uid-plain"}
    u = got["uid-plain"]
    assert u.deletion_timestamp == T0 + 1
    assert ("DisruptionTarget", "True", "DeletionByTaintManager") in [(c.type, c.status, c.reason) for c in u.conditions]
    assert [(e.reason, e.message) for e in fed.events] == [("TaintManagerEviction", "Marking for deletion Pod default/plain")]
    assert fed.cache.pods["uid-plain"].meta.deletion_timestamp == T0 + 1
    assert deleted(fed, tec.sync(T0 + 5.9)) == {}
    assert set(deleted(fed, tec.sync(T0 + 6.1))) == {"uid-five"}  # 5 s after the controller saw the taint
    assert deleted(fed, tec.sync(T0 + 1000)) == {}  # tolerates for ever


def test_deletion_cancelled_when_the_taint_goes():
    fed = FedCache()
    fed.add(node("n1", taints=[UNREACHABLE]), tolerating("ten", 10))
    tec = TaintEvictionController(fed.cache, source="cm")
    assert deleted(fed, tec.sync(T0)) == {}
    fed.apply([node_update("n1", remove_taints=[Taint(UNREACHABLE.key, NO_EXECUTE)])])
    assert deleted(fed, tec.sync(T0 + 2)) == {}
    assert [(e.reason, e.message) for e in fed.events] == [("TaintManagerEviction", "Cancelling deletion of Pod default/ten")]
    assert deleted(fed, tec.sync(T0 + 20)) == {}


def test_nodes_without_a_kubelet_are_left_as_applied():
    """A node applied as an object (no heartbeat) keeps its pods under its NoExecute taints, as the
    recorded cluster it comes from did; a node with a kubelet has them evicted."""
    fed = FedCache()
    applied = node("applied", taints=[Taint("maintenance", NO_EXECUTE)])
    pooled = node("pooled", taints=[Taint("maintenance", NO_EXECUTE)])
    fed.add(applied, pooled, bound(pod("kept"), "applied"), bound(pod("evicted"), "pooled"))
    tec = TaintEvictionController(fed.cache, source="cm", monitored=lambda n: n == "pooled")
    assert set(deleted(fed, tec.sync(T0))) == {"uid-evicted"}
    assert deleted(fed, tec.sync(T0 + 600)) == {}


def test_a_taint_added_to_an_applied_node_evicts():
    """`schedmesh taint` on a node applied as an object: the taint it adds evicts as kube's taint
    manager does, the taints the node was applied with still do not; applying the node again makes
    its taints the applied ones; a controller-manager that reads the same records again (a restart)
    decides the same."""
    applied_with = Taint("recorded", NO_EXECUTE)
    added = Taint("maintenance", NO_EXECUTE, time_added=T0)
    tolerates_added = Toleration("maintenance", "Exists", "", NO_EXECUTE, 30)
    records = [node_record(node("n1", taints=[applied_with])),
               pod_record(bound(pod("kept", tolerations=[Toleration("", "Exists", "", NO_EXECUTE)]), "n1")),
               pod_record(bound(pod("plain"), "n1")),
               pod_record(bound(pod("thirty", tolerations=[Toleration("recorded", "Exists", "", NO_EXECUTE),
                                                            tolerates_added]), "n1"))]
    fed = FedCache()
    tec = TaintEvictionController(fed.cache, source="cm", monitored=lambda n: False)
    fed.apply(records)
    assert deleted(fed, tec.sync(T0)) == {}  # "plain" does not tolerate "recorded": left as applied
    taint = node_update("n1", add_taints=[added])
    fed.apply([taint])
    assert set(deleted(fed, tec.sync(T0 + 1))) == {"uid-plain"}
    assert [e.message for e in fed.events] == ["Marking for deletion Pod default/plain"]

    again = FedCache()  # the same log read by a restarted controller-manager
    restarted = TaintEvictionController(again.cache, source="cm", monitored=lambda n: False)
    again.apply([*records, taint])
    assert set(deleted(again, restarted.sync(T0 + 1))) == {"uid-plain"}

    assert deleted(fed, tec.sync(T0 + 30)) == {}
    assert set(deleted(fed, tec.sync(T0 + 31.5))) == {"uid-thirty"}  # its tolerationSeconds, then out

    # the node applied again with the taint: now it is as applied, and evicts nobody
    fresh = FedCache()
    tec = TaintEvictionController(fresh.cache, source="cm", monitored=lambda n: False)
    fresh.apply([*records, taint, node_record(node("n1", taints=[applied_with, added]))])
    assert deleted(fresh, tec.sync(T0 + 100)) == {}
    # removed and added again with `schedmesh taint`: it evicts again
    fresh.apply([node_update("n1", remove_taints=[Taint("maintenance", "")]), node_update("n1", add_taints=[added])])
    assert set(deleted(fresh, tec.sync(T0 + 101))) == {"uid-plain"}


class CountingSnapshot:
    """The cache's snapshot, counting the passes over its nodes."""

    def __init__(self, snapshot) -> None:
        self._snapshot, self.passes = snapshot, 0

    @property
    def node_info_list(self):
        self.passes += 1
        return self._snapshot.node_info_list

    def __getattr__(self, name):
        return getattr(self._snapshot, name)


def test_no_pass_over_the_nodes_while_none_has_a_no_execute_taint():
    """(A pass over 5,000 nodes every 0.5 s was a third of an idle controller manager's CPU.)"""
    fed = FedCache()
    fed.add(node("n1"), node("n2"), bound(pod("plain"), "n1"))
    tec = TaintEvictionController(fed.cache, source="cm")
    fed.cache.snapshot = counting = CountingSnapshot(fed.cache.snapshot)
    assert tec.sync(T0) == [] and counting.passes == 0
    fed.apply([node_update("n1", add_taints=[UNREACHABLE])])
    assert set(deleted(fed, tec.sync(T0 + 1))) == {"uid-plain"} and counting.passes == 1
    fed.apply([node_update("n1", remove_taints=[Taint(UNREACHABLE.key, NO_EXECUTE)])])
    tec.sync(T0 + 2)
    assert counting.passes == 1


def test_a_deletion_not_seen_back_is_marked_again_after_the_expectations_timeout():
    """The marking's record lost (a memory broker restarted before anyone read it): the pod is
    marked again once EXPECTATIONS_TIMEOUT has passed, not before, and only while still evicted."""
    from schedmesh.mesh.controllers.podcontrol import EXPECTATIONS_TIMEOUT
    fed = FedCache()
    fed.add(node("n1", taints=[UNREACHABLE]), bound(pod("plain"), "n1"))
    tec = TaintEvictionController(fed.cache, source="cm")
    assert set(deleted(FedCache(), tec.sync(T0))) == {"uid-plain"}  # published, never read back
    assert deleted(fed, tec.sync(T0 + EXPECTATIONS_TIMEOUT - 1)) == {}
    again = deleted(fed, tec.sync(T0 + EXPECTATIONS_TIMEOUT))
    assert set(again) == {"uid-plain"} and again["uid-plain"].deletion_timestamp == T0 + EXPECTATIONS_TIMEOUT
    assert deleted(fed, tec.sync(T0 + 3 * EXPECTATIONS_TIMEOUT)) == {}, "seen back this time: done"


def test_a_mark_not_seen_back_is_dropped_when_the_taint_goes():
    """A taint removed and added again later starts afresh: the tolerating pod gets its
    tolerationSeconds again, not a deletion at once for the mark whose record was lost."""
    from schedmesh.mesh.controllers.podcontrol import EXPECTATIONS_TIMEOUT
    fed = FedCache()
    fed.add(node("n1", taints=[UNREACHABLE]), tolerating("five", 5))
    tec = TaintEvictionController(fed.cache, source="cm")
    assert deleted(fed, tec.sync(T0)) == {}
    assert set(deleted(FedCache(), tec.sync(T0 + 5.1))) == {"uid-five"}  # lost
    fed.apply([node_update("n1", remove_taints=[Taint(UNREACHABLE.key, NO_EXECUTE)])])
    assert deleted(fed, tec.sync(T0 + 6)) == {}
    later = T0 + 2 * EXPECTATIONS_TIMEOUT
    fed.apply([node_update("n1", add_taints=[UNREACHABLE])])
    assert deleted(fed, tec.sync(later)) == {}
    assert set(deleted(fed, tec.sync(later + 5.1))) == {"uid-five"}
