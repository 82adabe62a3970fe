import pytest

from schedmesh.api.labels import LabelSelector
from schedmesh.api.load import AdmissionError, ManifestError, admit_all, load_text
from schedmesh.api.resources import compute_pod_resource

POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop, labels: {app: web}}
spec:
  containers:
  - name: c
    image: nginx
    resources:
      requests: {cpu: 500m, memory: 1Gi}
      limits: {nvidia.com/gpu: 1}
"""


def test_multi_document_list_and_defaults():
    text = POD + """---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1}
  status: {capacity: {cpu: "4", memory: 8Gi, pods: "110"}}
- apiVersion: scheduling.k8s.io/v1
  kind: PriorityClass
  metadata: {name: high}
  value: 1000
"""
    m = load_text(text, "x.yaml")
    assert [p.key for p in m.pods] == ["shop/web"]
    assert m.nodes[0].allocatable == m.nodes[0].capacity  # allocatable defaults to capacity
    pod = m.pods[0]
    assert "nvidia.com/gpu" in pod.containers[0].requests  # requests default to limits
    r = compute_pod_resource(pod).requests
    assert (r.milli_cpu, r.memory, r.scalar) == (500, 2**30, {"nvidia.com/gpu": 1})
    assert m.priority_classes[0].value == 1000


@pytest.mark.parametrize("patch, path, reason", [
    (("cpu: 500m", "cpu: 12x"), "spec.containers[0].resources.requests.cpu", '"12x" is not a quantity'),
    (("memory: 1Gi", "memory: -1Gi"), "spec.containers[0].resources.requests.memory", "must be greater than or equal to 0"),
    (("name: web,", "nome: web,"), "metadata.name", "is required"),
    (("image: nginx", "image: [nginx]"), "spec.containers[0].image", "expected a string"),
])
def test_errors_name_document_field_and_reason(patch, path, reason):
    with pytest.raises(ManifestError) as e:
        load_text(POD.replace(*patch), "pods.yaml")
    assert e.value.path == path
    assert reason in e.value.reason
    assert str(e.value).startswith("pods.yaml")


def test_list_item_error_names_the_item():
    text = """{"apiVersion": "v1", "kind": "List", "items": [
      {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}},
      {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "12x"}}}]}}]}"""
    with pytest.raises(ManifestError) as e:
        load_text(text, "c.json")
    assert "items[1]" in str(e.value) and "spec.containers[0].resources.requests.cpu" in str(e.value)


def test_unknown_kind_and_bad_yaml():
    with pytest.raises(ManifestError, match="not supported"):
        load_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load_text("a: [1, 2\n")


def test_priority_admission():
    m = load_text(POD.replace("spec:\n", "spec:\n  priorityClassName: high\n") + """---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
preemptionPolicy: Never
""")
    admit_all(m)
    assert (m.pods[0].priority, m.pods[0].preemption_policy) == (1000, "Never")


def test_unknown_priority_class_is_an_error():
    m = load_text(POD.replace("spec:\n", "spec:\n  priorityClassName: nope\n"))
    with pytest.raises(AdmissionError, match="no PriorityClass with name nope was found"):
        admit_all(m)


def test_global_default_and_system_classes():
    m = load_text(POD + """---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: base}
value: 7
globalDefault: true
""" + "---\n" + POD.replace("name: web,", "name: sys,").replace("spec:\n", "spec:\n  priorityClassName: system-node-critical\n"))
    admit_all(m)
    assert [(p.priority, p.priority_class_name) for p in m.pods] == [(7, "base"), (2000001000, "system-node-critical")]


def test_match_label_keys_merged_into_affinity_selector():
    m = load_text("""
apiVersion: v1
kind: Pod
metadata: {name: p, labels: {app: a, rev: "7"}}
spec:
  containers: [{name: c}]
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector: {matchLabels: {app: a}}
        matchLabelKeys: [rev, missing]
""")
    sel = m.pods[0].affinity.pod_anti_affinity.required[0].label_selector
    assert sel.matches({"app": "a", "rev": "7"}) and not sel.matches({"app": "a", "rev": "8"})


def test_deployment_expands_to_pods():
    m = load_text("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, resources: {requests: {cpu: 100m}}}]}
""")
    assert len(m.pods) == 3 and len({p.name for p in m.pods}) == 3
    assert all(p.labels["app"] == "web" and p.meta.owner_references for p in m.pods)


