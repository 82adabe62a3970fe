"""The preemption service's decision path on a small cluster: the queue-manager's view in, kube's
victims out (the same as explain's), acted out as records that the cluster cache applies; and
the queue-manager's bookkeeping of preemptions in flight."""
from __future__ import annotations

import pytest

from schedmesh.api.types import Pod
from schedmesh.cli.explain import Explainer
from schedmesh.api.load import Manifests
from schedmesh.framework.interface import Code, CycleState
from schedmesh.framework.profile import default_profile
from schedmesh.framework.runtime import build_frameworks
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import TOPIC_EVENTS, ClusterCache
from schedmesh.mesh.preemption_service import (PreemptionEvaluator, PreemptionsInFlight, node_to_status_of,
                                               preempt_request)
from schedmesh.preemption.testkit import make_node, make_pdb, make_pod
from schedmesh.scheduling.cycle import FitError, SchedulingAlgorithm
from schedmesh.v1 import events_pb2
from schedmesh.v1 import scheduling_pb2 as spb

CPU2 = {"cpu": "2", "memory": "8Gi"}


class Cluster:
    """A ClusterCache fed through records, as every mesh service's replica is."""

    def __init__(self, nodes, pods, pdbs=()) -> None:
        self.cache = ClusterCache()
        self.offset = 0
        self.events: list[events_pb2.Event] = []
        for n in nodes:
            self.apply(records.node_record(n))
        for p in pdbs:
            self.apply(records.pdb_record(p))
        for i, p in enumerate(pods):
            p.start_time = p.start_time or 100.0 + i  # started in list order
            self.apply(records.pod_record(p))
        self.nodes, self.pdbs = list(nodes), list(pdbs)

    def apply(self, rec) -> None:
        topic, _key, value = rec
        if topic == TOPIC_EVENTS:
            self.events.extend(records.expand(events_pb2.Event.FromString(value)))
            return
        self.cache.apply(topic, value, self.offset)
        self.offset += 1

    def view(self, client="queue-manager", assumed=(), nominated=()) -> spb.ClusterView:
        v = spb.ClusterView(client_id=client, offsets=self.cache.view_offsets())
        from schedmesh.api import convert
        for pod, node in assumed:
            v.assumed.add(pod=convert.pod_to_proto(pod), node_name=node)
        for pod, node in nominated:
            v.nominated.add(pod=convert.pod_to_proto(pod), node_name=node)
        return v

    def fit_error(self, pod: Pod) -> FitError:
        """The queue-manager's cycle for `pod`, which must fail Filter.

    (PostFilter messages start with DynamicResources' "no new claims to deallocate", as kube's.)"""
        fw = build_frameworks([default_profile()])["default-scheduler"]
        fw.set_snapshot_source(lambda: self.cache.snapshot)
        with pytest.raises(FitError) as e:
            SchedulingAlgorithm(tie_break="name").schedule_pod(fw, CycleState(), pod, self.cache.snapshot,
                                                               evaluate_all=True)
        return e.value

    def request(self, pod: Pod, **view):
        return preempt_request(pod, "default-scheduler", self.view(**view), self.fit_error(pod).diagnosis)


def service(cluster: Cluster) -> PreemptionEvaluator:
    return PreemptionEvaluator(cluster.cache, build_frameworks([default_profile()]), all_candidates=True,
                               source="preemption", wait_timeout=0.2)


def explain_choice(cluster: Cluster, pod: Pod) -> dict:
    """What `schedmesh explain` says for the same cluster."""
    with cluster.cache.lock:
        bound = [p for p in cluster.cache.pods.values() if p.node_name]
    ex = Explainer(Manifests(nodes=cluster.nodes, pods=bound, pdbs=cluster.pdbs), [default_profile()])
    return ex.decide(pod).preemption


def small_cluster(pdbs=()) -> Cluster:
    nodes = [make_node("n1", CPU2), make_node("n2", CPU2)]
    pods = [make_pod("a1", "n1", priority=10, req={"cpu": "1"}, labels={"app": "a"}),
            make_pod("a2", "n1", priority=20, req={"cpu": "1"}, labels={"app": "a"}),
            make_pod("b1", "n2", priority=10, req={"cpu": "1"}, labels={"app": "b"}),
            make_pod("b2", "n2", priority=5, req={"cpu": "1"}, labels={"app": "b"})]
    return Cluster(nodes, pods, pdbs)


