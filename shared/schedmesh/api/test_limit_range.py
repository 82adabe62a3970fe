"""v1 LimitRange and kube-apiserver's LimitRanger admission (plugin/pkg/admission/limitranger,
v1.35): reading (SetDefaults_LimitRangeItem, ValidateLimitRange's refusals), the defaults given
to a pod being created (containers, init containers, the kubernetes.io/limit-ranger annotation),
the validation that refuses it with kube's messages, and the quantities written back as kube
writes them."""
from __future__ import annotations

from fractions import Fraction

import pytest

from schedmesh.api.admission import AdmissionObjects, admit_created_pod
from schedmesh.api.limit_range import LIMIT_RANGER_ANNOTATION, keep_admitted_defaults
from schedmesh.api.load import AdmissionError, ManifestError, load_text
from schedmesh.api.quantity import canonical_quantity


def limit_range(limits: str, namespace: str = "shop", name: str = "limits") -> str:
    return f"""
apiVersion: v1
kind: LimitRange
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  limits:
{limits}
"""


def pod(containers: str, init: str = "", namespace: str = "shop", name: str = "web", extra: str = "") -> str:
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  containers: {containers}
  initContainers: {init or "[]"}
{extra}"""


def admitted(manifest: str):
    m = load_text(manifest, "m.yaml")
    objects = AdmissionObjects(limit_ranges=m.limit_ranges)
    for p in m.pods:
        admit_created_pod(p, objects)
    return m.pods


def refusal(manifest: str) -> AdmissionError:
    m = load_text(manifest, "m.yaml")
    with pytest.raises(AdmissionError) as e:
        admit_created_pod(m.pods[0], AdmissionObjects(limit_ranges=m.limit_ranges))
    return e.value


def q(text: str) -> Fraction:
    return load_text(pod(f"[{{name: c, resources: {{requests: {{x: '{text}'}}}}}}]")).pods[0].containers[0].requests["x"]


# ---------------------------------------------------------------------------------------------
# Defaults
# ---------------------------------------------------------------------------------------------

DEFAULTS = [
    dict(id="cpu and memory defaults and default requests",
         limits="  - {type: Container, default: {cpu: 500m, memory: 256Mi}, defaultRequest: {cpu: 100m, memory: 128Mi}}",
         containers="[{name: app}]",
         requests={"cpu": "100m", "memory": "128Mi"}, limits_={"cpu": "500m", "memory": "256Mi"},
         note="cpu, memory request for container app; cpu, memory limit for container app"),
    dict(id="defaultRequest from default",
         limits="  - {type: Container, default: {cpu: 500m}}",
         containers="[{name: app}]",
         requests={"cpu": "500m"}, limits_={"cpu": "500m"},
         note="cpu request for container app; cpu limit for container app"),
    dict(id="default from max, defaultRequest from it",
         limits="  - {type: Container, max: {memory: 1Gi}}",
         containers="[{name: app}]",
         requests={"memory": "1Gi"}, limits_={"memory": "1Gi"},
         note="memory request for container app; memory limit for container app"),
    dict(id="defaultRequest from min when there is no default",
         limits="  - {type: Container, min: {cpu: 50m}}",
         containers="[{name: app}]",
         requests={"cpu": "50m"}, limits_={},
         note="cpu request for container app"),
    dict(id="a container that sets its own keeps them",
         limits="  - {type: Container, default: {cpu: 500m, memory: 256Mi}, defaultRequest: {cpu: 100m, memory: 128Mi}}",
         containers="[{name: app, resources: {requests: {cpu: 200m}, limits: {memory: 64Mi}}}]",
         # the API server defaulted memory's request from its limit before admission
         requests={"cpu": "200m", "memory": "64Mi"}, limits_={"cpu": "500m", "memory": "64Mi"},
         note="cpu limit for container app"),
    dict(id="a container that sets everything gets no annotation",
         limits="  - {type: Container, default: {cpu: 500m}}",
         containers="[{name: app, resources: {limits: {cpu: 300m}}}]",
         requests={"cpu": "300m"}, limits_={"cpu": "300m"}, note=None),
    dict(id="Pod-type items default nothing",
         limits="  - {type: Pod, max: {cpu: '4'}}",
         containers="[{name: app, resources: {limits: {cpu: '1'}}}]",
         requests={"cpu": "1"}, limits_={"cpu": "1"}, note=None),
]


@pytest.mark.parametrize("case", DEFAULTS, ids=[c["id"] for c in DEFAULTS])
def test_containers_get_the_defaults_they_do_not_set(case) -> None:
    (p,) = admitted(limit_range(case["limits"]) + pod(case["containers"]))
    c = p.containers[0]
    assert c.requests == {k: q(v) for k, v in case["requests"].items()}
    assert c.limits == {k: q(v) for k, v in case["limits_"].items()}
    note = p.meta.annotations.get(LIMIT_RANGER_ANNOTATION)
    assert note == (None if case["note"] is None else "LimitRanger plugin set: " + case["note"])


def test_init_containers_are_defaulted_after_the_containers_in_the_annotation() -> None:
    (p,) = admitted(limit_range("  - {type: Container, default: {cpu: 200m}, defaultRequest: {cpu: 100m}}")
                    + pod("[{name: app}]", init="[{name: migrate}, {name: proxy, restartPolicy: Always}]"))
    assert [c.requests["cpu"] for c in p.init_containers] == [Fraction(1, 10)] * 2
    assert [c.limits["cpu"] for c in p.init_containers] == [Fraction(1, 5)] * 2
    assert p.meta.annotations[LIMIT_RANGER_ANNOTATION] == (
        "LimitRanger plugin set: cpu request for container app; cpu limit for container app; "
        "cpu request for init container migrate; cpu limit for init container migrate; "
        "cpu request for init container proxy; cpu limit for init container proxy")


def test_only_the_pods_namespace_counts_and_the_first_limit_range_by_name_wins() -> None:
    manifest = (limit_range("  - {type: Container, defaultRequest: {cpu: 300m}}", name="b")
                + "---" + limit_range("  - {type: Container, defaultRequest: {cpu: 100m, memory: 64Mi}}", name="a")
                + "---" + limit_range("  - {type: Container, defaultRequest: {cpu: '2'}}", namespace="other")
                + pod("[{name: app}]"))
    (p,) = admitted(manifest)
    assert p.containers[0].requests == {"cpu": Fraction(1, 10), "memory": 64 * 2**20}
    # "b" set nothing more, so the annotation is still the one "a" wrote (kube rewrites it per LimitRange)
    assert p.meta.annotations[LIMIT_RANGER_ANNOTATION] == (
        "LimitRanger plugin set: cpu, memory request for container app")
    (untouched,) = admitted(manifest.replace("namespace: shop}\nspec:\n  containers", "namespace: dev}\nspec:\n  containers"))
    assert untouched.containers[0].requests == {} and LIMIT_RANGER_ANNOTATION not in untouched.meta.annotations


def test_an_update_keeps_what_admission_set_at_creation() -> None:
    """kubectl apply keeps the fields it never wrote: a re-applied manifest is the live pod."""
    (live,) = admitted(limit_range("  - {type: Container, default: {cpu: 500m}, defaultRequest: {cpu: 100m}}")
                       + pod("[{name: app}]"))
    applied = load_text(pod("[{name: app}]")).pods[0]
    keep_admitted_defaults(applied, live)
    assert applied.containers == live.containers
    assert applied.meta.annotations == live.meta.annotations


# ---------------------------------------------------------------------------------------------
# Validation of the pod (after defaulting)
# ---------------------------------------------------------------------------------------------

REFUSALS = [
    dict(id="container max, limit",
         limits="  - {type: Container, max: {cpu: '1'}}",
         containers="[{name: app, resources: {limits: {cpu: '2'}}}]",
         path="spec.containers[0].resources.limits.cpu",
         message="maximum cpu usage per Container is 1, but limit is 2"),
    dict(id="container min, request",
         limits="  - {type: Container, min: {memory: 64Mi}}",
         containers="[{name: app, resources: {requests: {memory: 32Mi}}}]",
         path="spec.containers[0].resources.requests.memory",
         message="minimum memory usage per Container is 64Mi, but request is 32Mi"),
    dict(id="container min, request and limit below it: the request is named",
         limits="  - {type: Container, min: {cpu: 100m}}",
         containers="[{name: app, resources: {requests: {cpu: 50m}, limits: {cpu: 50m}}}]",
         path="spec.containers[0].resources.requests.cpu",
         message="minimum cpu usage per Container is 100m, but request is 50m"),
    dict(id="init container max",
         limits="  - {type: Container, max: {cpu: 500m}}",
         containers="[{name: app, resources: {limits: {cpu: 500m}}}]",
         init="[{name: migrate, resources: {limits: {cpu: 700m}}}]",
         path="spec.initContainers[0].resources.limits.cpu",
         message="maximum cpu usage per Container is 500m, but limit is 700m"),
    dict(id="ratio",
         limits="  - {type: Container, maxLimitRequestRatio: {cpu: '2'}}",
         containers="[{name: app, resources: {requests: {cpu: 100m}, limits: {cpu: 300m}}}]",
         path="spec.containers[0].resources.limits.cpu",
         message="cpu max limit to request ratio per Container is 2, but provided ratio is 3.000000"),
    dict(id="ratio without a limit",
         limits="  - {type: Container, maxLimitRequestRatio: {memory: '2'}}",
         containers="[{name: app, resources: {requests: {memory: 1Gi}}}]",
         path="spec.containers[0].resources.limits.memory",
         message="memory max limit to request ratio per Container is 2, but no limit is specified or limit is 0"),
    dict(id="Pod max over the sum of the containers",
         limits="  - {type: Pod, max: {cpu: '1'}}",
         containers="[{name: a, resources: {limits: {cpu: 600m}}}, {name: b, resources: {limits: {cpu: 600m}}}]",
         path="spec.containers[*].resources.limits.cpu",
         message="maximum cpu usage per Pod is 1, but limit is 1200m"),
    dict(id="Pod max: no container with a limit",
         limits="  - {type: Pod, max: {memory: 1Gi}}",
         containers="[{name: a}, {name: b}]",
         path="spec.containers[*].resources.limits.memory",
         message="maximum memory usage per Pod is 1Gi.  No limit is specified"),
    dict(id="several violations are aggregated, duplicates once",
         limits="  - {type: Container, max: {cpu: '1'}, min: {cpu: 500m}}",
         containers="[{name: a, resources: {limits: {cpu: '2'}}}, {name: b, resources: {limits: {cpu: '2'}}}, "
                    "{name: c, resources: {limits: {cpu: 100m}}}]",
         path="spec.containers[0].resources.limits.cpu",
         message="[maximum cpu usage per Container is 1, but limit is 2, "
                 "minimum cpu usage per Container is 500m, but request is 100m]"),
]


@pytest.mark.parametrize("case", REFUSALS, ids=[c["id"] for c in REFUSALS])
def test_limits_refuse_the_pod_with_kubes_message(case) -> None:
    e = refusal(limit_range(case["limits"]) + pod(case["containers"], init=case.get("init", "")))
    assert (e.where, e.path) == ("Pod shop/web", case["path"])
    assert e.reason == f'pods "web" is forbidden: {case["message"]}'


def test_a_default_limit_below_the_containers_request_makes_the_pod_invalid() -> None:
    e = refusal(limit_range("  - {type: Container, max: {memory: 1Gi}, default: {memory: 512Mi}}")
                + pod("[{name: app, resources: {requests: {memory: 2Gi}}}]"))
    assert e.path == "spec.containers[0].resources.requests"
    assert e.reason == 'Pod "web" is invalid: Invalid value: "2Gi": must be less than or equal to memory limit of 512Mi'


def test_pod_limits_count_init_containers_as_the_scheduler_does() -> None:
    """The largest init container's need, sidecars added to everything after them."""
    lr = limit_range("  - {type: Pod, max: {cpu: '1'}}")
    ok = pod("[{name: app, resources: {limits: {cpu: 500m}}}]", init="[{name: init, resources: {limits: {cpu: '1'}}}]")
    assert admitted(lr + ok)
    e = refusal(lr + pod("[{name: app, resources: {limits: {cpu: 500m}}}]",
                         init="[{name: proxy, restartPolicy: Always, resources: {limits: {cpu: 600m}}}]"))
    assert e.reason == 'pods "web" is forbidden: maximum cpu usage per Pod is 1, but limit is 1100m'


