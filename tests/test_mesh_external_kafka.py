"""`schedmesh up --kafka BOOTSTRAP`: the mesh on a broker it did not start (here an embedded Tansu the
test starts through mesh_harness.kafka(); Apache Kafka with SCHEDMESH_TEST_KAFKA=testcontainers).
No broker process is supervised, mesh.json records the broker, `up` says which broker and that
durability is then the broker's; pods applied are bound; `down` leaves the broker running with the
pods, their bindings and the applied objects on its topics, and the next `up --kafka` starts from
them. Names an API server refuses are applied with kubectl's warning (the default); the CLI waits
for a queue-manager the supervisor is restarting. `up --kafka` refuses --restore and a broker that
does not answer, before starting anything."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedmesh.bus import EventConsumer
from schedmesh.local.supervisor import EMBEDDED_BROKER_LOSES, external_broker_keeps, kafka_answers
from schedmesh.mesh.cluster_cache import TOPIC_PODS
from schedmesh.mesh.records import PodTopicFold
from schedmesh.security.local import mesh_channel
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import alive, children, free_port, kafka, plain_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find processes")

SCHEDMESH = [sys.executable, "-m", "schedmesh.cli.main"]
POOL = """
pools:
- name: node
  count: 3
  cpu: "4"
  memory: 16Gi
  pods: 110
  zones: [zone-a, zone-b]
"""
NAMES = ("ext-0", "ext-1", "ext-2", "ext_odd")  # ext_odd: a name an API server refuses (an underscore)
PODS = "---\n".join(f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: 100m}}}}}}]
""" for name in NAMES)


def _env(**extra: str) -> dict:
    return {**plain_env(), **extra}


def schedmesh(*args: str, cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SCHEDMESH, *args], cwd=cwd, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


def state(base: Path) -> dict:
    return json.loads((base / ".schedmesh" / "mesh.json").read_text())


def bound(base: Path) -> dict[str, str]:
    with mesh_channel(state(base)) as ch:
        return {v.pod.metadata.name: v.pod.node_name
                for v in queue_pb2_grpc.SchedulerStub(ch).GetPods(queue_pb2.GetRequest(), timeout=20).pods
                if v.pod.node_name}


def wait_bound(base: Path, names: tuple[str, ...], timeout: float = 90) -> dict[str, str]:
    deadline = time.time() + timeout
    while True:
        now = bound(base)
        if set(names) <= set(now):
            return now
        assert time.time() < deadline, f"not bound within {timeout}s: {set(names) - set(now)}"
        time.sleep(0.5)


async def topic_pods(bootstrap: str) -> dict[str, str]:
    """namespace/name -> node of every live pod on the broker's pods topic."""
    fold = PodTopicFold()
    async with EventConsumer(bootstrap, [TOPIC_PODS], client_id="test-external-kafka") as consumer:
        for r in await consumer.catch_up(60):
            fold.add(r.value)
    return {name: fold.node.get(uid, "") for uid, name in fold.names.items() if uid not in fold.deleted}


def broker_answers(bootstrap: str) -> bool:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return kafka_answers(int(port), 5.0, host)


