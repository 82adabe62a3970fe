"""Apply is kubectl's apply, against real processes (embedded broker, binder, queue-manager):
created / configured / unchanged; a bound pod re-applied keeps its node and status and is never
published unbound; an immutable pod field change is refused with the API server's words, nothing
applied; duplicates and names the API server refuses are refused; the next read sees what an
Apply or a Delete wrote."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from schedmesh.bus import EventConsumer
from schedmesh.mesh import records
from schedmesh.mesh.cluster_cache import TOPIC_PODS
from schedmesh.v1 import events_pb2, queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port, kafka

NODES = "\n---\n".join(f"""
apiVersion: v1
kind: Node
metadata: {{name: node-{i}, labels: {{kubernetes.io/hostname: node-{i}}}}}
status:
  allocatable: {{cpu: "4", memory: 8Gi, pods: "110"}}
  capacity: {{cpu: "4", memory: 8Gi, pods: "110"}}
""" for i in range(3))


def pod(name: str, cpu: str = "100m", image: str = "nginx", labels: str = "{app: web}") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {labels}}}
spec:
  containers: [{{name: c, image: {image}, resources: {{requests: {{cpu: {cpu}}}}}}}]
"""


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 5
  selector: {matchLabels: {app: dep}}
  template:
    metadata: {labels: {app: dep}}
    spec:
      containers: [{name: c, image: nginx, resources: {requests: {cpu: 50m}}}]
