"""What the tests that place recorded scenarios through `schedmesh up` share with
../shared/tools/golden-mesh-check: the scenarios, the configuration the recordings were made
with, the order objects are applied in, and the CLI run as a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"
CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
"""
KINDS = (("Namespace", "v1", "namespaces"), ("PriorityClass", "scheduling.k8s.io/v1", "priorityClasses"),
         ("PodDisruptionBudget", "policy/v1", "pdbs"), ("Node", "v1", "nodes"), ("Pod", "v1", "pods"))


def schedmesh(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run([sys.executable, "-m", "schedmesh.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def pod_key(meta: dict) -> str:
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"