def test_defaults_are_validated_too() -> None:
    """A container that sets nothing gets the defaults, which max and min then accept (SetDefaults
    made the default max, and the default request the default, before min)."""
    (p,) = admitted(limit_range("  - {type: Container, max: {cpu: '1'}, min: {cpu: 100m}}") + pod("[{name: app}]"))
    assert p.containers[0].limits == {"cpu": 1} and p.containers[0].requests == {"cpu": 1}


def test_pod_limits_sum_the_containers_that_set_one() -> None:
    """As kube's podLimits adds each container's list: a container without a limit adds nothing."""
    assert admitted(limit_range("  - {type: Pod, max: {memory: 1Gi}}")
                    + pod("[{name: a, resources: {limits: {memory: 256Mi}}}, {name: b}]"))


# ---------------------------------------------------------------------------------------------
# Reading a LimitRange
# ---------------------------------------------------------------------------------------------

LIMIT_RANGE_REFUSALS = [
    ("  - {type: Container, min: {cpu: '2'}, max: {cpu: '1'}}",
     "spec.limits[0].min[cpu]", 'Invalid value: "2": min value 2 is greater than max value 1'),
    ("  - {type: Container, default: {cpu: 800m}, defaultRequest: {cpu: 900m}}",
     "spec.limits[0].defaultRequest[cpu]",
     'Invalid value: "900m": default request value 900m is greater than default limit value 800m'),
    ("  - {type: Container, max: {memory: 1Gi}, default: {memory: 2Gi}}",
     "spec.limits[0].defaultRequest[memory]",
     'Invalid value: "2Gi": default request value 2Gi is greater than max value 1Gi'),
    ("  - {type: Pod, default: {cpu: '1'}}",
     "spec.limits[0].default", "Forbidden: may not be specified when `type` is 'Pod'"),
    ("  - {type: Container, maxLimitRequestRatio: {cpu: 800m}}",
     "spec.limits[0].maxLimitRequestRatio[cpu]", 'Invalid value: "800m": ratio 800m is less than 1'),
    ("  - {type: Container, max: {memory: 2Gi}, min: {memory: 512Mi}, maxLimitRequestRatio: {memory: '10'}}",
     "spec.limits[0].maxLimitRequestRatio[memory]",
     'Invalid value: "10": ratio 10 is greater than max/min = 4.000000'),
    ("  - {type: Container, default: {nvidia.com/gpu: '2'}, defaultRequest: {nvidia.com/gpu: '1'}}",
     "spec.limits[0].defaultRequest[nvidia.com/gpu]",
     'Invalid value: "1": default value 2 must equal to defaultRequest value 1 in nvidia.com/gpu'),
    ("  - {type: Node, max: {cpu: '1'}}",
     "spec.limits[0].type", 'Invalid value: "Node": must be a standard limit type or fully qualified'),
    ("  - {type: Container}\n  - {type: Container}", "spec.limits[1].type", 'Duplicate value: "Container"'),
    ("  - {type: Container, max: {pods: '1'}}",
     "spec.limits[0].max[pods]", 'Invalid value: "pods": must be a standard resource for containers'),
    ("  - {type: PersistentVolumeClaim}", "spec.limits[0].limits",
     "Required value: either minimum or maximum storage value is required, but neither was provided"),
    ("  - {type: Container, max: {cpu: lots}}", "spec.limits[0].max.cpu", "'lots' is not a quantity"),
    ("  - {max: {cpu: '1'}}", "spec.limits[0].type", "Required value"),
]


