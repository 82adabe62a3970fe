"""The kinds beyond the core ones that platform manifests carry: ReplicationControllers and Jobs
expand to the pods their controllers create at once (named, labelled and owned as kube's
controllers make them); DaemonSets are read whole (defaulted, validated; their pods depend on
the nodes); kinds scheduling never reads are accepted and skipped; kinds that would change
scheduling but are not modelled are refused with the reason."""
from __future__ import annotations

import re

import pytest

from schedmesh.api import load
from schedmesh.api.labels import LabelSelector
from schedmesh.api.load import (JOB_COMPLETION_INDEX, JOB_CONTROLLER_UID_LABEL, JOB_NAME_LABEL,
                                LEGACY_JOB_CONTROLLER_UID_LABEL, LEGACY_JOB_NAME_LABEL, ManifestError, load_text,
                                refuse_duplicates_across)

GENERATED = "[bcdfghjklmnpqrstvwxz2456789]{5}"  # the 5 characters kube's name generator draws


def refusal(text: str, source: str = "m.yaml") -> ManifestError:
    with pytest.raises(ManifestError) as e:
        load_text(text, source)
    return e.value


# ---- ReplicationController ----------------------------------------------------------------------

def rc(spec: str, name: str = "web", ns: str = "shop") -> str:
    return f"apiVersion: v1\nkind: ReplicationController\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{spec}"


TEMPLATE = "  template:\n    metadata: {labels: {app: web, tier: front}}\n    spec: {containers: [{name: c}]}\n"


@pytest.mark.parametrize("spec, pods, selector", [
    ("  replicas: 3\n" + TEMPLATE, 3, {"app": "web", "tier": "front"}),
    (TEMPLATE, 1, {"app": "web", "tier": "front"}),
    ("  replicas: 2\n  selector: {app: web}\n" + TEMPLATE, 2, {"app": "web"}),
    ("  replicas: 2\n  selector: {}\n" + TEMPLATE, 2, {"app": "web", "tier": "front"}),
    ("  replicas: 0\n" + TEMPLATE, 0, {"app": "web", "tier": "front"}),
], ids=["replicas", "replicas default to 1", "selector given", "empty selector defaults", "no replica"])
def test_a_replication_controller_expands_like_a_replica_set(spec: str, pods: int, selector: dict) -> None:
    """Its pods are "<rc>-<5 characters>", owned by it (v1, controller); its selector, a plain
    label map that defaults to the template's labels, is kept as a WorkloadSelector of kind
    ReplicationController (what PodTopologySpread's DefaultSelector reads)."""
    m = load_text(rc(spec))
    assert len(m.pods) == pods
    for p in m.pods:
        assert re.fullmatch(f"web-{GENERATED}", p.name), p.name
        assert (p.namespace, p.labels) == ("shop", {"app": "web", "tier": "front"})
        (owner,) = p.meta.owner_references
        assert (owner.api_version, owner.kind, owner.name, owner.controller) == ("v1", "ReplicationController",
                                                                                 "web", True)
    assert len({p.name for p in m.pods}) == pods
    assert [(w.kind, w.namespace, w.name, w.selector) for w in m.workloads] == [
        ("ReplicationController", "shop", "web", LabelSelector.of(selector))]
    assert [p.name for p in load_text(rc(spec)).pods] == [p.name for p in m.pods]  # the same names again


@pytest.mark.parametrize("spec, path, reason", [
    ("  selector: {app: other}\n" + TEMPLATE, "spec.template.metadata.labels",
     "`selector` does not match template `labels`"),
    ("  template: {spec: {containers: [{name: c}]}}\n", "spec.selector", "Required value"),
    ("  replicas: 1\n", "spec.template", "Required value"),
    ("  replicas: -1\n" + TEMPLATE, "spec.replicas", "Invalid value: -1: must be greater than or equal to 0"),
    (TEMPLATE.replace("spec: {", "spec: {restartPolicy: Never, "), "spec.template.spec.restartPolicy",
     'Unsupported value: "Never": supported values: "Always"'),
    (TEMPLATE.replace("{name: c}", "{name: c, resources: {requests: {cpu: 1x}}}"),
     "spec.template.spec.containers[0].resources.requests.cpu", '"1x" is not a quantity'),
    ("  selector: {app: 'a b'}\n" + TEMPLATE, "spec.selector", "Invalid value"),
], ids=["selector does not match", "no selector, no labels", "no template", "negative replicas",
        "restartPolicy Never", "template error", "invalid selector"])
