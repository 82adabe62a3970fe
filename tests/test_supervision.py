"""Supervision of the local mesh, with real processes: `schedmesh up` restarts a service that dies
or stops answering (on its port, log appended, restart recorded), the broker included (its
Tansu child never outlives the wrapper); `schedmesh down` leaves no process of the mesh alive,
even when the supervisor is gone; `up` keeps the previous run's logs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedmesh.local.supervisor import EMBEDDED_BROKER_LOSES, kafka_answers
from schedmesh.security.local import mesh_channel
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import (EXTERNAL_KAFKA, SKIP_EMBEDDED_BROKER_KILL, alive, children, mesh_stop_note,
                                up_kafka_args)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find processes")

SCHEDMESH = [sys.executable, "-m", "schedmesh.cli.main"]
UNHEALTHY_SECONDS = 12  # how long the module's mesh lets a service stay unhealthy before restarting it

POOL = """
pools:
- name: node
  count: 3
  cpu: "4"
  memory: 16Gi
  pods: 110
  zones: [zone-a, zone-b]
"""


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, **extra}


def schedmesh(*args: str, cwd: Path, env: Optional[dict] = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*SCHEDMESH, *args], cwd=cwd, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


def up(base: Path, *args: str, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    (base / "pool.yaml").write_text(POOL)
    r = schedmesh("up", "--detach", "--pool", "pool.yaml", *up_kafka_args(base), *args, cwd=base, env=env,
                  timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def state(base: Path) -> dict:
    return json.loads((base / ".schedmesh" / "mesh.json").read_text())


def proc(base: Path, name: str) -> dict:
    return next(p for p in state(base)["procs"] if p["name"] == name)


def mesh_pids(base: Path) -> set[int]:
    """The supervisor, every service and the broker's Tansu child."""
    s = state(base)
    pids = {s["supervisor_pid"], *(p["pid"] for p in s["procs"])}
    broker = next((p["pid"] for p in s["procs"] if p["name"] == "broker"), 0)  # none with up --kafka
    return pids | (set(children(broker)) if broker else set())


def serving(base: Path, port: int) -> bool:
    with mesh_channel(state(base), f"127.0.0.1:{port}") as ch:  # the user's certificate (mutual TLS)
        try:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2).status == \
                health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError:
            return False


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while not check():
        if time.time() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(0.2)


def wait_restarted(base: Path, name: str, old: dict, timeout: float = 30) -> dict:
    """Wait until the supervisor has started `name` again on its port and it is healthy."""
    def back() -> bool:
        now = proc(base, name)
        return now["pid"] != old["pid"] and alive(now["pid"]) and (
            serving(base, now["port"]) if now["health"] else kafka_answers(now["port"]))
    wait_for(f"{name} restarted and healthy", back, timeout)
    now = proc(base, name)
    assert now["port"] == old["port"]
    assert now["restarts"] > old["restarts"]
    assert f"pid {old['pid']}" in now["last_restart"]
    return now


def wait_all_dead(pids: set[int], timeout: float = 15) -> None:
    wait_for(f"processes {sorted(p for p in pids if alive(p))} gone", lambda: not any(alive(p) for p in pids),
             timeout)


def bind_one(base: Path, name: str, timeout: float = 60) -> str:
    """Apply a pod through the Scheduler API and return the node it was bound to."""
    with mesh_channel(state(base)) as ch:  # the user's certificate and the API token
        stub = queue_pb2_grpc.SchedulerStub(ch)
        manifest = (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\n"
                    "spec:\n  containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m}}}]\n")
        deadline = time.time() + timeout
        while True:  # the queue-manager may itself be catching up after a restart
            try:
                stub.Apply(queue_pb2.ApplyRequest(manifest=manifest, source="test"), timeout=10)
                break
            except grpc.RpcError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        while time.time() < deadline:
            try:
                for v in stub.GetPods(queue_pb2.GetRequest(), timeout=10).pods:
                    if v.pod.metadata.name == name and v.pod.node_name:
                        return v.pod.node_name
            except grpc.RpcError:
                pass
            time.sleep(0.3)
    raise AssertionError(f"pod {name} not bound within {timeout:.0f}s\n{log_tails(base)}")


def log_tails(base: Path, lines: int = 40) -> str:
    """The end of each service's log, for a failure that only shows on a loaded CI machine."""
    out = []
    for p in state(base)["procs"]:
        try:
            tail = Path(p["log"]).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        out.append(f"--- {p['name']} ({p['log']})\n" + "\n".join(tail))
    return "\n".join(out)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    base: Path = tmp_path_factory.mktemp("supervised")
    up(base, "--filter-workers", "1", "--score-workers", "1",
       env=_env(SCHEDMESH_UNHEALTHY_SECONDS=str(UNHEALTHY_SECONDS)))
    try:
        yield base
    finally:
        pids = mesh_pids(base)
        r = schedmesh("down", cwd=base)
        assert r.returncode == 0, r.stderr
        wait_all_dead(pids)


