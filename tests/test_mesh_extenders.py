"""HTTP extenders of the queue-manager's --config in a running mesh (embedded broker, the binder,
two queue-managers), against a real HTTP extender started by the test: filter and prioritize
shape the decision as in explain; the bind verb of the first interested binder is called, then the
binding is committed through the binder; its error fails the binding (FailedScheduling, requeued
with backoff); an ignorable extender's failures are skipped."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from schedmesh.framework.test_extender import ExtenderServer, Reply, node_names
from schedmesh.v1 import queue_pb2, queue_pb2_grpc

from tests.mesh_harness import ServiceProc, free_port, kafka, poll

WIDGET = "example.com/widget"

CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: {url}/a
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 1
  managedResources: [{{name: {widget}}}]
- urlPrefix: http://127.0.0.1:{dead}/b
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 1
  ignorable: true
"""

# A profile of its own, whose only extender is an ignorable binder.
CONFIG_IGNORABLE_BINDER = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles: [{{schedulerName: ignorable-binder}}]
extenders:
- urlPrefix: {url}/c
  bindVerb: bind
  ignorable: true
"""

NODES = "\n---\n".join(f"""
apiVersion: v1
kind: Node
metadata: {{name: node-{i}, labels: {{kubernetes.io/hostname: node-{i}}}}}
status:
  allocatable: {{cpu: "4", memory: 8Gi, pods: "110", {WIDGET}: "4"}}
  capacity: {{cpu: "4", memory: 8Gi, pods: "110", {WIDGET}: "4"}}
""" for i in range(3))


def pod(name: str, widget: bool = True, extra: str = "", scheduler: str = "default-scheduler") -> str:
    res = f'{{cpu: 100m, {WIDGET}: "1"}}' if widget else "{cpu: 100m}"
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  schedulerName: {scheduler}
  {extra}
  containers: [{{name: c, image: nginx, resources: {{requests: {res}, limits: {res}}}}}]
"""


class Widgets:
    """The extender's behaviour: node-0 is reserved, node-1 preferred, binding refused for the
    pods in `refuse`."""

    def __init__(self, srv: ExtenderServer) -> None:
        self.srv = srv
        self.refuse: set[str] = set()
        self.lock = threading.Lock()
        srv.routes["/a/filter"] = self.filter
        srv.routes["/a/prioritize"] = lambda args: [{"Host": n, "Score": 10 if n == "node-1" else 0}
                                                    for n in node_names(args)]
        srv.routes["/a/bind"] = self.bind
        srv.routes["/c/bind"] = lambda args: Reply(500, b"down for maintenance")

    @staticmethod
    def filter(args: dict) -> dict:
        names = node_names(args)
        return {"Nodes": {"items": [n for n in args["Nodes"]["items"] if n["metadata"]["name"] != "node-0"]},
                "FailedNodes": {"node-0": "FakeExtender: node-0 is reserved"} if "node-0" in names else {}}

    def bind(self, args: dict) -> dict:
        with self.lock:
            if args["PodName"] in self.refuse:
                return {"Error": f"widget controller refuses {args['PodName']}"}
        return {}

    def calls(self, path: str, pod_name: str) -> list[dict]:
        out = []
        for p, body, _ in list(self.srv.requests):
            if p != path:
                continue
            name = body.get("PodName") or body["Pod"]["metadata"]["name"]
            if name == pod_name:
                out.append(body)
        return out


class Mesh:
    def __init__(self, stub, stub_ignorable, widgets: Widgets) -> None:
        self.stub, self.stub_ignorable, self.widgets = stub, stub_ignorable, widgets


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> Iterator[Mesh]:
    d: Path = tmp_path_factory.mktemp("extenders")
    srv = ExtenderServer()
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    widgets = Widgets(srv)
    (d / "scheduler.yaml").write_text(CONFIG.format(url=srv.url, widget=WIDGET, dead=free_port()))
    (d / "ignorable.yaml").write_text(CONFIG_IGNORABLE_BINDER.format(url=srv.url))
    procs: list[ServiceProc] = []
    try:
        with kafka() as bootstrap:
            env = {"SCHEDMESH_KAFKA": bootstrap}
            try:
                binder = ServiceProc("services.binder", [], free_port(), env, d)
                procs.append(binder)
                binder.start().wait_serving()
                for client, cfg in (("qm-ext", "scheduler.yaml"), ("qm-ext-ignorable", "ignorable.yaml")):
                    qm = ServiceProc("services.queue_manager", ["--binder", binder.target, "--client-id", client,
                                                                "--config", str(d / cfg)], free_port(), env, d)
                    procs.append(qm)
                    qm.start().wait_serving()
                with grpc.insecure_channel(procs[1].target) as ch, grpc.insecure_channel(procs[2].target) as ch2:
                    stub, stub2 = queue_pb2_grpc.SchedulerStub(ch), queue_pb2_grpc.SchedulerStub(ch2)
                    stub.Apply(queue_pb2.ApplyRequest(manifest=NODES))
                    for s in (stub, stub2):
                        assert poll(lambda: len(s.GetNodes(queue_pb2.GetRequest()).nodes) == 3)
                    yield Mesh(stub, stub2, widgets)
            finally:
                for p in reversed(procs):
                    p.stop()
    finally:
        srv.shutdown()
        srv.server_close()