def test_replication_controller_refusals(spec: str, path: str, reason: str) -> None:
    e = refusal(rc(spec))
    assert (e.where, e.path) == ("m.yaml (ReplicationController web)", path)
    assert reason in e.reason


# ---- Job ----------------------------------------------------------------------------------------

def job(spec: str = "", name: str = "work", template_meta: str = "{labels: {app: work}}",
        restart: str = "Never") -> str:
    policy = f"restartPolicy: {restart}, " if restart else ""
    return (f"apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}}}\nspec:\n{spec}"
            f"  template:\n    metadata: {template_meta}\n    spec: {{{policy}containers: [{{name: c}}]}}\n")


@pytest.mark.parametrize("spec, pods", [
    ("", 1),
    ("  parallelism: 3\n", 3),
    ("  completions: 4\n", 1),
    ("  parallelism: 3\n  completions: 2\n", 2),
    ("  parallelism: 2\n  completions: 5\n", 2),
    ("  parallelism: 4\n  completions: 0\n", 0),
    ("  parallelism: 0\n", 0),
    ("  parallelism: 3\n  completions: 5\n  suspend: true\n", 0),
    ("  parallelism: 3\n  suspend: false\n", 3),
    ("  parallelism: 3\n  completions: 2\n  completionMode: Indexed\n", 2),
], ids=["defaults", "parallelism", "completions, parallelism defaulted", "fewer completions",
        "fewer parallel", "no completion", "no parallelism", "suspended", "not suspended", "indexed"])
def test_a_job_expands_to_the_pods_its_controller_creates_at_once(spec: str, pods: int) -> None:
    """manageJob for a new Job: parallelism pods (default 1), no more than completions when they
    are set, none while it is suspended."""
    assert len(load_text(job(spec)).pods) == pods


def test_a_job_s_pods_are_labelled_named_and_owned_as_kube_makes_them() -> None:
    """The Job API's generated labels (name and uid, prefixed and legacy), an owner reference to
    the Job (batch/v1, controller), "<job>-<5 characters>"; its record is of kind Job, which
    PodTopologySpread's sources never read (kube's DefaultSelector ignores Jobs), for its controller."""
    m = load_text(job("  parallelism: 2\n", template_meta="{labels: {app: work}, annotations: {note: x}}"))
    assert len(m.pods) == 2 and [(w.kind, w.name) for w in m.workloads] == [("Job", "work")]
    uid = m.pods[0].meta.owner_references[0].uid
    for p in m.pods:
        assert re.fullmatch(f"work-{GENERATED}", p.name), p.name
        assert p.labels == {"app": "work", JOB_NAME_LABEL: "work", LEGACY_JOB_NAME_LABEL: "work",
                            JOB_CONTROLLER_UID_LABEL: uid, LEGACY_JOB_CONTROLLER_UID_LABEL: uid}
        assert p.meta.annotations == {"note": "x"}
        (owner,) = p.meta.owner_references
        assert (owner.api_version, owner.kind, owner.name, owner.controller, owner.uid) == (
            "batch/v1", "Job", "work", True, uid)
    # the generator is seeded: the same names each time
    assert [p.name for p in load_text(job("  parallelism: 2\n")).pods] == [
        p.name for p in load_text(job("  parallelism: 2\n")).pods]


def test_a_manual_selector_keeps_the_template_s_labels() -> None:
    m = load_text(job("  manualSelector: true\n  selector: {matchLabels: {app: work}}\n"))
    assert m.pods[0].labels == {"app": "work"}


