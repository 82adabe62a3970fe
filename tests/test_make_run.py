"""`make run` end to end: `schedmesh demo` brings a real mesh up on the embedded broker, places
the demo workload, acts out a preemption and a node-pressure eviction, and brings the mesh down,
saying each step; it fails (exit 1) when a step does not happen in time."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from schedmesh.cli import mesh as mesh_cli
from tests.mesh_harness import plain_env


def _processes_in(directory: Path) -> list[str]:
    """The command lines of processes whose working directory is `directory` (the mesh's)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(os.readlink(f"/proc/{pid}/cwd")) == directory:
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to see that no process of the mesh is left")
def test_make_run_places_the_workload_acts_out_preemption_and_eviction_and_stops_the_mesh() -> None:
    # outside pytest's numbered base directories: concurrent pytest runs prune each other's old ones
    d = Path(tempfile.mkdtemp(prefix="schedmesh-make-run-")).resolve()
    env = {**plain_env(), "HOME": str(d)}
    r = subprocess.run([sys.executable, "-m", "schedmesh.cli.main", "demo"], cwd=d, env=env,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout
    assert r.returncode == 0, f"exit {r.returncode}\n{out}\n{r.stderr}"
    assert "did not happen" not in r.stderr and "still undecided" not in r.stderr, r.stderr
    assert "nodes registered by the kubelet agent" in out and "== placements" in out
    # the pod that fits nowhere is described with kube's message
    assert "0/13 nodes are available" in out and "Preemption is not helpful for scheduling" in out
    preemption = next(line for line in out.splitlines() if line.startswith("== preemption:"))
    assert "bound to edge-0" in preemption and "preempted: batch-" in preemption, preemption
    assert "Normal Preempted default/batch-" in out
    assert "== node-pressure eviction: memory-hog Failed (Evicted): The node was low on resource: memory." in out
    assert "Warning Evicted default/memory-hog" in out
    assert out.rstrip().endswith("mesh stopped")
    assert _processes_in(d) == []
    shutil.rmtree(d, ignore_errors=True)  # (kept when the test fails: the mesh's logs are in it)


class _NoPods:
    def list_pods(self) -> list:
        return []


def test_a_demo_step_that_does_not_happen_is_said_and_remembered(capsys) -> None:
    missed: list[str] = []
    pods = mesh_cli._wait_for(_NoPods(), lambda ps: "web-0" in ps, "binding web-0", 0.0, missed)
    assert pods == {} and missed == ["binding web-0"]
    assert "schedmesh demo: binding web-0 did not happen within 0s" in capsys.readouterr().err