def test_victims_are_explains_and_the_decision_is_acted_out():
    c = small_cluster()
    preemptor = make_pod("urgent", priority=100, req={"cpu": "1"}, uid="urgent-uid")
    c.apply(records.pod_record(preemptor))
    resp, recs = service(c).decide(c.request(preemptor), now=500.0)
    assert (resp.code, resp.message, resp.has_result) == (Code.SUCCESS, "", True)
    # the fewest, least important victims: b2 (priority 5) on n2
    assert (resp.nominated_node_name, list(resp.victims)) == ("n2", ["default/b2"])
    assert explain_choice(c, preemptor) == {"node": "n2", "victims": ["default/b2"]}
    assert list(resp.deleting_uids) == ["b2"]
    for r in recs:
        c.apply(r)
    b2 = c.cache.pods["b2"]
    assert b2.meta.deletion_timestamp == 500.0
    target = [x for x in b2.conditions if x.type == "DisruptionTarget"]
    assert [(x.status, x.reason, x.message) for x in target] == [
        ("True", "PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")]
    assert c.cache.pods["urgent-uid"].nominated_node_name == "n2"
    assert [(e.pod, e.type, e.reason, e.message) for e in c.events] == [
        ("default/b2", "Normal", "Preempted", "Preempted by pod urgent-uid on node n2")]
    assert all(c.cache.pods[u].meta.deletion_timestamp is None for u in ("a1", "a2", "b1"))


def test_preemption_policy_never_preempts_nothing():
    c = small_cluster()
    pod = make_pod("polite", priority=100, req={"cpu": "1"}, policy="Never")
    c.apply(records.pod_record(pod))
    resp, recs = service(c).decide(c.request(pod))
    assert (resp.code, resp.message) == (
        Code.UNSCHEDULABLE, "no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never.")
    assert not resp.has_result and recs == []


def test_not_helpful_message_is_kubes():
    c = small_cluster()
    pod = make_pod("low", priority=1, req={"cpu": "1"})
    c.apply(records.pod_record(pod))
    resp, recs = service(c).decide(c.request(pod))
    assert resp.code == Code.UNSCHEDULABLE and recs == []
    assert resp.message == ("no new claims to deallocate, preemption: 0/2 nodes are available: "
                            "2 No preemption victims found for incoming pod.")
    assert resp.has_result and resp.nominated_node_name == ""  # kube clears a nomination then


def test_a_pdb_protected_pod_is_reprieved():
    # b2 is covered by a PDB that allows no disruption: n1 (a1, violating nothing) wins over n2
    c = small_cluster(pdbs=[make_pdb("keep-b", {"app": "b"}, allowed=0)])
    preemptor = make_pod("urgent", priority=100, req={"cpu": "1"})
    c.apply(records.pod_record(preemptor))
    resp, _ = service(c).decide(c.request(preemptor))
    assert (resp.nominated_node_name, list(resp.victims)) == ("n1", ["default/a1"])
    assert explain_choice(c, preemptor) == {"node": "n1", "victims": ["default/a1"]}


def test_the_callers_assumed_pods_count():
    # The queue-manager assumed "x" on n2 (not bound yet): n2 is then full of pods the preemptor
    # cannot all evict cheaply; without the overlay the service would see room on n2 already.
    nodes = [make_node("n1", CPU2), make_node("n2", CPU2)]
    c = Cluster(nodes, [make_pod("a1", "n1", priority=10, req={"cpu": "2"}),
                        make_pod("b1", "n2", priority=1, req={"cpu": "1"})])
    assumed = make_pod("x", priority=1000, req={"cpu": "1"})
    c.apply(records.pod_record(assumed))
    preemptor = make_pod("urgent", priority=100, req={"cpu": "2"})
    c.apply(records.pod_record(preemptor))
    c.cache.set_assumed("queue-manager", [(assumed, "n2")])  # the queue-manager's own cycle saw it
    req = c.request(preemptor, assumed=[(assumed, "n2")])
    c.cache.set_assumed("queue-manager", [])
    resp, _ = service(c).decide(req)
    assert (resp.nominated_node_name, list(resp.victims)) == ("n1", ["default/a1"])


def test_lower_priority_nominations_on_the_node_are_cleared():
    c = small_cluster()
    waiting = make_pod("waiting", priority=1, req={"cpu": "1"}, nominated="n2")
    preemptor = make_pod("urgent", priority=100, req={"cpu": "1"})
    for p in (waiting, preemptor):
        c.apply(records.pod_record(p))
    resp, recs = service(c).decide(c.request(preemptor, nominated=[(waiting, "n2")]))
    assert resp.nominated_node_name == "n2" and list(resp.cleared_nominations) == ["default/waiting"]
    for r in recs:
        c.apply(r)
    assert c.cache.pods["waiting"].nominated_node_name == ""


def test_a_replica_behind_the_callers_offsets_refuses():
    c = small_cluster()
    preemptor = make_pod("urgent", priority=100, req={"cpu": "1"})
    req = c.request(preemptor)
    req.view.offsets["schedmesh.pods/0"] = 10_000
    with pytest.raises(TimeoutError, match="has not caught up"):
        service(c).decide(req)
    req.view.offsets["schedmesh.pods/0"] = 0
    req.scheduler_name = "nobody"
    with pytest.raises(KeyError, match="nobody"):
        service(c).decide(req)


