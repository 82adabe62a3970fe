"""A DaemonSet through the real mesh (broker, binder, controller-manager, queue-manager and a
kubelet agent of three nodes, one tainted NoSchedule): apply publishes it, the controller-manager
makes one pod per eligible node, the queue-manager schedules each to its node, exactly two are
bound and run; re-applying it is unchanged; deleting it deletes its pods."""
from __future__ import annotations

import time

import grpc
import pytest

from schedmesh.broker.embedded import EmbeddedBroker
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port

POOL = """
pools:
- name: plain
  count: 2
  cpu: "4"
  memory: 8Gi
- name: db
  count: 1
  cpu: "4"
  memory: 8Gi
  taints: [{key: dedicated, value: db, effect: NoSchedule}]
"""

DAEMON_SET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: logs, namespace: default}
spec:
  selector: {matchLabels: {app: logs}}
  template:
    metadata: {labels: {app: logs}}
    spec:
      containers: [{name: c, image: fluent-bit, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
"""


def wait(what: str, check, timeout: float = 60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {timeout}s")


@pytest.mark.timeout(300)
def test_a_daemon_set_runs_one_pod_on_each_node_it_tolerates(tmp_path) -> None:
    (tmp_path / "pool.yaml").write_text(POOL)
    procs: list[ServiceProc] = []
    with EmbeddedBroker(log_path=tmp_path / "broker.log") as broker:
        common = ["--bootstrap", broker.bootstrap_servers]

        def start(module: str, args: list[str]) -> ServiceProc:
            p = ServiceProc(module, args, free_port(), log_dir=tmp_path).start()
            procs.append(p)
            p.wait_serving(120)
            return p
        try:
            binder = start("services.binder", common)
            start("services.controller_manager", [*common, "--sync-period", "0.2"])
            qm = start("services.queue_manager", [*common, "--binder", binder.target])
            start("services.kubelet_agent", [*common, "--pool", str(tmp_path / "pool.yaml"), "--name", "agent-ds",
                                             "--start-delay", "0.2"])
            stub = queue_pb2_grpc.SchedulerStub(grpc.insecure_channel(qm.target))
            wait("the pool's nodes", lambda: len(stub.GetNodes(queue_pb2.GetRequest(), timeout=30).nodes) == 3)

            def daemon_pods() -> dict[str, queue_pb2.PodView]:
                return {v.pod.metadata.name: v for v in stub.GetPods(queue_pb2.GetRequest(), timeout=30).pods
                        if v.pod.metadata.name.startswith("logs-")}

            applied = stub.Apply(queue_pb2.ApplyRequest(manifest=DAEMON_SET, source="logs.yaml"), timeout=60)
            assert list(applied.applied) == ["daemonset.apps/default/logs created"]
            wait("two daemon pods Running", lambda: len(daemon_pods()) == 2 and all(
                v.pod.phase == "Running" for v in daemon_pods().values()), 120)
            time.sleep(2)  # a few more controller passes: no third pod, none replaced
            running = daemon_pods()
            assert sorted(v.pod.node_name for v in running.values()) == ["plain-0", "plain-1"]
            for v in running.values():
                assert [(r.kind, r.name, r.controller) for r in v.pod.metadata.owner_references] == [
                    ("DaemonSet", "logs", True)]
                fields = v.pod.affinity.node_affinity.required.terms[0].match_fields[0]
                assert (fields.key, list(fields.values)) == ("metadata.name", [v.pod.node_name])
            assert list(stub.Apply(queue_pb2.ApplyRequest(manifest=DAEMON_SET, source="logs.yaml"),
                                   timeout=60).applied) == ["daemonset.apps/default/logs unchanged"]
            deleted = stub.Delete(queue_pb2.DeleteRequest(kind="daemonset", namespace="default", name="logs"),
                                  timeout=30)
            assert deleted.result == 'daemonset.apps "logs" deleted'
            wait("its pods gone", lambda: not daemon_pods(), 120)
        finally:
            for p in reversed(procs):
                p.stop()