"""


QM_ID = "qm-apply"


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Iterator[tuple[str, str]]:
    log_dir: Path = tmp_path_factory.mktemp("apply-logs")
    with kafka() as bootstrap:
        # names refused as the API server refuses them (the queue-manager's --strict-names)
        env = {"SCHEDMESH_KAFKA": bootstrap, "SCHEDMESH_STRICT_NAMES": "1"}
        binder = ServiceProc("services.binder", [], free_port(), env, log_dir)
        procs = [binder]
        try:
            binder.start()
            binder.wait_serving()
            qm = ServiceProc("services.queue_manager", ["--binder", binder.target, "--client-id", QM_ID],
                             free_port(), env, log_dir)
            procs.append(qm)
            qm.start()
            qm.wait_serving()
            yield bootstrap, qm.target
        finally:
            for p in reversed(procs):
                p.stop()


def apply(target: str, manifest: str) -> list[str]:
    stub = queue_pb2_grpc.SchedulerStub(grpc.insecure_channel(target))
    return list(stub.Apply(queue_pb2.ApplyRequest(manifest=manifest, source="test.yaml"), timeout=30).applied)


def pods(target: str) -> dict[str, queue_pb2.PodView]:
    stub = queue_pb2_grpc.SchedulerStub(grpc.insecure_channel(target))
    return {v.pod.metadata.name: v for v in stub.GetPods(queue_pb2.GetRequest(), timeout=10).pods}


def wait_bound(target: str, names: set[str], timeout: float = 30) -> dict[str, str]:
    deadline = time.time() + timeout
    while True:
        now = {n: v.pod.node_name for n, v in pods(target).items() if n in names and v.pod.node_name}
        if len(now) == len(names) or time.time() > deadline:
            return now
        time.sleep(0.2)


async def pod_history(bootstrap: str) -> list[events_pb2.PodRecord]:
    """Every pod record on the topic, batches flattened, in order."""
    async with EventConsumer(bootstrap, [TOPIC_PODS], client_id="test-apply-audit") as consumer:
        return [rec for r in await consumer.catch_up(30) if r.value
                for rec in records.expand(events_pb2.PodRecord.FromString(r.value))]


def applied_whole(history: list[events_pb2.PodRecord], name: str) -> list[events_pb2.PodRecord]:
    """The whole-pod records of pod `name` that the queue-manager's Apply published. Not the
    binder's: a binding for a pod the binder has not read, from a caller that sent no offsets
    (one right after a broker restart), is the whole bound pod (BinderServicer._bound_records)."""
    return [r for r in history if not r.HasField("update") and r.pod.metadata.name == name and r.source == QM_ID]


@pytest.mark.timeout(120)
def test_created_then_unchanged_and_bound_pods_stay_bound(target) -> None:
    bootstrap, t = target
    first = apply(t, NODES + "---" + pod("keep-0") + "---" + pod("keep-1") + "---" + DEPLOYMENT)
    assert "node/node-0 created" in first and "pod/default/keep-0 created" in first
    deployment_pods = {line.split("/")[2].split()[0] for line in first if line.startswith("pod/default/web-")}
    assert len(deployment_pods) == 5
    names = {"keep-0", "keep-1"} | deployment_pods
    placed = wait_bound(t, names)
    assert set(placed) == names
    before = pods(t)

    again = apply(t, NODES + "---" + pod("keep-0") + "---" + pod("keep-1") + "---" + DEPLOYMENT)
    assert sorted(again) == sorted(line.replace("created", "unchanged") for line in first), again
    time.sleep(1.0)  # anything wrongly published would have come back by now
    after = pods(t)
    for n in names:
        assert after[n].pod.node_name == placed[n], f"{n} moved or lost its binding"
        assert after[n].pod.metadata.uid == before[n].pod.metadata.uid
        assert [c.type for c in after[n].pod.conditions] == [c.type for c in before[n].pod.conditions]
    history = asyncio.run(pod_history(bootstrap))
    for n in names:
        mine = applied_whole(history, n)
        assert len(mine) == 1, f"{n} was published {len(mine)} times as a whole pod by Apply"


@pytest.mark.timeout(120)
def test_label_and_image_changes_are_configured_and_keep_the_binding(target) -> None:
    bootstrap, t = target
    apply(t, NODES)  # created here when this test runs alone, unchanged after the first test
    apply(t, pod("cfg-0"))
    node = wait_bound(t, {"cfg-0"})["cfg-0"]
    out = apply(t, pod("cfg-0", image="nginx:1.27", labels="{app: web, tier: front}"))
    assert out == ["pod/default/cfg-0 configured"]
    deadline = time.time() + 10
    while pods(t)["cfg-0"].pod.metadata.labels.get("tier") != "front" and time.time() < deadline:
        time.sleep(0.2)
    view = pods(t)["cfg-0"].pod
    assert view.metadata.labels["tier"] == "front" and view.containers[0].image == "nginx:1.27"
    assert view.node_name == node
    history = asyncio.run(pod_history(bootstrap))
    mine = applied_whole(history, "cfg-0")
    whole = [r.pod for r in mine]
    assert len(whole) == 2 and whole[1].node_name == node, (
        "the update carries the pod's binding; whole records (source, version, node, labels, conditions): "
        + repr([(r.source, r.pod.metadata.resource_version, r.pod.node_name, dict(r.pod.metadata.labels),
                 [(c.type, c.status, c.reason) for c in r.pod.conditions]) for r in mine]))


@pytest.mark.timeout(120)
def test_immutable_change_is_refused_as_the_api_server_does_and_nothing_is_applied(target) -> None:
    _, t = target
    apply(t, NODES)  # created here when this test runs alone, unchanged after the first test
    apply(t, pod("imm-0"))
    node = wait_bound(t, {"imm-0"})["imm-0"]
    with pytest.raises(grpc.RpcError) as e:
        apply(t, pod("imm-new") + "---" + pod("imm-0", cpu="200m"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(
        'Pod "imm-0" is invalid: spec: Forbidden: pod updates may not change fields other than '
        "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
        "`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
        "(allow it to be set to 1 if it was previously negative)"), e.value.details()
    assert "spec.containers" in e.value.details() and "nothing was applied" in e.value.details()
    time.sleep(0.5)
    now = pods(t)
    assert "imm-new" not in now, "a refused request applies nothing"
    assert now["imm-0"].pod.node_name == node


@pytest.mark.timeout(60)
def test_duplicates_and_invalid_names_are_refused(target) -> None:
    _, t = target
    with pytest.raises(grpc.RpcError) as e:
        apply(t, pod("dup") + "---" + pod("dup", cpu="1"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert 'Duplicate value: "dup"' in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        apply(t, pod("Bad_Name"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "metadata.name" in e.value.details() and "RFC 1123" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        apply(t, pod("good", labels='{"bad key!": x}'))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "metadata.labels" in e.value.details()
    assert not {"dup", "Bad_Name", "good"} & set(pods(t))


def test_what_apply_and_delete_wrote_is_what_the_next_read_sees(target) -> None:
    """Read-your-writes, as the API server's: a pod is there for the Describe right after its Apply
    (before, it was NotFound for 2-7 ms in 3 Applies of 15), and gone, or terminating when bound,
    for the one right after its Delete. Twenty rounds: the window was a few milliseconds."""
    _, t = target
    stub = queue_pb2_grpc.SchedulerStub(grpc.insecure_channel(t))
    for i in range(20):
        name = f"ryw-{i}"
        stub.Apply(queue_pb2.ApplyRequest(manifest=pod(name), source="ryw.yaml"), timeout=30)
        seen = stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name=name), timeout=10)
        assert seen.pod.pod.metadata.name == name
        stub.Delete(queue_pb2.DeleteRequest(kind="pod", namespace="default", name=name), timeout=30)
        try:
            left = stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name=name), timeout=10)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e
        else:  # bound meanwhile: deleted gracefully, its kubelet ends it
            assert left.pod.pod.node_name and left.pod.pod.metadata.deletion_timestamp > 0, left.pod.pod


def test_explain_refuses_an_object_in_both_cluster_and_pods(tmp_path) -> None:
    import argparse

    from schedmesh.api.load import ManifestError
    from schedmesh.cli import explain
    (tmp_path / "cluster.yaml").write_text(NODES + "---" + pod("same").replace("spec:\n", "spec:\n  nodeName: node-0\n"))
    (tmp_path / "pods.yaml").write_text(pod("same"))
    args = argparse.Namespace(cluster=[str(tmp_path / "cluster.yaml")], pods=[str(tmp_path / "pods.yaml")],
                              config=None, tie_break="name", seed=None, output="json")
    with pytest.raises(ManifestError) as e:
        explain.run(args)
    assert str(e.value) == (f"--pods {tmp_path / 'pods.yaml'}: metadata.name: Duplicate value: \"same\": "
                            f"Pod default/same is also defined in --cluster {tmp_path / 'cluster.yaml'}")
