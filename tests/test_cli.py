"""The `schedmesh` CLI against a real local mesh (`schedmesh up --detach` in a temporary directory)."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("filter_worker", "score_worker", "binder", "kubelet_agent", "queue_manager")


def schedmesh(*args: str, cwd: Path, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-m", "schedmesh.cli.main", *args], cwd=cwd, env=env, input=input,
                          capture_output=True, text=True, timeout=timeout)


def _missing_services() -> list[str]:
    out = []
    for s in SERVICES:
        try:
            if importlib.util.find_spec(f"services.{s}") is None:
                out.append(s)
        except ImportError:
            out.append(s)
    return out


def test_get_pods_without_mesh_is_a_clear_error(tmp_path: Path) -> None:
    r = schedmesh("get", "pods", cwd=tmp_path)
    assert r.returncode == 2
    assert "schedmesh: error: the mesh is not running (no .schedmesh/mesh.json); start it with `schedmesh up`" \
        in r.stderr
    r = schedmesh("down", cwd=tmp_path)
    assert r.returncode == 2 and "the mesh is not running" in r.stderr


def test_apply_missing_file(tmp_path: Path) -> None:
    r = schedmesh("apply", "-f", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert r.returncode == 2 and "nope.yaml" in r.stderr


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    missing = _missing_services()
    if missing:
        pytest.skip(f"services not written yet: {', '.join(missing)}")
    d = tmp_path_factory.mktemp("mesh")
    r = schedmesh("up", "--detach", "--filter-workers", "1", "--score-workers", "1", cwd=d, timeout=150)
    if r.returncode != 0:
        pytest.fail(f"schedmesh up failed:\n{r.stdout}\n{r.stderr}")
    assert (d / ".schedmesh" / "mesh.json").exists()
    try:
        yield d
    finally:
        r = schedmesh("down", cwd=d, timeout=60)
        assert r.returncode == 0, r.stderr
        assert not (d / ".schedmesh" / "mesh.json").exists()


BAD_POD = """
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  containers:
    - name: c
      image: busybox
      resources:
        requests: {cpu: lots}
"""

GOOD_POD = """
apiVersion: v1
kind: Pod
metadata: {name: hello, namespace: default}
spec:
  containers:
    - name: c
      image: busybox
      resources:
        requests: {cpu: 100m, memory: 64Mi}
"""

HUGE_POD = """
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers:
    - name: c
      image: busybox
      resources:
        requests: {cpu: "1000"}
"""


def test_apply_bad_manifest_names_the_field(mesh: Path) -> None:
    (mesh / "bad.yaml").write_text(BAD_POD)
    r = schedmesh("apply", "-f", "bad.yaml", cwd=mesh)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("schedmesh: error: ")
    assert "requests" in r.stderr and "cpu" in r.stderr, r.stderr


def test_apply_get_describe_delete(mesh: Path) -> None:
    r = schedmesh("apply", "-f", "-", cwd=mesh, input=GOOD_POD + "---\n" + HUGE_POD)
    assert r.returncode == 0, r.stderr
    assert "hello" in r.stdout and "huge" in r.stdout
    deadline = time.time() + 30
    while True:
        r = schedmesh("get", "pods", "-o", "wide", cwd=mesh)
        assert r.returncode == 0, r.stderr
        lines = {line.split()[1]: line for line in r.stdout.splitlines()[1:] if line.split()}
        hello_bound = "hello" in lines and lines["hello"].split()[7] != "<none>"  # NODE
        d = schedmesh("describe", "pod", "huge", cwd=mesh)
        if hello_bound and "FailedScheduling" in d.stdout:
            break
        assert time.time() < deadline, f"not scheduled in time:\n{r.stdout}\n{d.stdout}\n{d.stderr}"
        time.sleep(0.5)
    # kubectl's wide columns (all namespaces: NAMESPACE first), then schedmesh's QUEUE and TRACE ID
    assert re.split(r"\s{2,}", r.stdout.splitlines()[0].strip()) == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP",
                                                   "NODE", "NOMINATED NODE", "READINESS GATES", "QUEUE", "TRACE ID"]
    assert "Insufficient cpu" in d.stdout, d.stdout
    r = schedmesh("get", "nodes", "-o", "wide", cwd=mesh)  # kubectl's columns; ZONE among schedmesh's wide ones
    assert r.returncode == 0 and "zone-a" in r.stdout, r.stdout + r.stderr
    r = schedmesh("get", "pods", "-o", "json", cwd=mesh)
    assert r.returncode == 0 and '"kind": "List"' in r.stdout and '"items"' in r.stdout
    r = schedmesh("delete", "pod", "huge", cwd=mesh)
    assert r.returncode == 0, r.stderr
    r = schedmesh("describe", "pod", "no-such-pod", cwd=mesh)
    assert r.returncode == 2 and r.stderr.startswith("schedmesh: error: ")
