"""NodeToStatus: rows a search rejected are named when the map is first read, and reading it then
is the same as if each node had been set one by one."""
from __future__ import annotations

import numpy as np
import pytest

from schedmesh.framework.interface import Code, NodeToStatus, Status

NAMES = ["n0", "n1", "n2", "n3", "n4", "n5"]
FIT = Status(Code.UNSCHEDULABLE, ("Insufficient cpu",), "NodeResourcesFit")
TAINT = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("untolerated taint",), "TaintToleration")


def _eager() -> NodeToStatus:
    m = NodeToStatus()
    for node, st in (("n4", FIT), ("n1", TAINT), ("n3", FIT), ("n0", TAINT)):
        m.set(node, st)
    return m


def _lazy() -> NodeToStatus:
    m = NodeToStatus()
    m.add_rows(NAMES, np.array([4, 1], np.int64), np.array([1, 0], np.int32), [TAINT, FIT])
    m.add_rows(NAMES, np.array([], np.int64), np.array([], np.int32), [])
    m.add_rows(NAMES, np.array([3, 0], np.int64), np.array([0, 1], np.int32), [FIT, TAINT])
    return m


@pytest.mark.parametrize("read", [
    lambda m: len(m),
    lambda m: list(m.items()),
    lambda m: [m.get(n) for n in NAMES],
    lambda m: ["n3" in m, "n2" in m],
    lambda m: m.nodes_for_status_code(NAMES, Code.UNSCHEDULABLE),
    lambda m: m.nodes_for_status_code(NAMES, Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
])
def test_rows_added_read_as_nodes_set_one_by_one(read):
    assert read(_lazy()) == read(_eager())


def test_counting_names_nothing_and_a_later_set_wins():
    m = _lazy()
    assert len(m) == 4 and m._pending  # counted without naming
    m.set("n1", FIT)
    m.update([("n5", TAINT)])
    assert not m._pending and len(m) == 5
    assert m.get("n1") is FIT and m.get("n5") is TAINT and m.get("n2") is m.absent
