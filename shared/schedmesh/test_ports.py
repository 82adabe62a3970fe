"""free_port stays in SCHEDMESH_PORT_RANGE when it is set, and says what is wrong with a bad one."""
from __future__ import annotations

import pytest

from schedmesh import ports


def test_free_port_stays_in_the_configured_range(monkeypatch) -> None:
    monkeypatch.setenv("SCHEDMESH_PORT_RANGE", "23000-23300")
    got = {ports.free_port() for _ in range(50)}
    assert len(got) == 50 and all(23000 <= p <= 23300 for p in got)


@pytest.mark.parametrize("spec", ["23000", "a-b", "23000-22000", "80-90000"])
def test_a_bad_range_is_named(monkeypatch, spec: str) -> None:
    monkeypatch.setenv("SCHEDMESH_PORT_RANGE", spec)
    with pytest.raises(ValueError, match="SCHEDMESH_PORT_RANGE"):
        ports.free_port()
