"""A service started with a bad setting stops at once with a usage error naming the setting and
why (exit code 2), never a traceback or a process that spins."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

POOL = str(Path(__file__).resolve().parents[1] / "deploy" / "nodepools" / "demo.yaml")


@pytest.mark.parametrize("service, env, args, message", [
    ("services.controller_manager", {"SCHEDMESH_NODE_MONITOR_GRACE_PERIOD": "50s"}, [],
     "SCHEDMESH_NODE_MONITOR_GRACE_PERIOD='50s' is not a number of seconds"),
    ("services.controller_manager", {"SCHEDMESH_CONTROLLER_SYNC_PERIOD": "often"}, [],
     "SCHEDMESH_CONTROLLER_SYNC_PERIOD='often' is not a number of seconds"),
    ("services.controller_manager", {}, ["--sync-period", "0"], "--sync-period must be a positive number of seconds"),
    # 0 would publish heartbeats in a loop that never sleeps
    ("services.kubelet_agent", {}, ["--pool", POOL, "--heartbeat", "0"],
     "argument --heartbeat: '0' is not a positive number of seconds"),
])
def test_a_bad_setting_is_a_usage_error(service: str, env: dict, args: list, message: str) -> None:
    run = subprocess.run([sys.executable, "-m", service, "--bootstrap", "127.0.0.1:1", *args],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr[-2000:]
    assert message in run.stderr and "Traceback" not in run.stderr
