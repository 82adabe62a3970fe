"""Bounded input: every limit of schedmesh.api.load refuses with a ManifestError naming the source,
the document and the field path, before the input is expanded; nothing else escapes."""
from __future__ import annotations

import io
import json
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from schedmesh.api import load
from schedmesh.api.load import ManifestError, load_files, load_text

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n"

# The report's 578-byte Deployment: its template nests aliases 8 levels deep (9^8 = 43 million
# strings once expanded). It used to make the process grow to 778 MB.
BILLION_LAUGHS = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
        b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
        c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
        d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
        e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
        f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
        g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
        h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    spec: {containers: [{name: c}]}
"""


def refusal(text: str, source: str = "m.yaml") -> ManifestError:
    with pytest.raises(ManifestError) as e:
        load_text(text, source)
    return e.value


def nested(levels: int, leaf: str = "1") -> str:
    """A Pod whose spec.extra makes the document `levels` collections deep (the root is level 1)."""
    inner = "[" * (levels - 2) + leaf + "]" * (levels - 2)
    return f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers: [{{name: c}}]\n  extra: {inner}\n"


def test_billion_laughs_is_refused_before_it_expands() -> None:
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        e = refusal(BILLION_LAUGHS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - t0 < 2
    assert peak < 20 * 2**20
    assert e.where == "m.yaml: document 1"
    assert e.path.startswith("spec.template.metadata.annotations.")
    assert e.reason == f"expands to more than {load.MAX_EXPANDED_NODES} nodes (YAML aliases)"
    assert str(e).startswith("m.yaml: document 1: spec.template.metadata.annotations.")


@pytest.mark.parametrize("text, where, path, reason", [
    ("a: &a [*a]\n", "m.yaml: document 1", "a[0]",
     "the YAML alias *a refers to a node that contains it (a recursive structure)"),
    ("a: &a {b: {c: *a}}\n", "m.yaml: document 1", "a.b.c",
     "the YAML alias *a refers to a node that contains it (a recursive structure)"),
    ("x: &x " + "[" * 60 + "]" * 60 + "\ny: [[[[[[*x]]]]]]\n", "m.yaml: document 1", "y[0][0][0][0][0][0]",
     "nests more than 64 levels deep once YAML aliases are expanded"),
    (POD + "---\n" + nested(65), "m.yaml: document 2", "spec.extra[0][0][0][0][0][0].<52 more>[0][0][0][0]",
     "nests more than 64 levels deep"),
    ("a:\n" + "".join("  " * i + " b:\n" for i in range(1, 100)), "m.yaml: document 1",
     "a.b.b.b.b.b.b.b.<52 more>.b.b.b.b", "nests more than 64 levels deep"),
    ("a: " + "[" * 200_000 + "]" * 200_000, "m.yaml: document 1", "a[0][0][0][0][0][0][0].<52 more>[0][0][0][0]",
     "nests more than 64 levels deep"),
    ('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}", "m.yaml", "", "nests more than 64 levels deep"),
    (json.dumps({"spec": {"x": json.loads("[" * 70 + "]" * 70)}}), "m.yaml", "spec.x[0][0][0][0][0][0].<52 more>[0][0][0][0]",
     "nests more than 64 levels deep"),
], ids=["recursive alias", "recursive alias in a mapping", "alias nests too deep", "YAML flow 65 levels",
        "YAML block 100 levels", "YAML 200000 levels", "JSON 200000 levels", "JSON 72 levels"])
def test_nesting_and_recursive_aliases(text: str, where: str, path: str, reason: str) -> None:
    e = refusal(text)
    assert (e.where, e.path, e.reason) == (where, path, reason)


def test_64_levels_are_read() -> None:
    assert len(load_text(nested(64)).pods) == 1
    assert len(load_text(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                     "spec": {"containers": [{"name": "c"}],
                                              "extra": json.loads("[" * 62 + "]" * 62)}})).pods) == 1


@pytest.mark.parametrize("limit, value, text, where, path, reason", [
    ("MAX_MANIFEST_BYTES", 100, POD + "# " + "x" * 100, "m.yaml", "", "bytes; at most 100 bytes are read"),
    ("MAX_DOCUMENTS", 3, (POD + "---\n") * 3 + "{}\n", "m.yaml", "", "has more than 3 YAML documents"),
    ("MAX_EXPANDED_NODES", 40, POD + "---\n" + POD.replace("{name: p}", "{name: q}") + "---\n" + POD,
     "m.yaml: document 3", "", "the request expands to more than 40 nodes in all (YAML aliases included)"),
    ("MAX_EXPANDED_NODES", 30, "items: [" + ",".join(["1"] * 40) + "]", "m.yaml: document 1", "items[27]",
     "expands to more than 30 nodes (YAML aliases)"),
    ("MAX_EXPANDED_NODES", 30, json.dumps({"items": [1] * 40}), "m.yaml", "",
     "expands to more than 30 nodes (YAML aliases)"),
    ("MAX_REPLICAS", 5, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: 6\n"
     "  template: {spec: {containers: [{name: c}]}}\n", "m.yaml (Deployment d)", "spec.replicas",
     "Invalid value: 6: must be no more than 5 (the most pods one workload is expanded to)"),
    ("MAX_REPLICAS", 5, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 6\n"
     "  template: {spec: {restartPolicy: Never, containers: [{name: c}]}}\n", "m.yaml (Job j)", "spec.parallelism",
     "Invalid value: 6: must be no more than 5 (the most pods one workload is expanded to)"),
    ("MAX_REPLICAS", 5, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 9\n"
     "  completions: 7\n  template: {spec: {restartPolicy: Never, containers: [{name: c}]}}\n", "m.yaml (Job j)",
     "spec.completions", "Invalid value: 7: must be no more than 5 (the most pods one workload is expanded to)"),
    ("MAX_REPLICAS", 5, "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: r}\nspec:\n  replicas: 6\n"
     "  template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c}]}}\n",
     "m.yaml (ReplicationController r)", "spec.replicas",
     "Invalid value: 6: must be no more than 5 (the most pods one workload is expanded to)"),
    ("MAX_TEMPLATE_COPY_NODES", 100, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n"
     "  parallelism: 20\n  template: {spec: {restartPolicy: Never, containers: [{name: c}]}}\n", "m.yaml (Job j)",
     "spec.parallelism", "Invalid value: 20: 20 copies of a"),
    ("MAX_OBJECTS", 3, "apiVersion: v1\nkind: List\nitems:\n" + "".join(
        f"- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: c{i}}}}}\n" for i in range(4)),
     "m.yaml: items[3] (ConfigMap c3)", "", "the request has more than 3 objects"),
    ("MAX_TEMPLATE_COPY_NODES", 100, "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec:\n"
     "  replicas: 20\n  template: {spec: {containers: [{name: c}]}}\n", "m.yaml (StatefulSet s)", "spec.replicas",
     "Invalid value: 20: 20 copies of a 8-node pod template take the request past 100 pod-template nodes"),
    ("MAX_OBJECTS", 3, json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}} for i in range(4)]}),
     "m.yaml: items[3] (Node n3)", "", "the request has more than 3 objects (List items and the pods of workloads included)"),
    ("MAX_OBJECTS", 3, POD + "---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: r}\nspec:\n  replicas: 3\n"
     "  template: {spec: {containers: [{name: c}]}}\n", "m.yaml: document 2 (ReplicaSet r)", "spec.replicas",
     "the request has more than 3 objects (List items and the pods of workloads included)"),
])
def test_limits(monkeypatch: pytest.MonkeyPatch, limit: str, value: int, text: str, where: str, path: str,
                reason: str) -> None:
    monkeypatch.setattr(load, limit, value)
    e = refusal(text)
    assert (e.where, e.path) == (where, path)
    assert reason in e.reason


@pytest.mark.parametrize("field, limit", [("containers", load.MAX_CONTAINERS),
                                          ("initContainers", load.MAX_CONTAINERS)])
def test_containers_per_pod(field: str, limit: int) -> None:
    def pod(n: int) -> str:
        items = [{"name": f"c{i}"} for i in range(n)]
        spec = {"containers": items} if field == "containers" else {"containers": [{"name": "c"}], field: items}
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})

    assert load_text(pod(limit)).pods
    e = refusal(pod(limit + 1))
    assert (e.path, e.reason) == (f"spec.{field}", f"Too many: {limit + 1}: must have at most {limit} items")


def test_ports_per_container() -> None:
    def pod(n: int) -> str:
        ports = [{"containerPort": 1 + i} for i in range(n)]
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                           "spec": {"containers": [{"name": "c", "ports": ports}]}})

    assert len(load_text(pod(load.MAX_PORTS_PER_CONTAINER)).pods[0].containers[0].ports) == load.MAX_PORTS_PER_CONTAINER
    e = refusal(pod(load.MAX_PORTS_PER_CONTAINER + 1))
    assert e.path == "spec.containers[0].ports"
    assert e.reason.startswith(f"Too many: {load.MAX_PORTS_PER_CONTAINER + 1}: must have at most")


@pytest.mark.parametrize("kind", ["Pod", "Deployment"])
def test_ports_per_pod_summed_over_containers_and_init_containers(kind: str) -> None:
    per = load.MAX_PORTS_PER_CONTAINER
    full = -(-load.MAX_PORTS_PER_POD // per)  # containers with `per` ports each that reach the pod's limit

    def manifest(containers: int, init: int, extra: int) -> str:
        def c(name: str, n: int) -> dict:
            return {"name": name, "ports": [{"containerPort": 1 + i} for i in range(n)]}
        spec = {"containers": [c(f"c{i}", per) for i in range(containers)],
                "initContainers": [c(f"i{i}", per) for i in range(init)] + ([c("last", extra)] if extra else [])}
        if kind == "Pod":
            return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
        return json.dumps({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                           "spec": {"replicas": 1, "template": {"spec": spec}}})

    assert load.MAX_PORTS_PER_POD % per == 0, "the test fills the pod with whole containers"
    at_limit = load_text(manifest(full - 1, 1, 0)).pods[0]
    assert sum(len(c.ports) for c in at_limit.containers + at_limit.init_containers) == load.MAX_PORTS_PER_POD
    # one more port, in an init container after the full ones: refused there, naming it
    e = refusal(manifest(full - 1, 1, 1))
    prefix = "spec.template." if kind == "Deployment" else ""
    assert e.where == ("m.yaml (Pod p)" if kind == "Pod" else "m.yaml (Deployment d)")
    assert e.path == f"{prefix}spec.initContainers[1].ports"
    assert e.reason == (f"Too many: {load.MAX_PORTS_PER_POD + 1}: the pod's containers and init containers "
                        f"must have at most {load.MAX_PORTS_PER_POD} ports in all")
    assert str(e).startswith(f"{e.where}: {e.path}: Too many: ")
    # the containers alone, past it
    e = refusal(manifest(full + 1, 0, 0))
    assert e.path == f"{prefix}spec.containers[{full}].ports"
    assert e.reason.startswith(f"Too many: {load.MAX_PORTS_PER_POD + per}: ")


def test_the_per_pod_port_limit_bounds_what_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is the module's constant, and a pod of 100 containers with 1000 ports each is
    refused after the containers that cross it: the rest are not read."""
    monkeypatch.setattr(load, "MAX_PORTS_PER_POD", 5)
    ports = [{"containerPort": 1 + i} for i in range(3)]
    text = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                       "spec": {"containers": [{"name": f"c{i}", "ports": ports} for i in range(3)]}})
    e = refusal(text, "many.json")
    assert (e.where, e.path) == ("many.json (Pod p)", "spec.containers[1].ports")
    assert e.reason.startswith("Too many: 6: ") and "at most 5 ports in all" in e.reason
    monkeypatch.undo()  # the real limit again: a pod of 100 containers with 1000 ports each
    seen = []
    real = load._container
    monkeypatch.setattr(load, "_container", lambda *a: seen.append(a[2]) or real(*a))
    big = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                      "spec": {"containers": [{"name": f"c{i}", "ports": [{"containerPort": 1 + j}
                                                                          for j in range(load.MAX_PORTS_PER_CONTAINER)]}
                                              for i in range(load.MAX_CONTAINERS)]}})
    t0 = time.process_time()
    e = refusal(big)
    assert e.path == f"spec.containers[{load.MAX_PORTS_PER_POD // load.MAX_PORTS_PER_CONTAINER}].ports"
    assert len(seen) == load.MAX_PORTS_PER_POD // load.MAX_PORTS_PER_CONTAINER + 1, seen
    assert time.process_time() - t0 < 10


