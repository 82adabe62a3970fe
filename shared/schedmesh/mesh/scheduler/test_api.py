"""The Scheduler API's Apply, in process against a stand-in queue-manager (a real ClusterCache, a
producer that records what is sent): the manifest is read in a worker thread, or when large in
the admission worker process, never on the event loop, with the same refusals either way; names an API server refuses are accepted with kubectl's
warning by default and refused with --strict-names; kinds scheduling never reads get a "skipped"
line and are never published."""
from __future__ import annotations

import asyncio
import sys
import itertools
import threading
import time
from types import SimpleNamespace

import grpc
import pytest

from schedmesh.api import convert, load
from schedmesh.api.evolve import evolve
from schedmesh.api.load import ManifestError, load_text
from schedmesh.bus.topics import PODS
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import ClusterCache
from schedmesh.mesh.scheduler import admission, api
from schedmesh.mesh.scheduler.state import WriteGate
from schedmesh.v1 import events_pb2, queue_pb2


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, bytes]] = []

    async def send(self, topic: str, value: bytes, key: str = "") -> None:
        self.sent.append((topic, key, value))


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class Context:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def servicer(strict_names: bool = False, worker_min_chars: int = admission.WORKER_MIN_CHARS) -> api.SchedulerServicer:
    versions = itertools.count(1)
    qm = SimpleNamespace(cfg=SimpleNamespace(strict_names=strict_names, strict_admission=False, client_id="qm-test"),
                         cache=ClusterCache(), producer=Producer(), applied_nodes={}, store=None,
                         admission=admission.Admission(worker_min_chars),
                         next_resource_version=lambda: f"qm-test-{next(versions)}",
                         queue_name=lambda pod, pending: "", writes=WriteGate())
    return api.SchedulerServicer(qm)  # type: ignore[arg-type]


def apply(s: api.SchedulerServicer, manifest: str, source: str = "m.yaml") -> queue_pb2.ApplyResponse:
    return asyncio.run(s.Apply(queue_pb2.ApplyRequest(manifest=manifest, source=source), Context()))


def published_pods(s: api.SchedulerServicer) -> list[str]:
    return [rec.pod.metadata.name for topic, _k, v in s.qm.producer.sent if topic == PODS
            for rec in records.expand(events_pb2.PodRecord.FromString(v))]


POD = "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  containers: [{{name: c}}]\n"


