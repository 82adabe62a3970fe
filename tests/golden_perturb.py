"""Scenarios nobody recorded, for the mesh against explain: each recorded scenario with its nodes
renamed (new names, so ties break elsewhere) and its nodes and bound pods shuffled, its expected
decisions made by `schedmesh explain` (kube-exact: ../shared/tools/golden-check). Written as
golden files, so that ../shared/tools/golden-mesh-check places them through a running mesh:

    python -m tests.golden_perturb OUT --seed 1 --seed 2
    ../shared/tools/golden-mesh-check --golden OUT [--mode preempt]

(`make golden-mesh-perturbed` does both.)"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from tests.golden_mesh import GOLDEN, KINDS, schedmesh


def renamed(obj, names: dict[str, str]):
    """`obj` with every string equal to an old node name replaced (nodeName, hostname labels,
    matchFields values)."""
    if isinstance(obj, dict):
        return {k: renamed(v, names) for k, v in obj.items()}
    if isinstance(obj, list):
        return [renamed(v, names) for v in obj]
    return names.get(obj, obj) if isinstance(obj, str) else obj


def perturb(scenario: dict, rng: random.Random) -> dict:
    old = [n["metadata"]["name"] for n in scenario["nodes"]]
    new = [f"w{i:06d}" for i in rng.sample(range(10**6), len(old))]
    out = renamed(scenario, dict(zip(old, new)))
    rng.shuffle(out["nodes"])
    rng.shuffle(out["pods"])
    return out


def explain(scenario: dict, work: Path) -> list[dict]:
    cluster = [o for _kind, _api, key in KINDS for o in scenario.get(key) or []]
    (work / "cluster.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster}))
    (work / "pending.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": scenario["pending"]}))
    r = schedmesh("explain", "--cluster", "cluster.json", "--pods", "pending.json", "--tie-break", "name",
                  "--output", "json", cwd=work)
    if r.returncode != 0:
        raise SystemExit(f"explain failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout)["results"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--golden", type=Path, default=GOLDEN)
    p.add_argument("--seed", type=int, action="append", help="one perturbed copy per seed (default: 1)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for seed in a.seed or [1]:
        for f in sorted(a.golden.glob("*.in.json")):
            name = f"{f.name[:-len('.in.json')]}-s{seed}"
            scenario = perturb(json.loads(f.read_text()), random.Random(f"{seed}/{name}"))
            with tempfile.TemporaryDirectory() as work:
                results = explain(scenario, Path(work))
            (a.out / f"{name}.in.json").write_text(json.dumps(scenario))
            (a.out / f"{name}.out.json").write_text(json.dumps({"results": results}))
            print(f"{name}: {len(results)} pending pods")


if __name__ == "__main__":
    main()
