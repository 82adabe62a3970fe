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


def test_bound_pods_share_their_spec_and_keep_their_own_binding_and_status():
    """The spec memo leaves out the binding and the status too (a shard's feed brings every bound
    pod, each on its own node since its own time): such pods share one spec and decode to their
    own node, phase, start time, conditions, reasons and nomination; a pending replica decoded
    after them has none of those."""
    from schedmesh.api.evolve import evolve
    from schedmesh.api.types import PodCondition
    from schedmesh.bench.workloads import pod_from_template

    def decoded(p):
        return convert.pod_from_proto(convert.pod_to_proto(p))

    a = pod_from_template("pod-default", "bound-a", "default")
    bound = [evolve(a, meta=evolve(a.meta, name=f"bound-{i}", uid=f"uid-bound-{i}"), node_name=f"node-{i}",
                    phase="Running", start_time=1000.0 + i, nominated_node_name="node-9" if i else "",
                    conditions=[PodCondition("PodScheduled", "True", "", ""),
                                PodCondition("Ready", "False" if i else "True", "r", f"m{i}")],
                    status_reason="Evicted" if i == 2 else "", status_message="gone" if i == 2 else "")
             for i in range(3)]
    pending = evolve(a, meta=evolve(a.meta, name="pending", uid="uid-pending"))
    got = [decoded(p) for p in bound] + [decoded(pending)]
    for p, d in zip(bound + [pending], got):
        assert dataclasses.asdict(d) == dataclasses.asdict(p)
    assert all(d.containers is got[0].containers and d.tolerations is got[0].tolerations for d in got)
    assert len({id(d.conditions) for d in got}) == len(got)  # each pod its own list
    assert (got[3].node_name, got[3].phase, got[3].start_time, got[3].conditions) == ("", "Pending", None, [])


def test_spec_key_drops_exactly_the_metadata_binding_and_status_fields():
    from schedmesh.bench.workloads import pod_from_template
    from schedmesh.v1 import objects_pb2 as pb

    p = convert.pod_to_proto(pod_from_template("pod-default", "k", "default"))
    p.node_name, p.phase, p.nominated_node_name, p.start_time = "n1", "Running", "n2", 12.5
    p.conditions.add(type="Ready", status="True")
    p.status_reason, p.status_message = "r", "m"
    p.priority, p.host_network = 300, True
    key = convert._spec_key(p.SerializeToString(deterministic=True))
    spec = pb.Pod.FromString(key)  # still a Pod's serialization
    expected = pb.Pod()
    expected.CopyFrom(p)
    for f in ("metadata", "node_name", "phase", "nominated_node_name", "start_time", "conditions",
              "status_reason", "status_message"):
        expected.ClearField(f)
    assert spec == expected
    with pytest.raises(ValueError, match="ends inside a field"):
        convert._spec_key(p.SerializeToString()[:-1])


def test_a_pod_encoding_splits_into_its_metadata_and_the_rest():
    from schedmesh.bench.workloads import pod_from_template
    from schedmesh.v1 import objects_pb2 as pb

    p = convert.pod_to_proto(pod_from_template("pod-default", "k", "default"))
    p.metadata.labels["app"] = "web"
    p.node_name, p.phase = "n1", "Running"
    raw = p.SerializeToString()
    meta, rest = convert.split_pod_encoding(raw)
    assert pb.ObjectMeta.FromString(meta) == p.metadata
    without = pb.Pod()
    without.CopyFrom(p)
    without.ClearField("metadata")
    assert pb.Pod.FromString(rest) == without  # everything but the metadata, as it was
    # another pod's metadata over the same rest: that pod
    other = pb.Pod()
    other.CopyFrom(p)
    other.metadata.name, other.metadata.uid = "k2", "uid-2"
    assert pb.Pod.FromString(convert.join_pod_encoding(other.metadata.SerializeToString(), rest)) == other
    assert convert.join_pod_encoding(meta, rest) == raw
    other.metadata.labels["long"] = "x" * 300  # a length of more than one varint byte
    long_raw = other.SerializeToString()
    assert convert.join_pod_encoding(*convert.split_pod_encoding(long_raw)) == long_raw
    assert convert.split_pod_encoding(without.SerializeToString()) is None  # no metadata first
    assert convert.split_pod_encoding(b"") is None
    with pytest.raises(ValueError, match="ends inside its metadata"):
        convert.split_pod_encoding(raw[:len(meta)])