def test_node_statuses_travel_grouped_and_come_back_equal():
    c = small_cluster()
    preemptor = make_pod("urgent", priority=100, req={"cpu": "1"})
    err = c.fit_error(preemptor)
    back = node_to_status_of(preempt_request(preemptor, "default-scheduler", c.view(), err.diagnosis))
    for node in ("n1", "n2", "absent"):
        a, b = err.diagnosis.node_to_status.get(node), back.get(node)
        assert (a.code, a.reasons, a.plugin) == (b.code, b.reasons, b.plugin)


def test_preemptions_in_flight_until_the_last_victim_terminates():
    pods: dict[str, Pod] = {"v1": make_pod("v1", "n1"), "v2": make_pod("v2", "n1")}
    flight = PreemptionsInFlight(pods)
    assert not flight.is_pod_running_preemption("p")
    flight.started("p")
    assert flight.is_pod_running_preemption("p")  # unanswered
    flight.answered("p", ["v1", "v2"])
    assert flight.is_pod_running_preemption("p")  # v2 (the last) not terminating yet
    pods["v2"] = make_pod("v2", "n1", terminating=True)
    assert not flight.is_pod_running_preemption("p")
    flight.started("q")
    flight.answered("q", [])  # nothing to delete (victims already terminating, or no candidate)
    assert not flight.is_pod_running_preemption("q")
    flight.started("r")
    flight.answered("r", ["gone"])  # the last victim already deleted
    assert not flight.is_pod_running_preemption("r")


def test_a_preemptor_waits_no_longer_than_the_expectations_timeout_for_its_victims_deletion():
    """The deletion's record lost with a memory broker that restarted (or undone by an owner's
    re-publication): the preemptor is let through after EXPECTATIONS_TIMEOUT, not held for good."""
    from schedmesh.mesh.controllers.podcontrol import EXPECTATIONS_TIMEOUT
    now = [100.0]
    pods: dict[str, Pod] = {"v": make_pod("v", "n1")}
    flight = PreemptionsInFlight(pods, clock=lambda: now[0])
    flight.started("p")
    flight.answered("p", ["v"])
    now[0] += EXPECTATIONS_TIMEOUT - 1
    assert flight.is_pod_running_preemption("p")
    now[0] += 1
    assert not flight.is_pod_running_preemption("p")
    assert not flight.is_pod_running_preemption("p"), "over for good"


def test_no_second_preemption_while_victims_terminate_on_the_nominated_node():
    # The preemptor's own copy in the request predates its nomination: the service reads the
    # latest one (kube's Preempt does), sees its victims terminating there, and preempts nothing.
    c = small_cluster()
    preemptor = make_pod("urgent", priority=100, req={"cpu": "2"}, uid="urgent-uid")
    c.apply(records.pod_record(preemptor))
    evaluator = service(c)
    resp, recs = evaluator.decide(c.request(preemptor), now=500.0)
    assert resp.nominated_node_name == "n2" and len(resp.victims) == 2
    for r in recs:
        c.apply(r)
    again, recs = evaluator.decide(c.request(preemptor))
    assert again.message.endswith("preemption: not eligible due to a terminating pod on the nominated node.")
    assert not again.has_result and recs == []


def test_a_victim_waiting_on_permit_is_left_to_the_caller_to_reject():
    """kube's prepareCandidate: a victim a Permit plugin holds is rejected ("preempted"), not
    deleted; its Preempted event is recorded all the same."""
    nodes = [make_node("n1", CPU2)]
    c = Cluster(nodes, [make_pod("a1", "n1", priority=10, req={"cpu": "1"})])
    waiting = make_pod("w", priority=1, req={"cpu": "1"})  # assumed on n1, held by Permit
    c.apply(records.pod_record(waiting))
    preemptor = make_pod("urgent", priority=100, req={"cpu": "2"}, uid="urgent-uid")
    c.apply(records.pod_record(preemptor))
    c.cache.set_assumed("queue-manager", [(waiting, "n1")])
    req = c.request(preemptor, assumed=[(waiting, "n1")])
    c.cache.set_assumed("queue-manager", [])
    req.view.waiting_uids.append("w")
    resp, recs = service(c).decide(req, now=500.0)
    assert (resp.nominated_node_name, sorted(resp.victims)) == ("n1", ["default/a1", "default/w"])
    assert list(resp.reject_waiting_uids) == ["w"] and list(resp.deleting_uids) == ["a1"]
    for r in recs:
        c.apply(r)
    assert c.cache.pods["w"].meta.deletion_timestamp is None
    assert c.cache.pods["a1"].meta.deletion_timestamp == 500.0
    assert sorted((e.pod, e.reason) for e in c.events) == [("default/a1", "Preempted"), ("default/w", "Preempted")]
