"""Security of the mesh (issue 13 point 5) against a real `schedmesh up` mesh with mutual TLS (the
default): the CLI works with the local defaults; the binder and the shards refuse callers
without a certificate, with a certificate of another CA, or with another identity; the
Scheduler API refuses a missing or wrong token; plaintext is refused off loopback."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedmesh.api import convert
from schedmesh.api.load import load_text
from schedmesh.security import identity as ids
from schedmesh.security.credentials import CredentialsError, TLSFiles, channel
from schedmesh.security.local import mesh_channel
from schedmesh.security.pki import PKIFiles, make_pki
from schedmesh.v1 import binder_pb2, binder_pb2_grpc, queue_pb2, queue_pb2_grpc
from schedmesh.v1 import scheduling_pb2 as spb
from schedmesh.v1 import scheduling_pb2_grpc as sgrpc

from tests.mesh_harness import EXTERNAL_KAFKA, plain_env, up_kafka_args


def schedmesh(*args: str, cwd: Path, timeout: float = 150) -> subprocess.CompletedProcess:
    env = plain_env()
    return subprocess.run([sys.executable, "-m", "schedmesh.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def pod_yaml(name: str, cpu: str = "100m") -> str:
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n"
            f"spec:\n  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: {cpu}}}}}}}]\n")


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    base = tmp_path_factory.mktemp("secure-mesh")
    r = schedmesh("up", "--detach", "--filter-workers", "1", "--score-workers", "1", *up_kafka_args(base), cwd=base)
    if r.returncode != 0:
        pytest.fail(f"schedmesh up failed:\n{r.stdout}\n{r.stderr}")
    try:
        yield base, r.stdout
    finally:
        schedmesh("down", cwd=base, timeout=90)


def state(base: Path) -> dict:
    return json.loads((base / ".schedmesh" / "mesh.json").read_text())


def target(base: Path, name: str) -> str:
    return f"127.0.0.1:{next(p['port'] for p in state(base)['procs'] if p['name'] == name)}"


def files(directory: Path, identity: str) -> TLSFiles:
    f = PKIFiles(directory, identity)
    return TLSFiles(str(f.ca), str(f.cert), str(f.key))


def pki(base: Path) -> Path:
    return base / ".schedmesh" / "pki"


def wait_bound(base: Path, name: str, timeout: float = 60) -> str:
    with mesh_channel(state(base)) as ch:  # the local defaults, as the CLI uses them
        stub = queue_pb2_grpc.SchedulerStub(ch)
        deadline = time.time() + timeout
        while time.time() < deadline:
            for v in stub.GetPods(queue_pb2.GetRequest(namespace="default"), timeout=30).pods:
                if v.pod.metadata.name == name and v.pod.node_name:
                    return v.pod.node_name
            time.sleep(0.3)
    raise AssertionError(f"pod {name} not bound within {timeout}s")


def other_ca(tmp_path: Path) -> Path:
    """A PKI of another CA with certificates of the same names: a forged identity."""
    make_pki(tmp_path / "forged", identities=[ids.QUEUE_MANAGER], clients=[ids.ADMIN])
    return tmp_path / "forged"


# ------------------------------------------------------------------ the mesh
def test_up_says_tls_and_cli_works_with_local_defaults(mesh) -> None:
    base, out = mesh
    assert "security: mutual TLS between all services" in out
    assert ("Kafka: plaintext to " if EXTERNAL_KAFKA else
            "Kafka: plaintext on 127.0.0.1 (the embedded Tansu 0.6.0 cannot serve TLS)") in out
    st = state(base)
    assert st["tls"] is True
    for key in ("ca", "client_cert", "client_key", "token_file"):
        assert Path(st[key]).is_file(), key
    assert (Path(st["token_file"]).stat().st_mode & 0o777) == 0o600
    assert (Path(st["client_key"]).stat().st_mode & 0o777) == 0o600
    (base / "p.yaml").write_text(pod_yaml("through-tls"))
    r = schedmesh("apply", "-f", "p.yaml", cwd=base)
    assert r.returncode == 0 and "pod/default/through-tls created" in r.stdout, r.stderr
    assert wait_bound(base, "through-tls").startswith("general-")
    r = schedmesh("get", "pods", cwd=base, timeout=30)
    assert r.returncode == 0 and "through-tls" in r.stdout and "general-" in r.stdout, r.stderr


def test_services_refuse_plaintext_and_certificates_of_another_ca(mesh, tmp_path: Path) -> None:
    base, _ = mesh
    forged = other_ca(tmp_path)
    ca = (pki(base) / "ca.crt").read_bytes()
    for name in ("binder", "filter-worker-0", "score-worker-0", "queue-manager", "kubelet-agent"):
        attempts = {
            "plaintext": grpc.insecure_channel(target(base, name)),
            "no client certificate": grpc.secure_channel(target(base, name), grpc.ssl_channel_credentials(ca)),
            # trusts the mesh's CA but presents a certificate "queue-manager" signed by another CA
            "another CA": grpc.secure_channel(target(base, name), grpc.ssl_channel_credentials(
                ca, (forged / "queue-manager.key").read_bytes(), (forged / "queue-manager.crt").read_bytes())),
        }
        for what, ch in attempts.items():
            with ch:
                with pytest.raises(grpc.RpcError) as e:
                    health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
                assert e.value.code() == grpc.StatusCode.UNAVAILABLE, (name, what)
        with channel(target(base, name), files(pki(base), ids.ADMIN)) as ch:  # the user's certificate
            assert health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.SERVING


def test_only_the_queue_manager_may_bind(mesh) -> None:
    base, _ = mesh
    ghost = convert.pod_to_proto(load_text(pod_yaml("ghost"), "ghost.yaml").pods[0])
    ghost.metadata.uid = "ghost-uid"
    req = binder_pb2.BindBatchRequest(client_id="evil", binds=[binder_pb2.BindRequest(
        pod=ghost, node_name="general-0", client_id="evil")])
    for who in (ids.ADMIN, ids.KUBELET_AGENT, ids.FILTER_WORKER, ids.BINDER):
        with channel(target(base, "binder"), files(pki(base), who)) as ch:
            stub = binder_pb2_grpc.BinderStub(ch)
            for call in (lambda: stub.BindBatch(req, timeout=10), lambda: stub.Bind(req.binds[0], timeout=10)):
                with pytest.raises(grpc.RpcError) as e:
                    call()
                assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, who
                assert f"identity {who!r} may not call /schedmesh.v1.Binder/" in e.value.details()
                assert "only queue-manager may" in e.value.details()
    with mesh_channel(state(base)) as ch:  # nothing was bound
        pods = queue_pb2_grpc.SchedulerStub(ch).GetPods(queue_pb2.GetRequest(), timeout=30).pods
    assert "ghost" not in {v.pod.metadata.name for v in pods}


def test_only_the_queue_manager_may_feed_a_shard(mesh) -> None:
    base, _ = mesh
    # The attack of issue 13, on the shards' feeds: a whole cluster of no nodes, numbered past
    # anything the queue-manager has sent, would leave the shard nowhere to put a pod.
    view = spb.ClusterView(client_id="queue-manager")
    view.shard_feed.feeder, view.shard_feed.generation = "attacker", 1 << 40
    probe = convert.pod_to_proto(load_text(pod_yaml("probe"), "probe.yaml").pods[0])
    for who in (ids.ADMIN, ids.SCORE_WORKER, ids.BINDER):
        with channel(target(base, "filter-worker-0"), files(pki(base), who)) as ch:
            with pytest.raises(grpc.RpcError) as e:
                sgrpc.FilterWorkerStub(ch).Filter(spb.FilterRequest(pod=probe, scheduler_name="default-scheduler",
                                                                    view=view, evaluate_all=True), timeout=10)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, who
            assert "may not call /schedmesh.v1.FilterWorker/Filter: only queue-manager may" in e.value.details()
        with channel(target(base, "score-worker-0"), files(pki(base), who)) as ch:
            with pytest.raises(grpc.RpcError) as e:
                sgrpc.ScoreWorkerStub(ch).Score(spb.ScoreRequest(pod=probe, scheduler_name="default-scheduler",
                                                                 view=view, feasible=["general-0"]), timeout=10)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, who
    # The shards were not poisoned: a pod still fits and binds.
    (base / "after.yaml").write_text(pod_yaml("after-attack"))
    assert schedmesh("apply", "-f", "after.yaml", cwd=base).returncode == 0
    assert wait_bound(base, "after-attack").startswith("general-")


def test_scheduler_api_needs_the_token(mesh) -> None:
    base, _ = mesh
    st = state(base)
    token = Path(st["token_file"]).read_text().strip()
    with channel(st["scheduler"], files(pki(base), ids.ADMIN)) as ch:
        stub = queue_pb2_grpc.SchedulerStub(ch)
        for md, expected in ((None, "needs an API token"), ([("authorization", "Bearer wrong")], "not valid"),
                             ([("authorization", token)], "not valid"),  # no "Bearer "
                             ([("authorization", f"Bearer {token}x")], "not valid")):
            with pytest.raises(grpc.RpcError) as e:
                stub.GetPods(queue_pb2.GetRequest(), timeout=10, metadata=md)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, md
            assert expected in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            stub.Apply(queue_pb2.ApplyRequest(manifest=pod_yaml("no-token"), source="x"), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert stub.GetPods(queue_pb2.GetRequest(), timeout=10, metadata=[("authorization", f"Bearer {token}")])
    # the local defaults carry it
    with mesh_channel(st) as ch:
        assert queue_pb2_grpc.SchedulerStub(ch).GetNodes(queue_pb2.GetRequest(), timeout=10).nodes
    # the CLI says what is wrong when the token file no longer matches
    Path(st["token_file"]).write_text("stale\n")
    try:
        r = schedmesh("get", "pods", cwd=base, timeout=30)
        assert r.returncode == 2 and "the API token is not valid" in r.stderr, r.stderr
    finally:
        Path(st["token_file"]).write_text(token + "\n")


# ------------------------------------------------------------------ without a mesh
def test_plaintext_only_on_loopback(monkeypatch) -> None:
    import asyncio
    from schedmesh.mesh.runtime import ServiceProcess
    for k in ("SCHEDMESH_TLS_CA", "SCHEDMESH_TLS_CERT", "SCHEDMESH_TLS_KEY", "SCHEDMESH_API_TOKEN",
              "SCHEDMESH_API_TOKEN_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SCHEDMESH_METRICS_PORT", "-1")

    async def start(host: str) -> None:
        proc = ServiceProcess("test-service", 0, host=host)
        try:
            await proc.start()
        finally:
            await proc.server.stop(0)

    with pytest.raises(RuntimeError, match="refusing plaintext gRPC on 0.0.0.0 .*SCHEDMESH_TLS_CA"):
        asyncio.run(start("0.0.0.0"))
    asyncio.run(start("127.0.0.1"))  # loopback plaintext is allowed
    with pytest.raises(CredentialsError, match="refusing plaintext gRPC to binder:50051"):
        channel("binder:50051", None)
    monkeypatch.setenv("SCHEDMESH_TLS_CA", "/x/ca.crt")
    with pytest.raises(CredentialsError, match="SCHEDMESH_TLS_CERT, SCHEDMESH_TLS_KEY not set"):
        TLSFiles.from_env()


def test_container_health_check_uses_the_container_certificate(mesh) -> None:
    base, _ = mesh
    env = plain_env()
    check = [sys.executable, "-m", "schedmesh.security.healthcheck", target(base, "binder")]
    ok = subprocess.run(check, env={**env, **files(pki(base), ids.BINDER).env()}, capture_output=True, text=True,
                        timeout=30)
    assert ok.returncode == 0, ok.stderr
    plain = subprocess.run(check, env=env, capture_output=True, text=True, timeout=30)
    assert plain.returncode == 1 and "UNAVAILABLE" in plain.stderr


def test_preemption_and_controller_manager_admit_only_the_queue_manager(mesh) -> None:
    """Preemption (it evicts and nominates) and the controller-manager's Policy (the Eviction API,
    cordon, taint: reached through the queue-manager, which checks the user's token) refuse other
    identities; the queue-manager's Policy, the user-facing one, needs the token."""
    base, _ = mesh
    names = {p["name"] for p in state(base)["procs"]}
    if not {"preemption", "controller-manager"} <= names:
        pytest.skip("this mesh has no preemption service or controller-manager")
    from schedmesh.v1 import policy_pb2, policy_pb2_grpc, preemption_pb2, preemption_pb2_grpc
    probe = convert.pod_to_proto(load_text(pod_yaml("preemptor"), "p.yaml").pods[0])
    for who in (ids.ADMIN, ids.KUBELET_AGENT, ids.BINDER):
        with channel(target(base, "preemption"), files(pki(base), who)) as ch:
            with pytest.raises(grpc.RpcError) as e:
                preemption_pb2_grpc.PreemptionStub(ch).Preempt(
                    preemption_pb2.PreemptRequest(pod=probe, scheduler_name="default-scheduler"), timeout=10)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, who
            assert "/schedmesh.v1.Preemption/Preempt: only queue-manager may" in e.value.details()
        with channel(target(base, "controller-manager"), files(pki(base), who)) as ch:
            with pytest.raises(grpc.RpcError) as e:
                policy_pb2_grpc.PolicyStub(ch).Evict(policy_pb2.EvictRequest(namespace="default", name="x"),
                                                     timeout=10)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, who
            assert "/schedmesh.v1.Policy/Evict: only queue-manager may" in e.value.details()
    with channel(state(base)["scheduler"], files(pki(base), ids.ADMIN)) as ch:
        with pytest.raises(grpc.RpcError) as e:
            policy_pb2_grpc.PolicyStub(ch).Evict(policy_pb2.EvictRequest(namespace="default", name="x"), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
