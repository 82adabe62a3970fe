"""Validation as the API server does it (names, labels, annotations, in kube's words), duplicate
objects in one request, and the pod names workloads expand to."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from schedmesh.api import load
from schedmesh.api.load import ManifestError, load_files, load_text

SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
             "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
         "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
         "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
NAME_PART = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
             "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
             "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
               "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
               "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def obj(kind: str, meta: dict, **rest) -> dict:
    api = {"Pod": "v1", "Node": "v1", "Namespace": "v1", "PriorityClass": "scheduling.k8s.io/v1",
           "PodDisruptionBudget": "policy/v1"}.get(kind, "apps/v1")
    d = {"apiVersion": api, "kind": kind, "metadata": meta, **rest}
    if kind == "Pod":
        d.setdefault("spec", {"containers": [{"name": "c"}]})
    if kind == "PriorityClass":
        d.setdefault("value", 1)
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        d.setdefault("spec", {"replicas": 2, "template": {"metadata": {"labels": {"app": "a"}},
                                                          "spec": {"containers": [{"name": "c"}]}}})
    return d


def refusal(*docs: dict, strict: bool = False) -> ManifestError:
    with pytest.raises(ManifestError) as e:
        load_text("\n---\n".join(json.dumps(d) for d in docs), "m.yaml", strict_names=strict)
    return e.value


# ---- names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, meta, path, reason", [
    ("Pod", {"name": "Foo_Bar"}, "metadata.name", f'Invalid value: "Foo_Bar": {SUBDOMAIN}'),
    ("Node", {"name": "n" * 254}, "metadata.name",
     f'Invalid value: "{"n" * 128}..." (254 characters): must be no more than 253 characters'),
    ("Namespace", {"name": "a.b"}, "metadata.name", 'Invalid value: "a.b": must not contain dots'),
    ("Namespace", {"name": "Shop"}, "metadata.name", f'Invalid value: "Shop": {LABEL}'),
    ("Pod", {"name": "p", "namespace": "Shop"}, "metadata.namespace", f'Invalid value: "Shop": {LABEL}'),
    ("Pod", {"generateName": "Web_"}, "metadata.generateName", f'Invalid value: "Web_": {SUBDOMAIN}'),
    ("Pod", {}, "metadata.name", "Required value: name or generateName is required"),
    ("PriorityClass", {"name": "-high"}, "metadata.name", f'Invalid value: "-high": {SUBDOMAIN}'),
    ("PodDisruptionBudget", {"name": "pdb."}, "metadata.name", f'Invalid value: "pdb.": {SUBDOMAIN}'),
    ("Deployment", {"name": "Web"}, "metadata.name", f'Invalid value: "Web": {SUBDOMAIN}'),
    ("StatefulSet", {"name": "s" * 252}, "metadata.name",
     f'the pod name "{"s" * 128}..." (254 characters) made from it is invalid: must be no more than 253 characters'),
])
def test_strict_names(kind: str, meta: dict, path: str, reason: str) -> None:
    e = refusal(obj(kind, meta), strict=True)
    assert (e.path, e.reason) == (path, reason)
    assert str(e) == f"{e.where}: {path}: {reason}"


@pytest.mark.parametrize("name, accepted", [
    ("p0-fields_missing", True), ("Web.1", True), ("a/b", False), ("..", False), ("50%", False), ("x" * 254, False),
])
def test_default_names_need_only_be_url_path_segments(name: str, accepted: bool) -> None:
    """kube-scheduler takes objects the API server's validation never saw (tests/golden has
    "p0-fields_missing"); by default only what every object name must be is checked."""
    doc = json.dumps(obj("Pod", {"name": name}))
    if accepted:
        assert load_text(doc).pods[0].name == name
        with pytest.raises(ManifestError, match="RFC 1123 subdomain"):
            load_text(doc, strict_names=True)
    else:
        with pytest.raises(ManifestError, match=r"metadata.name: Invalid value: .*(may not|no more than 253)"):
            load_text(doc)


def test_strict_names_in_load_files(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(obj("Pod", {"name": "Foo_Bar"})))
    assert load_files([tmp_path]).pods[0].name == "Foo_Bar"
    with pytest.raises(ManifestError, match="RFC 1123 subdomain"):
        load_files([tmp_path], strict_names=True)


# ---- labels, selectors, annotations ------------------------------------------------------------

@pytest.mark.parametrize("labels, reason", [
    ({"Foo Bar": "x"}, f'Invalid value: "Foo Bar": {NAME_PART}'),
    ({"example.com/": "x"}, 'Invalid value: "example.com/": name part must be non-empty'),
    ({"/app": "x"}, 'Invalid value: "/app": prefix part must be non-empty'),
    ({"Example.com/app": "x"}, f'Invalid value: "Example.com/app": prefix part {SUBDOMAIN}'),
    ({"a/b/c": "x"}, 'Invalid value: "a/b/c": a qualified name must consist of alphanumeric characters, '
                     "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
                     "'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?"
                     "[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
    ({"k" * 64: "x"}, f'Invalid value: "{"k" * 64}": name part must be no more than 63 characters'),
    ({"app": "-web"}, f'Invalid value: "-web": {LABEL_VALUE}'),
    ({"app": "v" * 64}, f'Invalid value: "{"v" * 64}": must be no more than 63 characters'),
])
def test_label_keys_and_values(labels: dict, reason: str) -> None:
    e = refusal(obj("Node", {"name": "n", "labels": labels}))
    assert (e.path, e.reason) == ("metadata.labels", reason)


@pytest.mark.parametrize("labels", [
    {"app": ""}, {"example.com/App_1": "Web.v2_x"}, {"k" * 63: "v" * 63}, {"a.b.c/" + "d" * 63: "1"},
])
def test_valid_labels(labels: dict) -> None:
    assert load_text(json.dumps(obj("Node", {"name": "n", "labels": labels}))).nodes[0].meta.labels == labels


@pytest.mark.parametrize("doc, path", [
    (obj("Pod", {"name": "p"}, spec={"containers": [{"name": "c"}], "nodeSelector": {"a b": "x"}}),
     "spec.nodeSelector"),
    (obj("PodDisruptionBudget", {"name": "b"}, spec={"selector": {"matchLabels": {"app": "we b"}}}),
     "spec.selector.matchLabels"),
    (obj("PodDisruptionBudget", {"name": "b"}, spec={"selector": {"matchExpressions": [
        {"key": "a b", "operator": "Exists"}]}}), "spec.selector.matchExpressions[0].key"),
    (obj("PodDisruptionBudget", {"name": "b"}, spec={"selector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["ok", "not ok"]}]}}), "spec.selector.matchExpressions[0].values[1]"),
    (obj("Deployment", {"name": "d"}, spec={"template": {"metadata": {"labels": {"app": "-x"}},
                                                         "spec": {"containers": [{"name": "c"}]}}}),
     "spec.template.metadata.labels"),
    (obj("Pod", {"name": "p", "annotations": {"a b": "x"}}), "metadata.annotations"),
])
def test_labels_are_checked_wherever_they_are(doc: dict, path: str) -> None:
    e = refusal(doc)
    assert e.path == path and e.reason.startswith("Invalid value: ")


def test_annotations() -> None:
    # Keys are checked lower-cased, as kube does; values are free, but all of them together are bounded.
    ok = obj("Pod", {"name": "p", "annotations": {"Example.com/Owner": "Anything at all: {}", "x": ""}})
    assert load_text(json.dumps(ok)).pods[0].meta.annotations["Example.com/Owner"] == "Anything at all: {}"
    big = obj("Pod", {"name": "p", "annotations": {"a": "x" * (256 * 1024)}})
    e = refusal(big)
    assert (e.path, e.reason) == ("metadata.annotations", "Too long: may not be more than 262144 bytes")


@pytest.mark.parametrize("port, reason", [
    ({"hostPort": 80}, "Required value"), ({"containerPort": 0}, "Required value"),
    ({"containerPort": 70000}, "Invalid value: 70000: must be between 1 and 65535, inclusive"),
])
def test_container_ports(port: dict, reason: str) -> None:
    e = refusal(obj("Pod", {"name": "p"}, spec={"containers": [{"name": "c", "ports": [port]}]}))
    assert (e.path, e.reason) == ("spec.containers[0].ports[0].containerPort", reason)


# ---- duplicates ----------------------------------------------------------------------------------

@pytest.mark.parametrize("docs, where, reason", [
    ([obj("Pod", {"name": "p"}), obj("Pod", {"name": "p", "namespace": "default"})],
     "m.yaml: document 2 (Pod p)", 'Duplicate value: "p": Pod default/p is also defined by m.yaml: document 1 (Pod p)'),
    ([obj("Node", {"name": "n"}), {"apiVersion": "v1", "kind": "List", "items": [obj("Node", {"name": "n"})]}],
     "m.yaml: document 2: items[0] (Node n)", 'Duplicate value: "n": Node n is also defined by m.yaml: document 1 (Node n)'),
    ([obj("Deployment", {"name": "web"}), obj("Deployment", {"name": "web"})],
     "m.yaml: document 2 (Deployment web)",
     'Duplicate value: "web": Deployment default/web is also defined by m.yaml: document 1 (Deployment web)'),
    ([obj("StatefulSet", {"name": "web"}), obj("Pod", {"name": "web-1"})],
     "m.yaml: document 2 (Pod web-1)",
     'Duplicate value: "web-1": Pod default/web-1 is also defined by m.yaml: document 1 (StatefulSet web), '
     "which generates it"),
    ([obj("Pod", {"name": "web-0"}), obj("StatefulSet", {"name": "web"})],
     "m.yaml: document 2 (StatefulSet web)",
     'Duplicate value: "web-0": Pod default/web-0, which this StatefulSet generates, is also defined by '
     "m.yaml: document 1 (Pod web-0)"),
    ([obj("Namespace", {"name": "a"}), obj("PriorityClass", {"name": "a"}), obj("Namespace", {"name": "a"})],
     "m.yaml: document 3 (Namespace a)", 'Duplicate value: "a": Namespace a is also defined by m.yaml: document 1 (Namespace a)'),
])
def test_duplicates_name_both_documents(docs: list, where: str, reason: str) -> None:
    e = refusal(*docs)
    assert (e.where, e.path, e.reason) == (where, "metadata.name", reason)


def test_same_name_in_other_namespaces_or_kinds_is_no_duplicate() -> None:
    m = load_text("\n---\n".join(json.dumps(d) for d in [
        obj("Pod", {"name": "x"}), obj("Pod", {"name": "x", "namespace": "other"}), obj("Node", {"name": "x"}),
        obj("PodDisruptionBudget", {"name": "x"}), obj("Deployment", {"name": "x"}), obj("ReplicaSet", {"name": "x"})]))
    assert len(m.pods) == 6 and len(m.nodes) == 1 and len(m.pdbs) == 1


def test_a_deployments_replicaset_is_an_object_too() -> None:
    m = load_text(json.dumps(obj("Deployment", {"name": "web"})))
    rs = m.pods[0].meta.owner_references[0].name
    e = refusal(obj("Deployment", {"name": "web"}), obj("ReplicaSet", {"name": rs}))
    assert e.reason == (f'Duplicate value: "{rs}": ReplicaSet default/{rs} is also defined by m.yaml: document 1 '
                        "(Deployment web), whose ReplicaSet it is")


def test_duplicates_across_the_files_of_one_request(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(obj("Pod", {"name": "p"})))
    (tmp_path / "b.json").write_text(json.dumps(obj("Pod", {"name": "p"})))
    with pytest.raises(ManifestError) as e:
        load_files([tmp_path])
    assert str(e.value) == (f'{tmp_path / "b.json"} (Pod p): metadata.name: Duplicate value: "p": '
                            f'Pod default/p is also defined by {tmp_path / "a.json"} (Pod p)')


# ---- names of generated pods -----------------------------------------------------------------------

def deployment(name: str = "web", replicas: int = 3, kind: str = "Deployment", image: str = "nginx") -> dict:
    return obj(kind, {"name": name}, spec={"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                                           "template": {"metadata": {"labels": {"app": "web"}},
                                                        "spec": {"containers": [{"name": "c", "image": image}]}}})


def test_deployment_pods_are_named_as_the_replicaset_controller_names_them() -> None:
    pods = load_text(json.dumps(deployment())).pods
    h = pods[0].labels["pod-template-hash"]
    assert re.fullmatch(f"[{ALPHABET}]+", h)
    for p in pods:
        assert re.fullmatch(f"web-{h}-[{ALPHABET}]{{5}}", p.name), p.name
        assert p.labels == {"app": "web", "pod-template-hash": h}
        ref = p.meta.owner_references[0]
        assert (ref.kind, ref.name, ref.controller, ref.api_version) == ("ReplicaSet", f"web-{h}", True, "apps/v1")
    assert len({p.name for p in pods}) == 3


def test_replicaset_and_statefulset_pod_names() -> None:
    rs = load_text(json.dumps(deployment("front", kind="ReplicaSet"))).pods
    assert all(re.fullmatch(f"front-[{ALPHABET}]{{5}}", p.name) for p in rs)
    assert "pod-template-hash" not in rs[0].labels and rs[0].meta.owner_references[0].kind == "ReplicaSet"
    ss = load_text(json.dumps(deployment("db", kind="StatefulSet"))).pods
    assert [p.name for p in ss] == ["db-0", "db-1", "db-2"]


def test_generated_names_are_unique_and_reproducible() -> None:
    # Replicas 679 and up used to collide.
    text = json.dumps(deployment(replicas=3000))
    names = [p.name for p in load_text(text).pods]
    assert len(set(names)) == 3000
    assert [p.name for p in load_text(text).pods] == names
    other = [p.name for p in load_text(json.dumps(deployment(replicas=3000, image="nginx:2"))).pods]
    assert other[0].split("-")[1] != names[0].split("-")[1]  # a new template is a new ReplicaSet


def test_taken_names_are_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "_ALPHANUMS", "bc")  # 32 possible names: draws collide all the time
    pods = load_text(json.dumps(deployment(kind="ReplicaSet", replicas=30))).pods
    assert len({p.name for p in pods}) == 30
    e = refusal(deployment(kind="ReplicaSet", replicas=33))
    assert (e.path, e.reason) == ("metadata.generateName", 'no free name starting with "web-" after 100 tries')


def test_generated_names_avoid_the_pods_written_out() -> None:
    first = load_text(json.dumps(deployment(replicas=2))).pods[0].name
    for docs in ([deployment(replicas=2), obj("Pod", {"name": first})],
                 [obj("Pod", {"name": first}), deployment(replicas=2)]):
        pods = load_text("\n---\n".join(json.dumps(d) for d in docs)).pods
        assert len({p.name for p in pods}) == 3 and [p.name for p in pods].count(first) == 1


def test_long_names_are_cut_as_kube_cuts_them() -> None:
    name = "d" * 60
    for p in load_text(json.dumps(deployment(name, kind="ReplicaSet"))).pods:
        assert len(p.name) == 63 and p.name.startswith("d" * 58)


def test_generate_name() -> None:
    doc = obj("Pod", {"generateName": "web-"})
    names = {load_text(json.dumps(doc)).pods[0].name for _ in range(5)}
    assert all(re.fullmatch(f"web-[{ALPHABET}]{{5}}", n) for n in names)


def test_template_hash_ignores_key_order_and_copes_with_yaml_keys() -> None:
    a = load_text(json.dumps(deployment())).pods[0].labels["pod-template-hash"]
    b = load_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 3\n"
                  "  selector: {matchLabels: {app: web}}\n  template:\n"
                  "    spec: {containers: [{image: nginx, name: c}]}\n"
                  "    metadata: {labels: {app: web}}\n").pods[0].labels["pod-template-hash"]
    assert a == b
    odd = load_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n"
                    "    spec: {containers: [{name: c}], 1: x, 2001-01-01: y, z: !!set {a}}\n").pods
    assert len(odd) == 1


def _canonical_unshared(d):
    """The canonical form as it was computed before aliases were shared: every node rebuilt."""
    if isinstance(d, dict):
        return {str(k): _canonical_unshared(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_canonical_unshared(v) for v in d]
    if d is None or isinstance(d, (str, int, float, bool)):
        return d
    return str(d)


def test_template_hash_converts_each_aliased_node_once_and_keeps_its_value() -> None:
    """A template nested with YAML aliases 9 levels deep (about 900 000 nodes once expanded): each
    shared node is converted once and the result shares it too, and the hash is the one the
    unshared conversion gives (pod names of Deployments do not change)."""
    import hashlib

    import yaml
    fanouts = (5, 5, 4, 4, 4, 4, 4, 4, 4)
    levels = [f'l0: &a0 [{",".join(["lol"] * (fanouts[0] - 3))}, 1, 2001-01-01, {{7: x}}]']
    levels += [f"l{i}: &a{i} [{','.join([f'*a{i - 1}'] * f)}]" for i, f in enumerate(fanouts[1:], 1)]
    text = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n"
            "    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: c}]\n      extra:\n"
            + "".join(f"        {line}\n" for line in levels))
    template = yaml.load(text, Loader=yaml.CSafeLoader)["spec"]["template"]
    top = template["spec"]["extra"]["l8"]
    assert top[0] is top[1], "YAML builds an alias as one shared object"

    canonical = load._canonical(template, {})
    assert canonical["spec"]["extra"]["l8"][0] is canonical["spec"]["extra"]["l8"][3], \
        "an aliased node was converted again at each use"
    assert canonical["spec"]["extra"]["l0"] is canonical["spec"]["extra"]["l1"][0]
    assert canonical["spec"]["extra"]["l0"][-2:] == ["2001-01-01", {"7": "x"}]

    unshared = json.dumps(_canonical_unshared(template), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    want = load._safe_encode(str(int.from_bytes(hashlib.sha256(unshared.encode()).digest()[:4], "big")))
    assert load.pod_template_hash(template) == want
    [pod] = load_text(text).pods
    assert pod.labels["pod-template-hash"] == want and pod.name.startswith(f"web-{want}-")


@pytest.mark.parametrize("value", ["web-0", "", "a b", 'say "hi"', "back\\slash", "tab\there", "\x7f", "\x00",
                                   "café", "\u2028", "x" * 128, "x" * 129])
def test_a_value_is_quoted_in_messages_as_json_writes_it(value):
    want = json.dumps(value, ensure_ascii=False) if len(value) <= 128 else \
        json.dumps(value[:128], ensure_ascii=False)[:-1] + f'..." ({len(value)} characters)'
    assert load._quote(value) == want
