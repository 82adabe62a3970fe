"""The Eviction API's decisions (eviction.go / eviction_test.go cases, re-expressed)."""
from __future__ import annotations

import pytest

from schedmesh.api.labels import LabelSelector
from schedmesh.eviction.disruption import DisruptionBudgetStatus, disruption_status
from schedmesh.eviction.eviction_api import (ALWAYS_ALLOW, MAX_DISRUPTED_POD_SIZE, MSG_MULTIPLE_PDBS,
                                             MSG_VIOLATES_BUDGET, evict, matching_pdbs)
from schedmesh.eviction.testkit import T0, pdb, pod, requirement

APP = {"app": "web"}


def status(allowed: int, healthy: int = 3, desired: int = 2, disrupted=None) -> DisruptionBudgetStatus:
    return DisruptionBudgetStatus(expected_pods=3, current_healthy=healthy, desired_healthy=desired,
                                  disruptions_allowed=allowed, disrupted_pods=dict(disrupted or {}))


@pytest.mark.parametrize("name, victim, budgets, statuses, want_code, want_allowed", [
    ("no PDB", pod("p", labels=APP), [], {}, 201, True),
    ("PDB of another namespace", pod("p", labels=APP), [pdb(namespace="prod", match_labels=APP)], {}, 201, True),
    ("PDB that does not match", pod("p", labels=APP), [pdb(match_labels={"app": "db"})], {}, 201, True),
    ("nil selector matches nothing", pod("p", labels=APP), [pdb()], {}, 201, True),
    ("empty selector matches nothing here", pod("p", labels=APP), [pdb(selector=LabelSelector())], {}, 201, True),
    ("invalid selector matches nothing",
     pod("p", labels=APP), [pdb(selector=LabelSelector.of(match_expressions=[requirement("app", "In")]))], {}, 201,
     True),
    ("budget left", pod("p", labels=APP), [pdb(match_labels=APP)], {"pdb": status(1)}, 201, True),
    ("no budget left", pod("p", labels=APP), [pdb(match_labels=APP)], {"pdb": status(0)}, 429, False),
    ("negative budget", pod("p", labels=APP), [pdb(match_labels=APP)], {"pdb": status(-1)}, 403, False),
    ("two PDBs", pod("p", labels=APP), [pdb("a", match_labels=APP), pdb("b", match_labels=APP)], {}, 500, False),
    ("Succeeded pod ignores PDBs", pod("p", labels=APP, phase="Succeeded"), [pdb(match_labels=APP)],
     {"pdb": status(0)}, 201, True),
    ("Failed pod ignores PDBs", pod("p", labels=APP, phase="Failed"), [pdb(match_labels=APP)], {"pdb": status(0)}, 201,
     True),
    ("Pending pod ignores PDBs", pod("p", labels=APP, phase="Pending"), [pdb(match_labels=APP)], {"pdb": status(0)},
     201, True),
    ("terminating pod ignores PDBs", pod("p", labels=APP, terminating=True),
     [pdb("a", match_labels=APP), pdb("b", match_labels=APP)], {}, 201, True),
    ("unready pod, healthy budget", pod("p", labels=APP, ready=False), [pdb(match_labels=APP)],
     {"pdb": status(0, healthy=2, desired=2)}, 201, True),
    ("unready pod, unhealthy budget", pod("p", labels=APP, ready=False), [pdb(match_labels=APP)],
     {"pdb": status(0, healthy=1, desired=2)}, 429, False),
    ("unready pod, budget wanting nothing", pod("p", labels=APP, ready=False), [pdb(match_labels=APP)],
     {"pdb": status(0, healthy=0, desired=0)}, 429, False),
    ("unready pod spends what is left", pod("p", labels=APP, ready=False), [pdb(match_labels=APP)],
     {"pdb": status(1, healthy=1, desired=2)}, 201, True),
    ("status from the object", pod("p", labels=APP), [pdb(match_labels=APP, disruptions_allowed=1)], {}, 201, True),
    ("status from the object, none left", pod("p", labels=APP), [pdb(match_labels=APP)], {}, 429, False),
    ("too many disrupted pods", pod("p", labels=APP), [pdb(match_labels=APP)],
     {"pdb": status(5, disrupted={f"x{i}": T0 for i in range(MAX_DISRUPTED_POD_SIZE + 1)})}, 403, False),
])
def test_decision(name, victim, budgets, statuses, want_code, want_allowed):
    r = evict(victim, budgets, T0, statuses)
    assert (r.code, r.allowed) == (want_code, want_allowed)


