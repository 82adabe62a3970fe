"""disruption_status against the disruption controller's rules (disruption_test.go cases, re-expressed)."""
from __future__ import annotations

import pytest

from schedmesh.api.labels import LabelSelector
from schedmesh.eviction.disruption import (DELETION_TIMEOUT, DisruptionBudgetStatus, IntOrPercentError,
                                           disruption_status, scaled_value, with_status)
from schedmesh.eviction.testkit import T0, pdb, pod, requirement

APP = {"app": "web"}


def pods(ready: int, unready: int = 0, **kw) -> list:
    return ([pod(f"r{i}", labels=APP, **kw) for i in range(ready)]
            + [pod(f"u{i}", labels=APP, ready=False, **kw) for i in range(unready)])


@pytest.mark.parametrize("value, total, round_up, want", [
    ("3", 10, True, 3), ("30%", 10, True, 3), ("25%", 10, True, 3), ("25%", 10, False, 2),
    ("100%", 7, True, 7), ("1%", 1, True, 1), ("0%", 5, True, 0), ("50%", 0, True, 0),
])
def test_scaled_value(value, total, round_up, want):
    assert scaled_value(value, total, round_up) == want


@pytest.mark.parametrize("value", ["x%", "abc", "1.5%"])
def test_scaled_value_rejects(value):
    with pytest.raises(IntOrPercentError):
        scaled_value(value, 10, True)


@pytest.mark.parametrize("name, budget, the_pods, expected_count, want", [
    ("minAvailable int", pdb(match_labels=APP, min_available="2"), pods(3), None, (3, 3, 2, 1)),
    ("minAvailable int counts unready pods as expected", pdb(match_labels=APP, min_available="2"), pods(2, 2), None,
     (4, 2, 2, 0)),
    ("minAvailable int ignores the controllers' scale", pdb(match_labels=APP, min_available="1"), pods(3), 10,
     (3, 3, 1, 2)),
    ("minAvailable above the pods", pdb(match_labels=APP, min_available="5"), pods(3), None, (3, 3, 5, 0)),
    ("minAvailable percent rounds up", pdb(match_labels=APP, min_available="50%"), pods(3), None, (3, 3, 2, 1)),
    ("minAvailable percent of the given scale", pdb(match_labels=APP, min_available="50%"), pods(3), 4,
     (4, 3, 2, 1)),
    ("minAvailable 100%", pdb(match_labels=APP, min_available="100%"), pods(3), None, (3, 3, 3, 0)),
    ("maxUnavailable int", pdb(match_labels=APP, max_unavailable="1"), pods(3), None, (3, 3, 2, 1)),
    ("maxUnavailable percent rounds up", pdb(match_labels=APP, max_unavailable="34%"), pods(3), None, (3, 3, 1, 2)),
    ("maxUnavailable 0", pdb(match_labels=APP, max_unavailable="0"), pods(3), None, (3, 3, 3, 0)),
    ("maxUnavailable beyond the pods", pdb(match_labels=APP, max_unavailable="5"), pods(3), None, (3, 3, 0, 3)),
    ("maxUnavailable with unready pods", pdb(match_labels=APP, max_unavailable="1"), pods(2, 1), None, (3, 2, 2, 0)),
    ("maxUnavailable of the given scale", pdb(match_labels=APP, max_unavailable="1"), pods(3), 5, (5, 3, 4, 0)),
    ("neither set", pdb(match_labels=APP), pods(3), None, (0, 3, 0, 0)),
    ("no pods: nothing allowed", pdb(match_labels=APP, max_unavailable="1"), [], None, (0, 0, 0, 0)),
    ("nil selector selects nothing", pdb(min_available="0"), pods(3), None, (0, 0, 0, 0)),
    ("empty selector selects the namespace", pdb(selector=LabelSelector(), min_available="1"),
     pods(2) + [pod("other")], None, (3, 3, 1, 2)),
    ("other namespaces are not counted", pdb(match_labels=APP, min_available="1"),
     pods(2) + [pod("far", namespace="prod", labels=APP)], None, (2, 2, 1, 1)),
    ("labels must match", pdb(match_labels=APP, min_available="1"), pods(2) + [pod("db", labels={"app": "db"})],
     None, (2, 2, 1, 1)),
    ("expressions", pdb(selector=LabelSelector.of(match_expressions=[requirement("app", "In", "web", "api")]),
                        max_unavailable="1"), pods(2) + [pod("api", labels={"app": "api"})], None, (3, 3, 2, 1)),
    ("terminating pods are not healthy", pdb(match_labels=APP, min_available="1"),
     pods(2) + [pod("t", labels=APP, terminating=True)], None, (3, 2, 1, 1)),
    ("terminal pods are expected but not healthy", pdb(match_labels=APP, min_available="1"),
     pods(1) + [pod("done", labels=APP, phase="Succeeded", ready=False)], None, (2, 1, 1, 0)),
])
def test_status(name, budget, the_pods, expected_count, want):
    s = disruption_status(budget, the_pods, T0, expected_count)
    assert (s.expected_pods, s.current_healthy, s.desired_healthy, s.disruptions_allowed) == want
    assert s.sync_error == ""


@pytest.mark.parametrize("name, disrupted, the_pods, healthy, kept, recheck", [
    ("a fresh eviction is not healthy", {"r0": T0 - 10}, pods(3), 2, {"r0": T0 - 10}, T0 - 10 + DELETION_TIMEOUT),
    ("at exactly the timeout it is kept but counts again", {"r0": T0 - DELETION_TIMEOUT}, pods(3), 3,
     {"r0": T0 - DELETION_TIMEOUT}, T0),
    ("an old entry is dropped", {"r0": T0 - DELETION_TIMEOUT - 1}, pods(3), 3, {}, None),
    ("entries of pods gone are dropped", {"gone": T0 - 5}, pods(3), 3, {}, None),
    ("entries of terminating pods are dropped", {"t": T0 - 5}, pods(2) + [pod("t", labels=APP, terminating=True)], 2,
     {}, None),
    ("the earliest expiry is the recheck", {"r0": T0 - 30, "r1": T0 - 60}, pods(3), 1,
     {"r0": T0 - 30, "r1": T0 - 60}, T0 - 60 + DELETION_TIMEOUT),
])
def test_disrupted_pods(name, disrupted, the_pods, healthy, kept, recheck):
    s = disruption_status(pdb(match_labels=APP, min_available="1", disrupted_pods=disrupted), the_pods, T0)
    assert s.current_healthy == healthy
    assert dict(s.disrupted_pods) == kept
    assert s.recheck_at == recheck
    assert s.disruptions_allowed == max(0, healthy - 1)


def test_invalid_selector_fails_safe():
    budget = pdb(selector=LabelSelector.of(match_expressions=[requirement("app", "In")]), min_available="1",
                 disruptions_allowed=3, disrupted_pods={"x": T0})
    s = disruption_status(budget, pods(3), T0)
    assert s.disruptions_allowed == 0
    assert dict(s.disrupted_pods) == {"x": T0}
    assert "invalid label selector" in s.sync_error


def test_with_status_updates_the_object_fields():
    budget = pdb(match_labels=APP, min_available="1")
    updated = with_status(budget, DisruptionBudgetStatus(disruptions_allowed=2, disrupted_pods={"r0": T0}))
    assert (updated.disruptions_allowed, updated.disrupted_pods) == (2, {"r0": T0})
    assert (budget.disruptions_allowed, budget.disrupted_pods) == (0, {})
    assert DisruptionBudgetStatus.of(updated) == DisruptionBudgetStatus(disruptions_allowed=2, disrupted_pods={"r0": T0})