def down(base: Path) -> str:
    s = state(base)
    pids = {s["supervisor_pid"], *(p["pid"] for p in s["procs"])}
    r = schedmesh("down", cwd=base, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    deadline = time.time() + 30
    while any(alive(p) for p in pids):
        assert time.time() < deadline, f"still alive after down: {sorted(p for p in pids if alive(p))}"
        time.sleep(0.2)
    return r.stdout + r.stderr


@pytest.mark.timeout(600)
def test_up_on_a_running_broker_and_down_leaves_it_with_the_pods(tmp_path: Path) -> None:
    (tmp_path / "pool.yaml").write_text(POOL)
    (tmp_path / "pods.yaml").write_text(PODS)
    with kafka() as bootstrap:
        r = schedmesh("up", "--detach", "--pool", "pool.yaml", "--kafka", bootstrap, cwd=tmp_path, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        try:
            assert f"using the Kafka broker at {bootstrap} (--kafka): not started, supervised or stopped" in r.stderr
            assert f"broker: {bootstrap} (external: --kafka)" in r.stdout
            assert "durability is the broker's" in r.stdout and external_broker_keeps(bootstrap) in r.stdout
            assert EMBEDDED_BROKER_LOSES not in r.stdout + r.stderr and "embedded" not in r.stdout
            s = state(tmp_path)
            assert (s["bootstrap"], s["external_kafka"]) == (bootstrap, True)
            names = [p["name"] for p in s["procs"]]
            assert names == ["binder", "kubelet-agent", "preemption", "controller-manager", "queue-manager"], names
            assert not any("tansu" in Path(f"/proc/{c}/exe").resolve().name
                           for c in children(s["supervisor_pid"]) if Path(f"/proc/{c}").exists()), \
                "the supervisor started a broker"
            services = schedmesh("get", "services", cwd=tmp_path)
            assert services.returncode == 0, services.stderr
            row = next(line for line in services.stdout.splitlines() if line.startswith("broker (--kafka)"))
            assert bootstrap in row and "SERVING" in row

            # the default (lenient) names: created, with the API server's refusal as a warning
            r = schedmesh("apply", "-f", "pods.yaml", cwd=tmp_path)
            assert r.returncode == 0, r.stderr
            assert [f"pod/default/{n} created" for n in NAMES] == r.stdout.split("\n")[:len(NAMES)]
            assert 'Warning: pod/default/ext_odd: metadata.name: Invalid value: "ext_odd": a lowercase RFC 1123 ' \
                   "subdomain must consist of" in r.stderr
            assert "(a Kubernetes API server refuses it; accepted here, --strict-names refuses it)" in r.stderr
            placed = wait_bound(tmp_path, NAMES)

            # the queue-manager killed: the CLI waits while the supervisor restarts it, then answers
            qm = next(p for p in state(tmp_path)["procs"] if p["name"] == "queue-manager")
            os.kill(qm["pid"], signal.SIGKILL)
            r = schedmesh("get", "pods", cwd=tmp_path)
            assert r.returncode == 0, r.stderr
            assert all(n in r.stdout for n in NAMES), r.stdout
            # The supervisor may have restarted it before the CLI connected (then nothing is said);
            # the message itself is checked deterministically in tests/test_cli_unreachable.py.
            assert "schedmesh down" not in r.stderr, r.stderr
            assert not r.stderr.strip() or "is restarting the queue-manager" in r.stderr, r.stderr
        finally:
            said = down(tmp_path)
        assert external_broker_keeps(bootstrap) in said and EMBEDDED_BROKER_LOSES not in said
        assert not (tmp_path / ".schedmesh" / "mesh.json").exists()

        # the broker still runs, the pods and their bindings are on its topics; nothing kept locally
        assert broker_answers(bootstrap), "down stopped the broker given with --kafka"
        on_topic = asyncio.run(topic_pods(bootstrap))
        assert {n: on_topic.get(f"default/{n}") for n in NAMES} == {n: placed[n] for n in NAMES}
        assert not (tmp_path / ".schedmesh" / "applied").exists(), "the applied store is the embedded broker's"

        # the next `up --kafka` (here through $SCHEDMESH_KAFKA) starts from what the topics hold
        r = schedmesh("up", "--detach", "--pool", "pool.yaml", cwd=tmp_path, timeout=300,
                      env=_env(SCHEDMESH_KAFKA=bootstrap))
        assert r.returncode == 0, r.stdout + r.stderr
        try:
            assert state(tmp_path)["bootstrap"] == bootstrap
            assert "moved to" not in r.stdout, "a plain `up --kafka` leaves .schedmesh/applied alone"
            again = wait_bound(tmp_path, NAMES)
            assert {n: again[n] for n in NAMES} == {n: placed[n] for n in NAMES}
        finally:
            down(tmp_path)
        assert broker_answers(bootstrap)


def test_up_kafka_refuses_restore_and_a_broker_that_does_not_answer(tmp_path: Path) -> None:
    (tmp_path / "pool.yaml").write_text(POOL)
    r = schedmesh("up", "--detach", "--restore", "--kafka", "127.0.0.1:9092", cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and "--restore" in r.stderr and "with --kafka the broker's topics keep" in r.stderr
    r = schedmesh("up", "--detach", "--restore", cwd=tmp_path, timeout=60, env=_env(SCHEDMESH_KAFKA="127.0.0.1:9092"))
    assert r.returncode != 0 and "with --kafka the broker's topics keep" in r.stderr, "$SCHEDMESH_KAFKA is --kafka"

    nobody = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    r = schedmesh("up", "--detach", "--pool", "pool.yaml", "--kafka", nobody, cwd=tmp_path, timeout=60)
    assert r.returncode != 0
    assert f"--kafka: no Kafka broker answers at {nobody}" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 30, "it should fail before starting any service"
    assert not (tmp_path / ".schedmesh" / "mesh.json").exists()
    r = schedmesh("up", "--detach", "--kafka", "localhost", cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and "'localhost' is not host:port" in r.stderr, r.stderr