@pytest.mark.timeout(90)
def test_killed_filter_worker_comes_back_on_its_port(mesh: Path) -> None:
    old = proc(mesh, "filter-worker-0")
    os.kill(old["pid"], signal.SIGKILL)
    new = wait_restarted(mesh, "filter-worker-0", old)
    assert "SIGKILL" in new["last_restart"]
    log = Path(new["log"]).read_text()
    assert log.count("listening on") >= 2, "the log was appended to, not truncated"
    assert "schedmesh supervisor" in log
    supervisor_log = Path(state(mesh)["supervisor_log"]).read_text()
    assert f"restarted filter-worker-0 on 127.0.0.1:{old['port']}" in supervisor_log


@pytest.mark.timeout(240)
def test_a_restarted_queue_manager_answers_only_once_it_has_read_the_cluster(mesh: Path) -> None:
    """Its server listens before its cache has replayed the topics; a call in between was
    answered from the empty cache (`get pods` listed nothing). Now such a call is refused with
    UNAVAILABLE (ServingGate), which every caller sends again, and each answer lists the pod
    bound before the restart. A fresh channel per call: a channel's reconnect backoff would skip
    the window. The window lasts as long as the replay of a small cluster (tens of ms): a restart
    whose window no call fell into is made again, up to three times."""
    name = "bound-before-qm-restart"
    node = bind_one(mesh, name)
    refusals: list[str] = []
    for _restart in range(3):
        old = proc(mesh, "queue-manager")
        os.kill(old["pid"], signal.SIGKILL)
        answers_after_restart = 0
        deadline = time.time() + 60
        while answers_after_restart < 3:
            assert time.time() < deadline, f"no answers from the restarted queue-manager; refusals: {refusals[-3:]}"
            with mesh_channel(state(mesh)) as ch:
                try:
                    pods = {v.pod.metadata.name: v.pod.node_name
                            for v in queue_pb2_grpc.SchedulerStub(ch).GetPods(queue_pb2.GetRequest(), timeout=5).pods}
                except grpc.RpcError as e:
                    assert e.code() is grpc.StatusCode.UNAVAILABLE, e
                    refusals.append(e.details() or "")
                else:
                    assert pods.get(name) == node, f"answered without the pod bound before the restart: {len(pods)} pods"
                    if proc(mesh, "queue-manager")["pid"] != old["pid"]:
                        answers_after_restart += 1
            time.sleep(0.02)
        if any("queue-manager is not serving: starting" in d for d in refusals):
            break
    assert any("queue-manager is not serving: starting" in d for d in refusals), refusals[-5:]