def test_the_manifest_is_read_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a slow manifest is read, the event loop goes on (other RPCs, the scheduling loop)."""
    s = servicer()
    seen = {}
    real = admission.load_text

    def slow_load_text(*args, **kwargs):
        seen["thread"] = threading.current_thread()
        try:
            asyncio.get_running_loop()
            seen["loop"] = True
        except RuntimeError:
            seen["loop"] = False
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(admission, "load_text", slow_load_text)

    async def scenario() -> tuple[queue_pb2.ApplyResponse, int]:
        ticks = 0
        task = asyncio.create_task(s.Apply(queue_pb2.ApplyRequest(manifest=POD.format(name="p"), source="m.yaml"),
                                           Context()))
        while not task.done():
            await asyncio.sleep(0.01)
            ticks += 1
        return await task, ticks

    resp, ticks = asyncio.run(scenario())
    assert list(resp.applied) == ["pod/default/p created"]
    assert seen["thread"] is not threading.main_thread() and seen["loop"] is False
    assert ticks >= 10, f"the event loop ran {ticks} times during a 0.5 s read: it was blocked"


@pytest.mark.parametrize("manifest", [
    "kind: Pod\n",
    POD.format(name="p") + "---\n" + POD.format(name="p"),
    '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}",
    "a: " + "[" * 200_000 + "]" * 200_000,
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n  priorityClassName: nope\n",
], ids=["no apiVersion", "duplicate", "deep JSON", "deep YAML", "unknown PriorityClass"])
def test_refusals_are_what_they_were(manifest: str, worker_process: admission.Admission) -> None:
    """INVALID_ARGUMENT with the reader's (or admission's) own message, nothing published; the
    same read in the worker process."""
    with pytest.raises(ManifestError) as direct:
        m = load_text(manifest, "m.yaml")
        load.admit_all(m, [])
    for s in (servicer(), servicer(worker_min_chars=0)):
        if s.qm.admission.worker_min_chars == 0:
            s.qm.admission = worker_process
        with pytest.raises(Aborted) as e:
            apply(s, manifest)
        assert (e.value.code, e.value.details) == (grpc.StatusCode.INVALID_ARGUMENT, str(direct.value))
        assert s.qm.producer.sent == []


@pytest.fixture(scope="module")
def worker_process():
    """One admission worker process for the tests that read in it (each start imports the loader)."""
    a = admission.Admission(worker_min_chars=0)
    yield a
    a.stop()


def test_a_large_manifest_is_read_in_the_worker_process_as_it_is_here(worker_process: admission.Admission) -> None:
    manifest = "---\n".join(POD.format(name=f"p{i}") for i in range(400)) + (
        "---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n")
    assert len(manifest) >= admission.WORKER_MIN_CHARS // 2
    here = admission.admit_manifest(manifest, "m.yaml", False, [])
    there = asyncio.run(worker_process.admit(manifest, "m.yaml", False, []))
    assert len(there[0].pods) == 400 and there[1] == here[1]
    encoded = [[convert.pod_to_proto(p).SerializeToString(deterministic=True) for p in m.pods] for m, _ in (here, there)]
    assert encoded[0] == encoded[1]  # (pods compare by identity)
    assert there[0].pods[0].tolerations == here[0].pods[0].tolerations != []  # admitted there
    assert there[0].priority_classes == here[0].priority_classes
    # the records of a large Apply are encoded there too, byte for byte as here
    assert asyncio.run(worker_process.encode(here[0], "qm")) == records.manifest_records(here[0], source="qm")
    s = servicer(worker_min_chars=0)
    s.qm.admission = worker_process
    assert len(apply(s, manifest).applied) == 401 and len(published_pods(s)) == 400


def _pipe_sizes() -> list[int]:
    """(Run in the worker) the sizes of the pipes it holds."""
    import fcntl
    return [fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) for fd in admission._pipes()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's (F_SETPIPE_SZ)")
def test_the_worker_process_talks_through_pipes_a_large_apply_crosses_in_one_write(
        worker_process: admission.Admission) -> None:
    with open("/proc/sys/fs/pipe-max-size") as f:
        if int(f.read()) < admission.PIPE_BYTES:
            pytest.skip("this machine caps pipes below 1 MiB")
    sizes = asyncio.run(worker_process._in_worker(_pipe_sizes))
    assert sizes and admission.PIPE_BYTES in sizes and 65536 not in sizes, sizes


def test_a_dead_worker_process_is_replaced() -> None:
    a = admission.Admission(worker_min_chars=0)
    try:
        a.start()
        (pid,) = a._worker()._processes  # the one worker, started
        __import__("os").kill(pid, __import__("signal").SIGKILL)
        m, _ = asyncio.run(a.admit(POD.format(name="p"), "m.yaml", False, []))  # read again in a new worker
        assert [p.name for p in m.pods] == ["p"]
        assert a._worker()._processes and pid not in a._worker()._processes
    finally:
        a.stop()


def _die(*_args):
    __import__("os")._exit(9)  # as a worker killed for its memory would


def test_a_manifest_that_kills_the_worker_twice_is_refused_not_read_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read in the queue-manager itself: refused with a clear error, and the next manifest
    is read in a new worker."""
    a = admission.Admission(worker_min_chars=0)
    read_here = []
    monkeypatch.setattr(admission, "admit_manifest", lambda *args: read_here.append(args))
    real_in_worker = a._in_worker

    async def poisoned(fn, *args):
        return await real_in_worker(_die, *args)
    try:
        a._in_worker = poisoned  # type: ignore[method-assign]
        with pytest.raises(ManifestError, match=r"^huge.yaml: could not be read: the process reading it died twice"):
            asyncio.run(a.admit(POD.format(name="p"), "huge.yaml", False, []))
        assert read_here == []
        a._in_worker = real_in_worker  # type: ignore[method-assign]
        monkeypatch.undo()
        m, _ = asyncio.run(a.admit(POD.format(name="q"), "m.yaml", False, []))
        assert [p.name for p in m.pods] == ["q"]
    finally:
        a.stop()


