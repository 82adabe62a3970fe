"""kubectl's shapes, `--server` from elsewhere and /metrics, against one real mesh
(`schedmesh up --detach` in a temporary directory; every command is the installed CLI)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.mesh_harness import plain_env

pytestmark = pytest.mark.timeout(400)

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: default, labels: {app: web, tier: front}}
spec:
  containers:
  - {name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 1Gi}, limits: {cpu: 100m, memory: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: default, labels: {app: web}}
spec:
  containers:
  - {name: c, image: nginx, resources: {requests: {cpu: 200m}}}
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: other, labels: {app: db}}
spec:
  containers:
  - {name: c, image: postgres, resources: {requests: {cpu: "500"}}}
"""
SCHEDULED = ("web-1", "web-2")


def schedmesh(*args: str, cwd: Path, env: dict | None = None, input: str | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess:
    base = plain_env()
    base["HOME"] = str(cwd)  # no user config file leaks in
    return subprocess.run([sys.executable, "-m", "schedmesh.cli.main", *args], cwd=cwd, env={**base, **(env or {})},
                          input=input, capture_output=True, text=True, timeout=timeout)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def mesh():
    # outside pytest's numbered base directories: concurrent pytest runs prune each other's old ones
    d = Path(tempfile.mkdtemp(prefix="schedmesh-cli-live-"))
    # every cycle's plugins timed (kube's 10 % would make the plugin metric's samples a matter of luck)
    r = schedmesh("up", "--detach", cwd=d, timeout=240, env={"SCHEDMESH_PLUGIN_METRICS_SAMPLE_PERCENT": "100"})
    if r.returncode != 0:
        pytest.fail(f"schedmesh up failed:\n{r.stdout}\n{r.stderr}")
    try:
        ok(schedmesh("apply", "-f", "-", cwd=d, input=PODS))
        deadline = time.time() + 60
        while True:
            items = json.loads(ok(schedmesh("get", "pods", "-o", "json", cwd=d)))["items"]
            by_name = {p["metadata"]["name"]: p for p in items}
            bound = all(by_name.get(n, {}).get("spec", {}).get("nodeName") for n in SCHEDULED)
            failed = "schedmesh.io/unschedulable-message" in by_name.get("huge", {}).get("metadata", {}).get(
                "annotations", {})
            if bound and failed:
                break
            assert time.time() < deadline, f"pods not decided: {json.dumps(items, indent=1)}"
            time.sleep(0.5)
        yield d
    finally:
        r = schedmesh("down", cwd=d, timeout=90)
        assert r.returncode == 0, r.stderr
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------ kubectl's shapes
def test_get_pods_json_is_a_v1_list_that_validates_against_the_kubernetes_schema(mesh: Path) -> None:
    import kubernetes_validate
    for kind in ("pods", "nodes", "events"):
        doc = json.loads(ok(schedmesh("get", kind, "-o", "json", cwd=mesh)))
        assert doc["apiVersion"] == "v1" and doc["kind"] == "List" and doc["items"], kind
        for item in doc["items"]:
            # strict: an unknown field (e.g. schedmesh's own) would be an error
            kubernetes_validate.validate(item, "1.35", strict=True)
    pods = {p["metadata"]["name"]: p for p in json.loads(ok(schedmesh("get", "pods", "-o", "json", cwd=mesh)))["items"]}
    web = pods["web-1"]
    assert web["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "1Gi"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", web["metadata"]["creationTimestamp"])
    assert web["status"]["phase"] == "Running" and web["status"]["qosClass"] == "Guaranteed"
    assert {"type": "PodScheduled", "status": "True"} in web["status"]["conditions"]
    assert web["metadata"]["annotations"]["schedmesh.io/queue"] == "bound"
    assert re.fullmatch(r"[0-9a-f]{32}", web["metadata"]["annotations"]["schedmesh.io/trace-id"])
    huge = pods["huge"]
    assert "Insufficient cpu" in huge["metadata"]["annotations"]["schedmesh.io/unschedulable-message"]
    assert huge["status"]["qosClass"] == "Burstable" and "nodeName" not in huge["spec"]
    # one object by name: the object itself, as kubectl prints it
    one = yaml.safe_load(ok(schedmesh("get", "pod", "web-2", "-o", "yaml", cwd=mesh)))
    assert one["kind"] == "Pod" and one["metadata"]["name"] == "web-2"
    kubernetes_validate.validate(one, "1.35", strict=True)


def test_get_pods_namespaces_selectors_and_names(mesh: Path) -> None:
    assert ok(schedmesh("get", "pods", "-n", "other", "-o", "name", cwd=mesh)).split() == ["pod/huge"]
    assert ok(schedmesh("get", "pods", "-l", "app=web", "-o", "name", cwd=mesh)).split() == ["pod/web-1", "pod/web-2"]
    assert ok(schedmesh("get", "pods", "-l", "app in (web,db),tier!=front", "-o", "name", cwd=mesh)).split() \
        == ["pod/web-2", "pod/huge"]
    assert ok(schedmesh("get", "pods", "-A", "-l", "!tier", "-o", "name", cwd=mesh)).split() == ["pod/web-2", "pod/huge"]
    table = ok(schedmesh("get", "pods", "-n", "default", cwd=mesh)).splitlines()
    assert re.split(r"\s{2,}", table[0]) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert set(rows) == {"web-1", "web-2"} and rows["web-1"][1:4] == ["1/1", "Running", "0"]
    assert re.fullmatch(r"\d+s|\d+m\d*s?", rows["web-1"][4]), rows["web-1"]
    wide = ok(schedmesh("get", "pods", "-o", "wide", "-A", cwd=mesh)).splitlines()
    assert re.split(r"\s{2,}", wide[0]) == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE",
                                            "NOMINATED NODE", "READINESS GATES", "QUEUE", "TRACE ID"]
    huge = next(re.split(r"\s{2,}", line) for line in wide[1:] if " huge " in line)
    assert huge[3] == "Pending" and huge[7] == "<none>" and huge[10] == "unschedulable"
    r = schedmesh("get", "pod", "nope", cwd=mesh)
    assert r.returncode == 2 and 'pods "nope" not found' in r.stderr
    r = schedmesh("get", "pods", "-l", "app in (web", cwd=mesh)
    assert r.returncode == 2 and "label selector" in r.stderr and "app in (web" in r.stderr


