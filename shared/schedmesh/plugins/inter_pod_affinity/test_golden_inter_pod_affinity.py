"""InterPodAffinity alone against the recorded kube-scheduler decisions in the golden scenarios.

Each scenario is replayed as recorded (every pending pod assumed on the node kube chose) and,
for every pod, this plugin's Filter verdicts and weighted scores are compared wherever the
recording pins them down: nodes kube found feasible must pass, nodes InterPodAffinity rejected
must be rejected with the same reasons, nodes rejected by a later filter must pass, and the
plugin's scores (weight 2) must equal the recorded ones, or PreScore must skip when the
recording has no InterPodAffinity score.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from schedmesh.api.load import admit_all, load_text
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.interface import Code, CycleState
from schedmesh.plugins.inter_pod_affinity import InterPodAffinity

GOLDEN = pathlib.Path(__file__).resolve().parents[4] / "tests" / "golden"  # the repo's copy
WEIGHT = 2
# Filters kube runs after InterPodAffinity (a node they reject passed InterPodAffinity).
LATER_FILTERS = {"DynamicResources"}
SCENARIOS = sorted(p.name[:-len(".in.json")] for p in GOLDEN.glob("v-*.in.json"))
assert SCENARIOS, f"no golden scenarios in {GOLDEN}"


def _load(objs: list) -> object:
    return load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


@pytest.mark.parametrize("name", SCENARIOS)
def test_golden_scenario(name):
    inp = json.loads((GOLDEN / f"{name}.in.json").read_text())
    out = json.loads((GOLDEN / f"{name}.out.json").read_text())["results"]
    cluster = admit_all(_load(inp.get("namespaces", []) + inp.get("priorityClasses", []) + inp["nodes"] + inp["pods"]))
    pending = admit_all(_load(inp.get("priorityClasses", []) + inp["pending"])).pods
    snap = Snapshot(cluster.nodes, cluster.pods, {n.name: n.labels for n in cluster.namespaces})
    pl = InterPodAffinity()
    assert len(out) == len(pending)
    for pod, want in zip(pending, out):
        assert want["pod"] == pod.key
        state = CycleState()
        _, st = pl.pre_filter(state, pod, snap)
        skipped = st is not None and st.code == Code.SKIP
        infos = {ni.name: ni for ni in snap.node_info_list}
        feasible = []
        for node_name, w in want["nodes"].items():
            got = None if skipped else pl.filter(state, pod, infos[node_name])
            where = f"{pod.key} on {node_name}"
            if w["feasible"]:
                feasible.append(node_name)
                assert got is None, f"{where}: rejected ({got}) but kube found it feasible"
            elif w["plugin"] == InterPodAffinity.name:
                assert got is not None and list(got.reasons) == w["reasons"], f"{where}: {got} != {w['reasons']}"
            elif w["plugin"] in LATER_FILTERS:
                assert got is None, f"{where}: rejected ({got}) but kube got past InterPodAffinity"
        if feasible:
            rows = np.array([infos[n].index for n in feasible], np.int64)
            st = pl.pre_score(state, pod, snap, rows)
            want_scores = [want["nodes"][n]["scores"].get(InterPodAffinity.name) for n in feasible]
            if st is not None and st.code == Code.SKIP:
                assert want_scores == [None] * len(feasible), f"{pod.key}: PreScore skipped, kube scored"
            else:
                scores = pl.score_nodes(state, pod, snap, rows)
                pl.normalize_score(state, pod, scores)
                assert list(scores * WEIGHT) == want_scores, f"{pod.key}: scores differ"
        if want.get("chosen"):
            snap.add_pod(pod, want["chosen"])
