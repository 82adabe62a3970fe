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
from tests.mesh_harness import up_kafka_args

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("filter_worker", "score_worker", "binder", "kubelet_agent", "queue_manager")


def schedmesh(*args: str, cwd: Path, input: str | None = None, timeout: float = 120,
              env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-m", "schedmesh.cli.main", *args], cwd=cwd, env={**base, **(env or {})},
                          input=input, capture_output=True, text=True, timeout=timeout)


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
    # every cycle's plugins timed, for test_shards_serve_kubes_framework_metrics_and_their_request_latency
    r = schedmesh("up", "--detach", "--filter-workers", "1", "--score-workers", "1", *up_kafka_args(d), cwd=d,
                  timeout=150,
                  env={"SCHEDMESH_PLUGIN_METRICS_SAMPLE_PERCENT": "100"})
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


def test_shards_serve_kubes_framework_metrics_and_their_request_latency(mesh: Path) -> None:
    """With filter and score workers, Filter and Score run on them: each shard's /metrics has those
    extension points and their plugins (the same framework code as the queue-manager's), and the
    latency of the requests it served."""
    import json
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    r = schedmesh("apply", "-f", "-", cwd=mesh, input=GOOD_POD.replace("name: hello", "name: probe"))
    assert r.returncode == 0, r.stderr
    deadline = time.time() + 30
    while True:
        rows = [line.split() for line in schedmesh("get", "pods", "-o", "wide", cwd=mesh).stdout.splitlines()[1:]]
        if any(r[1] == "probe" and r[7] != "<none>" for r in rows if len(r) > 7):  # NAME, NODE
            break
        assert time.time() < deadline, f"probe not bound: {rows}"
        time.sleep(0.5)
    procs = {p["name"]: p for p in json.loads((mesh / ".schedmesh" / "mesh.json").read_text())["procs"]}

    def counts(name: str) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{procs[name]['metrics_port']}/metrics", timeout=10) as resp:
            fams = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
        out = {}
        for fam, keys in (("scheduler_framework_extension_point_duration_seconds", ("extension_point", "status")),
                          ("scheduler_plugin_execution_duration_seconds", ("plugin", "extension_point")),
                          ("schedmesh_shard_request_duration_seconds", ("shard", "method"))):
            for s in fams[fam].samples:
                if s.name == fam + "_count":
                    out[(fam, *(s.labels[k] for k in keys))] = s.value
        return out

    point, plugin, shard = ("scheduler_framework_extension_point_duration_seconds",
                            "scheduler_plugin_execution_duration_seconds", "schedmesh_shard_request_duration_seconds")
    fw, sw = counts("filter-worker-0"), counts("score-worker-0")
    for got, want in ((fw, [(point, "PreFilter", "Success"), (point, "Filter", "Success"),
                            (plugin, "NodeResourcesFit", "Filter"), (shard, "filter-worker-0", "filter")]),
                      (sw, [(point, "PreScore", "Success"), (point, "Score", "Success"),
                            (plugin, "NodeResourcesBalancedAllocation", "Score"), (shard, "score-worker-0", "score")])):
        for key in want:
            assert got.get(key, 0) >= 1, (key, sorted(got))
    assert schedmesh("delete", "pod", "probe", cwd=mesh).returncode == 0
