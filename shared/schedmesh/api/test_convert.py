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


def test_replicas_decode_to_their_own_metadata_over_one_shared_spec():
    """pod_from_proto remembers a spec by the record's bytes past the metadata: replicas (long
    metadata included: a length of more than one varint byte) share it, a changed spec does not."""
    from schedmesh.bench.workloads import pod_from_template
    from schedmesh.api.evolve import evolve

    def decoded(p):
        return convert.pod_from_proto(convert.pod_to_proto(p))

    long_labels = {f"label-{i}": "x" * 40 for i in range(8)}  # metadata well over 127 bytes
    a = pod_from_template("pod-default", "a", "default")
    b = evolve(a, meta=evolve(a.meta, name="b", uid="uid-b", labels=long_labels))
    c = evolve(a, meta=evolve(a.meta, name="c", uid="uid-c"), priority=7)
    da, db, dc, da2 = decoded(a), decoded(b), decoded(c), decoded(a)
    assert (da.name, db.name, dc.name) == ("a", "b", "c")
    assert db.meta.labels == long_labels and db.uid == "uid-b"
    assert db.containers is da.containers and da2.containers is da.containers
    assert dc.containers is not da.containers and dc.priority == 7
    for p, d in ((a, da), (b, db), (c, dc), (a, da2)):
        assert dataclasses.asdict(d) == dataclasses.asdict(p)