def test_other_errors_still_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(admission, "load_text", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        apply(servicer(), POD.format(name="p"))


# A Deployment's pod named by kube's rules is fine; these names break them (an uppercase letter,
# an underscore: recorded scenarios use such names).
LENIENT = POD.format(name="p0-fields_missing") + "---\n" + """apiVersion: v1
kind: Node
metadata: {name: Node_A}
status: {allocatable: {cpu: "1"}}
"""


def test_names_an_api_server_refuses_are_created_with_kubectls_warning_by_default() -> None:
    s = servicer()
    resp = apply(s, LENIENT)
    assert list(resp.applied) == ["node/Node_A created", "pod/default/p0-fields_missing created"]
    assert published_pods(s) == ["p0-fields_missing"]
    pod_warning, node_warning = sorted(resp.warnings, key=lambda w: not w.startswith("pod/"))
    # the object, the field, the rule, and what happened
    assert pod_warning.startswith("pod/default/p0-fields_missing: metadata.name: Invalid value: "
                                  '"p0-fields_missing": a lowercase RFC 1123 subdomain must consist of')
    assert node_warning.startswith('node/Node_A: metadata.name: Invalid value: "Node_A": a lowercase RFC 1123 '
                                   "subdomain")
    for w in (pod_warning, node_warning):
        assert "regex used for validation is" in w
        assert w.endswith("(a Kubernetes API server refuses it; accepted here, --strict-names refuses it)")


def test_strict_names_refuse_them_and_apply_nothing() -> None:
    s = servicer(strict_names=True)
    with pytest.raises(Aborted) as e:
        apply(s, LENIENT)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "metadata.name" in e.value.details and "p0-fields_missing" in e.value.details
    assert s.qm.producer.sent == []


def test_a_valid_manifest_has_no_warning() -> None:
    resp = apply(servicer(), POD.format(name="web-0"))
    assert list(resp.applied) == ["pod/default/web-0 created"] and list(resp.warnings) == []



def test_the_worker_process_ends_with_a_killed_queue_manager(tmp_path) -> None:
    """SIGKILL leaves no reader behind: the worker sees its parent gone and exits."""
    import os
    import signal
    import subprocess
    import sys
    owner = subprocess.Popen([sys.executable, "-c", (
        "import time\nfrom schedmesh.mesh.scheduler.admission import Admission\n"
        "a = Admission(worker_min_chars=0)\na.start()\n"
        "while not a._worker()._processes: time.sleep(0.05)\n"
        "print(*a._worker()._processes, flush=True)\ntime.sleep(60)\n")], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        worker = int(owner.stdout.readline())
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the admission worker outlived its killed parent by 10 s")
    finally:
        owner.kill()


PLATFORM = """
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop}
data: {a: b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules: []
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: shop}
spec: {schedule: "0 3 * * *", jobTemplate: {spec: {template: {spec: {containers: [{name: c}]}}}}}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: legacy, namespace: shop}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: legacy}}
    spec: {containers: [{name: c}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: shop}
spec:
  template:
    spec: {restartPolicy: Never, containers: [{name: c}]}
"""


@pytest.mark.parametrize("in_worker", [False, True], ids=["read here", "read in the worker process"])
def test_skipped_kinds_get_a_line_and_are_never_published(in_worker: bool, worker_process) -> None:
    """A platform's manifest applies whole: the RC's and the Job's pods are created, their
    records published for their controllers (with kubectl's line for each), and the ConfigMap,
    ClusterRole and CronJob each get kubectl's kind of line, "skipped", and nothing else."""
    s = servicer()
    if in_worker:
        s.qm.admission = worker_process
    resp = apply(s, PLATFORM)
    lines = list(resp.applied)
    assert lines[:2] == ["replicationcontroller/shop/legacy created", "job.batch/shop/migrate created"]
    pods = [line for line in lines if line.startswith("pod/")]
    assert lines[2:2 + len(pods)] == pods
    assert len(pods) == 3 and all(line.endswith(" created") for line in pods)
    assert sum(line.startswith("pod/shop/legacy-") for line in pods) == 2
    assert sum(line.startswith("pod/shop/migrate-") for line in pods) == 1
    skipped = lines[2 + len(pods):]
    assert skipped == [
        "configmap/shop/settings skipped: not used for scheduling",
        "clusterrole.rbac.authorization.k8s.io/reader skipped: not used for scheduling",
        "cronjob.batch/shop/nightly skipped: not used for scheduling (its pods appear only when its schedule fires)"]
    assert len(published_pods(s)) == 3
    keys = [k for _t, k, _v in s.qm.producer.sent]
    assert "workload/ReplicationController/shop/legacy" in keys and "workload/Job/shop/migrate" in keys
    assert not any(name in k for k in keys for name in ("settings", "reader", "nightly"))
    # the skipped objects alone, applied again: skipped again, nothing published
    s.qm.producer.sent.clear()
    assert list(apply(s, "---".join(PLATFORM.split("---")[:3])).applied) == skipped
    assert s.qm.producer.sent == []


DAEMON_SET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: infra}}
spec:
  selector: {{matchLabels: {selector}}}
  template:
    metadata: {{labels: {{app: agent, tier: node}}}}
    spec: {{containers: [{{name: c, image: "agent:{version}"}}]}}
"""


def sent_daemon_sets(s: api.SchedulerServicer) -> list[tuple[events_pb2.PodDisruptionBudgetRecord, str]]:
    out = []
    for topic, key, value in s.qm.producer.sent:
        rec = events_pb2.PodDisruptionBudgetRecord.FromString(value) if topic == records.TOPIC_PDBS else None
        if rec is not None and rec.HasField("daemon_set"):
            out.append((rec, key))
    return out


def read_back(s: api.SchedulerServicer) -> None:
    """What the broker would return to the queue-manager's cache."""
    for offset, (topic, _key, value) in enumerate(s.qm.producer.sent):
        s.qm.cache.apply(topic, value, offset)
    s.qm.producer.sent.clear()


def test_a_daemon_set_is_created_configured_unchanged_and_deleted() -> None:
    """kubectl's lines; no pod is published (the controller-manager makes them); the template's
    generation goes up with each template change, as the API server's templateGeneration does;
    the selector is immutable."""
    s = servicer()
    first = DAEMON_SET.format(selector="{app: agent}", version="1")
    assert list(apply(s, first).applied) == ["daemonset.apps/infra/agent created"]
    ((rec, key),) = sent_daemon_sets(s)
    assert key == "daemonset/infra/agent" and not rec.deleted and rec.daemon_set.template_generation == 1
    assert published_pods(s) == []
    read_back(s)
    assert list(apply(s, first).applied) == ["daemonset.apps/infra/agent unchanged"]
    assert s.qm.producer.sent == []
    assert list(apply(s, DAEMON_SET.format(selector="{app: agent}", version="2")).applied) == [
        "daemonset.apps/infra/agent configured"]
    ((rec, _),) = sent_daemon_sets(s)
    assert rec.daemon_set.template_generation == 2
    read_back(s)
    with pytest.raises(Aborted) as e:
        apply(s, DAEMON_SET.format(selector="{app: agent, tier: node}", version="2"))
    assert 'DaemonSet.apps "agent" is invalid: spec.selector: Invalid value: "app=agent,tier=node": field is ' \
           'immutable' in e.value.details
    gone = asyncio.run(s.Delete(queue_pb2.DeleteRequest(kind="daemonset", namespace="infra", name="agent"), Context()))
    assert gone.result == 'daemonset.apps "agent" deleted'
    ((rec, _),) = sent_daemon_sets(s)
    assert rec.deleted
    with pytest.raises(Aborted) as e:
        asyncio.run(s.Delete(queue_pb2.DeleteRequest(kind="ds", namespace="infra", name="agent"), Context()))
    assert e.value.code == grpc.StatusCode.NOT_FOUND


