"""The recorded kube-scheduler scenarios (tests/golden) placed through a real mesh started by
`schedmesh up`, as ../shared/tools/golden-mesh-check does: the real queue-manager, binder and
broker, no scheduling loop written by the test.

Per scenario: a fresh mesh (`up --detach --tie-break name`, an empty node pool, a
KubeSchedulerConfiguration with percentageOfNodesToScore: 100, as the recordings were made),
the cluster applied as one v1 List, then each pending pod applied alone and waited for: it must
be bound to the recorded node, or stay unbound with the recorded FailedScheduling message (and
is then deleted, as the recording never places it). Scenarios with preemption victims are
checked by tests/test_mesh_preemption.py; pods that name their node and were recorded as
unschedulable are skipped (a real scheduler never sees them).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from schedmesh.local.client import Client
from schedmesh.local.supervisor import load_state
from schedmesh.v1 import queue_pb2

from tests.golden_mesh import CONFIG, GOLDEN, KINDS, pod_key, schedmesh
from tests.mesh_harness import up_kafka_args


def _has_victims(name: str) -> bool:
    results = json.loads((GOLDEN / f"{name}.out.json").read_text())["results"]
    return any((r.get("preemption") or {}).get("victims") for r in results)


ALL_SCENARIOS = [n for n in sorted(p.name[:-len(".in.json")] for p in GOLDEN.glob("*.in.json")) if not _has_victims(n)]
assert ALL_SCENARIOS, f"no golden scenarios in {GOLDEN}"
# A fresh mesh per scenario costs about 6 s to start and stop, so the suite places one scenario of
# each family (the -00 one, or the one that once caught a mesh-only difference);
# SCHEDMESH_TEST_ALL_SCENARIOS=1, or ../shared/tools/golden-mesh-check, places them all.
_CAUGHT = {"v-edge": "v-edge-02"}


def _one_per_family(names: list[str]) -> list[str]:
    families: dict[str, list[str]] = {}
    for n in names:
        families.setdefault(n.rsplit("-", 1)[0], []).append(n)
    return sorted(_CAUGHT[f] if _CAUGHT.get(f) in ns else ns[0] for f, ns in families.items())


SCENARIOS = ALL_SCENARIOS if os.environ.get("SCHEDMESH_TEST_ALL_SCENARIOS") else _one_per_family(ALL_SCENARIOS)


class Placed:
    """The mesh's answer for one pod: its node, or its FailedScheduling message."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def pods(self) -> dict[str, tuple[str, str]]:
        out = {}
        for v in self.client.call("GetPods", queue_pb2.GetRequest()).pods:
            msg = v.message
            for c in v.pod.conditions:
                if c.type == "PodScheduled" and c.status == "False":
                    msg = msg or c.message
            out[f"{v.pod.metadata.namespace}/{v.pod.metadata.name}"] = (v.pod.node_name, msg)
        return out

    def apply(self, objs: list[dict], source: str) -> None:
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
        self.client.call("Apply", queue_pb2.ApplyRequest(manifest=text, source=source), timeout=120)

    def wait(self, key: str, timeout: float = 30.0) -> tuple[str, str]:
        deadline = time.monotonic() + timeout
        got = ("", "")
        while time.monotonic() < deadline:
            got = self.pods().get(key, ("", ""))
            if got[0] or got[1]:
                return got
            time.sleep(0.05)
        return got


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", SCENARIOS)
def test_mesh_places_like_kube_scheduler(tmp_path: Path, name: str) -> None:
    sc = json.loads((GOLDEN / f"{name}.in.json").read_text())
    want = json.loads((GOLDEN / f"{name}.out.json").read_text())["results"]
    (tmp_path / "sched.yaml").write_text(CONFIG)
    (tmp_path / "empty-pool.yaml").write_text("pools: []\n")
    up = schedmesh("up", "--detach", "--tie-break", "name", "--pool", "empty-pool.yaml", "--config", "sched.yaml",
                   *up_kafka_args(tmp_path),
                   cwd=tmp_path)
    assert up.returncode == 0, f"schedmesh up failed:\n{up.stdout}\n{up.stderr}"
    client = Client(load_state(tmp_path))
    try:
        mesh = Placed(client)
        mesh.apply([{"apiVersion": api, "kind": kind, **o} for kind, api, key in KINDS for o in sc.get(key) or []],
                   f"{name}.in.json")
        bound = {pod_key(p["metadata"]) for p in sc.get("pods") or []}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(mesh.pods().get(k, ("",))[0] for k in bound):
            time.sleep(0.2)
        wrong = []
        for pod, res in zip(sc["pending"], want):
            if (pod.get("spec") or {}).get("nodeName") and not res.get("chosen"):
                continue  # a pod naming its node never reaches a real scheduler
            mesh.apply([{"apiVersion": "v1", "kind": "Pod", **pod}], f"{name}.in.json")
            node, message = mesh.wait(res["pod"])
            if res.get("chosen"):
                if node != res["chosen"]:
                    wrong.append(f"{res['pod']}: bound to {node or message!r}, kube chose {res['chosen']}")
                continue
            if node or message != res.get("message"):
                wrong.append(f"{res['pod']}: got {node or message!r}, kube: {res.get('message')!r}")
            ns, pod_name = res["pod"].split("/", 1)
            client.call("Delete", queue_pb2.DeleteRequest(kind="pod", namespace=ns, name=pod_name))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and res["pod"] in mesh.pods():
                time.sleep(0.05)
        assert not wrong, "\n".join(wrong)
    finally:
        client.close()
        schedmesh("down", cwd=tmp_path, timeout=90)