@pytest.mark.parametrize("limits, path, reason", LIMIT_RANGE_REFUSALS, ids=[r[2][:50] for r in LIMIT_RANGE_REFUSALS])
def test_a_limit_range_the_api_server_refuses_is_refused_naming_the_field(limits: str, path: str, reason: str) -> None:
    with pytest.raises(ManifestError) as e:
        load_text(limit_range(limits), "m.yaml")
    assert (e.value.where, e.value.path, e.value.reason) == ("m.yaml (LimitRange limits)", path, reason)


def test_a_limit_range_is_read_defaulted_with_its_quantities_as_kube_writes_them() -> None:
    (lr,) = load_text(limit_range(
        "  - {type: Container, max: {cpu: '2', memory: 1024Mi}, defaultRequest: {cpu: 0.25}}\n"
        "  - {type: Pod, max: {cpu: 4000m}}\n"
        "  - {type: PersistentVolumeClaim, max: {storage: 10Gi}}\n"
        "  - {type: example.com/custom, max: {example.com/thing: '1'}}")).limit_ranges
    assert lr.key == "shop/limits"
    container, pod_item, pvc, custom = lr.limits
    assert container.max == {"cpu": "2", "memory": "1Gi"}
    assert container.default == {"cpu": "2", "memory": "1Gi"}
    assert container.default_request == {"cpu": "250m", "memory": "1Gi"}
    assert pod_item.max == {"cpu": "4"} and pod_item.default == {}
    assert pvc.max == {"storage": "10Gi"} and custom.type == "example.com/custom"


