"""Static checks of docker-compose.yml, the Dockerfile and deploy/kubernetes (no Docker or cluster needed)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
K8S = ROOT / "deploy" / "kubernetes"
PORT = 50051
SCHEDMESH_SERVICES = {"queue-manager", "filter-worker", "score-worker", "binder", "kubelet-agent"}


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _k8s_docs() -> list[dict]:
    docs = []
    for f in sorted(K8S.glob("*.yaml")):
        if f.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def _module_of(cmd: list[str]) -> str | None:
    return cmd[cmd.index("-m") + 1] if "-m" in cmd else None


def _assert_service_module(module: str) -> None:
    assert module.startswith("services."), module
    pkg = ROOT / "services" / module.split(".", 1)[1]
    # services being written concurrently may not exist yet; the name must still be well-formed
    assert re.fullmatch(r"services\.[a-z_]+", module)
    if pkg.exists():
        assert (pkg / "__main__.py").exists(), f"{module} has no __main__"


def _containers(doc: dict) -> list[dict]:
    return doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])


def test_compose_services_and_healthchecks():
    services = _compose()["services"]
    assert SCHEDMESH_SERVICES | {"kafka", "jaeger"} <= set(services)
    for name, s in services.items():
        assert "healthcheck" in s and s["healthcheck"]["test"], f"{name} has no healthcheck"
        # Compose restarts a container whose process exits, never an unhealthy one: a hung service's
        # watchdog (schedmesh.mesh.watchdog) exits with code 70, and this brings it back.
        assert s.get("restart") in ("always", "unless-stopped", "on-failure"), f"{name} has no restart policy"
        if name in SCHEDMESH_SERVICES:
            # grpc.health.v1 over mutual TLS with the container's certificate
            assert "schedmesh.security.healthcheck" in " ".join(s["healthcheck"]["test"]), name
            assert f"127.0.0.1:{PORT}" in " ".join(s["healthcheck"]["test"]), name
            assert s["environment"]["SCHEDMESH_PORT"] == str(PORT)
            assert s["environment"]["SCHEDMESH_HOST"] == "0.0.0.0"
            _assert_service_module(_module_of(s["command"]))
            if name in ("filter-worker", "score-worker"):  # fed by the queue-manager, no topic read
                assert "kafka" not in s["depends_on"], name
            else:
                assert s["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_compose_worker_addresses_match_ports():
    services = _compose()["services"]
    qm = services["queue-manager"]
    assert f"binder:{PORT}" in qm["command"]
    for kind in ("filter", "score"):
        tmpl = qm["environment"][f"SCHEDMESH_{kind.upper()}_WORKERS_TEMPLATE"]
        worker = services[f"{kind}-worker"]["environment"]["SCHEDMESH_REPLICA_NAME_TEMPLATE"]
        assert tmpl == f"{worker}:{PORT}"
        assert qm["environment"][f"SCHEDMESH_{kind.upper()}_SHARDS"] == services[f"{kind}-worker"]["environment"]["SCHEDMESH_SHARDS"]
        assert qm["depends_on"][f"{kind}-worker"]["condition"] == "service_healthy"


def test_compose_no_absolute_host_paths():
    for name, s in _compose()["services"].items():
        for v in s.get("volumes", []):
            src = v.split(":", 1)[0] if isinstance(v, str) else v.get("source", "")
            assert not src.startswith("/") and not src.startswith("~"), f"{name}: {v}"
            if src.startswith("."):
                assert (ROOT / src).exists(), f"{name}: {src} does not exist"
    for f in [COMPOSE, ROOT / "Dockerfile", *K8S.glob("*.yaml"), ROOT / "deploy" / "README.md"]:
        assert "/work/" not in f.read_text() and "/home/" not in f.read_text().replace("/home/schedmesh", ""), f


def test_kubernetes_manifests():
    docs = _k8s_docs()
    by_kind: dict[str, dict[str, dict]] = {}
    for d in docs:
        assert d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name"), d
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    for name in ("filter-worker", "score-worker"):
        sts = by_kind["StatefulSet"][name]
        assert by_kind["Service"][name]["spec"]["clusterIP"] == "None"
        assert sts["spec"]["serviceName"] == name
        env = {e["name"]: e for e in _containers(sts)[0]["env"]}
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert "SCHEDMESH_SHARDS" in env
    assert "kafka" in by_kind["StatefulSet"]
    for kind in ("Deployment", "StatefulSet"):
        for name, d in by_kind[kind].items():
            sel = d["spec"]["selector"]["matchLabels"]
            assert sel.items() <= d["spec"]["template"]["metadata"]["labels"].items(), name
            for c in _containers(d):
                assert c["resources"]["requests"], name
                assert "readinessProbe" in c and "livenessProbe" in c, name
                if name in SCHEDMESH_SERVICES:
                    _assert_service_module(_module_of(c["args"]))
                    # grpc.health.v1 over mutual TLS (kubelet's gRPC probe has no client certificate)
                    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                        assert c[probe]["exec"]["command"] == ["python", "-m", "schedmesh.security.healthcheck",
                                                               f"127.0.0.1:{PORT}"], (name, probe)
                    assert c["ports"][0]["containerPort"] == PORT
                    assert "command" not in c, "command would bypass the image entrypoint"
    for name in SCHEDMESH_SERVICES:
        assert by_kind["Service"][name]["spec"]["ports"][0]["port"] == PORT


def test_kustomization_lists_every_manifest_and_counts_match():
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) == files
    shards = dict(lit.split("=", 1) for lit in next(g for g in k["configMapGenerator"]
                                                     if g["name"] == "schedmesh-shards")["literals"])
    replicas = {r["name"]: r["count"] for r in k["replicas"]}
    assert int(shards["FILTER_SHARDS"]) == replicas["filter-worker"]
    assert int(shards["SCORE_SHARDS"]) == replicas["score-worker"]
    env = dict(lit.split("=", 1) for lit in next(g for g in k["configMapGenerator"]
                                                  if g["name"] == "schedmesh-env")["literals"])
    assert env["SCHEDMESH_PORT"] == str(PORT) and env["SCHEDMESH_KAFKA"] == "kafka:9092"


def test_nodepool_configmap_matches_demo_pool():
    cm = next(d for d in _k8s_docs() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kubelet-agent-nodepool")
    assert cm["data"]["nodepool.yaml"] == (ROOT / "deploy" / "nodepools" / "demo.yaml").read_text()


def test_dockerfile_generates_protos_and_runs_non_root():
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "grpc_tools.protoc" in text and "pip wheel --no-build-isolation --no-deps --wheel-dir /tmp/wheels ." in text
    assert re.search(r"^USER (?!root|0)", text, re.M)
    ignored = (ROOT / ".dockerignore").read_text()
    assert "*_pb2.py" in ignored and ".venv" in ignored


def _lock_pins(path: Path) -> dict[str, str]:
    """name -> version of a `uv pip compile` lock file (names canonical: lower case, '-')."""
    from packaging.utils import canonicalize_name
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"{path.name}: {line!r} is not pinned with =="
            pins[canonicalize_name(name.split("[")[0])] = version
    return pins


def _dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's stages, each a list of its instructions (continuation lines joined)."""
    stages: list[list[str]] = []
    for instr in re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text()).splitlines():
        instr = instr.strip()
        if not instr or instr.startswith("#"):
            continue
        if instr.startswith("FROM "):
            stages.append([])
        stages[-1].append(instr)
    return stages