LIMIT_RANGE = """
apiVersion: v1
kind: LimitRange
metadata: {{name: defaults, namespace: shop}}
spec:
  limits:
  - {{type: Container, max: {{cpu: "{max}"}}, defaultRequest: {{cpu: 100m}}}}
"""
SHOP_POD = """
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: shop}}
spec:
  containers: [{{name: app{resources}}}]
"""


def sent_limit_ranges(s: api.SchedulerServicer) -> list[tuple[events_pb2.PodDisruptionBudgetRecord, str]]:
    return [(rec, key) for topic, key, value in s.qm.producer.sent if topic == records.TOPIC_PDBS
            for rec in [events_pb2.PodDisruptionBudgetRecord.FromString(value)] if rec.HasField("limit_range")]


def published(s: api.SchedulerServicer) -> dict:
    return {rec.pod.metadata.name: convert.pod_from_proto(rec.pod) for topic, _k, v in s.qm.producer.sent
            if topic == PODS for rec in records.expand(events_pb2.PodRecord.FromString(v))}


def test_a_limit_range_defaults_the_pods_of_its_apply_and_of_later_ones() -> None:
    """Applied beside pods (even after them in the file), it defaults them; kept by the cache, it
    defaults the pods of the next Apply; kubectl's lines; re-applying is unchanged, pods included."""
    s = servicer()
    manifest = SHOP_POD.format(name="web", resources="") + "---" + LIMIT_RANGE.format(max="1")
    assert list(apply(s, manifest).applied) == ["limitrange/shop/defaults created", "pod/shop/web created"]
    ((rec, key),) = sent_limit_ranges(s)
    assert key == "limitrange/shop/defaults" and rec.limit_range.limits[0].default["cpu"] == "1"
    web = published(s)["web"]
    assert web.containers[0].requests["cpu"] * 1000 == 100 and web.containers[0].limits["cpu"] == 1
    assert web.meta.annotations["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu request for container app; cpu limit for container app")
    read_back(s)
    assert list(apply(s, manifest).applied) == ["limitrange/shop/defaults unchanged", "pod/shop/web unchanged"]
    apply(s, SHOP_POD.format(name="api", resources=""))
    assert published(s)["api"].containers[0].limits["cpu"] == 1
    read_back(s)
    assert list(apply(s, LIMIT_RANGE.format(max="2")).applied) == ["limitrange/shop/defaults configured"]


def test_a_pod_over_the_limit_refuses_the_apply_naming_file_document_and_pod() -> None:
    s = servicer()
    manifest = LIMIT_RANGE.format(max="1") + SHOP_POD.format(name="big", resources=", resources: {limits: {cpu: '2'}}")
    with pytest.raises(Aborted) as e:
        apply(s, manifest)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details == (
        "m.yaml: document 2 (Pod big): Pod shop/big: spec.containers[0].resources.limits.cpu: pods \"big\" is "
        "forbidden: maximum cpu usage per Container is 1, but limit is 2\n(nothing was applied)")
    assert s.qm.producer.sent == []


def test_a_deleted_limit_range_defaults_no_more_pods() -> None:
    s = servicer()
    apply(s, LIMIT_RANGE.format(max="1"))
    read_back(s)
    gone = asyncio.run(s.Delete(queue_pb2.DeleteRequest(kind="limitrange", namespace="shop", name="defaults"),
                                Context()))
    assert gone.result == 'limitrange "defaults" deleted'
    ((rec, _),) = sent_limit_ranges(s)
    assert rec.deleted
    read_back(s)
    apply(s, SHOP_POD.format(name="free", resources=""))
    assert published(s)["free"].containers[0].limits == {}
    with pytest.raises(Aborted) as e:
        asyncio.run(s.Delete(queue_pb2.DeleteRequest(kind="limits", namespace="shop", name="defaults"), Context()))
    assert e.value.code == grpc.StatusCode.NOT_FOUND


WEB = """
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: shop}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: c, image: "nginx:{version}"}}]}}
"""


def sent_workloads(s: api.SchedulerServicer) -> list[events_pb2.PodDisruptionBudgetRecord]:
    return [rec for topic, _key, value in s.qm.producer.sent if topic == records.TOPIC_PDBS
            for rec in [events_pb2.PodDisruptionBudgetRecord.FromString(value)] if rec.HasField("workload")]