def test_watch_prints_changes_until_interrupted(mesh: Path) -> None:
    base = plain_env()
    proc = subprocess.Popen([sys.executable, "-m", "schedmesh.cli.main", "get", "pods", "-n", "default", "-w"],
                            cwd=mesh, env={**base, "HOME": str(mesh)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        time.sleep(3)
        watched = PODS.split("---")[1].replace("web-2", "watched").replace("app: web", "app: watched")
        ok(schedmesh("apply", "-f", "-", cwd=mesh, input=watched))
        time.sleep(4)
    finally:
        proc.send_signal(2)  # SIGINT, as Ctrl-C
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "READY"] and sum(line.startswith("NAME") for line in lines) == 1
    assert any(line.split()[0] == "watched" for line in lines[1:]), out
    ok(schedmesh("delete", "pod", "watched", cwd=mesh))


def test_describe_pod_and_node_in_kubectls_layout(mesh: Path) -> None:
    d = ok(schedmesh("describe", "pod", "web-1", cwd=mesh))
    assert re.search(r"^QoS Class:\s+Guaranteed$", d, re.M), d
    assert re.search(r"^Status:\s+Running$", d, re.M)
    assert re.search(r"^\s+Normal\s+Scheduled\s+\S+\s+default-scheduler\s+Successfully assigned default/web-1 to ", d,
                     re.M), d
    node = re.search(r"^Node:\s+(\S+)$", d, re.M).group(1)
    h = ok(schedmesh("describe", "pod", "huge", "-n", "other", cwd=mesh))
    assert re.search(r"^\s+Warning\s+FailedScheduling\s+\S+\s+default-scheduler\s+0/\d+ nodes are available", h,
                     re.M), h
    assert re.search(r"^QoS Class:\s+Burstable$", h, re.M)
    n = ok(schedmesh("describe", "node", node, cwd=mesh))
    heads = [line.split(":")[0] for line in n.splitlines() if line and not line.startswith(" ")]
    for section in ("Name", "Roles", "Labels", "Taints", "Unschedulable", "Conditions", "Capacity", "Allocatable",
                    "Non-terminated Pods", "Allocated resources", "Events"):
        assert section in heads, (section, n)
    assert heads.index("Capacity") < heads.index("Allocatable") < heads.index("Non-terminated Pods")
    assert re.search(r"^\s+default\s+web-1\s+100m \(\d+%\)\s+100m \(\d+%\)\s+1Gi \(\d+%\)\s+1Gi \(\d+%\)", n, re.M), n
    r = schedmesh("describe", "node", "no-such-node", cwd=mesh)
    assert r.returncode == 2 and 'nodes "no-such-node" not found' in r.stderr


def test_get_events_in_kubectls_columns(mesh: Path) -> None:
    out = ok(schedmesh("get", "events", "-n", "other", cwd=mesh)).splitlines()
    assert re.split(r"\s{2,}", out[0]) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert any(re.match(r"\S+\s+Warning\s+FailedScheduling\s+pod/huge\s+0/\d+ nodes are available", line)
               for line in out[1:]), out
    events = json.loads(ok(schedmesh("get", "events", "-o", "json", cwd=mesh)))["items"]
    scheduled = [e for e in events if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "web-1"]
    assert scheduled and scheduled[0]["source"] == {"component": "default-scheduler"}


def test_delete_f_deletes_every_object_of_the_manifest(mesh: Path) -> None:
    (mesh / "extra.yaml").write_text(PODS.replace("web-", "extra-").split("---\napiVersion: v1\nkind: Namespace")[0])
    ok(schedmesh("apply", "-f", "extra.yaml", cwd=mesh))
    assert len(ok(schedmesh("get", "pods", "-l", "app=web", "-o", "name", cwd=mesh)).split()) == 4
    out = ok(schedmesh("delete", "-f", "extra.yaml", cwd=mesh))
    assert 'pod "extra-1" deleted' in out and 'pod "extra-2" deleted' in out, out
    deadline = time.time() + 30
    while len(ok(schedmesh("get", "pods", "-l", "app=web", "-o", "name", cwd=mesh)).split()) != 2:
        assert time.time() < deadline
        time.sleep(0.5)
    r = schedmesh("delete", "-f", "extra.yaml", cwd=mesh)  # already gone: kubectl's error, exit 1
    assert r.returncode == 1 and "not found" in r.stderr, r.stderr


# ------------------------------------------------------------------ one CLI for every deployment
def test_server_flag_drives_a_mesh_started_in_another_directory(mesh: Path, tmp_path: Path) -> None:
    st = json.loads((mesh / ".schedmesh" / "mesh.json").read_text())
    creds = ["--certificate-authority", st["ca"], "--client-certificate", st["client_cert"],
             "--client-key", st["client_key"]]
    token = Path(st["token_file"]).read_text().strip()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = schedmesh("get", "pods", cwd=elsewhere)  # nothing here, nothing configured
    assert r.returncode == 2 and "the mesh is not running" in r.stderr
    r = schedmesh("--server", st["scheduler"], *creds, "get", "pods", cwd=elsewhere)
    assert r.returncode == 2 and "needs an API token" in r.stderr, r.stderr
    r = schedmesh("get", "pods", "--server", st["scheduler"], "--token", token, cwd=elsewhere)
    assert r.returncode == 2 and "cannot reach the scheduler" in r.stderr  # plaintext to a TLS server
    names = ok(schedmesh("get", "pods", "-o", "name", "--server", st["scheduler"], *creds, "--token", token,
                         cwd=elsewhere)).split()
    assert {"pod/web-1", "pod/huge"} <= set(names)
    # the environment, then a config file context
    env = {"SCHEDMESH_SERVER": st["scheduler"], "SCHEDMESH_CERTIFICATE_AUTHORITY": st["ca"],
           "SCHEDMESH_CLIENT_CERTIFICATE": st["client_cert"], "SCHEDMESH_CLIENT_KEY": st["client_key"],
           "SCHEDMESH_TOKEN": token}
    ok(schedmesh("apply", "-f", "-", cwd=elsewhere, env=env,
                 input=PODS.split("---")[1].replace("web-2", "from-afar").replace("app: web", "app: afar")))
    config = elsewhere / "config.yaml"
    ok(schedmesh("config", "set-context", "local", "--server", st["scheduler"], "--certificate-authority", st["ca"],
                 "--client-certificate", st["client_cert"], "--client-key", st["client_key"],
                 "--token-file", st["token_file"], "--config-file", str(config), cwd=elsewhere))
    ok(schedmesh("config", "set-context", "nowhere", "--server", "127.0.0.1:1", "--config-file", str(config),
                 cwd=elsewhere))
    r = schedmesh("get", "pods", cwd=elsewhere, env={"SCHEDMESH_CONFIG": str(config)})
    assert r.returncode == 2 and "current-context" not in r.stderr and "not running" in r.stderr  # none chosen yet
    assert "Switched to context" in ok(schedmesh("config", "use-context", "local", "--config-file", str(config),
                                                 cwd=elsewhere))
    assert (config.stat().st_mode & 0o777) == 0o600
    contexts = ok(schedmesh("config", "get-contexts", cwd=elsewhere, env={"SCHEDMESH_CONFIG": str(config)}))
    assert re.search(r"^\*\s+local\s", contexts, re.M), contexts
    out = ok(schedmesh("describe", "pod", "from-afar", cwd=elsewhere, env={"SCHEDMESH_CONFIG": str(config)}))
    assert "Name:" in out and "from-afar" in out
    r = schedmesh("get", "pods", "--context", "nowhere", "--config-file", str(config), cwd=elsewhere)
    assert r.returncode == 2 and "127.0.0.1:1" in r.stderr
    r = schedmesh("get", "pods", "--context", "missing", "--config-file", str(config), cwd=elsewhere)
    assert r.returncode == 2 and "no context named 'missing'" in r.stderr
    # get services, remote: the scheduler names every service of the mesh, the kubelet agent too,
    # with its address and /metrics as configured; each is health-checked from here (and it says so)
    listing = yaml.safe_load(ok(schedmesh("get", "services", "-o", "yaml", "--server", st["scheduler"], *creds,
                                          "--token", token, cwd=elsewhere)))
    services = listing["services"]
    by_name = {s["name"]: s for s in services}
    assert by_name["queue-manager"]["address"] == st["scheduler"]
    local = {p["name"]: p for p in st["procs"] if p["name"] != "broker"}
    assert set(by_name) == set(local), (sorted(by_name), sorted(local))
    for name, p in local.items():
        assert by_name[name]["address"] == f"127.0.0.1:{p['port']}", (name, by_name[name])
        assert by_name[name]["metrics"] == f"http://127.0.0.1:{p['metrics_port']}/metrics", (name, by_name[name])
        scrape(by_name[name]["metrics"])  # and it answers
    assert all(s["health"] == "SERVING" for s in services), services
    assert "checked from this machine" in listing["note"]
    r = schedmesh("get", "services", "--server", st["scheduler"], *creds, "--token", token, cwd=elsewhere)
    assert r.returncode == 0 and "HEALTH was checked from this machine's network" in r.stderr, r.stderr
    assert "kubelet-agent" in r.stdout and "note" not in r.stdout  # the table stays parseable
    ok(schedmesh("delete", "pod", "from-afar", cwd=mesh))


def test_get_services_of_the_local_mesh(mesh: Path) -> None:
    out = ok(schedmesh("get", "services", cwd=mesh)).splitlines()
    assert re.split(r"\s{2,}", out[0]) == ["NAME", "ADDRESS", "HEALTH", "METRICS", "PID", "RESTARTS"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert {"broker", "queue-manager", "binder", "kubelet-agent"} <= set(rows)
    assert all(r[2] == "SERVING" for r in rows.values()), out
    assert all(r[3].startswith("http://127.0.0.1:") for name, r in rows.items() if name != "broker")


# ------------------------------------------------------------------ /metrics of every service
KUBE_SCHEDULER_METRICS = ("scheduler_schedule_attempts_total", "scheduler_scheduling_attempt_duration_seconds",
                          "scheduler_pod_scheduling_sli_duration_seconds", "scheduler_pod_scheduling_attempts",
                          "scheduler_pending_pods", "scheduler_queue_incoming_pods_total",
                          "scheduler_framework_extension_point_duration_seconds",
                          "scheduler_plugin_execution_duration_seconds", "scheduler_preemption_attempts_total",
                          "scheduler_preemption_victims")


def scrape(url: str) -> dict:
    """Metric family name -> family, as Prometheus parses the exposition."""
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(family, suffix: str = "") -> list:
    return [s for s in family.samples if s.name == family.name + suffix]


def _metrics_urls(mesh: Path) -> dict[str, str]:
    st = json.loads((mesh / ".schedmesh" / "mesh.json").read_text())
    return {p["name"]: f"http://127.0.0.1:{p['metrics_port']}/metrics" for p in st["procs"] if p["metrics_port"]}


def test_every_service_serves_metrics_with_kube_schedulers_names(mesh: Path) -> None:
    urls = _metrics_urls(mesh)
    assert {"queue-manager", "binder", "kubelet-agent", "preemption", "controller-manager"} <= set(urls)
    families = {name: scrape(url) for name, url in urls.items()}
    qm = families["queue-manager"]
    for name in KUBE_SCHEDULER_METRICS:
        # counters are named without _total by the parser
        assert name.removesuffix("_total") in qm, (name, sorted(qm))
    attempts = {(s.labels["result"], s.labels["profile"]): s.value
                for s in samples(qm["scheduler_schedule_attempts"], "_total")}
    assert attempts[("scheduled", "default-scheduler")] >= len(SCHEDULED)
    assert attempts[("unschedulable", "default-scheduler")] >= 1
    durations = samples(qm["scheduler_scheduling_attempt_duration_seconds"], "_count")
    assert {s.labels["result"] for s in durations} >= {"scheduled", "unschedulable"}
    assert all(s.labels["profile"] == "default-scheduler" for s in durations)
    sli = samples(qm["scheduler_pod_scheduling_sli_duration_seconds"], "_count")
    assert sum(s.value for s in sli) >= len(SCHEDULED) and all("attempts" in s.labels for s in sli)
    buckets = {s.labels["le"] for s in samples(qm["scheduler_pod_scheduling_sli_duration_seconds"], "_bucket")}
    assert {"0.01", "0.02", "+Inf"} <= buckets  # kube's ExponentialBuckets(0.01, 2, 20)
    # kube's framework metrics: every extension point the cycles ran (the mesh has no shards: the
    # queue-manager filters and scores), and the plugins one by one (every cycle is sampled here)
    points = {(s.labels["extension_point"], s.labels["status"]): s.value
              for s in samples(qm["scheduler_framework_extension_point_duration_seconds"], "_count")
              if s.labels["profile"] == "default-scheduler"}
    for point in ("PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit", "PreBind", "Bind", "PostBind"):
        assert points.get((point, "Success"), 0) >= 1, (point, points)
    post_filter = [s for fams in (qm, families["preemption"])  # in the preemption service when it is asked
                   for s in samples(fams["scheduler_framework_extension_point_duration_seconds"], "_count")
                   if s.labels["extension_point"] == "PostFilter"]
    assert sum(s.value for s in post_filter) >= 1, post_filter
    plugins = {(s.labels["plugin"], s.labels["extension_point"]): s.value
               for s in samples(qm["scheduler_plugin_execution_duration_seconds"], "_count")}
    for plugin, point in (("NodeResourcesFit", "PreFilter"), ("NodeResourcesFit", "Filter"),
                          ("NodeResourcesBalancedAllocation", "Score"), ("DefaultBinder", "Bind")):
        assert plugins.get((plugin, point), 0) >= 1, (plugin, point, sorted(plugins))
    # the binder's admission check is no scheduler's: none of kube's framework metrics there
    assert not samples(families["binder"]["scheduler_framework_extension_point_duration_seconds"], "_count")
    # the mesh's own, by name, on each service that does the work
    for name in ("queue-manager", "binder", "preemption", "controller-manager"):
        fams = families[name]
        applied = samples(fams["schedmesh_records_applied"], "_total")
        assert any(s.labels["topic"] == "schedmesh.pods" and s.value > 0 for s in applied), (name, applied)
        assert "schedmesh_kafka_consumer_lag" in fams and samples(fams["schedmesh_kafka_consumer_lag"]), name
        assert samples(fams["schedmesh_batch_size"], "_count"), name


def test_pending_pods_and_incoming_pods_follow_the_queue(mesh: Path) -> None:
    qm = scrape(_metrics_urls(mesh)["queue-manager"])
    pending = {s.labels["queue"]: s.value for s in samples(qm["scheduler_pending_pods"])}
    assert pending.get("unschedulable") == 1, pending  # the `huge` pod
    incoming = samples(qm["scheduler_queue_incoming_pods"], "_total")
    assert sum(s.value for s in incoming if s.labels["queue"] == "active") >= 3, incoming


def test_binder_conflicts_are_counted_by_kind(mesh: Path) -> None:
    """A binding the binder refuses (here: a pod already bound, sent again to another node, as a
    queue-manager with a stale view would) is counted by the kind of refusal, not by pod."""
    from schedmesh.security.credentials import TLSFiles, channel
    from schedmesh.security.local import mesh_channel
    from schedmesh.security.pki import PKIFiles
    from schedmesh.v1 import binder_pb2, binder_pb2_grpc, queue_pb2, queue_pb2_grpc

    st = json.loads((mesh / ".schedmesh" / "mesh.json").read_text())
    procs = {p["name"]: p for p in st["procs"]}
    api = mesh_channel(st)
    try:
        scheduler = queue_pb2_grpc.SchedulerStub(api)
        web = next(v.pod for v in scheduler.GetPods(queue_pb2.GetRequest(), timeout=30).pods
                   if v.pod.metadata.name == "web-1")
        other = next(v.node.metadata.name for v in scheduler.GetNodes(queue_pb2.GetRequest(), timeout=30).nodes
                     if v.node.metadata.name != web.node_name)
    finally:
        api.close()
    url = _metrics_urls(mesh)["binder"]

    def conflicts() -> dict:
        return {s.labels["reason"]: s.value for s in samples(scrape(url)["schedmesh_binder_conflicts"], "_total")}

    before = conflicts().get("already bound", 0)
    # only the queue-manager may bind: its certificate, as the mesh gave it
    qm = PKIFiles(Path(st["ca"]).parent, "queue-manager")
    ch = channel(f"127.0.0.1:{procs['binder']['port']}", TLSFiles(str(qm.ca), str(qm.cert), str(qm.key)))
    try:
        resp = binder_pb2_grpc.BinderStub(ch).Bind(binder_pb2.BindRequest(pod=web, node_name=other,
                                                                           client_id="test"), timeout=30)
    finally:
        ch.close()
    assert not resp.bound and "is already bound to" in resp.reason, resp
    after = conflicts()
    assert after.get("already bound", 0) == before + 1, after
    assert not any("web-1" in reason for reason in after), after  # no pod names in label values