def test_dockerfile_builds_with_the_locked_build_tools_without_build_isolation():
    """`pip install .` with build isolation would fetch the newest setuptools and grpcio-tools
    for the build: their generated code could need a protobuf newer than the lock's. The image
    installs the build tools of requirements-build.lock (the versions `make protos` uses here,
    the protobuf and grpcio of requirements.lock) and builds with them."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    build_stage, final_stage = _dockerfile_stages()
    runs = [i.removeprefix("RUN ") for i in build_stage if i.startswith("RUN ")]
    pip_calls = [c.strip() for run in runs for c in run.split("&&") if re.search(r"\bpip (install|wheel)\b", c)]
    assert pip_calls
    for call in pip_calls:  # nothing is resolved at build time: a lock, or the project without its deps
        assert re.search(r"-r /tmp/requirements(-build)?\.lock$", call) or "--no-deps" in call, call
        if " wheel " in f" {call} " or call.endswith(" ."):
            assert call.startswith("/opt/build/bin/pip wheel --no-build-isolation --no-deps"), call
    assert "/opt/build/bin/pip install -r /tmp/requirements-build.lock" in pip_calls
    assert any(re.fullmatch(r"pip install --no-deps /tmp/wheels/schedmesh-\*\.whl", c) for c in pip_calls), pip_calls
    copies = " ".join(i for i in build_stage if i.startswith("COPY "))
    assert "requirements.lock" in copies and "requirements-build.lock" in copies
    # the build tools stay in the build stage
    assert [i for i in final_stage if "--from=build" in i] == ["COPY --from=build /opt/schedmesh /opt/schedmesh"]

    build, runtime = _lock_pins(ROOT / "requirements-build.lock"), _lock_pins(ROOT / "requirements.lock")
    dev = _lock_pins(ROOT / "requirements-dev.lock")
    for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in build and req.specifier.contains(build[name]), (spec, build.get(name))
        if name in dev:  # what `make protos` generates with here
            assert build[name] == dev[name], name
    shared = set(build) & set(runtime)
    assert {"protobuf", "grpcio"} <= shared
    assert {n: build[n] for n in shared} == {n: runtime[n] for n in shared}
    # `make lock` writes it, from pyproject.toml's build requirements, constrained by the other locks
    lock = re.search(r"^lock:.*?(?=^\S)", (ROOT / "Makefile").read_text(), re.M | re.S).group(0)
    assert "['build-system']['requires']" in lock and "-o requirements-build.lock" in lock
    assert "-c requirements.lock" in lock and "-c requirements-dev.lock" in lock
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not any(p in ignored for p in ("requirements-build.lock", "*.lock", "requirements*"))


def _entrypoint():
    spec = importlib.util.spec_from_file_location("entrypoint", ROOT / "deploy" / "docker" / "entrypoint.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_entrypoint_shard_from_pod_name_and_worker_lists():
    ep = _entrypoint()
    _, env = ep.build(["python"], {"POD_NAME": "score-worker-3"})
    assert env["SCHEDMESH_SHARD"] == "3"
    _, env = ep.build(["python"], {"POD_NAME": "x-1", "SCHEDMESH_SHARD": "0"})
    assert env["SCHEDMESH_SHARD"] == "0"
    args, _ = ep.build(["python", "-m", "services.queue_manager"],
                       {"SCHEDMESH_FILTER_SHARDS": "2", "SCHEDMESH_FILTER_WORKERS_TEMPLATE": "fw-{n}:1",
                        "SCHEDMESH_SCORE_SHARDS": "1", "SCHEDMESH_SCORE_WORKERS_TEMPLATE": "sw-{i}.sw:1"})
    assert args[-4:] == ["--filter-workers", "fw-1:1,fw-2:1", "--score-workers", "sw-0.sw:1"]


def test_entrypoint_shard_from_compose_replica_name(monkeypatch):
    ep = _entrypoint()
    addrs = {"own": "10.0.0.7", "p-w-1": "10.0.0.5", "p-w-2": "10.0.0.7"}
    monkeypatch.setattr(ep.socket, "gethostname", lambda: "own")
    monkeypatch.setattr(ep.socket, "gethostbyname", lambda h: addrs[h])

    def ex(h):
        if h not in addrs:
            raise OSError(h)
        return h, [], [addrs[h]]
    monkeypatch.setattr(ep.socket, "gethostbyname_ex", ex)
    _, env = ep.build(["python"], {"SCHEDMESH_REPLICA_NAME_TEMPLATE": "p-w-{n}", "SCHEDMESH_SHARDS": "3"})
    assert env["SCHEDMESH_SHARD"] == "1"
    with pytest.raises(SystemExit):
        ep._replica_number("p-w-{n}", 1, timeout=0)


# ------------------------------------------------------------------ observability
METRICS_PORT = 9464
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
K8S_VERSION = "1.35.0"


def _k8s_by_kind() -> dict[str, dict[str, dict]]:
    by_kind: dict[str, dict[str, dict]] = {}
    for d in _k8s_docs():
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    return by_kind


def test_compose_matches_the_compose_spec():
    import importlib.resources
    import json

    import jsonschema

    schema = json.loads(importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
                        .joinpath("compose-spec.json").read_text())
    jsonschema.validate(_compose(), schema)


@pytest.mark.parametrize("doc", _k8s_docs(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_kubernetes_manifests_validate_against_the_api_schema(doc):
    import kubernetes_validate

    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_compose_published_ports_bind_loopback_only():
    for name, s in _compose()["services"].items():
        for p in s.get("ports", []):
            assert isinstance(p, str) and p.startswith("127.0.0.1:"), f"{name}: {p}"


def test_compose_services_expose_metrics_and_prometheus_scrapes_them():
    services = _compose()["services"]
    assert {"prometheus", "grafana"} <= set(services)
    assert services["jaeger"]["image"].startswith("jaegertracing/jaeger:2.")
    for name in SCHEDMESH_SERVICES:
        s = services[name]
        assert s["environment"]["SCHEDMESH_METRICS_PORT"] == str(METRICS_PORT), name
        assert any(p.endswith(f":{METRICS_PORT}") for p in s["ports"]), f"{name} publishes no metrics port"
    prom = yaml.safe_load(PROMETHEUS.read_text())
    scraped = {}
    for job in prom["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            for host in sd["names"]:
                scraped[host] = sd["port"]
        for sc in job.get("static_configs", []):
            for target in sc["targets"]:
                host, _, port = target.rpartition(":")
                scraped[host] = int(port)
    for name in SCHEDMESH_SERVICES:
        assert scraped.get(name) == METRICS_PORT, f"Prometheus does not scrape {name}:{METRICS_PORT}"
    volumes = " ".join(services["prometheus"]["volumes"])
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml" in volumes


def test_kubernetes_pods_expose_metrics_for_prometheus():
    by_kind = _k8s_by_kind()
    env = dict(lit.split("=", 1) for lit in next(
        g for g in yaml.safe_load((K8S / "kustomization.yaml").read_text())["configMapGenerator"]
        if g["name"] == "schedmesh-env")["literals"])
    assert env["SCHEDMESH_METRICS_PORT"] == str(METRICS_PORT)
    workloads = {**by_kind["Deployment"], **by_kind["StatefulSet"]}
    for name in SCHEDMESH_SERVICES:
        template = workloads[name]["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", name
        assert annotations["prometheus.io/port"] == str(METRICS_PORT), name
        assert annotations["prometheus.io/path"] == "/metrics", name
        [container] = template["spec"]["containers"]
        assert {"name": "metrics", "containerPort": METRICS_PORT} in container["ports"], name
        service_ports = {p["name"]: p for p in by_kind["Service"][name]["spec"]["ports"]}
        assert service_ports["metrics"]["port"] == METRICS_PORT and service_ports["metrics"]["targetPort"] == "metrics"
    jaeger = by_kind["Deployment"]["jaeger"]["spec"]["template"]["spec"]["containers"][0]
    assert jaeger["image"].startswith("jaegertracing/jaeger:2.")


def _series_to_metric(series: str, defined: dict[str, str]) -> str | None:
    """The metric a PromQL series name belongs to (histograms expose _bucket/_sum/_count)."""
    if series in defined:
        return series
    for suffix in ("_bucket", "_sum", "_count"):
        base = series.removesuffix(suffix)
        if base != series and defined.get(base) == "histogram":
            return base
    return None


def test_grafana_dashboard_uses_only_defined_metrics():
    import json

    from schedmesh.telemetry.metrics import metric_names

    defined = metric_names()
    dashboards = sorted(DASHBOARDS.glob("*.json"))
    assert dashboards
    used = set()
    for f in dashboards:
        dash = json.loads(f.read_text())
        assert dash["uid"] and dash["title"] and dash["panels"]
        for panel in dash["panels"]:
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                names = re.findall(r"\b(?:scheduler|schedmesh)_[a-z0-9_]+", target["expr"])
                assert names, target["expr"]
                for series in names:
                    metric = _series_to_metric(series, defined)
                    assert metric, f"{f.name} / {panel['title']}: {series} is not defined in telemetry/metrics.py"
                    used.add(metric)
    # what the dashboard promises to show
    assert {"scheduler_schedule_attempts_total", "scheduler_scheduling_attempt_duration_seconds",
            "scheduler_pending_pods", "schedmesh_shard_request_duration_seconds",
            "schedmesh_binder_conflicts_total", "schedmesh_evictions_total",
            "schedmesh_kafka_consumer_lag", "scheduler_framework_extension_point_duration_seconds",
            "scheduler_plugin_execution_duration_seconds"} <= used


def test_grafana_queries_group_by_labels_their_metrics_have():
    """Every `by (...)` label is a label of the metric the query reads (`le` of a histogram's
    buckets), every {{label}} of a legend is one of them, and a quantile is taken over buckets
    grouped by `le`. The extension point panel is kube's: per extension point and profile."""
    import json

    from schedmesh.telemetry.metrics import ALL_METRICS, metric_names

    defined = metric_names()
    labels = {m._name + ("_total" if defined.get(m._name + "_total") == "counter" else ""): set(m._labelnames)
              for m in ALL_METRICS}
    for f in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(f.read_text())["panels"]:
            for target in panel["targets"]:
                expr, where = target["expr"], f"{f.name} / {panel['title']}"
                series = re.findall(r"\b(?:scheduler|schedmesh)_[a-z0-9_]+", expr)
                have = set().union(*(labels[_series_to_metric(s, defined)] | ({"le"} if s.endswith("_bucket") else set())
                                     for s in series))
                grouped = [set(re.split(r"\s*,\s*", g.strip())) for g in re.findall(r"\bby \(([^)]*)\)", expr)]
                for g in grouped:
                    assert g <= have, f"{where}: groups by {sorted(g - have)}, which {series} do not have"
                legend = set(re.findall(r"{{\s*(\w+)\s*}}", target.get("legendFormat", "")))
                assert not grouped or legend <= set.union(*grouped), f"{where}: legend {legend} not grouped by"
                if "histogram_quantile" in expr:
                    assert all(s.endswith("_bucket") for s in series) and all("le" in g for g in grouped), where
                if "scheduler_framework_extension_point_duration_seconds" in expr:
                    assert grouped == [{"le", "extension_point", "profile"}], where