def test_a_workload_s_pods_are_made_by_its_first_apply_then_by_its_controller() -> None:
    """The first Apply makes the pods (its record names them, for the controller to await); an
    Apply of a workload that exists makes none: with more replicas the record says so and the
    controller makes the new pods, with the pods it replaced missing from the manifest's names
    nothing is made twice. A template change makes a new ReplicaSet and scales the old one to 0."""
    s = servicer()
    first = apply(s, WEB.format(replicas=2, version="1"))
    pods = [line.split()[0] for line in first.applied if line.startswith("pod/")]
    assert list(first.applied) == ["deployment.apps/shop/web created"] + [f"{p} created" for p in pods]
    (rec,) = sent_workloads(s)
    assert list(rec.workload.spec.created_pods) == [p.split("/")[-1] for p in pods] and rec.workload.spec.created_at
    created_at = rec.workload.spec.created_at
    read_back(s)
    # one of its pods was replaced by the controller: re-applying makes no pod and changes nothing
    (gone, kept) = (s.qm.cache.get_pod("shop", p.split("/")[-1]) for p in pods)
    s.qm.cache.apply(records.TOPIC_PODS, records.pod_record(gone, deleted=True)[2], 1000)
    again = apply(s, WEB.format(replicas=2, version="1"))
    assert list(again.applied) == ["deployment.apps/shop/web unchanged", f"pod/shop/{kept.name} unchanged"]
    assert s.qm.producer.sent == []
    # more replicas: the record says so, no pod is published (the controller makes them)
    assert list(apply(s, WEB.format(replicas=5, version="1")).applied) == [
        "deployment.apps/shop/web configured", f"pod/shop/{kept.name} unchanged"]
    (rec,) = sent_workloads(s)
    assert (rec.workload.spec.replicas, rec.workload.spec.created_at) == (5, created_at) and published_pods(s) == []
    read_back(s)
    # a template change: a new ReplicaSet with its pods, the old one scaled to 0
    lines = list(apply(s, WEB.format(replicas=2, version="2")).applied)
    assert lines[0] == "deployment.apps/shop/web configured" and len(published_pods(s)) == 2
    new, old = sent_workloads(s)
    assert (old.workload.name, old.workload.spec.replicas) == (rec.workload.name, 0)
    assert new.workload.name != old.workload.name and new.workload.spec.replicas == 2
    read_back(s)
    # deleting the Deployment deletes both ReplicaSets' records and every pod they own
    gone = asyncio.run(s.Delete(queue_pb2.DeleteRequest(kind="deployment", namespace="shop", name="web"), Context()))
    assert gone.result == 'deployment.apps "web" deleted'
    assert sorted((r.deleted, r.workload.name) for r in sent_workloads(s)) == sorted(
        [(True, new.workload.name), (True, old.workload.name)])
    assert len(published_pods(s)) == 3  # the first ReplicaSet's one left and the new one's two
    assert not any(w.kind == "ReplicaSet" for w in s.qm.cache.workloads.values())  # forgotten here at once
    with pytest.raises(Aborted) as e:
        asyncio.run(s.Delete(queue_pb2.DeleteRequest(kind="deploy", namespace="shop", name="web"), Context()))
    assert (e.value.code, e.value.details) == (grpc.StatusCode.NOT_FOUND,
                                               'deployments.apps "web" not found in namespace shop')


def test_other_workload_kinds_are_deleted_by_their_kubectl_names() -> None:
    s = servicer()
    apply(s, PLATFORM)
    read_back(s)
    for kind, name, line in [("rc", "legacy", 'replicationcontroller "legacy" deleted'),
                             ("jobs", "migrate", 'job.batch "migrate" deleted')]:
        assert asyncio.run(s.Delete(queue_pb2.DeleteRequest(kind=kind, namespace="shop", name=name),
                                    Context())).result == line
    assert len(published_pods(s)) == 3 and not [w for w in s.qm.cache.workloads.values() if w.spec is not None]


def _a_step_behind(*later) -> tuple[api.SchedulerServicer, ClusterCache]:
    """A pod "web" applied and bound, as the queue-manager knows it, and another reader that has
    also read its kubelet's Running report and `later`'s records, which the queue-manager has not."""
    s = servicer()
    apply(s, POD.format(name="web"))
    applied = list(s.qm.producer.sent)
    read_back(s)
    pod = s.qm.cache.get_pod("default", "web")
    bound = records.pod_batch_record([records.binding_update(pod, "node-1")])
    s.qm.cache.apply(*bound[::2], 100)
    running = records.pod_batch_record([records.status_update(evolve(s.qm.cache.get_pod("default", "web"),
                                                                     phase="Running"))])
    reader = ClusterCache()
    for offset, (topic, _key, value) in enumerate([*applied, bound, running, *(f(pod) for f in later)]):
        reader.apply(topic, value, offset)
    return s, reader


def test_a_bound_pods_deletion_is_a_delta_that_keeps_what_its_kubelet_reported() -> None:
    """The queue-manager's copy may be behind the pods topic (its kubelet's Running report not
    read yet): the deletion request must not carry that copy back to every reader."""
    s, topic_reader = _a_step_behind()
    assert asyncio.run(s.Delete(queue_pb2.DeleteRequest(kind="pod", namespace="default", name="web"),
                                Context())).result == 'pod "web" deleted'
    (topic, _key, value), = s.qm.producer.sent
    assert all(r.HasField("update") for r in records.expand(events_pb2.PodRecord.FromString(value)))
    topic_reader.apply(topic, value, 200)
    p = topic_reader.get_pod("default", "web")
    assert p.meta.deletion_timestamp is not None and p.phase == "Running" and p.node_name == "node-1"


