"""NodePorts, re-expressing kube's node_ports_test.go (TestNodePorts, TestFits, hints) plus
edge cases and bulk == per-node checks."""
from __future__ import annotations

import random

import pytest

from schedmesh.api.load import load_text
from schedmesh.api.types import Container, ContainerPort, Node, ObjectMeta, Pod
from schedmesh.cache.node_info import NodeInfo
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework.events import ActionType, EventResource, QueueingHint
from schedmesh.framework.interface import Code, CycleState
from schedmesh.plugins.node_ports import NodePorts, fits

ERR = "node(s) didn't have free ports for the requested pod ports"
_uid = iter(range(1, 10**6))


def pod(*port_specs: str, node_name: str = "", sidecar: str = "", init: str = "", nominated: str = "") -> Pod:
    """Ports as "PROTO/IP/PORT" like kube's newPod helper; sidecar/init give one init container port."""
    def ports(specs):
        out = []
        for s in specs:
            proto, ip, port = s.split("/")
            out.append(ContainerPort(container_port=int(port), host_port=int(port), protocol=proto, host_ip=ip))
        return out
    inits = []
    if sidecar:
        inits.append(Container("sidecar", ports=ports([sidecar]), restart_policy="Always"))
    if init:
        inits.append(Container("init", ports=ports([init])))
    return Pod(meta=ObjectMeta(name=f"p{next(_uid)}", namespace="default", uid=f"uid-{next(_uid)}"),
               containers=[Container("c", ports=ports(port_specs))], init_containers=inits, node_name=node_name,
               nominated_node_name=nominated)


def node_info(*existing: str) -> NodeInfo:
    ni = NodeInfo(Node(meta=ObjectMeta(name="n1")))
    ni.add_pod(pod(*existing, node_name="n1"))
    return ni


CASES = [
    ("skip-filter", pod(), (), "skip", None),
    ("other-port", pod("UDP/127.0.0.1/8080"), ("UDP/127.0.0.1/9090",), None, None),
    ("same-udp-port", pod("UDP/127.0.0.1/8080"), ("UDP/127.0.0.1/8080",), None, ERR),
    ("same-tcp-port", pod("TCP/127.0.0.1/8080"), ("TCP/127.0.0.1/8080",), None, ERR),
    ("different-host-ip", pod("TCP/127.0.0.1/8080"), ("TCP/127.0.0.2/8080",), None, None),
    ("different-protocol", pod("UDP/127.0.0.1/8080"), ("TCP/127.0.0.1/8080",), None, None),
    ("second-udp-port-conflict", pod("UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"), ("UDP/127.0.0.1/8080",), None, ERR),
    ("first-tcp-port-conflict", pod("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"),
     ("TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"), None, ERR),
    ("conflict-due-to-wanted-0.0.0.0", pod("TCP/0.0.0.0/8001"), ("TCP/127.0.0.1/8001",), None, ERR),
    ("tcp-conflict-0.0.0.0-second-port", pod("TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"), ("TCP/127.0.0.1/8001",), None, ERR),
    ("conflict-with-used-0.0.0.0", pod("TCP/127.0.0.1/8001"), ("TCP/0.0.0.0/8001",), None, ERR),
    ("second-different-protocol", pod("UDP/127.0.0.1/8001"), ("TCP/0.0.0.0/8001",), None, None),
    ("udp-conflict-due-to-0.0.0.0", pod("UDP/127.0.0.1/8001"), ("TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"), None, ERR),
    ("empty-ip-means-0.0.0.0", pod("TCP//8001"), ("TCP/127.0.0.1/8001",), None, ERR),
    ("empty-protocol-means-tcp", pod("/127.0.0.1/8001"), ("TCP/127.0.0.1/8001",), None, ERR),
    ("non-sidecar-init-container-skips", pod(init="TCP/0.0.0.0/8001"), ("TCP/0.0.0.0/8001",), "skip", None),
    ("sidecar-init-container-conflict", pod(sidecar="TCP/0.0.0.0/8001"), ("TCP/0.0.0.0/8001",), None, ERR),
]


@pytest.mark.parametrize("name,p,existing,want_pf,want_reason", CASES, ids=[c[0] for c in CASES])
def test_node_ports(name, p, existing, want_pf, want_reason):
    pl = NodePorts()
    state = CycleState()
    _, st = pl.pre_filter(state, p, Snapshot())
    if want_pf == "skip":
        assert st is not None and st.code == Code.SKIP
        return
    assert st is None
    ni = node_info(*existing)
    got = pl.filter(state, p, ni)
    if want_reason is None:
        assert got is None
    else:
        assert got.code == Code.UNSCHEDULABLE and got.reasons == (want_reason,)
    # Bulk form on a snapshot holding the same node.
    holder = pod(*existing, node_name="n1")
    snap = Snapshot([Node(meta=ObjectMeta(name="n1")), Node(meta=ObjectMeta(name="n2"))], [holder])
    v = pl.filter_nodes(state, p, snap, snap.all_indices())
    verdict = dict(zip(snap.cols.names, v.failed.tolist()))
    assert (verdict["n1"] == -1) == (want_reason is None)
    assert verdict["n2"] == -1