def node_of(stub, name: str) -> str:
    v = next((v for v in stub.GetPods(queue_pb2.GetRequest()).pods if v.pod.metadata.name == name), None)
    return v.pod.node_name if v is not None else ""


def failed_scheduling(stub, name: str) -> list[str]:
    try:
        d = stub.DescribePod(queue_pb2.DescribeRequest(namespace="default", name=name))
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.NOT_FOUND:
            return []
        raise
    return [e.message for e in d.events if e.reason == "FailedScheduling"]


@pytest.mark.timeout(120)
def test_filter_prioritize_and_bind_verbs_decide_and_bind(mesh) -> None:
    stub, w = mesh.stub, mesh.widgets
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("w-0") + "---" + pod("plain-0", widget=False)))
    # The extender kept node-0 out and preferred node-1; it was asked to bind there, and the
    # binder committed that binding.
    assert poll(lambda: node_of(stub, "w-0")) == "node-1"
    assert len(w.calls("/a/filter", "w-0")) == 1 and len(w.calls("/a/prioritize", "w-0")) == 1
    binds = w.calls("/a/bind", "w-0")
    assert len(binds) == 1 and binds[0]["Node"] == "node-1" and binds[0]["PodNamespace"] == "default"
    # Not interested in a pod without widgets; the ignorable extender's failures are skipped.
    assert poll(lambda: node_of(stub, "plain-0"))
    assert not any(w.calls(v, "plain-0") for v in ("/a/filter", "/a/prioritize", "/a/bind"))
    assert not failed_scheduling(stub, "w-0") and not failed_scheduling(stub, "plain-0")


@pytest.mark.timeout(120)
def test_a_node_the_extender_filters_out_is_in_the_fit_error(mesh) -> None:
    stub = mesh.stub
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("w-far", extra="nodeSelector: {kubernetes.io/hostname: node-0}")))
    want = ("0/3 nodes are available: 1 FakeExtender: node-0 is reserved, "
            "2 node(s) didn't match Pod's node affinity/selector.")
    msgs = poll(lambda: failed_scheduling(stub, "w-far"))
    assert msgs and msgs[0].startswith(want), msgs
    assert not node_of(stub, "w-far")


@pytest.mark.timeout(120)
def test_an_extender_bind_error_fails_the_binding_and_the_pod_is_retried(mesh) -> None:
    stub, w = mesh.stub, mesh.widgets
    w.refuse.add("w-refuse")
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("w-refuse")))
    msgs = poll(lambda: failed_scheduling(stub, "w-refuse"))
    assert msgs and msgs[0] == "widget controller refuses w-refuse", msgs
    assert not node_of(stub, "w-refuse")  # never committed through the binder
    # Retried with backoff: refused again until the extender accepts.
    assert poll(lambda: len(w.calls("/a/bind", "w-refuse")) >= 2)
    with w.lock:
        w.refuse.clear()
    assert poll(lambda: node_of(stub, "w-refuse")) == "node-1"
    assert w.calls("/a/bind", "w-refuse")[-1]["Node"] == "node-1"


@pytest.mark.timeout(120)
def test_an_ignorable_binder_that_fails_leaves_the_binding_to_the_binder(mesh) -> None:
    stub, w = mesh.stub_ignorable, mesh.widgets
    stub.Apply(queue_pb2.ApplyRequest(manifest=pod("i-0", widget=False, scheduler="ignorable-binder")))
    assert poll(lambda: node_of(stub, "i-0"))
    assert len(w.calls("/c/bind", "i-0")) == 1  # asked, failed (HTTP 500), skipped
    assert not failed_scheduling(stub, "i-0")
