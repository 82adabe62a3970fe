"""RuntimeClass objects (node.k8s.io/v1) and kube-apiserver's RuntimeClass admission: parsing and
validation with file/document/field errors, the protobuf form and the records carrying it, and
the admission's table (found / not found, overhead filled / equal / refused, nodeSelector merged /
conflicting, tolerations merged), in kube's words."""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Optional

import pytest

from schedmesh.api import convert
from schedmesh.api.load import AdmissionError, ManifestError, load_text
from schedmesh.api.resources import pod_requests
from schedmesh.api.runtime_class import admit_runtime_class, merge_tolerations
from schedmesh.api.types import RuntimeClass, RuntimeClassScheduling, Toleration
from schedmesh.mesh import records
from schedmesh.mesh.applied_store import AppliedStore
from schedmesh.mesh.cluster_cache import ClusterCache

GVISOR = """
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
overhead:
  podFixed: {cpu: 250m, memory: 120Mi}
scheduling:
  nodeSelector: {runtime: gvisor}
  tolerations:
  - {key: sandbox, operator: Exists, effect: NoSchedule}
"""


def pod(spec: str = "", name: str = "web"):
    text = f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: 500m, memory: 64Mi}}}}}}]
{spec}"""
    (p,) = load_text(text).pods
    return p


def rc(name: str = "gvisor", overhead: Optional[dict] = None, selector: Optional[dict] = None,
       tolerations: Optional[list[Toleration]] = None, scheduling: bool = True) -> RuntimeClass:
    return RuntimeClass(name, "runsc", None if overhead is None else {k: Fraction(v) for k, v in overhead.items()},
                        RuntimeClassScheduling(selector or {}, tolerations or []) if scheduling else None)


NO_SCHEDULE_SANDBOX = Toleration("sandbox", "Exists", "", "NoSchedule")


# ---- parsing ---------------------------------------------------------------------------------

def test_a_runtime_class_is_read_with_its_overhead_and_scheduling() -> None:
    (c,) = load_text(GVISOR).runtime_classes
    assert c == RuntimeClass("gvisor", "runsc", {"cpu": Fraction(1, 4), "memory": Fraction(120 * 2**20)},
                             RuntimeClassScheduling({"runtime": "gvisor"}, [NO_SCHEDULE_SANDBOX]))
    (bare,) = load_text("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: runc}\nhandler: runc\n"
                        ).runtime_classes
    assert bare == RuntimeClass("runc", "runc", None, None), "no overhead and no scheduling stay unset (kube's nil)"


@pytest.mark.parametrize("body, path, reason", [
    ("metadata: {name: x}", "handler", "Required value"),
    ("metadata: {name: x}\nhandler: Run_SC", "handler", "Invalid value: \"Run_SC\": a lowercase RFC 1123 label"),
    ("metadata: {name: x}\nhandler: runsc\noverhead: {podFixed: {cpu: 12x}}", "overhead.podFixed.cpu",
     '"12x" is not a quantity'),
    ("metadata: {name: x}\nhandler: runsc\noverhead: {podFixed: {cpu: -1}}", "overhead.podFixed.cpu",
     "-1 must be greater than or equal to 0"),
    ("metadata: {name: x}\nhandler: runsc\nscheduling: {nodeSelector: {'bad key!': a}}", "scheduling.nodeSelector",
     'Invalid value: "bad key!"'),
    ("metadata: {name: x}\nhandler: runsc\nscheduling: {tolerations: [{key: a, operator: Sometimes}]}",
     "scheduling.tolerations[0].operator", "'Sometimes' is not one of Equal, Exists"),
    ("metadata: {name: x}\nhandler: runsc\nscheduling: {tolerations: [{key: a}, {key: b}, {key: a}]}",
     "scheduling.tolerations[2]", "Duplicate value"),
])
def test_invalid_runtime_classes_name_file_document_field_and_reason(body: str, path: str, reason: str) -> None:
    text = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: node.k8s.io/v1\nkind: RuntimeClass\n"
    with pytest.raises(ManifestError) as e:
        load_text(text + body, "classes.yaml")
    assert e.value.where == "classes.yaml: document 2 (RuntimeClass x)"
    assert e.value.path == path and reason in e.value.reason, str(e.value)


def test_a_runtime_class_name_is_checked_like_the_other_cluster_scoped_kinds() -> None:
    doc = "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: Bad_Name}\nhandler: runsc\n"
    with pytest.raises(ManifestError) as e:
        load_text(doc, strict_names=True)
    assert e.value.path == "metadata.name" and "RFC 1123 subdomain" in e.value.reason
    with pytest.raises(ManifestError) as e:
        load_text(doc.replace("Bad_Name", "gvisor") + "---\n" + doc.replace("Bad_Name", "gvisor"))
    assert 'Duplicate value: "gvisor": RuntimeClass gvisor is also defined by' in e.value.reason


# ---- protobuf and records --------------------------------------------------------------------

@pytest.mark.parametrize("c", [
    load_text(GVISOR).runtime_classes[0],
    rc(overhead={}, scheduling=False),  # overhead: {} is not the same as no overhead
    rc(scheduling=False),
    rc(tolerations=[Toleration("t", "Equal", "v", "NoExecute", 30), Toleration(operator="Exists")]),
])
def test_protobuf_round_trip_keeps_unset_apart_from_empty(c: RuntimeClass) -> None:
    assert convert.runtime_class_from_proto(convert.runtime_class_to_proto(c)) == c


def test_runtime_class_records_fill_the_cluster_cache_and_the_applied_store(tmp_path) -> None:
    cache = ClusterCache()
    gvisor = load_text(GVISOR).runtime_classes[0]
    high = load_text("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: gvisor}\nvalue: 5\n"
                     ).priority_classes[0]
    recs = [records.runtime_class_record(gvisor), records.priority_class_record(high)]
    for offset, (topic, _key, value) in enumerate(recs):
        cache.apply(topic, value, offset)
    assert cache.runtime_classes == {"gvisor": gvisor} and cache.priority_classes == {"gvisor": high}, \
        "a RuntimeClass and a PriorityClass of the same name share the topic under different keys"
    store = AppliedStore(tmp_path)
    store.write(recs)
    assert len(store.records()) == 2
    deleted = records.runtime_class_record(gvisor, deleted=True)
    cache.apply(deleted[0], deleted[2], 2)
    store.write([deleted])
    assert cache.runtime_classes == {} and cache.priority_classes == {"gvisor": high}
    assert [k for _t, k, _v in store.records()] == ["gvisor"]


# ---- admission -------------------------------------------------------------------------------

CLASSES = {
    "gvisor": rc(overhead={"cpu": "1/4", "memory": 120 * 2**20}, selector={"runtime": "gvisor"},
                 tolerations=[NO_SCHEDULE_SANDBOX]),
    "plain": rc("plain"),
    "bare": rc("bare", scheduling=False),
    "empty-overhead": rc("empty-overhead", overhead={}, scheduling=False),
}
GVISOR_OVERHEAD = {"cpu": Fraction(1, 4), "memory": Fraction(120 * 2**20)}


@pytest.mark.parametrize("spec, overhead, selector", [
    ("", {}, {}),  # no class: nothing to do
    ("  runtimeClassName: gvisor", GVISOR_OVERHEAD, {"runtime": "gvisor"}),  # overhead filled
    ("  runtimeClassName: gvisor\n  overhead: {cpu: 250m, memory: 120Mi}", GVISOR_OVERHEAD, {"runtime": "gvisor"}),
    # equal as quantities, written otherwise
    ("  runtimeClassName: gvisor\n  overhead: {cpu: '0.25', memory: 125829120}", GVISOR_OVERHEAD,
     {"runtime": "gvisor"}),
    ("  runtimeClassName: gvisor\n  nodeSelector: {runtime: gvisor, disk: ssd}", GVISOR_OVERHEAD,
     {"runtime": "gvisor", "disk": "ssd"}),  # the same key and value: merged
    ("  runtimeClassName: gvisor\n  nodeSelector: {disk: ssd}", GVISOR_OVERHEAD,
     {"disk": "ssd", "runtime": "gvisor"}),
    ("  runtimeClassName: plain", {}, {}),
    ("  runtimeClassName: bare\n  nodeSelector: {disk: ssd}", {}, {"disk": "ssd"}),
])
def test_admitted(spec: str, overhead: dict, selector: dict) -> None:
    p = pod(spec)
    assert admit_runtime_class(p, CLASSES) == []
    assert (p.overhead, p.node_selector) == (overhead, selector)


@pytest.mark.parametrize("spec, path, reason", [
    ("  runtimeClassName: kata", "spec.runtimeClassName", 'pod rejected: RuntimeClass "kata" not found'),
    ("  runtimeClassName: gvisor\n  overhead: {cpu: 100m, memory: 120Mi}", "spec.overhead",
     "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"),
    ("  runtimeClassName: gvisor\n  overhead: {cpu: 250m}", "spec.overhead",
     "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"),
    ("  runtimeClassName: empty-overhead\n  overhead: {cpu: 250m}", "spec.overhead",
     "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"),
    ("  runtimeClassName: plain\n  overhead: {cpu: 250m}", "spec.overhead",
     "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"),
    ("  overhead: {cpu: 250m}", "spec.overhead",
     "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"),
    ("  runtimeClassName: gvisor\n  nodeSelector: {runtime: kata}", "spec.nodeSelector",
     "conflict: runtimeClass.scheduling.nodeSelector[runtime] = gvisor; pod.spec.nodeSelector[runtime] = kata"),
])
def test_refused_in_kube_words(spec: str, path: str, reason: str) -> None:
    with pytest.raises(AdmissionError) as e:
        admit_runtime_class(pod(spec), CLASSES)
    assert str(e.value) == f'Pod default/web: {path}: pods "web" is forbidden: {reason}'


def test_an_unknown_class_is_admitted_as_written_with_a_warning_unless_refused() -> None:
    p = pod("  runtimeClassName: kata\n  overhead: {cpu: 250m}")
    warnings = admit_runtime_class(p, CLASSES, refuse_unknown=False)
    assert p.overhead == {"cpu": Fraction(1, 4)}, "taken as written, as the recorded scenarios carry it"
    assert warnings == ['pod/default/web: spec.runtimeClassName: pod rejected: RuntimeClass "kata" not found '
                        "(a Kubernetes API server refuses the pod; accepted here as written, "
                        "--strict-admission refuses it)"]


T = Toleration


@pytest.mark.parametrize("pod_tolerations, class_tolerations, merged", [
    ([], [NO_SCHEDULE_SANDBOX], [NO_SCHEDULE_SANDBOX]),
    ([T("a", "Equal", "1", "NoSchedule")], [NO_SCHEDULE_SANDBOX],
     [NO_SCHEDULE_SANDBOX, T("a", "Equal", "1", "NoSchedule")]),
    ([NO_SCHEDULE_SANDBOX], [NO_SCHEDULE_SANDBOX], [NO_SCHEDULE_SANDBOX]),  # a duplicate is skipped
    # the same key and effect: the class's wins, whatever the pod's operator or value
    ([T("sandbox", "Equal", "yes", "NoSchedule")], [NO_SCHEDULE_SANDBOX], [NO_SCHEDULE_SANDBOX]),
    # another effect is another toleration
    ([T("sandbox", "Exists", "", "NoExecute", 60)], [NO_SCHEDULE_SANDBOX],
     [NO_SCHEDULE_SANDBOX, T("sandbox", "Exists", "", "NoExecute", 60)]),
    # kube keys the pod's own by key and effect too: the last of two is kept
    ([T("a", "Equal", "1", "NoSchedule"), T("a", "Equal", "2", "NoSchedule")], [],
     [T("a", "Equal", "2", "NoSchedule")]),
])
def test_tolerations_merge_as_kube_merges_them(pod_tolerations, class_tolerations, merged) -> None:
    assert merge_tolerations(pod_tolerations, class_tolerations) == merged


def test_admission_appends_the_class_tolerations_to_the_pod() -> None:
    p = pod("  runtimeClassName: gvisor\n  tolerations: [{key: a, operator: Exists}]")
    admit_runtime_class(p, CLASSES)
    assert p.tolerations == [NO_SCHEDULE_SANDBOX, T("a", "Exists")]
    unscheduled = pod("  runtimeClassName: bare\n  tolerations: [{key: a, value: '1'}, {key: a, value: '2'}]")
    admit_runtime_class(unscheduled, CLASSES)
    assert len(unscheduled.tolerations) == 2, "a class without scheduling merges nothing"


def test_an_update_keeps_the_pods_overhead_and_merges_the_class_again() -> None:
    live = pod("  runtimeClassName: gvisor")
    admit_runtime_class(live, CLASSES)
    changed = dict(CLASSES, gvisor=dataclasses.replace(CLASSES["gvisor"], overhead={"cpu": Fraction(1)}))
    again = pod("  runtimeClassName: gvisor")
    assert admit_runtime_class(again, changed, live=live) == []
    assert again.overhead == live.overhead, "admission does not run on update in kube: the overhead stays"
    assert (again.node_selector, again.tolerations) == (live.node_selector, live.tolerations)
    gone = pod("  runtimeClassName: gvisor")
    assert admit_runtime_class(gone, {}, live=live) == [], "an update of a pod whose class is gone is no refusal"
    assert gone.overhead == live.overhead


def test_the_admitted_overhead_counts_in_the_pods_requests() -> None:
    p = pod("  runtimeClassName: gvisor")
    assert pod_requests(p)["cpu"] == Fraction(1, 2)
    admit_runtime_class(p, CLASSES)
    assert pod_requests(p)["cpu"] == Fraction(3, 4) and pod_requests(p)["memory"] == (64 + 120) * 2**20
