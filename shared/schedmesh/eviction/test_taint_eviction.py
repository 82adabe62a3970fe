"""NoExecute taint eviction (taint_eviction_test.go, getMinTolerationTime cases) and default tolerations."""
from __future__ import annotations

import pytest

from schedmesh.api.types import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, Taint, Toleration
from schedmesh.eviction.taint_eviction import (TAINT_NODE_DISK_PRESSURE, TAINT_NODE_MEMORY_PRESSURE,
                                               TAINT_NODE_NETWORK_UNAVAILABLE, TAINT_NODE_NOT_READY,
                                               TAINT_NODE_PID_PRESSURE, TAINT_NODE_UNREACHABLE, ScheduledDeletion,
                                               cancelling_deletion_message, daemonset_tolerations,
                                               default_toleration_seconds, default_tolerations,
                                               marking_for_deletion_message,
                                               matching_tolerations, min_toleration_seconds, schedule_deletion)
from schedmesh.eviction.testkit import T0, pod
from schedmesh.plugins.taint_toleration.tolerations import TAINT_NODE_UNSCHEDULABLE

FOO = Taint("foo", NO_EXECUTE, "bar")
BAZ = Taint("baz", NO_EXECUTE)


def tol(key: str = "foo", value: str = "bar", effect: str = NO_EXECUTE, seconds=None, op: str = "Equal") -> Toleration:
    return Toleration(key=key, operator=op, value=value if op == "Equal" else "", effect=effect,
                      toleration_seconds=seconds)


@pytest.mark.parametrize("tolerations, want", [
    ([], 0),
    ([tol()], None),
    ([tol(seconds=10)], 10),
    ([tol(seconds=10), tol(seconds=3), tol()], 3),
    ([tol(seconds=10), tol(seconds=0)], 0),
    ([tol(seconds=-5), tol(seconds=10)], 0),
])
def test_min_toleration_seconds(tolerations, want):
    assert min_toleration_seconds(tolerations) == want


def test_each_taint_uses_its_first_matching_toleration():
    first, second = tol(seconds=100), tol(key="", op="Exists", effect="", seconds=5)
    assert matching_tolerations([FOO], [first, second]) == (True, [first])
    assert matching_tolerations([FOO, BAZ], [first, second]) == (True, [first, second])
    assert matching_tolerations([FOO, BAZ], [first]) == (False, [])


@pytest.mark.parametrize("name, taints, tolerations, want_fire, want_untolerated", [
    ("no taints", [], [], None, None),
    ("only NoSchedule taints", [Taint("foo", NO_SCHEDULE, "bar"), Taint("x", PREFER_NO_SCHEDULE)], [], None, None),
    ("untolerated NoExecute: now", [FOO], [], T0, FOO),
    ("one of two untolerated: now", [FOO, BAZ], [tol()], T0, BAZ),
    ("toleration for another effect does not help", [FOO], [tol(effect=NO_SCHEDULE)], T0, FOO),
    ("tolerated forever", [FOO], [tol()], None, None),
    ("tolerated for a while", [FOO], [tol(seconds=60)], T0 + 60, None),
    ("the shortest wins", [FOO, BAZ], [tol(seconds=60), tol("baz", "", seconds=30)], T0 + 30, None),
    ("forever and a while: the while", [FOO, BAZ], [tol(), tol("baz", "", seconds=30)], T0 + 30, None),
    ("zero seconds: now", [FOO], [tol(seconds=0)], T0, None),
    ("negative seconds: now", [FOO], [tol(seconds=-1)], T0, None),
    ("Exists with empty key tolerates all", [FOO, BAZ], [tol("", op="Exists", effect="")], None, None),
])
def test_schedule_deletion(name, taints, tolerations, want_fire, want_untolerated):
    got = schedule_deletion(pod("p", tolerations=tolerations), taints, T0)
    if want_fire is None:
        assert got is None
    else:
        assert (got.created_at, got.fire_at, got.untolerated_taint) == (T0, want_fire, want_untolerated)


@pytest.mark.parametrize("name, scheduled, now, tolerations, want", [
    ("earlier work keeps its deadline", ScheduledDeletion(T0 - 10, T0 + 50), T0, [tol(seconds=60)],
     ScheduledDeletion(T0 - 10, T0 + 50)),
    ("earlier work keeps its deadline even if the toleration shrank", ScheduledDeletion(T0 - 10, T0 + 50), T0,
     [tol(seconds=5)], ScheduledDeletion(T0 - 10, T0 + 50)),
    ("work of the same instant is replaced", ScheduledDeletion(T0, T0 + 50), T0, [tol(seconds=20)],
     ScheduledDeletion(T0, T0 + 20)),
    ("untolerated replaces any work", ScheduledDeletion(T0 - 10, T0 + 50), T0, [], ScheduledDeletion(T0, T0, FOO)),
    ("tolerated forever cancels", ScheduledDeletion(T0 - 10, T0 + 50), T0, [tol()], None),
])
def test_rescheduling(name, scheduled, now, tolerations, want):
    assert schedule_deletion(pod("p", tolerations=tolerations), [FOO], now, scheduled) == want