def test_workloads_give_their_pods_controllers_selectors():
    """What PodTopologySpread's default constraints look up by a pod's controller reference: a
    Deployment's ReplicaSet selects by the Deployment's selector plus the pod-template-hash (as
    kube's deployment controller makes it), a ReplicaSet and a StatefulSet by their own."""
    from schedmesh.api.labels import LabelSelectorRequirement
    m = load_text("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
    matchExpressions: [{key: tier, operator: In, values: [front]}]
  template:
    metadata: {labels: {app: web, tier: front}}
    spec: {containers: [{name: c}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: cache}
spec:
  replicas: 1
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec: {containers: [{name: c}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c}]}
""")
    web = m.pods[0]
    h = web.labels["pod-template-hash"]
    owner = web.meta.owner_references[0]
    assert [(w.kind, w.namespace, w.name) for w in m.workloads] == [
        ("ReplicaSet", "shop", f"web-{h}"), ("ReplicaSet", "default", "cache"), ("StatefulSet", "default", "db")]
    assert (owner.kind, owner.name) == ("ReplicaSet", f"web-{h}")
    rs = m.workloads[0].selector
    assert rs.match_labels == (("app", "web"), ("pod-template-hash", h))
    assert rs.match_expressions == (LabelSelectorRequirement("tier", "In", ("front",)),)
    assert m.workloads[1].selector.match_labels == (("app", "cache"),) and not m.workloads[1].selector.match_expressions


def _pod_doc(name: str, labels: dict, spec: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def test_replicas_parse_once_and_equal_a_fresh_parse(monkeypatch):
    """Pods of one spec, status and labels share one parse (api.load._PARSED_PODS): each equals
    the pod a parse of its own gives, and labels, which matchLabelKeys reads, are in the key."""
    import dataclasses
    import json

    from schedmesh.api import load as load_module
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}, "ports": [{"containerPort": 80}]}],
            "hostNetwork": True,
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "a"}},
                 "matchLabelKeys": ["rev"]}]}}}
    docs = [_pod_doc("p0", {"app": "a", "rev": "1"}, spec), _pod_doc("p1", {"app": "a", "rev": "1"}, spec),
            _pod_doc("p2", {"app": "a", "rev": "2"}, spec)]
    monkeypatch.setattr(load_module, "_PARSED_PODS", {})
    parsed = load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})).pods
    assert len(load_module._PARSED_PODS) == 2  # p1 reused p0's parse; p2's labels differ
    assert parsed[1].containers is parsed[0].containers and parsed[2].containers is not parsed[0].containers
    for pod, doc in zip(parsed, docs):
        monkeypatch.setattr(load_module, "_PARSED_PODS", {})
        alone = load_text(json.dumps(doc)).pods[0]
        assert pod.name == doc["metadata"]["name"]
        assert all(getattr(pod, f.name) == getattr(alone, f.name) for f in dataclasses.fields(pod))
    sel = parsed[2].affinity.pod_anti_affinity.required[0].label_selector
    assert sel.matches({"app": "a", "rev": "2"}) and not sel.matches({"app": "a", "rev": "1"})
    assert parsed[0].containers[0].ports[0].host_port == 80  # hostNetwork's defaulting kept in the reused parse


def test_a_reused_parse_never_hides_an_error(monkeypatch):
    """Only documents identical in spec, status and labels share a parse: one that differs, even
    only in an invalid field, is parsed and refused with its own document named."""
    import json

    from schedmesh.api import load as load_module
    monkeypatch.setattr(load_module, "_PARSED_PODS", {})
    good = {"containers": [{"name": "c"}], "preemptionPolicy": "Never"}
    bad = {"containers": [{"name": "c"}], "preemptionPolicy": "Sometimes"}
    items = [_pod_doc("ok", {}, good), _pod_doc("ok2", {}, good), _pod_doc("broken", {}, bad)]
    with pytest.raises(ManifestError) as e:
        load_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), "m.json")
    assert "items[2] (Pod broken)" in str(e.value) and "spec.preemptionPolicy" in str(e.value)


def test_a_service_keeps_only_its_selector():
    """v1 Service: what scheduling reads of it (its selector, for PodTopologySpread's defaults);
    a Service without a selector selects nothing; a selector kube would refuse is refused, named."""
    m = load_text("""
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: ClusterIP
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: external}
spec: {type: ExternalName, externalName: example.com}
""")
    assert [(w.kind, w.namespace, w.name, w.selector) for w in m.workloads] == [
        ("Service", "shop", "web", LabelSelector.of({"app": "web"})), ("Service", "default", "external", None)]
    assert not m.pods
    with pytest.raises(ManifestError) as e:
        load_text("apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {selector: {app: 'a b'}}\n", "svc.yaml")
    assert "svc.yaml" in str(e.value) and "spec.selector" in str(e.value)