def test_a_pods_update_keeps_what_its_readers_know_of_its_binding_and_status() -> None:
    """kubectl apply of a label change, planned on the queue-manager's copy before it read the
    kubelet's Running report and a deletion request: a reader that has read them keeps them and
    takes the new labels (the API server's status subresource; a whole copy undid them)."""
    s, topic_reader = _a_step_behind(lambda pod: records.pod_batch_record([records.deletion_update(pod, 50.0)]))
    relabelled = POD.format(name="web").replace("namespace: default}", "namespace: default, labels: {tier: front}}")
    assert list(apply(s, relabelled).applied) == ["pod/default/web configured"]
    for offset, (topic, _key, value) in enumerate(s.qm.producer.sent, start=200):
        topic_reader.apply(topic, value, offset)
    p = topic_reader.get_pod("default", "web")
    assert p.meta.labels == {"tier": "front"}
    assert (p.node_name, p.phase, p.meta.deletion_timestamp) == ("node-1", "Running", 50.0)


def test_a_pod_applied_again_after_its_deletion_is_created_under_a_new_uid() -> None:
    """kube's API server gives every pod it creates a new uid. A pod applied without one gets a uid
    from its name (the same at each apply, so re-applying finds it); applied again after that pod
    was deleted, it is a new pod with the next uid of its name, not the deleted one's (which the
    binder refused for good). A uid the manifest names is kept."""
    from schedmesh.mesh.cluster_cache import REMEMBERED_DELETIONS
    s = servicer()
    s.qm.cache.remember_deletions = REMEMBERED_DELETIONS  # as the queue-manager's cache does
    def read_back() -> None:  # what was published, read back by the cache as from the broker
        for offset, (topic, _key, value) in enumerate(s.qm.producer.sent):
            s.qm.cache.apply(topic, value, offset)
        s.qm.producer.sent.clear()

    assert apply(s, POD.format(name="web")).applied == ["pod/default/web created"]
    read_back()
    first = s.qm.cache.pods[load.object_uid("Pod", "default", "web")]
    assert apply(s, POD.format(name="web")).applied == ["pod/default/web unchanged"]
    s.qm.cache.apply(PODS, records.pod_record(first, deleted=True)[2], 1000)
    assert apply(s, POD.format(name="web")).applied == ["pod/default/web created"]
    read_back()
    (second,) = s.qm.cache.pods.values()
    assert second.uid not in (first.uid, "") and second.name == "web"
    assert apply(s, POD.format(name="web")).applied == ["pod/default/web unchanged"]
    s.qm.cache.apply(PODS, records.pod_record(second, deleted=True)[2], 1001)
    assert apply(s, POD.format(name="web")).applied == ["pod/default/web created"]
    read_back()
    (third,) = s.qm.cache.pods.values()
    assert third.uid not in (first.uid, second.uid)

    named = POD.format(name="rec").replace("namespace: default}", "namespace: default, uid: u-rec}")
    apply(s, named)
    read_back()
    s.qm.cache.apply(PODS, records.pod_record(s.qm.cache.pods["u-rec"], deleted=True)[2], 1002)
    apply(s, named)
    read_back()
    assert "u-rec" in s.qm.cache.pods


def test_get_events_keeps_a_deleted_pods_events() -> None:
    """An evicted pod's TaintManagerEviction event is listed after the pod is gone (kube keeps
    events an hour), in time order, and only in its namespace."""
    s = servicer()
    notes = {"uid-gone": SimpleNamespace(events=[
                 events_pb2.Event(pod_uid="uid-gone", pod="default/web-0", reason="Scheduled", timestamp=1.0),
                 events_pb2.Event(pod_uid="uid-gone", pod="default/web-0", reason="TaintManagerEviction",
                                  message="Marking for deletion Pod default/web-0", timestamp=3.0)]),
             "uid-other": SimpleNamespace(events=[
                 events_pb2.Event(pod_uid="uid-other", pod="team/db-0", reason="Scheduled", timestamp=2.0)])}
    s.qm.notes, s.qm._notes_lock = notes, threading.Lock()
    listed = asyncio.run(s.ListEvents(queue_pb2.EventsRequest(), Context())).events
    assert [(e.pod, e.reason) for e in listed] == [
        ("default/web-0", "Scheduled"), ("team/db-0", "Scheduled"), ("default/web-0", "TaintManagerEviction")]
    listed = asyncio.run(s.ListEvents(queue_pb2.EventsRequest(namespace="team"), Context())).events
    assert [e.pod for e in listed] == ["team/db-0"]
    # More than one message may carry: refused, saying what to ask instead, never cut short.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "MAX_MESSAGE_BYTES", 100)
        with pytest.raises(Aborted) as e:
            asyncio.run(s.ListEvents(queue_pb2.EventsRequest(), Context()))
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "one namespace's" in e.value.details
    assert "ask for pages (EventsRequest.limit" in e.value.details


def _eventful() -> api.SchedulerServicer:
    """A stand-in queue-manager keeping events of three pods, some at the same time: two of web-0's
    at 2.0 (kept in the order they came), one of each pod at 2.0, and web-1's out of time order."""
    def notes(uid: str, pod: str, *events: tuple[str, float]) -> SimpleNamespace:
        return SimpleNamespace(events=[events_pb2.Event(pod_uid=uid, pod=pod, reason=reason, timestamp=timestamp)
                                       for reason, timestamp in events])
    s = servicer()
    s.qm.notes = {"u-a": notes("u-a", "default/web-0", ("a1", 1.0), ("a2", 2.0), ("a2-again", 2.0), ("a5", 5.0)),
                  "u-c": notes("u-c", "default/web-1", ("c4", 4.0), ("c2", 2.0)),
                  "u-b": notes("u-b", "team/db-0", ("b2", 2.0), ("b3", 3.0))}
    s.qm._notes_lock = threading.Lock()
    return s


