"""Workloads keep their replicas through the real mesh (broker, binder, controller-manager,
queue-manager and a kubelet agent of three nodes): a Deployment's pod evicted through the
Eviction API (what `schedmesh drain` does) is replaced by a pod with a new generated name, which
the queue-manager binds; a StatefulSet's pod deleted comes back under its name (a new pod);
re-applying the manifest makes nothing twice; deleting the Deployment deletes its pods, and no
replacement follows."""
from __future__ import annotations

import re
import time
from typing import Optional

import grpc
import pytest

from schedmesh.broker.embedded import EmbeddedBroker
from schedmesh.v1 import policy_pb2, policy_pb2_grpc, queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port

POOL = """
pools:
- name: node
  count: 3
  cpu: "4"
  memory: 8Gi
"""

MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: c, image: postgres, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""


def wait(what: str, check, timeout: float = 60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {timeout}s")


def never(what: str, check, seconds: float) -> None:
    """`check()` stays false for `seconds` (ten and more controller passes at --sync-period 0.2):
    what must not happen, looked for all along rather than once after a sleep."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        got = check()
        assert not got, f"{what}: {got}"
        time.sleep(0.2)


@pytest.mark.timeout(300)
def test_a_deployment_and_a_stateful_set_keep_their_replicas(tmp_path) -> None:
    (tmp_path / "pool.yaml").write_text(POOL)
    procs: list[ServiceProc] = []
    with EmbeddedBroker(log_path=tmp_path / "broker.log") as broker:
        common = ["--bootstrap", broker.bootstrap_servers]

        def start(module: str, args: list[str], env: Optional[dict] = None) -> ServiceProc:
            p = ServiceProc(module, args, free_port(), env=env, log_dir=tmp_path).start()
            procs.append(p)
            p.wait_serving(120)
            return p
        try:
            binder = start("services.binder", common)
            cm = start("services.controller_manager", [*common, "--sync-period", "0.2"])
            qm = start("services.queue_manager", [*common, "--binder", binder.target],
                       env={"SCHEDMESH_CONTROLLER_MANAGER": cm.target})
            start("services.kubelet_agent", [*common, "--pool", str(tmp_path / "pool.yaml"), "--name", "agent-wl",
                                             "--start-delay", "0.2"])
            stub = queue_pb2_grpc.SchedulerStub(grpc.insecure_channel(qm.target))
            # through the queue-manager, as the CLI's evict and drain call it: it forwards its view's
            # offsets, so a pod it lists is known to the controller-manager when the call is answered
            policy = policy_pb2_grpc.PolicyStub(grpc.insecure_channel(qm.target))
            wait("the pool's nodes", lambda: len(stub.GetNodes(queue_pb2.GetRequest(), timeout=30).nodes) == 3)

            def pods(prefix: str) -> dict[str, queue_pb2.PodView]:
                """The live pods whose names start with `prefix` (not ended, not being deleted)."""
                return {v.pod.metadata.name: v for v in stub.GetPods(queue_pb2.GetRequest(), timeout=30).pods
                        if v.pod.metadata.name.startswith(prefix) and v.pod.phase in ("Pending", "Running")
                        and not v.pod.metadata.deletion_timestamp}

            def running(prefix: str, n: int) -> dict[str, queue_pb2.PodView]:
                now = pods(prefix)
                return now if len(now) == n and all(v.pod.phase == "Running" and v.pod.node_name
                                                    for v in now.values()) else {}

            applied = list(stub.Apply(queue_pb2.ApplyRequest(manifest=MANIFEST, source="app.yaml"), timeout=60).applied)
            assert applied[:2] == ["deployment.apps/default/web created", "statefulset.apps/default/db created"]
            first = wait("the Deployment's 3 pods Running", lambda: running("web-", 3), 120)
            wait("the StatefulSet's 2 pods Running", lambda: running("db-", 2), 120)
            (rs_name,) = {v.pod.metadata.owner_references[0].name for v in first.values()}

            # drained: evicted through the Eviction API; a replacement with a new name is bound
            victim = sorted(first)[0]
            assert policy.Evict(policy_pb2.EvictRequest(namespace="default", name=victim), timeout=30).code == 201
            after = wait("a replacement bound", lambda: (lambda now: now if victim not in now else {})(
                running("web-", 3)), 120)
            (replacement,) = set(after) - set(first)
            assert re.fullmatch(f"{rs_name}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", replacement), replacement
            assert [(r.kind, r.name, r.controller) for r in after[replacement].pod.metadata.owner_references] == [
                ("ReplicaSet", rs_name, True)]

            # a StatefulSet's pod deleted comes back under its name, as a new pod
            old_uid = pods("db-")["db-1"].pod.metadata.uid
            stub.Delete(queue_pb2.DeleteRequest(kind="pod", namespace="default", name="db-1"), timeout=30)
            wait("db-1 made again and Running", lambda: (lambda now: now.get("db-1") is not None and now[
                "db-1"].pod.metadata.uid != old_uid)(running("db-", 2)), 120)

            # the manifest applied again makes no pod (the evicted one's name is not made again)
            again = list(stub.Apply(queue_pb2.ApplyRequest(manifest=MANIFEST, source="app.yaml"), timeout=60).applied)
            assert again[:2] == ["deployment.apps/default/web unchanged", "statefulset.apps/default/db unchanged"]
            never("a pod made twice or lost", lambda: (set(pods("web-")) ^ set(after)) or len(pods("db-")) != 2, 3)

            # deleting the Deployment deletes its pods; nothing replaces them
            deleted = stub.Delete(queue_pb2.DeleteRequest(kind="deployment", namespace="default", name="web"),
                                  timeout=30)
            assert deleted.result == 'deployment.apps "web" deleted'
            wait("its pods gone", lambda: not [n for n in (v.pod.metadata.name for v in stub.GetPods(
                queue_pb2.GetRequest(), timeout=30).pods) if n.startswith("web-")], 120)
            never("a pod of the deleted Deployment came back", lambda: [
                v.pod.metadata.name for v in stub.GetPods(queue_pb2.GetRequest(), timeout=30).pods
                if v.pod.metadata.name.startswith("web-")], 3)
            assert len(running("db-", 2)) == 2
        finally:
            for p in reversed(procs):
                p.stop()
