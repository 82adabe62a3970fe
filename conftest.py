"""Each pytest-xdist worker hands out ports from a range of its own (schedmesh.ports.port_range):
meshes of two workers started at once once picked the same free port, and a service of one
failed to bind it. Processes the tests start inherit the range through the environment."""
from __future__ import annotations

import os

from schedmesh.ports import port_range


def pytest_configure(config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2 or "SCHEDMESH_PORT_RANGE" in os.environ:
        return
    index = int(worker[2:])
    low, high = port_range()  # the default range, split between the workers
    size = (high - low + 1) // count
    os.environ["SCHEDMESH_PORT_RANGE"] = f"{low + index * size}-{low + (index + 1) * size - 1}"
