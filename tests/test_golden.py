"""kube-scheduler v1.35.4's recorded decisions (tests/golden, see its README) reproduced exactly
by `schedmesh explain`: feasible nodes, failing plugin and reasons, per-plugin scores, totals,
the chosen node, the FitError message and the preemption decision."""
from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from schedmesh.cli import explain

GOLDEN = Path(__file__).parent / "golden"
SCENARIOS = sorted(p.name[: -len(".in.json")] for p in GOLDEN.glob("*.in.json"))
CLUSTER_KEYS = ["namespaces", "priorityClasses", "pdbs", "nodes", "pods"]


def run_explain(tmp_path: Path, name: str) -> list[dict]:
    inp = json.loads((GOLDEN / f"{name}.in.json").read_text())
    cluster, pending = tmp_path / "cluster.json", tmp_path / "pending.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                   "items": [o for k in CLUSTER_KEYS for o in inp.get(k, [])]}))
    pending.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": inp["pending"]}))
    out = io.StringIO()
    args = SimpleNamespace(cluster=[str(cluster)], pods=[str(pending)], config=None, tie_break="name",
                           seed=None, output="json")
    assert explain.run(args, out) == 0
    return json.loads(out.getvalue())["results"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_golden_scenario(tmp_path: Path, name: str) -> None:
    want = json.loads((GOLDEN / f"{name}.out.json").read_text())["results"]
    got = {r["pod"]: r for r in run_explain(tmp_path, name)}
    problems = []
    for w in want:
        g = got.get(w["pod"])
        if g is None:
            problems.append(f"{w['pod']}: missing")
            continue
        for node, wn in w["nodes"].items():
            gn = g["nodes"].get(node, {})
            if wn["feasible"] != gn.get("feasible"):
                problems.append(f"{w['pod']} {node}: feasible {wn['feasible']} != {gn.get('feasible')} {gn.get('reasons')}")
            elif not wn["feasible"] and (wn["plugin"], sorted(wn["reasons"])) != (gn["plugin"], sorted(gn["reasons"])):
                problems.append(f"{w['pod']} {node}: {wn['plugin']} {wn['reasons']} != {gn['plugin']} {gn['reasons']}")
            elif wn["feasible"] and (wn["scores"] != gn["scores"] or wn["total"] != gn["total"]):
                problems.append(f"{w['pod']} {node}: scores {wn['scores']} {wn['total']} != {gn['scores']} {gn['total']}")
        if w["chosen"] != g["chosen"]:
            problems.append(f"{w['pod']}: chosen {w['chosen']} != {g['chosen']}")
        if "message" in w and w["message"] != g.get("message"):
            problems.append(f"{w['pod']}: message {w['message']!r} != {g.get('message')!r}")
        if "preemption" in w:
            wp, gp = w["preemption"], g.get("preemption") or {}
            if wp["node"] != gp.get("node") or sorted(wp["victims"]) != sorted(gp.get("victims", [])):
                problems.append(f"{w['pod']}: preemption {wp} != {gp}")
    assert not problems, f"{len(problems)} differences, first: " + "\n".join(problems[:10])
