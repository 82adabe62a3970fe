"""Every object survives the trip to protobuf and back unchanged (golden inputs as the corpus)."""
import dataclasses
import json
from pathlib import Path

import pytest

from schedmesh.api import convert
from schedmesh.api.load import admit_all, load_text
from schedmesh.api.quantity import format_exact, parse_quantity

GOLDEN = Path(__file__).resolve().parents[3] / "tests" / "golden"


@pytest.mark.parametrize("text", ["0", "1", "1.5", "0.0001", "123Mi", "129e6", "100u", "7500m", "-2.25"])
def test_format_exact_round_trips(text):
    q = parse_quantity(text)
    assert parse_quantity(format_exact(q)) == q


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.in.json")), ids=lambda p: p.name)
def test_round_trip(path):
    d = json.loads(path.read_text())
    items = [o for k in ("namespaces", "priorityClasses", "pdbs", "nodes", "pods", "pending") for o in d.get(k, [])]
    m = admit_all(load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items})))
    for p in m.pods:
        back = convert.pod_from_proto(type(convert.pod_to_proto(p)).FromString(convert.pod_to_proto(p).SerializeToString()))
        assert dataclasses.asdict(back) == dataclasses.asdict(p)
    for n in m.nodes:
        assert dataclasses.asdict(convert.node_from_proto(convert.node_to_proto(n))) == dataclasses.asdict(n)
    for c in m.priority_classes:
        assert convert.priority_class_from_proto(convert.priority_class_to_proto(c)) == c
    for b in m.pdbs:
        assert convert.pdb_from_proto(convert.pdb_to_proto(b)) == b
    for ns in m.namespaces:
        assert convert.namespace_from_proto(convert.namespace_to_proto(ns)) == ns
