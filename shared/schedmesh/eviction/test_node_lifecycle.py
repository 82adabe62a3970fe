"""Node conditions and taints from heartbeats (tryUpdateNodeHealth, TaintNodesByCondition, NoExecute tainting)."""
from __future__ import annotations

import pytest

from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, NodeCondition, Taint
from schedmesh.eviction.node_lifecycle import (DEFAULT_NODE_MONITOR_GRACE_PERIOD, MESSAGE_NODE_STATUS_NEVER_UPDATED,
                                               MESSAGE_NODE_STATUS_UNKNOWN, REASON_NODE_STATUS_NEVER_UPDATED,
                                               REASON_NODE_STATUS_UNKNOWN, desired_taints, no_execute_taint,
                                               no_schedule_taints, node_health, updated_conditions)
from schedmesh.eviction.testkit import T0, node

HB = T0 - 100  # the kubelet's last heartbeat in these tests


def cond(type_: str, status: str, reason: str = "", message: str = "") -> NodeCondition:
    return NodeCondition(type_, status, reason, message, last_heartbeat_time=HB)


HEALTHY = [cond("Ready", "True", "KubeletReady"), cond("MemoryPressure", "False"), cond("DiskPressure", "False"),
           cond("PIDPressure", "False"), cond("NetworkUnavailable", "False")]


def statuses(conditions) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in conditions}


@pytest.mark.parametrize("name, now, last_heartbeat, grace, stale", [
    ("just heard from", HB + 1, None, DEFAULT_NODE_MONITOR_GRACE_PERIOD, False),
    ("exactly at the grace period", HB + 50, None, DEFAULT_NODE_MONITOR_GRACE_PERIOD, False),
    ("past the grace period", HB + 50.5, None, DEFAULT_NODE_MONITOR_GRACE_PERIOD, True),
    ("a lease renewal counts", HB + 200, HB + 190, DEFAULT_NODE_MONITOR_GRACE_PERIOD, False),
    ("a custom grace period", HB + 30, None, 20.0, True),
])
def test_staleness(name, now, last_heartbeat, grace, stale):
    got = statuses(updated_conditions(node(conditions=HEALTHY), now, last_heartbeat, grace))
    if not stale:
        assert got == statuses(HEALTHY)
        return
    unknown = ("Unknown", REASON_NODE_STATUS_UNKNOWN, MESSAGE_NODE_STATUS_UNKNOWN)
    assert got == {"Ready": unknown, "MemoryPressure": unknown, "DiskPressure": unknown, "PIDPressure": unknown,
                   "NetworkUnavailable": ("False", "", "")}


def test_stale_conditions_already_unknown_keep_their_reason():
    n = node(conditions=[cond("Ready", "Unknown", "Custom", "why")])
    got = statuses(updated_conditions(n, HB + 1000))
    assert got["Ready"] == ("Unknown", "Custom", "why")
    assert got["MemoryPressure"] == ("Unknown", REASON_NODE_STATUS_NEVER_UPDATED, MESSAGE_NODE_STATUS_NEVER_UPDATED)


@pytest.mark.parametrize("name, created, now, stale", [
    ("new node within the startup grace period", T0 - 59, T0, False),
    ("new node past the startup grace period", T0 - 61, T0, True),
])
def test_node_that_never_posted(name, created, now, stale):
    got = updated_conditions(node(created=created), now)
    if not stale:
        assert got == []
        return
    assert [c.type for c in got] == ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"]
    assert all((c.status, c.reason, c.message) == ("Unknown", REASON_NODE_STATUS_NEVER_UPDATED,
                                                   MESSAGE_NODE_STATUS_NEVER_UPDATED) for c in got)


def test_the_node_is_not_modified():
    n = node(conditions=HEALTHY)
    updated_conditions(n, HB + 1000)
    assert n.conditions[0].status == "True"


