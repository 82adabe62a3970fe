"""The node-lifecycle controller over a cache fed by records and the agents' lease batches:
Ready=Unknown and the unreachable taints after the grace period, back to Ready when heartbeats
resume, TaintNodesByCondition, users' taints left alone, nodes without an agent left alone."""
from __future__ import annotations

import dataclasses

import pytest

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


def lease_posting(names, renew: float, status: str):
    """A heartbeat batch whose nodes post Ready=`status` (a kubelet that reports itself not ready)."""
    r = lease(names, renew)
    msg = events_pb2.NodeRecord.FromString(r.value)
    msg.leases.ready.status = status
    return dataclasses.replace(r, value=msg.SerializeToString())


def lease_per_node(names, renew: float, status: str = "True"):
    """A heartbeat batch as an agent of an earlier version sent it: a NodeRecord per node."""
    r = lease(names, renew)
    leases = events_pb2.NodeRecord.FromString(r.value).leases
    msg = events_pb2.NodeRecord(source="agent-test")
    for name in leases.names:
        item = msg.batch.add(source="agent-test")
        item.node.metadata.name = name
        item.node.conditions.add().CopyFrom(leases.ready)
        item.node.conditions[0].status = status
    return dataclasses.replace(r, value=msg.SerializeToString())


def test_heartbeats_of_an_earlier_agent_a_record_per_node_count_as_well():
    """A compacted topic keeps an older agent's last heartbeats, and an agent not upgraded yet
    still sends them: they renew the node and post its Ready as NodeLeases do."""
    fed, nlc = setup()
    nlc.on_lease(lease_per_node(["n1"], T0 + 4), now=T0 + 4)
    assert nlc.sync(T0 + 8) == []  # renewed at T0 + 4: within the grace period
    nlc.on_lease(lease_per_node(["n1"], T0 + 9, "False"), now=T0 + 9)
    recs = nlc.sync(T0 + 9)
    conditions, _add, _remove = edit(recs)
    assert conditions["Ready"][0] == "False"
    fed.apply(recs)
    assert nlc.sync(T0 + 14) == []
    conditions, _add, _remove = edit(nlc.sync(T0 + 14.5))
    assert conditions["Ready"][0] == "Unknown"


class FullPass(NodeLifecycleController):
    """The controller as it was: every monitored node examined on every sync."""

    def _to_examine(self, now: float) -> set[str]:
        super()._to_examine(now)
        return set(self.probe)


@pytest.mark.parametrize("grace, startup_grace", [(4.0, 9.0), (9.0, 4.0)])
def test_examining_only_changed_nodes_decides_as_a_full_pass(grace: float, startup_grace: float):
    """Random heartbeats, silences, pressure conditions and node edits over time: the incremental
    controller publishes what examining every node every period publishes, sync by sync."""
    import random
    rng = random.Random(7)
    names = [f"n{i}" for i in range(12)]
    runs = []
    for cls in (NodeLifecycleController, FullPass):
        fed = FedCache()
        fed.add(*(node(n, conditions=[ready("True", T0)]) for n in names))
        runs.append((fed, cls(fed.cache, grace_period=grace, startup_grace_period=startup_grace, source="cm")))
    now = T0
    for step in range(400):
        now += rng.choice((0.1, 0.5, 0.5, 1.0, 3.0))
        beating = [n for n in names if rng.random() < (0.9 if step % 60 < 30 else 0.2)]
        pressured = rng.sample(names, 2)
        got = []
        not_ready = set(rng.sample(names, 3)) if step % 40 < 10 else set()
        for fed, nlc in runs:
            nlc.on_lease(lease([n for n in beating if n not in not_ready], now), now=now)
            nlc.on_lease(lease_posting([n for n in beating if n in not_ready], now, "False"), now=now)
            if step % 7 == 0:
                fed.apply([node_update(n, conditions=[NodeCondition("MemoryPressure", "True")]) for n in pressured])
            if step % 11 == 0:
                fed.apply([node_update(n, conditions=[NodeCondition("MemoryPressure", "False")]) for n in names])
            recs = nlc.sync(now)
            if step % 5:  # sometimes the edits come back before the next sync, sometimes later
                fed.apply(recs)
            got.append(sorted(events_pb2.NodeRecord.FromString(r[2]).SerializeToString() for r in recs))
        assert got[0] == got[1], f"step {step}"


def test_a_quiet_sync_examines_no_node():
    fed, nlc = setup(grace=50)
    nlc.sync(T0 + 1)
    examined = []
    nlc.desired = lambda n, now: examined.append(n.name) or ([], [], [])
    nlc.sync(T0 + 2)
    assert examined == []
    nlc.on_lease(lease(["n1"], T0 + 3), now=T0 + 3)  # a heartbeat that changes nothing
    nlc.sync(T0 + 3)
    assert examined == []
    nlc.on_lease(lease_posting(["n1"], T0 + 4, "False"), now=T0 + 4)  # the agent posts Ready=False
    nlc.sync(T0 + 4)
    assert examined == ["n1"]


def test_heartbeats_do_not_grow_the_deadline_heap():
    """A heartbeat that changes nothing leaves the node's queued deadlines where they are (one per
    grace period): 5,000 nodes beating every 10 s pushed 10,000 heap entries per period, most of
    an idle controller manager's CPU. The deadline still follows the last heartbeat."""
    fed, nlc = setup(grace=5.0)
    nlc.sync(T0)
    for beat in range(1, 50):
        nlc.on_lease(lease(["n1"], T0 + beat), now=T0 + beat)
        assert nlc.sync(T0 + beat) == []
        assert len(nlc._due) <= 2
    assert nlc.sync(T0 + 49 + 5) == []  # within the grace period of the last heartbeat
    conditions, _add, _remove = edit(nlc.sync(T0 + 49 + 5.5))
    assert conditions["Ready"][0] == "Unknown"


def test_the_ready_it_publishes_carries_the_last_heartbeat():
    """When heartbeats resume, the Ready it publishes is the agent's, stamped with the newest
    renew time (kept per node, not in a condition built per heartbeat)."""
    fed, nlc = setup()
    fed.apply(nlc.sync(T0 + 5.5))  # silent: Unknown
    nlc.on_lease(lease(["n1"], T0 + 20), now=T0 + 20)
    nlc.on_lease(lease(["n1"], T0 + 21), now=T0 + 21)
    (rec,) = nlc.sync(T0 + 21)
    (ready_cond,) = [c for c in events_pb2.NodeRecord.FromString(rec[2]).update.conditions if c.type == "Ready"]
    assert (ready_cond.status, ready_cond.last_heartbeat_time) == ("True", T0 + 21)