def _event_pages(s: api.SchedulerServicer, limit: int, namespace: str = "", between_pages=None) -> list[list[str]]:
    """The reasons of each page of events, walking the continue_tokens; `between_pages()` is called
    after each page but the last."""
    request, pages = queue_pb2.EventsRequest(namespace=namespace, limit=limit), []
    while True:
        page = asyncio.run(s.ListEvents(request, Context()))
        pages.append([e.reason for e in page.events])
        if not page.continue_token:
            return pages
        if between_pages is not None:
            between_pages()
        request.continue_token = page.continue_token


ALL_EVENTS = ["a1", "a2", "a2-again", "b2", "c2", "b3", "c4", "a5"]  # by time, pod uid, order in the pod


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_events_are_listed_in_pages_each_once_in_the_order_of_the_whole_list(limit: int) -> None:
    s = _eventful()
    assert _event_pages(s, 0) == [ALL_EVENTS]
    pages = _event_pages(s, limit)
    assert [reason for page in pages for reason in page] == ALL_EVENTS
    assert [len(page) for page in pages] == [limit] * (len(pages) - 1) + [len(pages[-1])] and pages[-1]


def test_an_events_page_token_still_works_after_events_come_between_pages() -> None:
    """An event added after the token's place is listed on a later page, one before it is not
    (no snapshot is kept), and none twice; nor does a token need its pod's events still kept."""
    s = _eventful()
    notes = s.qm.notes

    def after_the_first_page() -> None:  # web-0's third event at 2.0: after the token, its second
        notes["u-a"].events.append(events_pb2.Event(pod_uid="u-a", pod="default/web-0", reason="a2-late", timestamp=2.0))

    def after_the_second_page() -> None:  # an event of earlier, and web-0's notes pruned (the token is its a2-late)
        notes["u-b"].events.append(events_pb2.Event(pod_uid="u-b", pod="team/db-0", reason="b0-late", timestamp=0.5))
        del notes["u-a"]
    gaps = iter([after_the_first_page, after_the_second_page, lambda: None])
    pages = _event_pages(s, 2, between_pages=lambda: next(gaps)())
    assert pages == [["a1", "a2"], ["a2-again", "a2-late"], ["b2", "c2"], ["b3", "c4"]]


def test_one_namespaces_events_are_listed_in_pages() -> None:
    s = _eventful()
    assert _event_pages(s, 2, namespace="default") == [["a1", "a2"], ["a2-again", "c2"], ["c4", "a5"]]
    assert _event_pages(s, 1, namespace="team") == [["b2"], ["b3"]]
    assert _event_pages(s, 1, namespace="none") == [[]]


def test_the_client_lists_events_page_by_page() -> None:
    from schedmesh.local import client as local_client
    s = _eventful()
    c = local_client.Client.__new__(local_client.Client)
    asked = []
    def call(method: str, request: queue_pb2.EventsRequest) -> queue_pb2.EventList:
        asked.append((method, request.namespace, request.limit, request.continue_token))
        return asyncio.run(getattr(s, method)(request, Context()))
    c.call = call
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local_client, "LIST_PAGE", 3)
        assert [e.reason for e in c.list_events()] == ALL_EVENTS
        assert [(m, ns, limit) for m, ns, limit, _ in asked] == [("ListEvents", "", 3)] * 3
        assert asked[0][3] == "" and all(token for *_, token in asked[1:])
        assert [e.reason for e in c.list_events("team")] == ["b2", "b3"]


def test_writes_run_together_and_a_re_publication_alone() -> None:
    """The broker-restart re-publication waits for the Applies and Deletes in flight, and holds
    the ones that come meanwhile until it has published (WriteGate)."""
    async def scenario() -> list[str]:
        gate, order = WriteGate(), []
        first_in, release_first = asyncio.Event(), asyncio.Event()

        async def write(name: str, hold: asyncio.Event | None = None) -> None:
            async with gate.write():
                order.append(f"{name} in")
                if hold is not None:
                    first_in.set()
                    await hold.wait()
                order.append(f"{name} out")

        async def republish() -> None:
            async with gate.alone():
                order.append("republish in")
                await asyncio.sleep(0.01)
                order.append("republish out")
        first = asyncio.create_task(write("a", release_first))
        await first_in.wait()
        both = asyncio.create_task(write("b"))  # a second write runs beside the first
        await both
        again = asyncio.create_task(republish())
        await asyncio.sleep(0.01)
        late = asyncio.create_task(write("c"))  # comes while the re-publication waits: after it
        await asyncio.sleep(0.01)
        order.append("a released")
        release_first.set()
        await asyncio.gather(first, again, late)
        return order
    assert asyncio.run(scenario()) == ["a in", "b in", "b out", "a released", "a out", "republish in",
                                       "republish out", "c in", "c out"]


def test_an_apply_during_a_re_publication_is_published_after_it() -> None:
    s = servicer()

    async def scenario() -> tuple[int, int]:
        async with s.qm.writes.alone():
            manifest = SHOP_POD.format(name="web", resources="")
            applying = asyncio.create_task(s.Apply(queue_pb2.ApplyRequest(manifest=manifest, source="m.yaml"),
                                                   Context()))
            await asyncio.sleep(0.05)
            during = len(s.qm.producer.sent)
        await applying
        return during, len(s.qm.producer.sent)
    during, after = asyncio.run(scenario())
    assert during == 0 and after > 0