def test_an_indexed_job_s_pods_carry_their_completion_index() -> None:
    """"<job>-<index>-<5 characters>", the index as label and annotation (job controller's
    addCompletionIndexLabel / addCompletionIndexAnnotation), indexes from 0."""
    m = load_text(job("  parallelism: 3\n  completions: 10\n  completionMode: Indexed\n",
                      template_meta="{labels: {app: work}, annotations: {note: x}}"))
    assert len(m.pods) == 3
    for i, p in enumerate(m.pods):
        assert re.fullmatch(f"work-{i}-{GENERATED}", p.name), p.name
        assert p.labels[JOB_COMPLETION_INDEX] == str(i) and p.labels["app"] == "work"
        assert p.meta.annotations == {"note": "x", JOB_COMPLETION_INDEX: str(i)}


def test_a_long_indexed_job_name_is_cut_before_its_index() -> None:
    """podGenerateNameWithIndex: the index survives, the Job's name is cut (58 + 5 characters)."""
    name = "j" * 60
    (p,) = load_text(job("  completions: 1\n  completionMode: Indexed\n", name=name)).pods
    assert re.fullmatch("j" * 55 + f"-0-{GENERATED}", p.name), p.name


@pytest.mark.parametrize("spec, restart, path, reason", [
    ("", "", "spec.template.spec.restartPolicy", 'Required value: valid values: "OnFailure", "Never"'),
    ("", "Always", "spec.template.spec.restartPolicy", 'Required value: valid values: "OnFailure", "Never"'),
    ("", "Sometimes", "spec.template.spec.restartPolicy",
     'Unsupported value: "Sometimes": supported values: "OnFailure", "Never"'),
    ("  podFailurePolicy: {rules: []}\n", "OnFailure", "spec.template.spec.restartPolicy",
     'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is specified'),
    ("  parallelism: -1\n", "Never", "spec.parallelism", "Invalid value: -1: must be greater than or equal to 0"),
    ("  completions: -2\n", "Never", "spec.completions", "Invalid value: -2: must be greater than or equal to 0"),
    ("  completionMode: Indexed\n", "Never", "spec.completions", "Required value: when completion mode is Indexed"),
    ("  completionMode: Sometimes\n", "Never", "spec.completionMode",
     'Unsupported value: "Sometimes": supported values: "NonIndexed", "Indexed"'),
    ("  manualSelector: true\n", "Never", "spec.selector", "Required value"),
    ("  manualSelector: true\n  selector: {matchLabels: {app: other}}\n", "Never",
     "spec.template.metadata.labels", "`selector` does not match template `labels`"),
    ("  selector: {matchLabels: {app: work}}\n", "Never", "spec.selector", "`selector` not auto-generated"),
], ids=["restartPolicy unset", "restartPolicy Always", "restartPolicy unknown", "podFailurePolicy",
        "negative parallelism", "negative completions", "indexed without completions", "unknown completionMode",
        "manual selector missing", "manual selector does not match", "selector given without manualSelector"])
def test_job_refusals_name_the_field(spec: str, restart: str, path: str, reason: str) -> None:
    """kube's batch validation, its messages (after the value, where one is shown)."""
    e = refusal(job(spec, restart=restart))
    assert (e.where, e.path) == ("m.yaml (Job work)", path)
    assert e.reason == reason or e.reason.startswith("Invalid value: ") and e.reason.endswith(f": {reason}")


def test_a_generated_job_label_set_otherwise_is_refused() -> None:
    e = refusal(job(template_meta="{labels: {job-name: other}}"))
    assert (e.path, e.reason) == ("spec.template.metadata.labels[job-name]", "Invalid value: \"other\": must be 'work'")


def test_an_indexed_job_whose_last_hostname_is_no_dns_label_is_refused_with_strict_names() -> None:
    text = job("  completions: 10\n  completionMode: Indexed\n", name="j" * 62)
    assert len(load_text(text).pods) == 1  # leniently accepted, as other names are
    with pytest.raises(ManifestError, match="will not able to create pod with invalid DNS label: j{62}-9"):
        load_text(text, strict_names=True)


def test_a_job_s_template_errors_are_prefixed() -> None:
    e = refusal(job().replace("{name: c}", "{name: c, resources: {requests: {memory: -1Gi}}}"))
    assert e.path == "spec.template.spec.containers[0].resources.requests.memory"