def test_refusal_messages_are_kubes():
    r = evict(pod("p", labels=APP), [pdb("web-pdb", match_labels=APP)], T0, {"web-pdb": status(0, 2, 3)})
    assert r.message == "Cannot evict pod as it would violate the pod's disruption budget." == MSG_VIOLATES_BUDGET
    assert r.causes == ("The disruption budget web-pdb needs 3 healthy pods and has 2 currently",)
    assert (r.reason, r.pdb_name, r.pdb_status) == ("TooManyRequests", "web-pdb", None)

    r = evict(pod("p", labels=APP), [pdb("a", match_labels=APP), pdb("b", match_labels=APP)], T0)
    assert r.message == "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    assert r.message == MSG_MULTIPLE_PDBS and r.reason == ""

    r = evict(pod("p", labels=APP), [pdb("web-pdb", match_labels=APP)], T0, {"web-pdb": status(-1)})
    assert r.message == 'poddisruptionbudget.policy "web-pdb" is forbidden: pdb disruptions allowed is negative'
    assert r.reason == "Forbidden"


def test_allowed_eviction_spends_the_budget():
    before = status(2, disrupted={"old": T0 - 5})
    r = evict(pod("p", labels=APP), [pdb(match_labels=APP)], T0, {"pdb": before})
    assert r.pdb_name == "pdb" and not r.delete_only_if_unchanged
    assert r.pdb_status.disruptions_allowed == 1
    assert dict(r.pdb_status.disrupted_pods) == {"old": T0 - 5, "p": T0}
    assert before.disruptions_allowed == 2 and dict(before.disrupted_pods) == {"old": T0 - 5}


def test_dry_run_decrements_without_recording_the_pod():
    r = evict(pod("p", labels=APP), [pdb(match_labels=APP)], T0, {"pdb": status(1)}, dry_run=True)
    assert r.allowed and r.pdb_status.disruptions_allowed == 0 and dict(r.pdb_status.disrupted_pods) == {}


def test_unready_pods_go_without_spending_and_with_a_precondition():
    r = evict(pod("p", labels=APP, ready=False), [pdb(match_labels=APP)], T0, {"pdb": status(0, 2, 2)})
    assert r.allowed and r.delete_only_if_unchanged and r.pdb_status is None


@pytest.mark.parametrize("healthy, desired", [(0, 2), (0, 0), (5, 2)])
def test_always_allow_lets_unready_pods_go(healthy, desired):
    r = evict(pod("p", labels=APP, ready=False), [pdb(match_labels=APP)], T0, {"pdb": status(0, healthy, desired)},
              policies={"pdb": ALWAYS_ALLOW})
    assert (r.allowed, r.code, r.delete_only_if_unchanged) == (True, 201, True)


def test_always_allow_does_not_help_ready_pods():
    r = evict(pod("p", labels=APP), [pdb(match_labels=APP)], T0, {"pdb": status(0)}, policies={"pdb": ALWAYS_ALLOW})
    assert r.code == 429


def test_pod_without_labels_matches_only_selectors_that_match_nothing_set():
    unlabeled = pod("p")
    not_in = pdb(selector=LabelSelector.of(match_expressions=[requirement("app", "NotIn", "db")]))
    assert matching_pdbs(unlabeled, [not_in, pdb(match_labels=APP)]) == [not_in]


def test_with_the_disruption_controller():
    """Evict one pod of three with minAvailable 2, then the next is refused until the first is gone."""
    budget = pdb(match_labels=APP, min_available="2")
    the_pods = [pod(f"w{i}", labels=APP) for i in range(3)]
    first = evict(the_pods[0], [budget], T0, {"pdb": disruption_status(budget, the_pods, T0)})
    assert first.allowed
    budget.disrupted_pods = dict(first.pdb_status.disrupted_pods)
    second = evict(the_pods[1], [budget], T0 + 1, {"pdb": disruption_status(budget, the_pods, T0 + 1)})
    assert second.code == 429
    assert second.causes == ("The disruption budget pdb needs 2 healthy pods and has 2 currently",)