def test_grafana_provisioning_points_at_the_dashboards_and_prometheus():
    services = _compose()["services"]
    mounts = {container: host for host, container in (v.split(":")[:2] for v in services["grafana"]["volumes"])}
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    [provider] = yaml.safe_load((provisioning / "dashboards" / "schedmesh.yaml").read_text())["providers"]
    assert mounts[provider["options"]["path"]] == "./deploy/grafana/dashboards"
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["uid"] == "prometheus"


def _listed_services(qm_env: dict, qm_args: list[str]) -> dict:
    """What the queue-manager of a deployment lists in GetServices: name -> (address, metrics URL)."""
    from schedmesh.mesh.scheduler.services import mesh_services
    from schedmesh.mesh.scheduler.state import QueueManagerConfig

    args, env = _entrypoint().build(["python", "-m", "services.queue_manager", *qm_args], qm_env)
    flag = lambda name: args[args.index(name) + 1] if name in args else ""  # noqa: E731
    split = lambda v: [a for a in v.split(",") if a]  # noqa: E731
    cfg = QueueManagerConfig(filter_workers=split(flag("--filter-workers")), score_workers=split(flag("--score-workers")),
                             binder=flag("--binder"), preemption=flag("--preemption") or None)
    return {s.name: (s.address, s.metrics_url) for s in mesh_services(cfg, "http://0.0.0.0:9464/metrics", env)}


