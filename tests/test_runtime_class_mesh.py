"""RuntimeClass through a running mesh (embedded broker, binder, queue-manager with
--strict-admission): the class's overhead makes a pod too big for the only node its class allows
while the same pod without the class fits there; the class's nodeSelector and tolerations steer
pods onto its tainted node although an emptier node would score higher; re-applying is
"unchanged"; admission refusals carry kube's words and apply nothing. And explain admitting its
pending pods against the classes in its inputs."""
from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from schedmesh.api.quantity import parse_quantity
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port, kafka

NODES = """
apiVersion: v1
kind: Node
metadata: {name: sandbox-node, labels: {kubernetes.io/hostname: sandbox-node, runtime: gvisor}}
spec:
  taints: [{key: sandbox, value: "true", effect: NoSchedule}]
status:
  allocatable: {cpu: "2", memory: 8Gi, pods: "110"}
---
apiVersion: v1
kind: Node
metadata: {name: plain-node, labels: {kubernetes.io/hostname: plain-node}}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
"""

GVISOR = """
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
overhead:
  podFixed: {cpu: 250m, memory: 64Mi}
scheduling:
  nodeSelector: {runtime: gvisor}
  tolerations: [{key: sandbox, operator: Exists, effect: NoSchedule}]
"""


def pod(name: str, cpu: str, spec: str = "  runtimeClassName: gvisor\n") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers: [{{name: c, image: nginx, resources: {{requests: {{cpu: {cpu}, memory: 128Mi}}}}}}]
{spec}"""


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Iterator[str]:
    log_dir: Path = tmp_path_factory.mktemp("runtime-class-logs")
    with kafka() as bootstrap:
        env = {"SCHEDMESH_KAFKA": bootstrap, "SCHEDMESH_STRICT_ADMISSION": "1"}
        binder = ServiceProc("services.binder", [], free_port(), env, log_dir)
        procs = [binder]
        try:
            binder.start()
            binder.wait_serving()
            qm = ServiceProc("services.queue_manager", ["--binder", binder.target, "--client-id", "qm-runtime-class",
                                                        "--tie-break", "name"], free_port(), env, log_dir)
            procs.append(qm)
            qm.start()
            qm.wait_serving()
            yield qm.target
        finally:
            for p in reversed(procs):
                p.stop()


def stub(target: str) -> queue_pb2_grpc.SchedulerStub:
    return queue_pb2_grpc.SchedulerStub(grpc.insecure_channel(target))


def apply(target: str, manifest: str) -> list[str]:
    return list(stub(target).Apply(queue_pb2.ApplyRequest(manifest=manifest, source="rc.yaml"), timeout=30).applied)


def refused(target: str, manifest: str) -> str:
    with pytest.raises(grpc.RpcError) as e:
        apply(target, manifest)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return e.value.details()


def views(target: str) -> dict[str, queue_pb2.PodView]:
    return {v.pod.metadata.name: v for v in stub(target).GetPods(queue_pb2.GetRequest(), timeout=10).pods}


def settled(target: str, name: str, timeout: float = 30) -> queue_pb2.PodView:
    """The pod once it is bound or has a FailedScheduling message."""
    deadline = time.time() + timeout
    while True:
        v = views(target).get(name)
        if v is not None and (v.pod.node_name or v.message) or time.time() > deadline:
            return v
        time.sleep(0.2)


def requested_milli_cpu(target: str, node: str) -> int:
    nodes = stub(target).GetNodes(queue_pb2.GetRequest(), timeout=10).nodes
    return next(n.requested_milli_cpu for n in nodes if n.node.metadata.name == node)


@pytest.mark.timeout(180)
def test_overhead_and_scheduling_of_the_class_decide_where_pods_go(target) -> None:
    out = apply(target, NODES + "---" + GVISOR + "---" + pod("small", "100m"))
    assert out == ["runtimeclass.node.k8s.io/gvisor created", "node/sandbox-node created", "node/plain-node created",
                   "pod/default/small created"]
    small = settled(target, "small")
    # Steered by the class: plain-node is emptier (LeastAllocated would choose it) and untainted.
    assert small.pod.node_name == "sandbox-node", small.message
    overhead = {k: parse_quantity(q) for k, q in small.pod.overhead.items()}
    assert overhead == {"cpu": Fraction(1, 4), "memory": 64 * 2**20}
    assert dict(small.pod.node_selector) == {"runtime": "gvisor"}
    assert any(t.key == "sandbox" and t.effect == "NoSchedule" for t in small.pod.tolerations)
    assert requested_milli_cpu(target, "sandbox-node") == 350, "the node counts the pod's overhead"

    # 1600m + 250m overhead no longer fits next to small's 350m on the 2-cpu node ...
    apply(target, pod("big", "1600m"))
    big = settled(target, "big")
    assert not big.pod.node_name
    assert big.message.startswith("0/2 nodes are available: 1 Insufficient cpu, "
                                  "1 node(s) didn't match Pod's node affinity/selector."), big.message
    # ... where the same pod without the class (its selector and toleration written out) fits.
    apply(target, pod("big-without-overhead", "1600m",
                      "  nodeSelector: {runtime: gvisor}\n"
                      "  tolerations: [{key: sandbox, operator: Exists, effect: NoSchedule}]\n"))
    assert settled(target, "big-without-overhead").pod.node_name == "sandbox-node"
    assert requested_milli_cpu(target, "sandbox-node") == 1950

    again = apply(target, GVISOR + "---" + pod("small", "100m"))
    assert again == ["runtimeclass.node.k8s.io/gvisor unchanged", "pod/default/small unchanged"], \
        "what admission added is not a change"


@pytest.mark.timeout(120)
def test_admission_refusals_apply_nothing(target) -> None:
    apply(target, GVISOR)
    cases = [
        (pod("r-unknown", "10m", "  runtimeClassName: kata\n"),
         'rc.yaml: document 2 (Pod r-unknown): '
         'Pod default/r-unknown: spec.runtimeClassName: pods "r-unknown" is forbidden: '
         'pod rejected: RuntimeClass "kata" not found'),
        (pod("r-overhead", "10m", "  runtimeClassName: gvisor\n  overhead: {cpu: 100m}\n"),
         'rc.yaml: document 2 (Pod r-overhead): '
         'Pod default/r-overhead: spec.overhead: pods "r-overhead" is forbidden: '
         "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"),
        (pod("r-no-class", "10m", "  overhead: {cpu: 100m}\n"),
         'rc.yaml: document 2 (Pod r-no-class): '
         'Pod default/r-no-class: spec.overhead: pods "r-no-class" is forbidden: '
         "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"),
        (pod("r-conflict", "10m", "  runtimeClassName: gvisor\n  nodeSelector: {runtime: kata}\n"),
         'rc.yaml: document 2 (Pod r-conflict): '
         'Pod default/r-conflict: spec.nodeSelector: pods "r-conflict" is forbidden: conflict: '
         "runtimeClass.scheduling.nodeSelector[runtime] = gvisor; pod.spec.nodeSelector[runtime] = kata"),
        (GVISOR.replace("handler: runsc", "handler: kata"),
         'RuntimeClass.node.k8s.io "gvisor" is invalid: handler: Invalid value: "kata": field is immutable'),
    ]
    for manifest, message in cases:  # a pod's refusal names the file and document it was read from
        details = refused(target, pod("r-bystander", "10m", "") + "---" + manifest)
        assert details == message + "\n(nothing was applied)", details
    assert not {"r-bystander", "r-unknown", "r-overhead", "r-no-class", "r-conflict"} & set(views(target))

    assert stub(target).Delete(queue_pb2.DeleteRequest(kind="runtimeclass", name="gvisor"), timeout=10).result == \
        'runtimeclass.node.k8s.io "gvisor" deleted'
    assert 'RuntimeClass "gvisor" not found' in refused(target, pod("r-after-delete", "10m"))
    with pytest.raises(grpc.RpcError) as e:
        stub(target).Delete(queue_pb2.DeleteRequest(kind="runtimeclass", name="gvisor"), timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert e.value.details() == 'runtimeclasses.node.k8s.io "gvisor" not found'


def test_explain_admits_pending_pods_against_the_runtime_classes_it_is_given(tmp_path) -> None:
    import argparse
    import io
    import json

    from schedmesh.cli import explain
    (tmp_path / "cluster.yaml").write_text(NODES + "---" + GVISOR)
    (tmp_path / "pods.yaml").write_text(pod("fits-without-overhead", "1900m") + "---" +
                                        pod("kata", "100m", "  runtimeClassName: kata\n  overhead: {cpu: 100m}\n"))
    args = argparse.Namespace(cluster=[str(tmp_path / "cluster.yaml")], pods=[str(tmp_path / "pods.yaml")],
                              config=None, tie_break="name", seed=None, output="json")
    out = io.StringIO()
    assert explain.run(args, out) == 0
    first, second = json.loads(out.getvalue())["results"]
    assert first["chosen"] is None and first["nodes"]["sandbox-node"]["reasons"] == ["Insufficient cpu"]
    assert first["nodes"]["plain-node"]["reasons"] == ["node(s) didn't match Pod's node affinity/selector"]
    assert second["chosen"] == "plain-node", "a class explain is not given leaves the pod as stored"