# ---- kinds skipped, kinds refused ---------------------------------------------------------------

@pytest.mark.parametrize("api, kind", sorted(load._SKIPPED), ids=[f"{a} {k}" for a, k in sorted(load._SKIPPED)])
def test_kinds_scheduling_never_reads_are_skipped(api: str, kind: str) -> None:
    """Accepted (namespace defaulted when namespaced), kept only as a named line; no pod, node or
    selector from them."""
    m = load_text(f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: x}}\nsomething: [1, 2]\n")
    (s,) = m.skipped
    group = api.rpartition("/")[0]
    assert s.resource == kind.lower() + (f".{group}" if group else "")
    namespaced = kind not in ("ClusterRole", "ClusterRoleBinding", "IngressClass")
    assert s.namespace == ("default" if namespaced else "")
    assert s.line() == f"{s.resource}/{'default/' if namespaced else ''}x skipped: {s.reason}"
    assert s.reason.startswith("not used for scheduling")
    assert not (m.pods or m.nodes or m.workloads or m.namespaces or m.pdbs)


def test_skipped_lines_say_why() -> None:
    m = load_text("""
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop}
data: {a: b}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: shop}
spec: {schedule: "0 3 * * *", jobTemplate: {spec: {template: {spec: {containers: [{name: c}]}}}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: admins}
""")
    assert [s.line() for s in m.skipped] == [
        "configmap/shop/settings skipped: not used for scheduling",
        "cronjob.batch/shop/nightly skipped: not used for scheduling (its pods appear only when its schedule fires)",
        "clusterrolebinding.rbac.authorization.k8s.io/admins skipped: not used for scheduling"]


@pytest.mark.parametrize("text, path, reason", [
    ("apiVersion: v1\nkind: Secret\nmetadata: {generateName: s-}\n", "metadata.name",
     "Required value: name is required"),
    ("apiVersion: v1\nkind: Secret\n", "metadata.name", "Required value: name is required"),
    ("apiVersion: v1\nkind: Secret\nmetadata: [x]\n", "metadata", "expected an object, got a list"),
    ("apiVersion: v1\nkind: Secret\nmetadata: {name: a/b}\n", "metadata.name", "may not contain '/'"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\n"
     "metadata: {name: c, namespace: default}\n", "metadata.name",
     'Duplicate value: "c": ConfigMap default/c is also defined by m.yaml: document 1 (ConfigMap c)'),
], ids=["generateName only", "no metadata", "metadata not an object", "name with a slash", "duplicate"])
def test_a_skipped_object_still_needs_a_name(text: str, path: str, reason: str) -> None:
    e = refusal(text)
    assert e.path == path and reason in e.reason


def test_skipped_objects_of_two_inputs_are_duplicates_too() -> None:
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    with pytest.raises(ManifestError, match="configmap/default/c is also defined in --cluster"):
        refuse_duplicates_across(load_text(cm), "--cluster a.yaml", load_text(cm), "--pods b.yaml")


@pytest.mark.parametrize("api, kind, why", [
    ("v1", "ResourceQuota", "it refuses pods at admission"),
    ("v1", "PersistentVolumeClaim", "volumes are not modelled"),
    ("v1", "PersistentVolume", "volumes are not modelled"),
    ("storage.k8s.io/v1", "StorageClass", "volumes are not modelled"),
])
def test_kinds_that_change_scheduling_are_refused_with_the_reason(api: str, kind: str, why: str) -> None:
    e = refusal(f"apiVersion: {api}\nkind: {kind}\nmetadata: {{name: x}}\n")
    assert e.path == "kind"
    assert e.reason.startswith(f"{api} {kind} is not supported here and cannot be skipped: ")
    assert why in e.reason