def test_replicas_get_their_default_toleration_seconds_once_and_share_them() -> None:
    from schedmesh.eviction.taint_eviction import default_toleration_seconds
    tolerant = ("apiVersion: v1\nkind: Pod\nmetadata: {name: t, namespace: default}\nspec:\n  containers: [{name: c}]\n"
                "  tolerations: [{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, "
                "tolerationSeconds: 30}]\n")
    manifest = "---\n".join([POD.format(name=f"p{i}") for i in range(3)] + [tolerant])
    m, _ = admission.admit_manifest(manifest, "m.yaml", False, [])
    first, *others, last = m.pods
    assert first.tolerations == default_toleration_seconds([]) and len(first.tolerations) == 2
    assert all(p.tolerations is first.tolerations for p in others)
    assert [t.toleration_seconds for t in last.tolerations] == [30, 300]  # its own, defaulted apart


def _listed_cluster() -> api.SchedulerServicer:
    """A stand-in queue-manager whose cache holds nodes n0..n6 and pods in two namespaces."""
    s = servicer()
    s.qm.pending_map = dict
    s.qm.pod_view = lambda pod, pending: queue_pb2.PodView(pod=convert.pod_to_proto(pod))
    nodes = "".join(f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: n{i}}}\n" for i in (3, 0, 6, 1, 5, 2, 4))
    pods = "".join("---\n" + POD.format(name=name).replace("namespace: default", f"namespace: {ns}")
                   for ns, name in (("team", "b"), ("default", "c"), ("team", "a"), ("default", "a"), ("default", "b")))
    m = load_text(nodes + pods, "cluster.yaml")
    for offset, (topic, _key, value) in enumerate(records.manifest_records(m, "test")):
        s.qm.cache.apply(topic, value, offset)
    return s


def _pages(s: api.SchedulerServicer, method: str, field: str, limit: int, namespace: str = "") -> list[list[str]]:
    request, pages = queue_pb2.GetRequest(namespace=namespace, limit=limit), []
    while True:
        page = asyncio.run(getattr(s, method)(request, Context()))
        items = getattr(page, field)
        pages.append([f"{v.pod.metadata.namespace}/{v.pod.metadata.name}" if field == "pods" else v.node.metadata.name
                      for v in items])
        if not page.continue_token:
            return pages
        request.continue_token = page.continue_token


def test_nodes_and_pods_are_listed_whole_or_in_pages_by_name() -> None:
    s = _listed_cluster()
    assert _pages(s, "GetNodes", "nodes", 0) == [[f"n{i}" for i in range(7)]]
    assert _pages(s, "GetNodes", "nodes", 3) == [["n0", "n1", "n2"], ["n3", "n4", "n5"], ["n6"]]
    assert _pages(s, "GetNodes", "nodes", 7) == [[f"n{i}" for i in range(7)]]
    assert _pages(s, "GetPods", "pods", 2) == [["default/a", "default/b"], ["default/c", "team/a"], ["team/b"]]
    assert _pages(s, "GetPods", "pods", 1, namespace="team") == [["team/a"], ["team/b"]]
    # The client asks page by page until the last.
    from schedmesh.local import client as local_client
    c = local_client.Client.__new__(local_client.Client)
    c.call = lambda method, request: asyncio.run(getattr(s, method)(request, Context()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local_client, "LIST_PAGE", 2)
        assert [v.node.metadata.name for v in c.list_nodes()] == [f"n{i}" for i in range(7)]
        assert [v.pod.metadata.name for v in c.list_pods("default")] == ["a", "b", "c"]


def test_a_list_too_large_for_one_message_is_refused_and_pages_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _listed_cluster()
    monkeypatch.setattr(api, "MAX_MESSAGE_BYTES", 300)
    with pytest.raises(Aborted) as e:
        asyncio.run(s.GetNodes(queue_pb2.GetRequest(), Context()))
    assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "ask for pages" in e.value.details
    assert _pages(s, "GetNodes", "nodes", 1)[-1] == ["n6"]


@pytest.mark.parametrize("method, request_, says", [
    ("GetNodes", queue_pb2.GetRequest(limit=-1), "limit: must not be negative"),
    ("GetPods", queue_pb2.GetRequest(limit=2, continue_token="no-slash"), "not a pod's NAMESPACE/NAME"),
    ("ListEvents", queue_pb2.EventsRequest(limit=-1), "limit: must not be negative"),
    *(pytest.param("ListEvents", queue_pb2.EventsRequest(limit=2, continue_token=token),
                   f"continue_token: {token!r} is not an event's TIMESTAMP/POD_UID/ORDINAL "
                   "(the continue_token of a page of events)", id=f"ListEvents-{token}")
      for token in ("2.0/u-a", "default/web-0", "soon/u-a/0", "2.0/u-a/first", "2.0/u-a/-1", "nan/u-a/0")),
])
def test_a_bad_page_request_is_refused(method: str, request_, says: str) -> None:
    with pytest.raises(Aborted) as e:
        asyncio.run(getattr(_listed_cluster(), method)(request_, Context()))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and says in e.value.details