def test_filter_without_prefilter_is_an_error():
    pl = NodePorts()
    st = pl.filter(CycleState(), pod(), NodeInfo(Node(meta=ObjectMeta(name="n"))))
    assert st.code == Code.ERROR and st.message() == 'reading "PreFilterNodePorts" from cycleState: not found'


FITS_CASES = [
    ("non-conflicting-ports", pod("TCP/127.0.0.1/80"), ("TCP/127.0.0.1/9090",), True),
    ("multiple-non-conflicting", pod("TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"),
     ("TCP/127.0.0.1/9090", "TCP/127.0.0.1/9191", "TCP/127.0.1.1/8080"), True),
    ("same-port-different-protocol", pod("TCP/127.0.0.1/80"), ("UDP/127.0.0.1/80",), True),
    ("conflicting-ports", pod("TCP/127.0.0.1/80"), ("TCP/127.0.0.1/80",), False),
    ("some-conflicting", pod("TCP/127.0.0.1/80", "TCP/127.0.1.1/80", "TCP/127.0.1.1/90", "TCP/127.0.1.1/100"),
     ("TCP/127.0.0.1/9090", "TCP/127.0.1.1/90", "TCP/127.0.1.1/8080"), False),
]


@pytest.mark.parametrize("name,p,existing,want", FITS_CASES, ids=[c[0] for c in FITS_CASES])
def test_fits(name, p, existing, want):
    assert fits(p, node_info(*existing)) is want


def test_bulk_matches_per_node_and_tracks_assumed_pods():
    rng = random.Random(3)
    nodes = [Node(meta=ObjectMeta(name=f"n{i:02d}")) for i in range(30)]
    specs = [f"{proto}/{ip}/{port}" for proto in ("TCP", "UDP") for ip in ("0.0.0.0", "10.0.0.1", "10.0.0.2")
             for port in (80, 443)]
    bound = [pod(*rng.sample(specs, rng.randint(0, 2)), node_name=f"n{rng.randrange(30):02d}") for _ in range(40)]
    snap = Snapshot(nodes, bound)
    pl = NodePorts()
    rows = snap.all_indices()
    for _ in range(30):
        p = pod(*rng.sample(specs, rng.randint(1, 3)))
        state = CycleState()
        pl.pre_filter(state, p, snap)
        v = pl.filter_nodes(state, p, snap, rows)
        assert (v.failed == -1).tolist() == [pl.filter(state, p, ni) is None for ni in snap.node_info_list]
    # Assuming a pod on an empty node makes its ports busy there.
    empty = next(ni.name for ni in snap.node_info_list if not ni.pods)
    p = pod("TCP/10.0.0.1/9999")
    state = CycleState()
    pl.pre_filter(state, p, snap)
    assert (pl.filter_nodes(state, p, snap, rows).failed == -1).all()
    holder = pod("TCP/0.0.0.0/9999", node_name=empty)
    snap.add_pod(holder)
    v = pl.filter_nodes(state, p, snap, rows)
    assert [snap.cols.names[r] for r, f in zip(rows, v.failed) if f >= 0] == [empty]
    # ... and removing it frees the port again (the cached answer is refreshed).
    snap.remove_pod(holder)
    assert (pl.filter_nodes(state, p, snap, rows).failed == -1).all()


def test_from_yaml_host_network_defaults_host_port():
    m = load_text("""
apiVersion: v1
kind: Pod
metadata: {name: hn}
spec:
  hostNetwork: true
  containers: [{name: c, image: i, ports: [{containerPort: 53, protocol: UDP}]}]
""")
    pl = NodePorts()
    state = CycleState()
    _, st = pl.pre_filter(state, m.pods[0], Snapshot())
    assert st is None
    assert pl.filter(state, m.pods[0], node_info("UDP/0.0.0.0/53")).reasons == (ERR,)


def test_events_to_register():
    ev = NodePorts().events_to_register()
    assert [(e.event.resource, e.event.action) for e in ev] == [
        (EventResource.POD, ActionType.DELETE), (EventResource.NODE, ActionType.ADD)]
    assert ev[0].hint is not None and ev[1].hint is None


HINT_CASES = [
    ("wrong-old-object", "not-a-pod", QueueingHint.QUEUE),
    ("skip-queue-on-unscheduled", pod(), QueueingHint.QUEUE_SKIP),
    ("skip-queue-on-non-hostport", pod(node_name="fake-node"), QueueingHint.QUEUE_SKIP),
    ("skip-queue-on-unrelated-hostport", pod("TCP/0.0.0.0/8081", node_name="fake-node"), QueueingHint.QUEUE_SKIP),
    ("queue-on-released-hostport", pod("TCP/0.0.0.0/8080", node_name="fake-node"), QueueingHint.QUEUE),
    ("queue-on-nominated-pod", pod("TCP/0.0.0.0/8080", nominated="fake-node"), QueueingHint.QUEUE),
    ("skip-on-other-protocol", pod("UDP/0.0.0.0/8080", node_name="fake-node"), QueueingHint.QUEUE_SKIP),
]


@pytest.mark.parametrize("name,deleted,want", HINT_CASES, ids=[c[0] for c in HINT_CASES])
def test_is_schedulable_after_pod_deleted(name, deleted, want):
    assert NodePorts().is_schedulable_after_pod_deleted(pod("TCP//8080"), deleted, None) == want