def _assert_every_service_listed_with_its_metrics(listed: dict, kinds: set[str]) -> None:
    names = {re.sub(r"-\d+$", "", n) for n in listed}
    assert kinds <= names, kinds - names
    for name, (address, url) in listed.items():
        if name == "queue-manager":
            continue
        host = address.rsplit(":", 1)[0]
        # the URL Prometheus scrapes: the service's host, the metrics port every container has
        assert url == f"http://{host}:{METRICS_PORT}/metrics", (name, address, url)


def test_compose_queue_manager_lists_every_service_with_its_metrics():
    services = _compose()["services"]
    qm = services["queue-manager"]
    env = {k: str(v) for k, v in qm["environment"].items()}
    env = {k: re.sub(r"\$\{(\w+):-([^}]*)\}", r"\2", v) for k, v in env.items()}  # compose's ${VAR:-default}
    listed = _listed_services(env, qm["command"][3:])
    _assert_every_service_listed_with_its_metrics(
        listed, {"queue-manager", "filter-worker", "score-worker", "binder", "preemption", "controller-manager",
                 "kubelet-agent"})
    assert listed["kubelet-agent"][0] == f"kubelet-agent:{PORT}" and "kubelet-agent" in services
    assert env["SCHEDMESH_PEER_METRICS_PORT"] == services["kubelet-agent"]["environment"]["SCHEDMESH_METRICS_PORT"]