def _cpus_of(pid: int) -> dict[int, str]:
    """Each thread of `pid` -> its Cpus_allowed_list."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue  # a thread that ended meanwhile
        out[int(tid)] = next(line.split()[1] for line in text.splitlines() if line.startswith("Cpus_allowed_list"))
    return out


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="CPU pinning needs Linux and two CPUs")
def test_the_queue_manager_runs_on_a_cpu_of_its_own(mesh: Path) -> None:
    """`up` (--cpu-pinning auto): every thread of the queue-manager on the last CPU, every other
    process of the mesh (the broker's Tansu and the queue-manager's admission worker included) on
    the others; so is a service the supervisor started again. (The resource tracker that
    multiprocessing starts beside the admission worker, idle, stays where the queue-manager is.)"""
    from schedmesh.mesh.cpu_affinity import format_cpus
    cpus = sorted(os.sched_getaffinity(0))
    own, others = format_cpus(cpus[-1:]), format_cpus(cpus[:-1])
    s = state(mesh)
    qm = proc(mesh, "queue-manager")["pid"]
    wait_for(f"queue-manager threads on CPU {own}", lambda: set(_cpus_of(qm).values()) == {own}, 20)
    helpers = [c for c in children(qm) if b"multiprocessing.spawn" in Path(f"/proc/{c}/cmdline").read_bytes()]
    assert helpers, "the queue-manager's admission worker"
    pids = [p["pid"] for p in s["procs"] if p["name"] != "queue-manager"] + helpers + [s["supervisor_pid"]]
    broker = next((p["pid"] for p in s["procs"] if p["name"] == "broker"), 0)
    pids += children(broker) if broker else []
    for pid in pids:  # a process pins itself as it starts (a restarted one may be starting)
        deadline = time.time() + 20
        while set(_cpus_of(pid).values()) != {others}:
            assert time.time() < deadline, (pid, _cpus_of(pid), Path(f"/proc/{pid}/cmdline").read_text()[:80])
            time.sleep(0.1)


@pytest.mark.timeout(120)
def test_killed_binder_comes_back_and_pods_bind(mesh: Path) -> None:
    old = proc(mesh, "binder")
    os.kill(old["pid"], signal.SIGKILL)
    wait_restarted(mesh, "binder", old)
    assert bind_one(mesh, "after-binder-restart").startswith("node-")


@pytest.mark.timeout(120)
@pytest.mark.skipif(bool(EXTERNAL_KAFKA), reason=SKIP_EMBEDDED_BROKER_KILL)
def test_killed_broker_wrapper_leaves_no_tansu_and_the_broker_comes_back(mesh: Path) -> None:
    old = proc(mesh, "broker")
    tansu = children(old["pid"])
    assert tansu, "the broker wrapper runs Tansu as its child"
    os.kill(old["pid"], signal.SIGKILL)
    wait_all_dead(set(tansu), timeout=5)
    wait_restarted(mesh, "broker", old)
    # topics came back empty; the agent re-registers its nodes and scheduling goes on
    assert bind_one(mesh, "after-broker-restart", timeout=90).startswith("node-")


@pytest.mark.timeout(90)
def test_service_that_stops_answering_is_restarted(mesh: Path) -> None:
    old = proc(mesh, "score-worker-0")
    os.kill(old["pid"], signal.SIGSTOP)  # alive, but its health service no longer answers
    try:
        new = wait_restarted(mesh, "score-worker-0", old, timeout=UNHEALTHY_SECONDS + 20)
    finally:
        if alive(old["pid"]):
            os.kill(old["pid"], signal.SIGKILL)
    assert "unhealthy" in new["last_restart"]
    assert not alive(old["pid"])


@pytest.mark.timeout(150)
def test_down_stops_everything_even_without_supervisor_and_up_keeps_earlier_logs(tmp_path: Path) -> None:
    up(tmp_path)  # no filter/score workers: the queue-manager evaluates itself
    try:
        assert [p["name"] for p in state(tmp_path)["procs"]] == [*([] if EXTERNAL_KAFKA else ["broker"]), "binder",
                                                                "kubelet-agent", "preemption", "controller-manager",
                                                                "queue-manager"]
        old = proc(tmp_path, "binder")
        os.kill(old["pid"], signal.SIGKILL)
        wait_restarted(tmp_path, "binder", old)
        first_logs = Path(state(tmp_path)["log_dir"])
        pids = mesh_pids(tmp_path)  # the restarted binder's new pid among them
        note = mesh_stop_note(state(tmp_path))  # EMBEDDED_BROKER_LOSES, unless up --kafka
        r = schedmesh("down", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert note in r.stdout
        wait_all_dead(pids)
        assert not (tmp_path / ".schedmesh" / "mesh.json").exists()

        r = up(tmp_path)
        assert first_logs.is_dir() and (first_logs / "binder.log").is_file(), "the first run's logs are kept"
        assert str(first_logs) in r.stdout, "up says where the earlier logs are"
        assert Path(state(tmp_path)["log_dir"]) != first_logs
        assert note in r.stdout

        # without its supervisor, down still stops every recorded process and the broker's Tansu
        pids = mesh_pids(tmp_path)
        os.kill(state(tmp_path)["supervisor_pid"], signal.SIGKILL)
        r = schedmesh("down", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "supervisor" in r.stderr and "is gone" in r.stderr
        wait_all_dead(pids)
    finally:
        if (tmp_path / ".schedmesh" / "mesh.json").exists():
            schedmesh("down", cwd=tmp_path)


@pytest.mark.timeout(150)
def test_foreground_up_says_what_it_restarted_and_down_stops_it(tmp_path: Path) -> None:
    (tmp_path / "pool.yaml").write_text(POOL)
    err = open(tmp_path / "up.err", "w")
    fg = subprocess.Popen([*SCHEDMESH, "up", "--pool", "pool.yaml"], cwd=tmp_path, env=_env(),
                          stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for("the mesh running", lambda: (tmp_path / ".schedmesh" / "mesh.json").exists()
                 and state(tmp_path)["status"] == "running", timeout=120)
        assert state(tmp_path)["supervisor_pid"] == fg.pid
        old = proc(tmp_path, "kubelet-agent")
        os.kill(old["pid"], signal.SIGKILL)
        wait_restarted(tmp_path, "kubelet-agent", old)
        wait_for("the restart said on stderr",
                 lambda: f"restarted kubelet-agent on 127.0.0.1:{old['port']}" in (tmp_path / "up.err").read_text())
        pids = mesh_pids(tmp_path)
        r = schedmesh("down", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert fg.wait(30) == 0
        wait_all_dead(pids)
        assert EMBEDDED_BROKER_LOSES in (tmp_path / "up.err").read_text()
    finally:
        if fg.poll() is None:
            fg.send_signal(signal.SIGINT)
            fg.wait(60)
        err.close()
