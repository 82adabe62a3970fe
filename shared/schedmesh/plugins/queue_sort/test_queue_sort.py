"""PrioritySort, re-expressing kube's priority_sort_test.go."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cmp_to_key

import pytest

from schedmesh.api.types import ObjectMeta, Pod
from schedmesh.plugins.queue_sort import PrioritySort


@dataclass
class Queued:
    pod: Pod
    timestamp: float


def q(priority, ts: float, name: str = "p") -> Queued:
    return Queued(Pod(meta=ObjectMeta(name=name), priority=priority), ts)


CASES = [
    ("p1-higher-priority", q(100, 1.0), q(50, 0.0), True),
    ("p2-higher-priority", q(50, 0.0), q(100, 1.0), False),
    ("equal-priority-p1-earlier", q(100, 0.0), q(100, 1.0), True),
    ("equal-priority-p2-earlier", q(100, 1.0), q(100, 0.0), False),
    ("equal-priority-same-time", q(100, 1.0), q(100, 1.0), False),
    ("unset-priority-is-zero", q(None, 5.0), q(0, 1.0), False),
    ("negative-priority", q(-10, 0.0), q(0, 9.0), False),
]


@pytest.mark.parametrize("name,a,b,want", CASES, ids=[c[0] for c in CASES])
def test_less(name, a, b, want):
    assert PrioritySort().less(a, b) is want


def test_sorting_order():
    pl = PrioritySort()
    items = [q(0, 3.0, "c"), q(10, 2.0, "b"), q(10, 1.0, "a"), q(2000000000, 9.0, "critical")]
    ordered = sorted(items, key=cmp_to_key(lambda x, y: -1 if pl.less(x, y) else (1 if pl.less(y, x) else 0)))
    assert [i.pod.meta.name for i in ordered] == ["critical", "a", "b", "c"]