def test_kubernetes_queue_manager_lists_every_service_with_its_metrics():
    by_kind = _k8s_by_kind()
    [container] = by_kind["Deployment"]["queue-manager"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env |= {"SCHEDMESH_FILTER_SHARDS": "2", "SCHEDMESH_SCORE_SHARDS": "2"}  # the schedmesh-shards ConfigMap's
    listed = _listed_services(env, container["args"][3:])
    _assert_every_service_listed_with_its_metrics(
        listed, {"queue-manager", "filter-worker", "score-worker", "binder", "preemption", "controller-manager",
                 "kubelet-agent"})
    for name, (address, _) in listed.items():  # every address a Service of the manifests answers to
        service = re.sub(r"-\d+\.(\S+)$", "", address.rsplit(":", 1)[0]) if address else "queue-manager"
        assert service in by_kind["Service"], (name, address)


# ------------------------------------------------------------------ Kubernetes monitoring (kube-prometheus-stack)
MONITORING = K8S / "monitoring"
NAMESPACE = "schedmesh"
# kube-prometheus-stack's values: grafana.sidecar.dashboards.label / labelValue (searchNamespace: ALL)
# and grafana.sidecar.datasources.uid, the default Prometheus datasource the dashboard names
SIDECAR_LABEL = {"grafana_dashboard": "1"}
KPS_DATASOURCE_UID = "prometheus"


def _kustomize_by_hand(root: Path) -> list[dict]:
    """What `kustomize build root` makes, for the features the monitoring kustomizations use:
    resources (files, and kustomization directories), configMapGenerator from files (with
    per-generator options), namespace. Any other field fails, rather than being misread."""
    k = yaml.safe_load((root / "kustomization.yaml").read_text())
    assert set(k) <= {"apiVersion", "kind", "namespace", "resources", "configMapGenerator"}, f"{root}: {set(k)}"
    docs: list[dict] = []
    for r in k.get("resources", []):
        path = (root / r).resolve()
        docs += _kustomize_by_hand(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for gen in k.get("configMapGenerator", []):
        assert set(gen) <= {"name", "files", "options"}, gen
        options = gen.get("options", {})
        assert set(options) <= {"labels", "disableNameSuffixHash"}, options
        # without it the name would carry a content hash (not computed here)
        assert options.get("disableNameSuffixHash") is True, gen["name"]
        data = {}
        for f in gen["files"]:
            key, _, src = f.rpartition("=")  # "key=path" or "path"
            path = (root / src).resolve()
            # kustomize's default load restrictor: a generator reads only below its kustomization
            assert path.is_relative_to(root.resolve()), f"{root}: kustomize refuses {src} (not in or below it)"
            data[key or path.name] = path.read_text()
        metadata = {"name": gen["name"], **({"labels": options["labels"]} if "labels" in options else {})}
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    if "namespace" in k:
        for d in docs:
            d["metadata"]["namespace"] = k["namespace"]
    return docs


def _kustomize_tool() -> list[str] | None:
    import shutil

    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


def _kustomize_with_tool(root: Path) -> list[dict]:
    import subprocess

    out = subprocess.run([*_kustomize_tool(), str(root)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _monitoring_docs() -> dict[str, dict]:
    """kind -> the one object of that kind `kubectl apply -k deploy/kubernetes/monitoring` applies
    (built by kustomize when it or kubectl is installed, else read from the kustomizations)."""
    docs = _kustomize_with_tool(MONITORING) if _kustomize_tool() else _kustomize_by_hand(MONITORING)
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs) == 2, [(d["kind"], d["metadata"]["name"]) for d in docs]
    return by_kind


def _selects(selector: dict, labels: dict) -> bool:
    """A metav1.LabelSelector against an object's labels."""
    if not selector:  # {} selects everything: never what a ServiceMonitor here should say
        return True
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def test_monitoring_is_outside_the_base_kustomization():
    """The ServiceMonitor needs prometheus-operator's CRDs: `kubectl apply -k deploy/kubernetes`
    must work without them."""
    base = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert not any("monitoring" in r or "grafana" in r for r in base["resources"])
    assert {d["apiVersion"].split("/")[0] for d in _k8s_docs()} <= {"v1", "apps", "batch", "policy"}
    k = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert k["namespace"] == base["namespace"] == NAMESPACE
    assert "kubectl apply -k deploy/kubernetes/monitoring" in (ROOT / "deploy" / "README.md").read_text()


def test_monitoring_kustomization_read_by_hand_is_what_kustomize_builds():
    """The by-hand reading that stands in for kustomize where it is missing gives kustomize's result."""
    if not _kustomize_tool():
        pytest.skip("neither kustomize nor kubectl is installed")
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(_kustomize_with_tool(MONITORING), key=key) == sorted(_kustomize_by_hand(MONITORING), key=key)


def test_servicemonitor_selects_every_service_with_a_metrics_port_and_nothing_else():
    sm = _monitoring_docs()["ServiceMonitor"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1" and sm["metadata"]["namespace"] == NAMESPACE
    spec = sm["spec"]
    # no namespaceSelector: the ServiceMonitor's own namespace, where the Services are
    assert spec.get("namespaceSelector", {"matchNames": [NAMESPACE]}) == {"matchNames": [NAMESPACE]}
    assert spec["selector"], "an empty selector selects every Service"
    # kube-prometheus-stack's Prometheus selects ServiceMonitors by its Helm release's label
    assert sm["metadata"]["labels"]["release"]
    services = _k8s_by_kind()["Service"]
    with_metrics = {n for n, s in services.items() if any(p.get("name") == "metrics" for p in s["spec"]["ports"])}
    selected = {n for n, s in services.items() if _selects(spec["selector"], s["metadata"].get("labels", {}))}
    assert selected == with_metrics
    assert SCHEDMESH_SERVICES | {"preemption", "controller-manager", "jaeger"} <= selected
    workloads = {**_k8s_by_kind()["Deployment"], **_k8s_by_kind()["StatefulSet"]}
    assert spec["endpoints"]
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {"port", "path", "scheme", "interval", "scrapeTimeout", "relabelings"}, endpoint
        for name in selected:
            [port] = [p for p in services[name]["spec"]["ports"] if p.get("name") == endpoint["port"]]
            # the Service's port leads to the container port the pods' annotations name
            template = workloads[name]["spec"]["template"]
            [container] = template["spec"]["containers"]
            [target] = [p for p in container["ports"] if p["name"] == port["targetPort"]
                        or p["containerPort"] == port["targetPort"]]
            annotations = template["metadata"]["annotations"]
            assert str(target["containerPort"]) == annotations["prometheus.io/port"], name
            assert endpoint.get("path", "/metrics") == annotations["prometheus.io/path"], name
            assert endpoint.get("scheme", "http") == "http", name  # /metrics is plaintext HTTP


def test_servicemonitor_metadata_and_configmap_validate_against_the_api_schema():
    """kubernetes-validate knows the core kinds, not prometheus-operator's CRDs: the ConfigMap is
    validated whole, the ServiceMonitor's metadata as an ObjectMeta (label keys and values)."""
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError

    docs = _monitoring_docs()
    kubernetes_validate.validate(docs["ConfigMap"], K8S_VERSION, strict=True)
    with pytest.raises(SchemaNotFoundError):
        kubernetes_validate.validate(docs["ServiceMonitor"], K8S_VERSION, strict=True)
    as_configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": docs["ServiceMonitor"]["metadata"]}
    kubernetes_validate.validate(as_configmap, K8S_VERSION, strict=True)


def _config_map_generators(root: Path) -> list[tuple[Path, dict]]:
    """(kustomization directory, generator) of every configMapGenerator `kustomize build root` runs."""
    k = yaml.safe_load((root / "kustomization.yaml").read_text())
    found = [(root, g) for g in k.get("configMapGenerator", [])]
    for r in k.get("resources", []):
        if (root / r).is_dir():
            found += _config_map_generators(root / r)
    return found


def test_grafana_dashboard_configmap_is_generated_from_the_dashboard_file_for_the_sidecar():
    import json

    # the generator reads the dashboard files themselves: no second copy under deploy/kubernetes
    [(root, gen)] = _config_map_generators(MONITORING)
    assert [(root / f.rpartition("=")[2]).resolve() for f in gen["files"]] == \
        [p.resolve() for p in sorted(DASHBOARDS.glob("*.json"))]
    assert not list(K8S.rglob("*.json"))
    cm = _monitoring_docs()["ConfigMap"]
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert SIDECAR_LABEL.items() <= cm["metadata"]["labels"].items()
    assert cm["data"] == {f.name: f.read_text() for f in sorted(DASHBOARDS.glob("*.json"))}
    dash = json.loads(cm["data"]["schedmesh.json"])
    uids = {t["datasource"]["uid"] for p in dash["panels"] for t in [p, *p["targets"]] if "datasource" in t}
    assert uids == {KPS_DATASOURCE_UID}


def _relabel(labels: dict[str, str], rules: list[dict]) -> dict[str, str] | None:
    """Prometheus's relabel_configs (actions replace, keep, drop); None when the target is dropped."""
    labels = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace")
        value = rule.get("separator", ";").join(labels.get(s, "") for s in rule.get("source_labels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        if action == "keep" and not match or action == "drop" and match:
            return None
        if action == "replace" and match:
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", rule.get("replacement", "$1"))
            labels[rule["target_label"]] = match.expand(replacement)
    return labels


def _pod_targets(job: dict, pod_ip: str) -> dict[str, dict]:
    """pod name -> the target Prometheus's kubernetes-pods job keeps for one pod of each workload."""
    sanitize = lambda k: re.sub(r"[^a-zA-Z0-9_]", "_", k)  # noqa: E731
    by_kind = _k8s_by_kind()
    targets = {}
    for kind in ("Deployment", "StatefulSet"):
        for name, w in by_kind[kind].items():
            template = w["spec"]["template"]
            meta = {"__meta_kubernetes_namespace": NAMESPACE, "__meta_kubernetes_pod_name": f"{name}-0",
                    "__meta_kubernetes_pod_ip": pod_ip, "__meta_kubernetes_pod_phase": "Running",
                    "__metrics_path__": "/metrics", "__scheme__": "http"}
            meta |= {f"__meta_kubernetes_pod_annotation_{sanitize(k)}": v
                     for k, v in template["metadata"].get("annotations", {}).items()}
            meta |= {f"__meta_kubernetes_pod_label_{sanitize(k)}": v for k, v in template["metadata"]["labels"].items()}
            ports = [p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])]
            ip = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
            # role: pod makes a target per container port; identical ones after relabelling are one
            kept = [_relabel({**meta, "__address__": f"{ip}:{port}"}, job["relabel_configs"]) for port in ports]
            kept = [{k: v for k, v in t.items() if not k.startswith("__meta_")} for t in kept if t]
            if kept:
                assert all(t == kept[0] for t in kept), (name, kept)
                targets[name] = kept[0]
    return targets


def test_prometheus_kubernetes_pods_job_scrapes_what_the_annotations_say():
    """The plain-Prometheus alternative to the ServiceMonitor: a scrape job over the pods'
    prometheus.io annotations, in the schedmesh namespace."""
    [job] = yaml.safe_load((ROOT / "deploy" / "prometheus" / "kubernetes-pods.yml").read_text())["scrape_configs"]
    [sd] = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["namespaces"]["names"] == [NAMESPACE]
    workloads = {**_k8s_by_kind()["Deployment"], **_k8s_by_kind()["StatefulSet"]}
    annotated = {n for n, w in workloads.items()
                 if w["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true"}
    assert SCHEDMESH_SERVICES | {"preemption", "controller-manager", "jaeger"} <= annotated
    for pod_ip in ("10.244.1.7", "fd00:10:244::7"):
        targets = _pod_targets(job, pod_ip)
        assert set(targets) == annotated, pod_ip  # Kafka has no annotations: not scraped
        host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
        for name, t in targets.items():
            annotations = workloads[name]["spec"]["template"]["metadata"]["annotations"]
            assert t["__address__"] == f"{host}:{annotations['prometheus.io/port']}", (name, t)
            assert t["__metrics_path__"] == annotations["prometheus.io/path"]
            assert t["job"] == name and t["namespace"] == NAMESPACE and t["pod"] == f"{name}-0"
