"""Applied objects cross to and from the admission worker pickled: each dataclass of api.types
is rebuilt by its constructor (copyreg), field for field what was sent."""
from __future__ import annotations

import copyreg
import dataclasses
import json
import pickle

from schedmesh.api import types
from schedmesh.api.load import load_text

MANIFEST = {"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
     "spec": {"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80, "hostPort": 8080}],
                              "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}],
              "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}],
              "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                  {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}},
              "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                             "labelSelector": {"matchLabels": {"app": "web"}}}]}},
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "n1", "labels": {"zone": "a"}},
     "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
     "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}},
    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000},
]}


def _same(a, b, path: str = "") -> None:
    assert type(a) is type(b), path
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _same(a[k], b[k], f"{path}[{k!r}]")
    else:
        assert a == b, path


def test_every_dataclass_of_the_types_is_rebuilt_by_its_constructor():
    classes = [c for c in vars(types).values() if isinstance(c, type) and c.__module__ == types.__name__
               and dataclasses.is_dataclass(c)]
    assert types.Pod in classes and types.Node in classes
    assert all(c in copyreg.dispatch_table for c in classes)


def test_a_manifest_round_trips_field_for_field():
    m = load_text(json.dumps(MANIFEST), "m.yaml")
    assert m.pods and m.nodes and m.priority_classes
    back = pickle.loads(pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL))
    _same(m, back)
    assert back.pods[0] is not m.pods[0]
