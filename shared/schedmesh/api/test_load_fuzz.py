"""Fuzzing the manifest reader: whatever the input, load_text returns or raises ManifestError
(no other exception, no traceback for the user), and it does so quickly."""
from __future__ import annotations

import copy
import json
import os
import time
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedmesh.api.load import ManifestError, load_text

# Generous for a loaded CI machine; what matters is that nothing takes long.
# SCHEDMESH_FUZZ_EXAMPLES=3000 searches harder.
SECONDS_PER_INPUT = 10.0
FUZZ = settings(max_examples=int(os.environ.get("SCHEDMESH_FUZZ_EXAMPLES", 150)), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                 "annotations": {"example.com/owner": "team"},
                 "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}]},
    "spec": {
        "containers": [{"name": "c", "image": "nginx",
                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}},
                        "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]}],
        "initContainers": [{"name": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1m"}}}],
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule",
                         "tolerationSeconds": 30}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
                     "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [{"key": "gen", "operator": "Gt",
                                                                        "values": ["3"]}]}}]},
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}},
                     "matchLabelKeys": ["app"], "namespaceSelector": {}}],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "podAffinityTerm": {"topologyKey": "zone", "namespaces": ["shop"]}}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                       "minDomains": 2, "labelSelector": {"matchExpressions": [
                                           {"key": "app", "operator": "Exists"}]}}],
        "priorityClassName": "high", "schedulingGates": [{"name": "gate"}],
        "overhead": {"cpu": "10m"}, "resources": {"limits": {"cpu": "2"}},
        "hostNetwork": False, "terminationGracePeriodSeconds": 5,
    },
    "status": {"phase": "Pending", "startTime": "2024-01-01T00:00:00Z",
               "conditions": [{"type": "PodScheduled", "status": "False"}]},
}
NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"zone": "a"}, "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}], "unschedulable": False},
        "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "images": [{"names": ["nginx:1"], "sizeBytes": 1000}],
                   "conditions": [{"type": "Ready", "status": "True"}]}}
DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
              "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "d"}},
                       "template": {"metadata": {"labels": {"app": "d"}},
                                    "spec": {"containers": [{"name": "c"}]}}}}
STATEFULSET = dict(DEPLOYMENT, kind="StatefulSet", metadata={"name": "s"})
REPLICATION_CONTROLLER = {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "r"},
                          "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "r"}},
                                                               "spec": {"containers": [{"name": "c"}]}}}}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
       "spec": {"parallelism": 3, "completions": 2, "completionMode": "Indexed",
                "template": {"metadata": {"labels": {"app": "j"}},
                             "spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}}}
OTHERS = [
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 10,
     "preemptionPolicy": "Never"},
    {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb", "namespace": "shop"},
     "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}},
     "status": {"disruptionsAllowed": 1, "disruptedPods": {"web": "2024-01-01T00:00:00Z"}}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "labels": {"team": "a"}}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shop"}, "data": {"a": "b"}},
]
VALID = [POD, NODE, DEPLOYMENT, STATEFULSET, REPLICATION_CONTROLLER, JOB, *OTHERS,
         {"apiVersion": "v1", "kind": "List", "items": [NODE, POD]}]


def load_quietly(text: str) -> None:
    """load_text, failing the test on anything but a ManifestError or on a slow answer."""
    t0 = time.monotonic()
    try:
        load_text(text, "fuzz.yaml")
    except ManifestError as e:
        assert str(e).startswith("fuzz.yaml"), e
    assert time.monotonic() - t0 < SECONDS_PER_INPUT


def test_the_seeds_are_valid() -> None:
    for doc in VALID:
        load_text(json.dumps(doc), "seed.json")


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", "500m", "1Gi", "12x", "-1", "1e400", "Always", "In", "Exists", "NoSchedule",
                     "kubernetes.io/hostname", "a/b/c", "Foo_Bar", "2024-01-01T00:00:00Z", "2001-02-30",
                     "%", "..", "x" * 300]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10) | st.sampled_from(
        ["metadata", "spec", "name", "labels", "containers", "resources", "requests", "items", "kind"]),
        inner, max_size=4)), max_leaves=20)


@FUZZ
@given(api_kind=st.sampled_from([("v1", "Pod"), ("v1", "Node"), ("v1", "Namespace"), ("apps/v1", "Deployment"),
                                  ("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet"), ("v1", "List"),
                                  ("scheduling.k8s.io/v1", "PriorityClass"), ("policy/v1", "PodDisruptionBudget")]),
       body=st.dictionaries(st.sampled_from(["metadata", "spec", "status", "items", "value", "preemptionPolicy"]),
                            values, max_size=4),
       as_yaml=st.booleans())
def test_random_objects(api_kind: tuple[str, str], body: dict, as_yaml: bool) -> None:
    doc = dict(body, apiVersion=api_kind[0], kind=api_kind[1])
    load_quietly(yaml.safe_dump(doc) if as_yaml else json.dumps(doc))


def _paths(d: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(d, dict):
        for k, v in d.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            out += _paths(v, prefix + (i,))
    return out


def _set(d: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = d
    for seg in path[:-1]:
        parent = parent[seg]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return d


@FUZZ
@given(seed=st.sampled_from(VALID), data=st.data())
def test_mutated_manifests(seed: dict, data: st.DataObject) -> None:
    doc = copy.deepcopy(seed)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = data.draw(st.sampled_from(paths))
        doc = _set(doc, path, data.draw(values), delete=bool(path) and data.draw(st.booleans()))
    load_quietly(json.dumps(doc))
    load_quietly(yaml.safe_dump(doc))


@FUZZ
@given(seed=st.sampled_from(VALID), data=st.data())
def test_mutated_text(seed: dict, data: st.DataObject) -> None:
    text = yaml.safe_dump(seed) if data.draw(st.booleans()) else json.dumps(seed, indent=1)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        junk = data.draw(st.text(alphabet="&*!|>-:{}[],%@`'\"#\n\t ?<=ab0\\", max_size=4) | st.text(max_size=3))
        cut = data.draw(st.integers(0, 3))
        text = text[:i] + junk + text[i + cut:]
    load_quietly(text)


@FUZZ
@given(levels=st.integers(1, 12), fan=st.integers(1, 12), where=st.sampled_from(
    ["annotations", "spec", "labels", "template"]))
def test_alias_structures(levels: int, fan: int, where: str) -> None:
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan)}]" for i in range(1, levels)]
    anchors = "\n".join("    " + line for line in lines)
    text = {"annotations": f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n{anchors}\n"
                           "spec: {containers: [{name: c}]}\n",
            "spec": f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  x:\n{anchors}\n"
                    "  containers: [{name: c}]\n",
            "labels": f"apiVersion: v1\nkind: Node\nmetadata:\n  name: n\n  labels:\n{anchors}\n",
            "template": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: 10000\n"
                        f"  template:\n    metadata:\n      annotations:\n{anchors.replace('    ', '        ')}\n"
                        "    spec: {containers: [{name: c}]}\n"}[where]
    load_quietly(text)
