"""Each pytest-xdist worker hands out ports from a range of its own (schedmesh.ports.port_range):
meshes of two workers started at once once picked the same free port, and a service of one
failed to bind it. Processes the tests start inherit the range through the environment (a test
that starts them with a cleaned environment keeps it: tests.mesh_harness.plain_env)."""
from __future__ import annotations

import os

from schedmesh.ports import PORT_RANGE_ENV, port_range


def pytest_configure(config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2 or PORT_RANGE_ENV in os.environ:
        return
    index = int(worker[2:])
    low, high = port_range()  # the default range, split between the workers
    size = (high - low + 1) // count
    os.environ[PORT_RANGE_ENV] = f"{low + index * size}-{low + (index + 1) * size - 1}"
