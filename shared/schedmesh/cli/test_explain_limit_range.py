"""`schedmesh explain` with LimitRanges (in either file): the pods to place get their namespace's
defaults before they are placed, as the mesh's apply creates them, and a pod over a limit is
refused naming the file, document and pod. Bound pods of the cluster are taken as stored."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from schedmesh.api.load import AdmissionError
from schedmesh.cli import explain

NODES = "".join(f"""
---
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status: {{allocatable: {{cpu: "{cpu}", memory: 4Gi, pods: "110"}}}}
""" for name, cpu in (("small", "500m"), ("large", "2")))

LIMITS = """
---
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: shop}
spec:
  limits:
  - {type: Container, max: {cpu: "1"}, defaultRequest: {cpu: 800m}}
"""


def pod(name: str, namespace: str = "shop", resources: str = "") -> str:
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  containers: [{{name: c{resources}}}]
"""


def explained(tmp_path: Path, cluster: str, pods: str) -> list[dict]:
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "pods.yaml").write_text(pods)
    args = argparse.Namespace(cluster=[str(tmp_path / "cluster.yaml")], pods=[str(tmp_path / "pods.yaml")],
                              config=None, tie_break="name", seed=None, output="json")
    out = tmp_path / "out.json"
    with out.open("w") as f:
        assert explain.run(args, f) == 0
    return json.loads(out.read_text())["results"]


@pytest.mark.parametrize("where", ["cluster", "pods"])
def test_the_default_request_decides_where_the_pod_fits(tmp_path: Path, where: str) -> None:
    cluster, pods = (NODES + LIMITS, pod("web") + pod("free", namespace="default")) if where == "cluster" else \
        (NODES, LIMITS + pod("web") + pod("free", namespace="default"))
    results = {r["pod"]: r for r in explained(tmp_path, cluster, pods)}
    # web is defaulted to 800m: only "large" fits; "free" (another namespace) requests nothing
    assert results["shop/web"]["chosen"] == "large" and results["shop/web"]["nodes"]["small"]["feasible"] is False
    assert results["default/free"]["nodes"]["small"]["feasible"] is True
    results = explained(tmp_path, NODES, pod("web"))
    assert results[0]["nodes"]["small"]["feasible"] is True  # without the LimitRange it fits anywhere


def test_a_pod_over_the_limit_is_refused_naming_where_it_was_read(tmp_path: Path) -> None:
    with pytest.raises(AdmissionError) as e:
        explained(tmp_path, NODES + LIMITS, pod("big", resources=", resources: {limits: {cpu: '2'}}"))
    assert str(e.value) == (f"{tmp_path / 'pods.yaml'} (Pod big): Pod shop/big: "
                            "spec.containers[0].resources.limits.cpu: pods \"big\" is forbidden: "
                            "maximum cpu usage per Container is 1, but limit is 2")