@pytest.mark.parametrize("name, conditions, unschedulable, want_no_schedule, want_no_execute", [
    ("healthy", HEALTHY, False, [], None),
    ("not ready", [cond("Ready", "False")], False, [Taint("node.kubernetes.io/not-ready", NO_SCHEDULE)],
     Taint("node.kubernetes.io/not-ready", NO_EXECUTE)),
    ("unknown", [cond("Ready", "Unknown")], False, [Taint("node.kubernetes.io/unreachable", NO_SCHEDULE)],
     Taint("node.kubernetes.io/unreachable", NO_EXECUTE)),
    ("no Ready condition yet", [], False, [], None),
    ("pressures", [cond("Ready", "True"), cond("MemoryPressure", "True"), cond("DiskPressure", "True"),
                   cond("PIDPressure", "True"), cond("NetworkUnavailable", "True")], False,
     [Taint("node.kubernetes.io/memory-pressure", NO_SCHEDULE), Taint("node.kubernetes.io/disk-pressure", NO_SCHEDULE),
      Taint("node.kubernetes.io/pid-pressure", NO_SCHEDULE),
      Taint("node.kubernetes.io/network-unavailable", NO_SCHEDULE)], None),
    ("unknown pressure is no taint", [cond("Ready", "True"), cond("MemoryPressure", "Unknown")], False, [], None),
    ("cordoned", HEALTHY, True, [Taint("node.kubernetes.io/unschedulable", NO_SCHEDULE)], None),
])
def test_condition_taints(name, conditions, unschedulable, want_no_schedule, want_no_execute):
    assert no_schedule_taints(conditions, unschedulable) == want_no_schedule
    assert no_execute_taint(conditions) == want_no_execute


def test_desired_taints_keep_foreign_and_existing_taints():
    old_unreachable = Taint("node.kubernetes.io/unreachable", NO_EXECUTE, time_added=T0 - 500)
    foreign = Taint("dedicated", NO_SCHEDULE, "gpu")
    stale_pressure = Taint("node.kubernetes.io/memory-pressure", NO_SCHEDULE)
    n = node(taints=[foreign, old_unreachable, stale_pressure])
    got = desired_taints(n, [cond("Ready", "Unknown")], T0)
    assert got == [foreign, old_unreachable, Taint("node.kubernetes.io/unreachable", NO_SCHEDULE, time_added=T0)]


def test_not_ready_and_unreachable_exclude_each_other():
    n = node(taints=[Taint("node.kubernetes.io/unreachable", NO_EXECUTE, time_added=T0 - 5),
                     Taint("node.kubernetes.io/unreachable", NO_SCHEDULE)])
    got = desired_taints(n, [cond("Ready", "False")], T0)
    assert got == [Taint("node.kubernetes.io/not-ready", NO_SCHEDULE, time_added=T0),
                   Taint("node.kubernetes.io/not-ready", NO_EXECUTE, time_added=T0)]


def test_recovery_removes_the_controllers_taints():
    n = node(conditions=[cond("Ready", "True")], taints=[Taint("node.kubernetes.io/not-ready", NO_EXECUTE),
                                                         Taint("node.kubernetes.io/not-ready", NO_SCHEDULE),
                                                         Taint("team", NO_EXECUTE, "a")])
    h = node_health(n, HB + 1)
    assert (h.ready, list(h.taints)) == ("True", [Taint("team", NO_EXECUTE, "a")])
    assert h.changed(n)


def test_node_goes_unreachable_then_comes_back():
    n = node(conditions=HEALTHY)
    h = node_health(n, HB + 51)
    assert h.ready == "Unknown"
    assert [(t.key, t.effect, t.time_added) for t in h.taints] == [
        ("node.kubernetes.io/unreachable", NO_SCHEDULE, HB + 51), ("node.kubernetes.io/unreachable", NO_EXECUTE, HB + 51)]
    n.conditions, n.taints = list(h.conditions), list(h.taints)
    assert not node_health(n, HB + 60).changed(n)
    n.conditions = [cond("Ready", "True")]
    back = node_health(n, HB + 61, last_heartbeat=HB + 61)
    assert back.ready == "True" and back.taints == ()