def test_replicas_at_the_limit_are_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "MAX_REPLICAS", 5)
    m = load_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: 5\n"
                  "  template: {spec: {containers: [{name: c}]}}\n")
    assert len(m.pods) == 5


@pytest.mark.parametrize("text, reason", [
    ("a: " + "1" * 5000 + "\n", 'not valid YAML or JSON at line 1, column 4: cannot read "1111'),
    ("a: 2001-02-30\n", 'not valid YAML or JSON at line 1, column 4: cannot read "2001-02-30": day is out of range'),
    ("a: !!python/object:os.system x\n", "could not determine a constructor for the tag"),
    ("a: \ud800\n", "is not valid UTF-8 text"),
    ("a: *nothing\n", "found undefined alias 'nothing'"),
    ("a: &x 1\nb: &x 2\n", "found duplicate anchor 'x'"),
    ("x: [" + ", ".join(f"&a{i} {{<<: *a{i - 1}}}" if i else "&a0 {k: 1}" for i in range(3000)) + "]",
     "nests more than 64 levels deep once YAML aliases are expanded"),
], ids=["5000-digit integer", "no such date", "python tag", "surrogate", "undefined alias", "duplicate anchor",
        "merge-key chain"])
def test_unreadable_values(text: str, reason: str) -> None:
    assert reason in str(refusal(text))


def test_files_are_read_only_up_to_the_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(load, "MAX_MANIFEST_BYTES", 1000)
    big = tmp_path / "big.yaml"
    big.write_text(POD + "#" * 2000)
    with pytest.raises(ManifestError, match=r"big.yaml: is larger than 1000 bytes, the most that is read$"):
        load_files([big])
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(POD.encode() + b"# caf\xe9\n")
    with pytest.raises(ManifestError, match=r"latin1.yaml: is not UTF-8 text \(byte \d+\)$"):
        load_files([bad])


def test_standard_input_is_read_only_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "MAX_MANIFEST_BYTES", 1000)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(POD.encode())))
    assert load.read_manifest("-") == POD
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"#" * 5000)))
    with pytest.raises(ManifestError, match=r"^-: is larger than 1000 bytes"):
        load_files(["-"])


def test_one_request_spans_its_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(load, "MAX_EXPANDED_NODES", 20)
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text(POD.replace("{name: p}", "{name: " + name[0] + "}"))
    assert len(load_text((tmp_path / "a.yaml").read_text()).pods) == 1  # each file alone is within the limit
    with pytest.raises(ManifestError, match="b.yaml: document 1: .*the request expands to more than 20 nodes in all"):
        load_files([tmp_path])