def test_due_and_messages():
    d = ScheduledDeletion(T0, T0 + 5)
    assert not d.due(T0 + 4.9) and d.due(T0 + 5)
    p = pod("web-0", namespace="shop")
    assert marking_for_deletion_message(p) == "Marking for deletion Pod shop/web-0"
    assert cancelling_deletion_message(p) == "Cancelling deletion of Pod shop/web-0"


NOT_READY_300 = Toleration(TAINT_NODE_NOT_READY, "Exists", "", NO_EXECUTE, 300)
UNREACHABLE_300 = Toleration(TAINT_NODE_UNREACHABLE, "Exists", "", NO_EXECUTE, 300)


@pytest.mark.parametrize("name, given, want_added", [
    ("nothing given", [], [NOT_READY_300, UNREACHABLE_300]),
    ("own not-ready toleration kept", [tol(TAINT_NODE_NOT_READY, op="Exists", seconds=10)], [UNREACHABLE_300]),
    ("own unreachable toleration kept", [tol(TAINT_NODE_UNREACHABLE, op="Exists")], [NOT_READY_300]),
    ("empty effect counts", [tol(TAINT_NODE_NOT_READY, op="Exists", effect="")], [UNREACHABLE_300]),
    ("NoSchedule does not count", [tol(TAINT_NODE_NOT_READY, op="Exists", effect=NO_SCHEDULE)],
     [NOT_READY_300, UNREACHABLE_300]),
    ("empty key tolerates both", [tol("", op="Exists", effect=NO_EXECUTE)], []),
    ("unrelated keys do not count", [tol()], [NOT_READY_300, UNREACHABLE_300]),
])
def test_default_toleration_seconds(name, given, want_added):
    assert default_toleration_seconds(given) == given + want_added


def test_daemonset_tolerations():
    own = Toleration(TAINT_NODE_NOT_READY, "Exists", "", NO_EXECUTE, 60)
    got = daemonset_tolerations([own], host_network=True)
    assert got == [Toleration(TAINT_NODE_NOT_READY, "Exists", "", NO_EXECUTE),
                   Toleration(TAINT_NODE_UNREACHABLE, "Exists", "", NO_EXECUTE),
                   Toleration(TAINT_NODE_DISK_PRESSURE, "Exists", "", NO_SCHEDULE),
                   Toleration(TAINT_NODE_MEMORY_PRESSURE, "Exists", "", NO_SCHEDULE),
                   Toleration(TAINT_NODE_PID_PRESSURE, "Exists", "", NO_SCHEDULE),
                   Toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", NO_SCHEDULE),
                   Toleration(TAINT_NODE_NETWORK_UNAVAILABLE, "Exists", "", NO_SCHEDULE)]
    assert len(daemonset_tolerations([])) == 6


MEMORY_PRESSURE = Toleration(TAINT_NODE_MEMORY_PRESSURE, "Exists", "", NO_SCHEDULE)


@pytest.mark.parametrize("name, the_pod, include, want", [
    ("best effort", pod("p"), True, [NOT_READY_300, UNREACHABLE_300]),
    ("burstable gets memory-pressure", pod("p", requests={"memory": "1Mi"}), True,
     [NOT_READY_300, UNREACHABLE_300, MEMORY_PRESSURE]),
    ("guaranteed gets memory-pressure", pod("p", limits={"cpu": "1", "memory": "1Gi"}), True,
     [NOT_READY_300, UNREACHABLE_300, MEMORY_PRESSURE]),
    ("kube's objects", pod("p", requests={"memory": "1Mi"}), False, [NOT_READY_300, UNREACHABLE_300]),
    ("already tolerated", pod("p", requests={"memory": "1Mi"}, tolerations=[tol("", op="Exists", effect="")]), True,
     [tol("", op="Exists", effect="")]),
    ("daemonset pod", pod("p", owner_kind="DaemonSet"), True,
     daemonset_tolerations([])),
])
def test_default_tolerations(name, the_pod, include, want):
    assert default_tolerations(the_pod, include) == want
    assert default_tolerations(the_pod, include) is not the_pod.tolerations


def test_memory_pressure_toleration_is_opt_in_as_in_kube_apiserver():
    """PodTolerationRestriction is not a default admission plugin: without asking, a Burstable
    pod gets only DefaultTolerationSeconds' tolerations."""
    assert default_tolerations(pod("p", requests={"memory": "1Mi"})) == [NOT_READY_300, UNREACHABLE_300]