def test_a_pvc_item_constrains_no_pod() -> None:
    (p,) = admitted(limit_range("  - {type: PersistentVolumeClaim, max: {storage: 1Gi}}") + pod("[{name: app}]"))
    assert p.containers[0].requests == {} and LIMIT_RANGER_ANNOTATION not in p.meta.annotations


@pytest.mark.parametrize("text, shown", [
    ("1500m", "1500m"), ("0.5", "500m"), ("2000m", "2"), ("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"), ("1000", "1k"),
    ("512", "512"), ("1e3", "1e3"), ("10G", "10G"), ("100Mi", "100Mi"), (2, "2"), ("0.0000000001", "1n"),
])
def test_quantities_are_written_back_as_kube_writes_them(text, shown) -> None:
    assert canonical_quantity(text) == shown


def test_a_refusal_can_name_the_document_a_workloads_pod_came_from() -> None:
    m = load_text(limit_range("  - {type: Container, max: {cpu: '1'}}") + """
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: c, resources: {limits: {cpu: '2'}}}]}
""", "m.yaml")
    (p,) = m.pods
    assert m.pod_source(p) == f"m.yaml: document 2 (Deployment api): Pod shop/{p.name}"
    with pytest.raises(AdmissionError, match="maximum cpu usage per Container is 1, but limit is 2"):
        admit_created_pod(p, AdmissionObjects(limit_ranges=m.limit_ranges))