def test_an_unknown_kind_is_refused_listing_what_is_supported_and_what_is_skipped() -> None:
    e = refusal("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    assert e.reason.startswith("example.com/v1 Widget is not supported here (supported: ")
    supported, skipped = e.reason.split("; skipped, as not used for scheduling: ")
    for known in ("v1 Pod", "apps/v1 Deployment", "v1 ReplicationController", "batch/v1 Job", "v1 Service",
                  "apps/v1 DaemonSet"):
        assert known in supported
    for known in ("v1 ConfigMap", "v1 Secret", "rbac.authorization.k8s.io/v1 ClusterRole", "batch/v1 CronJob",
                  "autoscaling/v2 HorizontalPodAutoscaler", "networking.k8s.io/v1 Ingress"):
        assert known in skipped and known not in supported
    # an old version of a skipped kind is not the kind kube 1.35 serves: refused too
    assert "is not supported here (supported" in refusal("apiVersion: batch/v1beta1\nkind: CronJob\n"
                                                         "metadata: {name: c}\n").reason


def test_a_platform_manifest_is_read_whole() -> None:
    """What platform teams apply: the pods come from the workloads, the rest is named and skipped."""
    m = load_text("""
apiVersion: v1
kind: ServiceAccount
metadata: {name: app, namespace: shop}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: shop}
stringData: {password: x}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: app, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: app}
subjects: [{kind: ServiceAccount, name: app}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {serviceAccountName: app, containers: [{name: c}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec: {rules: [{host: shop.example.com}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: shop}
spec:
  template:
    spec: {restartPolicy: OnFailure, containers: [{name: c}]}
""")
    assert len(m.pods) == 3
    assert [w.kind for w in m.workloads] == ["ReplicaSet", "Service", "Job"]
    assert [s.key for s in m.skipped] == ["serviceaccount/shop/app", "secret/shop/creds",
                                          "rolebinding.rbac.authorization.k8s.io/shop/app",
                                          "ingress.networking.k8s.io/shop/web"]


# ---- DaemonSet --------------------------------------------------------------------------------

def daemon_set(spec: str, name: str = "agent", ns: str = "infra", meta: str = "") -> str:
    return f"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: {name}, namespace: {ns}{meta}}}\nspec:\n{spec}"


DS_SELECTOR = "  selector: {matchLabels: {app: agent}}\n"
DS_TEMPLATE = ("  template:\n    metadata: {labels: {app: agent}}\n"
               "    spec: {containers: [{name: c, resources: {limits: {cpu: 200m}}}]}\n")


def test_a_daemon_set_is_read_whole_with_apps_v1_defaults() -> None:
    m = load_text(daemon_set(DS_SELECTOR + DS_TEMPLATE))
    assert m.pods == [] and m.workloads == []  # nothing expanded: its pods depend on the nodes
    (ds,) = m.daemon_sets
    assert (ds.key, ds.update_strategy, ds.max_unavailable, ds.template_generation) == (
        "infra/agent", "RollingUpdate", "1", 1)
    assert ds.meta.uid == load.object_uid("DaemonSet", "infra", "agent")
    assert ds.selector == LabelSelector.of({"app": "agent"})
    assert ds.template.namespace == "infra" and ds.template.labels == {"app": "agent"}
    assert str(ds.template.containers[0].requests["cpu"]) == "1/5"  # requests defaulted from limits
    assert re.fullmatch("[bcdfghjklmnpqrstvwxz2456789]+", ds.template_hash)
    assert load_text(daemon_set(DS_SELECTOR + DS_TEMPLATE)).daemon_sets[0].template_hash == ds.template_hash
    changed = DS_TEMPLATE.replace("200m", "300m")
    assert load_text(daemon_set(DS_SELECTOR + changed)).daemon_sets[0].template_hash != ds.template_hash


@pytest.mark.parametrize("strategy, kind, max_unavailable", [
    ("  updateStrategy: {type: OnDelete}\n", "OnDelete", "1"),
    ("  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 3}}\n", "RollingUpdate", "3"),
    ("  updateStrategy: {rollingUpdate: {maxUnavailable: 25%}}\n", "RollingUpdate", "25%"),
    ("  updateStrategy: {rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}\n", "RollingUpdate", "0"),
])
def test_a_daemon_set_s_update_strategy(strategy: str, kind: str, max_unavailable: str) -> None:
    (ds,) = load_text(daemon_set(DS_SELECTOR + strategy + DS_TEMPLATE)).daemon_sets
    assert (ds.update_strategy, ds.max_unavailable) == (kind, max_unavailable)


def test_the_template_generation_annotation_is_read() -> None:
    meta = ", annotations: {deprecated.daemonset.template.generation: '4'}"
    assert load_text(daemon_set(DS_SELECTOR + DS_TEMPLATE, meta=meta)).daemon_sets[0].template_generation == 4


@pytest.mark.parametrize("spec, path, reason", [
    (DS_TEMPLATE, "spec.selector", "Required value"),
    ("  selector: {}\n" + DS_TEMPLATE, "spec.selector", "empty selector is invalid for daemonset"),
    ("  selector: {matchLabels: {app: other}}\n" + DS_TEMPLATE, "spec.template.metadata.labels",
     "`selector` does not match template `labels`"),
    (DS_SELECTOR + DS_TEMPLATE.replace("spec: {", "spec: {restartPolicy: OnFailure, "),
     "spec.template.spec.restartPolicy", 'Unsupported value: "OnFailure": supported values: "Always"'),
    (DS_SELECTOR + DS_TEMPLATE.replace("spec: {", "spec: {activeDeadlineSeconds: 30, "),
     "spec.template.spec.activeDeadlineSeconds", "activeDeadlineSeconds in DaemonSet is not Supported"),
    (DS_SELECTOR + "  updateStrategy: {type: Recreate}\n" + DS_TEMPLATE, "spec.updateStrategy.type",
     'Unsupported value: "Recreate": supported values: "OnDelete", "RollingUpdate"'),
    (DS_SELECTOR + "  updateStrategy: {rollingUpdate: {maxUnavailable: 0}}\n" + DS_TEMPLATE,
     "spec.updateStrategy.rollingUpdate.maxUnavailable", "may not be 0 when `maxSurge` is 0"),
    (DS_SELECTOR + "  updateStrategy: {rollingUpdate: {maxUnavailable: ten}}\n" + DS_TEMPLATE,
     "spec.updateStrategy.rollingUpdate.maxUnavailable", "a valid percent string must be a numeric string"),
    (DS_SELECTOR + "  updateStrategy: {rollingUpdate: {maxUnavailable: 150%}}\n" + DS_TEMPLATE,
     "spec.updateStrategy.rollingUpdate.maxUnavailable", "must not be greater than 100%"),
    (DS_SELECTOR + "  updateStrategy: {rollingUpdate: {maxSurge: -1}}\n" + DS_TEMPLATE,
     "spec.updateStrategy.rollingUpdate.maxSurge", "must be greater than or equal to 0"),
    (DS_SELECTOR + "  minReadySeconds: -1\n" + DS_TEMPLATE, "spec.minReadySeconds",
     "must be greater than or equal to 0"),
    (DS_SELECTOR + DS_TEMPLATE.replace("{name: c, ", "{name: c, ports: [{containerPort: 0}], "),
     "spec.template.spec.containers[0].ports[0].containerPort", ""),
    (DS_SELECTOR + "  template:\n    metadata: {labels: {app: agent}}\n    spec: {}\n",
     "spec.template.spec.containers", "must have at least one container"),
], ids=["no selector", "empty selector", "selector misses the labels", "restartPolicy", "activeDeadlineSeconds",
        "strategy type", "nothing unavailable", "maxUnavailable not a percent", "over 100%", "negative surge",
        "negative minReadySeconds", "a template field", "no container"])
def test_a_daemon_set_is_refused_naming_the_file_document_and_field(spec: str, path: str, reason: str) -> None:
    e = refusal("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + daemon_set(spec))
    assert e.where == "m.yaml: document 2 (DaemonSet agent)"
    assert e.path == path and reason in e.reason


def test_a_daemon_set_defined_twice_is_refused() -> None:
    e = refusal(daemon_set(DS_SELECTOR + DS_TEMPLATE) + "---\n" + daemon_set(DS_SELECTOR + DS_TEMPLATE))
    assert "DaemonSet infra/agent is also defined by m.yaml: document 1" in e.reason
    with pytest.raises(ManifestError, match="DaemonSet infra/agent is also defined in --cluster"):
        text = daemon_set(DS_SELECTOR + DS_TEMPLATE)
        refuse_duplicates_across(load_text(text), "--cluster a.yaml", load_text(text), "--pods b.yaml")


# ---- what each workload's controller keeps (WorkloadSpec) ---------------------------------------

def test_each_workload_s_record_carries_what_its_controller_keeps() -> None:
    """The record of a workload's controller holds the pods' template as the expansion made them
    (labels with a Deployment's pod-template-hash, the controller reference; no name, no uid), the
    replicas, the names of the pods expanded, and the kind's settings, defaulted as the API
    server defaults them; it survives the trip through protobuf."""
    from schedmesh.api import convert
    from schedmesh.api.types import INDEXED, PARALLEL, REPLACE_FAILED, TERMINATING_OR_FAILED
    m = load_text("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}, annotations: {note: x}}
    spec: {priority: 5, containers: [{name: c, image: nginx}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  replicas: 2
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c}]}
""" + "---\n" + job("  parallelism: 2\n  completions: 3\n  completionMode: Indexed\n  backoffLimit: 2\n")
                  + "---\n" + job("  podFailurePolicy: {rules: []}\n", name="other"))
    rs, ss, indexed, other = m.workloads
    deployment_pods = [p for p in m.pods if p.name.startswith("web-")]
    assert rs.spec.deployment == "web" and rs.name == f"web-{rs.spec.template_hash}"
    assert rs.spec.replicas == 3 and rs.spec.created_pods == tuple(p.name for p in deployment_pods)
    t = rs.spec.template
    assert (t.name, t.uid, t.priority, t.containers[0].image) == (rs.name, "", 5, "nginx")
    assert t.labels == {"app": "web", "pod-template-hash": rs.spec.template_hash} == deployment_pods[0].labels
    assert t.meta.annotations == {"note": "x"}
    assert [(r.kind, r.name, r.uid) for r in t.meta.owner_references] == [
        ("ReplicaSet", rs.name, deployment_pods[0].meta.owner_references[0].uid)]
    assert (ss.kind, ss.spec.pod_management_policy, ss.spec.created_pods) == ("StatefulSet", PARALLEL,
                                                                              ("db-0", "db-1"))
    assert (indexed.spec.replicas, indexed.spec.completions, indexed.spec.backoff_limit,
            indexed.spec.completion_mode, indexed.spec.pod_replacement_policy) == (
        2, 3, 2, INDEXED, TERMINATING_OR_FAILED)
    assert JOB_COMPLETION_INDEX not in indexed.spec.template.labels  # each pod gets its own
    assert (other.spec.backoff_limit, other.spec.completions, other.spec.pod_replacement_policy) == (
        6, None, REPLACE_FAILED)
    for w in m.workloads:
        back = convert.workload_from_proto(type(convert.workload_to_proto(w)).FromString(
            convert.workload_to_proto(w).SerializeToString()))
        assert back == w and back.spec.template.priority == w.spec.template.priority


@pytest.mark.parametrize("text, path, reason", [
    ("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  podManagementPolicy: Burst\n"
     "  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n"
     "    spec: {containers: [{name: c}]}\n", "spec.podManagementPolicy",
     'Unsupported value: "Burst": supported values: "OrderedReady", "Parallel"'),
    (job("  backoffLimit: -1\n"), "spec.backoffLimit", "Invalid value: -1: must be greater than or equal to 0"),
    (job("  podReplacementPolicy: Sometimes\n"), "spec.podReplacementPolicy",
     'Unsupported value: "Sometimes": supported values: "Failed", "TerminatingOrFailed"'),
    (job("  podFailurePolicy: {rules: []}\n  podReplacementPolicy: TerminatingOrFailed\n"),
     "spec.podReplacementPolicy", 'Unsupported value: "TerminatingOrFailed": supported values: "Failed"'),
], ids=["pod management policy", "negative backoff limit", "replacement policy", "replacement with failure policy"])
def test_controller_settings_are_validated(text: str, path: str, reason: str) -> None:
    e = refusal(text)
    assert (e.path, e.reason) == (path, reason)
