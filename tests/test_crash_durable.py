"""Durable local state (issue 13, point 3): with the embedded, memory-only broker, a whole-mesh
`down` then `up --restore` keeps what users applied (the queue-manager's store under
.schedmesh/applied is applied again; a plain `up` starts empty and moves the store aside): the pods come back and are scheduled again, their PriorityClass and
RuntimeClass before them; a pod deleted before `down` stays deleted; `up` and `down` say what is kept and what is
not; the first run's logs are still there.

With SCHEDMESH_TEST_KAFKA=testcontainers (or tansu) the mesh runs on a broker given with
`up --kafka`, which keeps its topics across down/up: the same checks hold with a plain second
`up` (--restore is the embedded broker's), and nothing is kept in .schedmesh/applied."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from schedmesh.local.supervisor import EMBEDDED_BROKER_LOSES
from schedmesh.security.local import mesh_channel
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import EXTERNAL_KAFKA, mesh_stop_note
from tests.test_supervision import _env, mesh_pids, schedmesh, state, up, wait_all_dead

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find processes")

MANIFEST = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: keep-high}
value: 1000
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: keep-runtime}
handler: runc
overhead: {podFixed: {cpu: 10m}}
""" + "".join(f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  priorityClassName: keep-high
  runtimeClassName: keep-runtime
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: 100m}}}}}}]
""" for name in ("keep-0", "keep-1", "keep-2", "gone-0"))


def stub(base: Path) -> queue_pb2_grpc.SchedulerStub:
    return queue_pb2_grpc.SchedulerStub(mesh_channel(state(base)))


def pods(base: Path) -> dict[str, queue_pb2.PodView]:
    return {v.pod.metadata.name: v for v in stub(base).GetPods(queue_pb2.GetRequest(), timeout=20).pods}


def wait_pods(base: Path, check, what: str, timeout: float = 90) -> dict[str, queue_pb2.PodView]:
    deadline = time.time() + timeout
    while True:
        now = pods(base)
        if check(now):
            return now
        assert time.time() < deadline, f"not within {timeout}s: {what}; pods: " + \
            str({n: v.pod.node_name for n, v in now.items()})
        time.sleep(0.5)


def down(base: Path) -> str:
    pids = mesh_pids(base)
    r = schedmesh("down", cwd=base)
    assert r.returncode == 0, r.stderr
    wait_all_dead(pids, timeout=30)
    return r.stdout + r.stderr


@pytest.mark.timeout(400)
def test_down_then_up_keeps_what_was_applied(tmp_path: Path) -> None:
    env = _env(SCHEDMESH_UNHEALTHY_SECONDS="60")
    first = up(tmp_path, env=env)
    note = mesh_stop_note(state(tmp_path))
    assert note in first.stdout and (note == EMBEDDED_BROKER_LOSES) == (not EXTERNAL_KAFKA)
    first_logs = Path(state(tmp_path)["log_dir"])
    try:
        stub(tmp_path).Apply(queue_pb2.ApplyRequest(manifest=MANIFEST, source="keep.yaml"), timeout=30)
        wait_pods(tmp_path, lambda p: all(p.get(n) and p[n].pod.node_name for n in ("keep-0", "keep-1", "keep-2",
                                                                                    "gone-0")), "all bound")
        stub(tmp_path).Delete(queue_pb2.DeleteRequest(kind="pod", namespace="default", name="gone-0"), timeout=20)
        wait_pods(tmp_path, lambda p: "gone-0" not in p, "gone-0 deleted")
    finally:
        said = down(tmp_path)
    assert note in said
    # the embedded broker's topics are gone: the queue-manager's store keeps what was applied
    assert (tmp_path / ".schedmesh" / "applied" / "applied.jsonl").exists() == (not EXTERNAL_KAFKA)

    up(tmp_path, *([] if EXTERNAL_KAFKA else ["--restore"]), env=env)
    try:
        now = wait_pods(tmp_path, lambda p: all(p.get(n) and p[n].pod.node_name for n in ("keep-0", "keep-1",
                                                                                       "keep-2")),
                        "the applied pods back and scheduled again")
        assert "gone-0" not in now, "a pod deleted before down came back"
        assert {now[n].pod.priority for n in ("keep-0", "keep-1", "keep-2")} == {1000}
        assert {now[n].pod.overhead["cpu"] for n in ("keep-0", "keep-1", "keep-2")} == {"0.01"}
        again = stub(tmp_path).Apply(queue_pb2.ApplyRequest(manifest=MANIFEST, source="keep.yaml"), timeout=30)
        assert "priorityclass/keep-high unchanged" in again.applied and "pod/default/keep-0 unchanged" in again.applied
        assert "runtimeclass.node.k8s.io/keep-runtime unchanged" in again.applied
        assert first_logs.is_dir() and any(first_logs.iterdir()), "up deleted the earlier run's logs"
        assert Path(state(tmp_path)["log_dir"]) != first_logs
    finally:
        down(tmp_path)
