"""The node-lifecycle controller over a cache fed by records and the agents' lease batches:
Ready=Unknown and the unreachable taints after the grace period, back to Ready when heartbeats
resume, TaintNodesByCondition, users' taints left alone, nodes without an agent left alone."""
from __future__ import annotations

from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, NodeCondition, Taint
from schedmesh.eviction.testkit import T0, node
from schedmesh.mesh.controllers.node_lifecycle import NodeLifecycleController
from schedmesh.mesh.controllers.testkit import FedCache, lease, ready
from schedmesh.mesh.records import node_update
from schedmesh.v1 import events_pb2

UNREACHABLE = "node.kubernetes.io/unreachable"
USER_TAINT = Taint("dedicated", NO_SCHEDULE, "db")


def edit(recs):
    (rec,) = recs
    u = events_pb2.NodeRecord.FromString(rec[2]).update
    return ({c.type: (c.status, c.reason) for c in u.conditions},
            sorted((t.key, t.effect) for t in u.add_taints), sorted((t.key, t.effect) for t in u.remove_taints))


def setup(grace: float = 5.0):
    fed = FedCache()
    fed.add(node("n1", conditions=[ready("True", T0)], taints=[USER_TAINT]),
            node("applied", conditions=[NodeCondition("Ready", "False")]))
    nlc = NodeLifecycleController(fed.cache, grace_period=grace, source="cm")
    nlc.on_lease(lease(["n1"], T0), now=T0)
    return fed, nlc


def test_silent_node_becomes_unknown_and_unreachable_then_recovers():
    fed, nlc = setup()
    assert nlc.sync(T0 + 5) == []  # within the grace period
    recs = nlc.sync(T0 + 5.5)
    conditions, add, remove = edit(recs)
    assert conditions["Ready"] == ("Unknown", "NodeStatusUnknown")
    assert conditions["MemoryPressure"][0] == "Unknown"
    assert add == [(UNREACHABLE, NO_EXECUTE), (UNREACHABLE, NO_SCHEDULE)]
    assert remove == []
    fed.apply(recs)
    n1 = fed.cache.snapshot.get("n1").node
    assert USER_TAINT in n1.taints and {(t.key, t.effect) for t in n1.taints} >= {(UNREACHABLE, NO_EXECUTE)}
    assert all(t.time_added == T0 + 5.5 for t in n1.taints if t.key == UNREACHABLE)
    assert nlc.sync(T0 + 6) == []  # done
    # heartbeats resume: Ready from the agent's lease, unreachable taints gone, the user's kept
    nlc.on_lease(lease(["n1"], T0 + 20), now=T0 + 20)
    recs = nlc.sync(T0 + 20)
    conditions, add, remove = edit(recs)
    assert conditions["Ready"][0] == "True" and add == []
    assert remove == [(UNREACHABLE, NO_EXECUTE), (UNREACHABLE, NO_SCHEDULE)]
    fed.apply(recs)
    assert fed.cache.snapshot.get("n1").node.taints == [USER_TAINT]


def test_a_replayed_old_lease_starts_the_grace_period_now():
    """kube's probe timestamp is the controller's own clock when it first sees a lease."""
    fed, nlc = setup()
    nlc.on_lease(lease(["n1"], T0 - 1000), now=T0)  # older renew time: ignored
    assert nlc.sync(T0 + 4) == []


def test_taint_nodes_by_condition():
    fed, nlc = setup(grace=50)
    fed.apply([node_update("n1", conditions=[NodeCondition("MemoryPressure", "True"),
                                             NodeCondition("PIDPressure", "True")], unschedulable=True)])
    recs = nlc.sync(T0 + 1)
    conditions, add, remove = edit(recs)
    assert conditions == {}
    assert add == [("node.kubernetes.io/memory-pressure", NO_SCHEDULE), ("node.kubernetes.io/pid-pressure", NO_SCHEDULE),
                   ("node.kubernetes.io/unschedulable", NO_SCHEDULE)]
    fed.apply(recs)
    fed.apply([node_update("n1", conditions=[NodeCondition("MemoryPressure", "False")], unschedulable=False)])
    _c, add, remove = edit(nlc.sync(T0 + 2))
    assert add == [] and remove == [("node.kubernetes.io/memory-pressure", NO_SCHEDULE),
                                    ("node.kubernetes.io/unschedulable", NO_SCHEDULE)]


def test_nodes_without_an_agent_are_left_as_applied():
    fed, nlc = setup()
    nlc.on_lease(lease(["n1"], T0 + 100), now=T0 + 100)
    assert nlc.sync(T0 + 100) == []  # "applied" is Ready=False but no agent speaks for it
    assert fed.cache.snapshot.get("applied").node.taints == []
