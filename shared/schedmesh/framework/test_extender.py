"""HTTP scheduler extenders against a real local HTTP server, alone and inside the scheduling cycle.

Cases re-express kube's pkg/scheduler/extender_test.go (TestSchedulerWithExtenders, TestIsInterested,
TestConvertToMetaVictims, TestConvertToVictims) with the fake extenders served over HTTP.
"""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from schedmesh.api.load import admit_pod, load_text
from schedmesh.api.to_json import node_to_json, pod_to_json, quantity_string
from schedmesh.api.types import Pod
from schedmesh.cache.snapshot import Snapshot
from schedmesh.framework import extender as extender_module
from schedmesh.framework.config import load_scheduler_config
from schedmesh.framework.extender import (MAX_EXTENDER_REPLY_BYTES, ExtenderError, ExtenderTLSConfig, HTTPExtender,
                                          Victims)
from schedmesh.framework.interface import (MAX_NODE_SCORE, BindPlugin, CycleState, FilterPlugin, QueueSortPlugin,
                                           ScorePlugin)
from schedmesh.framework.profile import Extender, PluginRef, PluginSet, Profile
from schedmesh.framework.registry import Registry
from schedmesh.framework.runtime import Framework
from schedmesh.scheduling.cycle import MAX_EXTENDER_PRIORITY, FitError, SchedulingAlgorithm

# ---------------------------------------------------------------------------------------------
# a real extender: an HTTP server whose routes are Python functions of the request JSON
# ---------------------------------------------------------------------------------------------


@dataclass
class Reply:
    """A raw HTTP reply (status and body), for error cases."""

    status: int
    body: bytes = b""


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        srv: "ExtenderServer" = self.server  # type: ignore[assignment]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw) if raw else None
        srv.requests.append((self.path, body, self.headers.get("Content-Type")))
        route = srv.routes.get(self.path)
        out = Reply(404) if route is None else route(body)
        if not isinstance(out, Reply):
            out = Reply(200, json.dumps(out).encode())
        self.send_response(out.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out.body)))
        self.end_headers()
        self.wfile.write(out.body)

    def log_message(self, *args: Any) -> None:
        pass


class ExtenderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, Callable[[Any], Any]] = {}
        self.requests: list[tuple[str, Any, Optional[str]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def paths(self) -> list[str]:
        return [p for p, _, _ in self.requests]


@pytest.fixture
def server():
    srv = ExtenderServer()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


# ---- what a fake extender answers (kube's testing/framework fake_extender.go, over the wire) ----

def node_names(args: dict) -> list[str]:
    if args.get("NodeNames") is not None:
        return list(args["NodeNames"])
    return [n["metadata"]["name"] for n in args["Nodes"]["items"]]


def predicate(keep: Callable[[str], bool]) -> Callable[[dict], dict]:
    """A filter verb keeping the nodes `keep` accepts, answering in the form it was asked in."""
    def route(args: dict) -> dict:
        names = node_names(args)
        kept = [n for n in names if keep(n)]
        failed = {n: f"FakeExtender: node {n!r} failed" for n in names if not keep(n)}
        if args.get("NodeNames") is not None:
            return {"NodeNames": kept, "FailedNodes": failed}
        items = [n for n in args["Nodes"]["items"] if keep(n["metadata"]["name"])]
        return {"Nodes": {"items": items}, "FailedNodes": failed}
    return route


TRUE_PREDICATE = predicate(lambda n: True)
FALSE_PREDICATE = predicate(lambda n: False)
NODE1_PREDICATE = predicate(lambda n: n == "node1")
NODE2_PREDICATE = predicate(lambda n: n == "node2")


def error_route(args: Any) -> Reply:
    return Reply(500, b"boom")


def prioritizer(best: str, weight: int = 10) -> Callable[[dict], list]:
    """kube's Node1/Node2PrioritizerExtender (10 for the node, 1 for others) times the fake's
    prioritizer weight, summed as FakeExtender.Prioritize does."""
    def route(args: dict) -> list:
        return [{"Host": n, "Score": (10 if n == best else 1) * weight} for n in node_names(args)]
    return route


# ---------------------------------------------------------------------------------------------
# cluster objects
# ---------------------------------------------------------------------------------------------

def make_nodes(*names: str) -> list:
    docs = "\n---\n".join(
        f"apiVersion: v1\nkind: Node\nmetadata:\n  name: {n}\n  labels: {{kubernetes.io/hostname: {n}}}\n"
        f"status:\n  allocatable: {{cpu: '4', memory: 8Gi, pods: '110'}}\n" for n in names)
    return load_text(docs, "nodes.yaml").nodes


def make_pod(extra_spec: str = "", name: str = "p") -> Pod:
    text = (f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  uid: uid-{name}\n"
            f"spec:\n  containers:\n  - name: c\n    image: nginx\n{extra_spec}")
    return admit_pod(load_text(text, "pod.yaml").pods[0], {})


def extender(srv: ExtenderServer, prefix: str = "ext", **kw: Any) -> HTTPExtender:
    return HTTPExtender(Extender(url_prefix=f"{srv.url}/{prefix}", http_timeout_seconds=kw.pop("timeout", 5.0), **kw))


# ---------------------------------------------------------------------------------------------
# HTTPExtender alone
# ---------------------------------------------------------------------------------------------

def test_filter_sends_nodes_and_maps_the_answer_back(server: ExtenderServer) -> None:
    server.routes["/ext/filter"] = NODE1_PREDICATE
    snap = Snapshot(make_nodes("node1", "node2", "node3"))
    infos = snap.node_info_list
    ext = extender(server, filter_verb="filter")
    passed, failed, unresolvable = ext.filter(make_pod(), infos)
    assert passed == [snap.get("node1")]
    assert failed == {"node2": "FakeExtender: node 'node2' failed", "node3": "FakeExtender: node 'node3' failed"}
    assert unresolvable == {}
    path, body, ctype = server.requests[0]
    assert (path, ctype) == ("/ext/filter", "application/json")
    assert set(body) == {"Pod", "Nodes", "NodeNames"} and body["NodeNames"] is None
    assert body["Pod"]["metadata"]["name"] == "p" and body["Pod"]["metadata"]["uid"] == "uid-p"
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["node1", "node2", "node3"]
    assert body["Nodes"]["items"][0]["status"]["allocatable"] == {"cpu": "4", "memory": "8Gi", "pods": "110"}


def test_node_cache_capable_sends_names_only(server: ExtenderServer) -> None:
    server.routes["/ext/filter"] = lambda a: {"NodeNames": ["node2"],
                                              "FailedAndUnresolvableNodes": {"node1": "gone"},
                                              "FailedNodes": {"node1": "also here", "node3": "busy"}}
    snap = Snapshot(make_nodes("node1", "node2", "node3"))
    ext = extender(server, filter_verb="filter", node_cache_capable=True)
    passed, failed, unresolvable = ext.filter(make_pod(), snap.node_info_list)
    assert [ni.name for ni in passed] == ["node2"]
    assert unresolvable == {"node1": "gone"}
    assert failed == {"node1": "also here", "node3": "busy"}  # the cycle lets unresolvable win
    body = server.requests[0][1]
    assert body["Nodes"] is None and body["NodeNames"] == ["node1", "node2", "node3"]


@pytest.mark.parametrize("answer,cache_capable,want", [
    ({"nodenames": ["node1"], "failednodes": {"node2": "x"}}, True, (["node1"], {"node2": "x"})),
    ({"NodeNames": ["node2"], "nodeNames": ["node1"]}, True, (["node1"], {})),  # the later key wins
    ({"NodeNames": ["node2"], "Nodes": {"items": [{"metadata": {"name": "node1"}}]}}, False, (["node1"], {})),
    ({"Nodes": {"items": [{"metadata": {"name": "node2"}}]}}, True, (["node2"], {})),  # no NodeNames: Nodes used
    ({}, True, ([], {})),
    ({"NodeNames": None, "Nodes": None, "FailedNodes": None, "Error": ""}, False, ([], {})),
    ({"NodeNames": ["node1", "node1"], "Extra": 1}, True, (["node1", "node1"], {})),
], ids=["case-insensitive keys", "duplicate keys", "Nodes when not cache capable", "Nodes fallback",
        "empty answer filters everything", "nulls", "duplicates and unknown keys kept as kube"])
def test_filter_answers_decoded_as_go(server: ExtenderServer, answer: dict, cache_capable: bool, want) -> None:
    server.routes["/ext/filter"] = lambda a: answer
    snap = Snapshot(make_nodes("node1", "node2"))
    passed, failed, _ = extender(server, filter_verb="filter", node_cache_capable=cache_capable).filter(
        make_pod(), snap.node_info_list)
    assert ([ni.name for ni in passed], failed) == want


@pytest.mark.parametrize("route,message", [
    (lambda a: {"Error": "extender is sad"}, "extender is sad"),
    (error_route, "failed filter with extender at URL {url}/ext/filter, code 500"),
    (lambda a: {"NodeNames": ["node9"]}, "extender '{url}/ext' claims a filtered node 'node9' which is not found "
                                         "in the input node list"),
    (lambda a: {"NodeNames": "node1"}, "cannot unmarshal str into ExtenderFilterResult.NodeNames"),
    (lambda a: {"FailedNodes": {"node1": 3}}, "cannot unmarshal int into ExtenderFilterResult.FailedNodes value"),
    (lambda a: Reply(200, b"not json"), "decoding the response of {url}/ext/filter"),
], ids=["Error field", "HTTP 500", "unknown node", "wrong type", "non-string reason", "not JSON"])
def test_filter_errors(server: ExtenderServer, route, message: str) -> None:
    server.routes["/ext/filter"] = route
    snap = Snapshot(make_nodes("node1", "node2"))
    with pytest.raises(ExtenderError) as ei:
        extender(server, filter_verb="filter", node_cache_capable=True).filter(make_pod(), snap.node_info_list)
    assert str(ei.value).startswith(message.format(url=server.url))


def test_unreachable_extender(server: ExtenderServer) -> None:
    ext = HTTPExtender(Extender(url_prefix="http://127.0.0.1:9/nothing", filter_verb="filter", http_timeout_seconds=1))
    with pytest.raises(ExtenderError, match=r"^Post 'http://127.0.0.1:9/nothing/filter': "):
        ext.filter(make_pod(), Snapshot(make_nodes("node1")).node_info_list)


def test_timeout(server: ExtenderServer) -> None:
    server.routes["/ext/filter"] = lambda a: (time.sleep(1.0), {})[1]
    ext = extender(server, filter_verb="filter", timeout=0.2)
    t0 = time.monotonic()
    with pytest.raises(ExtenderError, match="timed out"):
        ext.filter(make_pod(), Snapshot(make_nodes("node1")).node_info_list)
    assert time.monotonic() - t0 < 0.9


# ---- a raw server, for replies no well-behaved HTTP server sends ----------------------------

class RawServer:
    """Accepts connections, reads each request, then lets `script(conn)` write whatever it likes."""

    def __init__(self, script: Callable[[socket.socket], None]) -> None:
        self.script = script
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)  # so that close() is noticed
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        with conn:
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                match = re.search(rb"Content-Length: (\d+)", head)
                body = head.split(b"\r\n\r\n", 1)[1]
                while match and len(body) < int(match.group(1)):
                    body += conn.recv(65536)
                self.script(conn)
            except OSError:  # the client gave up: that is what several tests want
                pass

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def raw_server():
    servers: list[RawServer] = []

    def start(script: Callable[[socket.socket], None]) -> RawServer:
        servers.append(RawServer(script))
        return servers[-1]

    yield start
    for srv in servers:
        srv.close()


def until_closed(conn: socket.socket) -> None:
    while conn.recv(65536):
        pass


def trickle(data: bytes, pause: float = 0.05) -> Callable[[socket.socket], None]:
    def script(conn: socket.socket) -> None:
        for b in data:
            conn.sendall(bytes([b]))
            time.sleep(pause)
    return script


def hold(head: bytes) -> Callable[[socket.socket], None]:
    def script(conn: socket.socket) -> None:
        conn.sendall(head)
        until_closed(conn)
    return script


def send(data: bytes) -> Callable[[socket.socket], None]:
    return lambda conn: conn.sendall(data)


def chunked(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n%s\r\n" % (len(body[i:i + 1000]), body[i:i + 1000]) for i in range(0, len(body), 1000)) + b"0\r\n\r\n"


REPLY = json.dumps({"NodeNames": ["node1"]}).encode()


@pytest.mark.parametrize("limit, script", [
    (None, hold(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n{" % (MAX_EXTENDER_REPLY_BYTES + 1))),
    (1000, send(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b" " * 5000)),
    (1000, send(chunked(b" " * 4990 + REPLY))),
    (1000, send(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b" " * 4990 + REPLY)),
], ids=["declared 16 MiB + 1", "declared", "chunked", "until the connection closes"])
def test_a_reply_longer_than_the_limit_is_refused(raw_server, monkeypatch: pytest.MonkeyPatch,
                                                  limit: Optional[int], script) -> None:
    if limit is not None:
        monkeypatch.setattr(extender_module, "MAX_EXTENDER_REPLY_BYTES", limit)
    srv = raw_server(script)
    ext = HTTPExtender(Extender(url_prefix=f"{srv.url}/ext", filter_verb="filter", node_cache_capable=True,
                                http_timeout_seconds=2))
    t0 = time.monotonic()
    with pytest.raises(ExtenderError) as e:
        ext.filter(make_pod(), Snapshot(make_nodes("node1")).node_info_list)
    assert str(e.value) == (f"extender {srv.url}/ext filter: the reply is longer than "
                            f"{extender_module.MAX_EXTENDER_REPLY_BYTES} bytes")
    assert time.monotonic() - t0 < 1.5  # refused as soon as it is known, not at the timeout


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(REPLY), REPLY),
    chunked(REPLY),
    b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + REPLY,
], ids=["declared", "chunked", "until the connection closes"])
def test_a_reply_of_exactly_the_limit_is_read(raw_server, monkeypatch: pytest.MonkeyPatch, reply: bytes) -> None:
    monkeypatch.setattr(extender_module, "MAX_EXTENDER_REPLY_BYTES", len(REPLY))
    srv = raw_server(send(reply))
    ext = HTTPExtender(Extender(url_prefix=f"{srv.url}/ext", filter_verb="filter", node_cache_capable=True))
    passed, _, _ = ext.filter(make_pod(), Snapshot(make_nodes("node1", "node2")).node_info_list)
    assert [ni.name for ni in passed] == ["node1"]


@pytest.mark.parametrize("script", [
    trickle(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(REPLY), REPLY)),
    trickle(b"HTTP/1.1 200 OK\r\n" + b"X-Padding: 0\r\n" * 20),
    lambda conn: (conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(REPLY)),
                  trickle(REPLY)(conn)),
], ids=["everything a byte at a time", "endless headers", "the body a byte at a time"])
def test_the_timeout_bounds_the_whole_call(raw_server, script) -> None:
    """httpTimeout is Go's http.Client.Timeout: a server that keeps sending, slowly, cannot
    stretch the call past it (a per-read timeout never fires on a byte every 50 ms)."""
    srv = raw_server(script)
    ext = HTTPExtender(Extender(url_prefix=f"{srv.url}/ext", filter_verb="filter", node_cache_capable=True,
                                http_timeout_seconds=0.4))
    t0 = time.monotonic()
    with pytest.raises(ExtenderError, match=r"timed out: no complete reply within httpTimeout \(0.4s\)"):
        ext.filter(make_pod(), Snapshot(make_nodes("node1")).node_info_list)
    assert time.monotonic() - t0 < 1.2


def test_the_timeout_bounds_a_tls_handshake(raw_server) -> None:
    srv = raw_server(until_closed)  # accepts, never answers the ClientHello
    ext = HTTPExtender(Extender(url_prefix=srv.url.replace("http:", "https:") + "/ext", filter_verb="filter",
                                enable_https=True, http_timeout_seconds=0.3))
    t0 = time.monotonic()
    with pytest.raises(ExtenderError, match="timed out"):
        ext.filter(make_pod(), Snapshot(make_nodes("node1")).node_info_list)
    assert time.monotonic() - t0 < 1.1


def test_url_prefix_trailing_slash_and_query(server: ExtenderServer) -> None:
    server.routes["/ext/prio"] = lambda a: []
    HTTPExtender(Extender(url_prefix=f"{server.url}/ext///", prioritize_verb="prio", weight=1)).prioritize(
        make_pod(), Snapshot(make_nodes("node1")).node_info_list)
    assert server.paths() == ["/ext/prio"]


def test_prioritize(server: ExtenderServer) -> None:
    server.routes["/ext/prioritize"] = lambda a: [{"Host": "node1", "Score": 7}, {"host": "node2", "score": 3}]
    snap = Snapshot(make_nodes("node1", "node2"))
    ext = extender(server, prioritize_verb="prioritize", weight=4, node_cache_capable=True)
    assert ext.prioritize(make_pod(), snap.node_info_list) == ([("node1", 7), ("node2", 3)], 4)
    assert server.requests[0][1]["NodeNames"] == ["node1", "node2"]


@pytest.mark.parametrize("answer", [[{"Host": "node1", "Score": 7.5}], [{"Host": "node1", "Score": "7"}], {"Host": "x"}],
                         ids=["float score", "string score", "not a list"])
def test_prioritize_bad_answers(server: ExtenderServer, answer: Any) -> None:
    server.routes["/ext/p"] = lambda a: answer
    with pytest.raises(ExtenderError):
        extender(server, prioritize_verb="p", weight=1).prioritize(make_pod(), Snapshot(make_nodes("node1")).node_info_list)


def test_verbs_not_configured(server: ExtenderServer) -> None:
    infos = Snapshot(make_nodes("node1", "node2")).node_info_list
    ext = extender(server)
    assert not (ext.is_filter() or ext.is_prioritizer() or ext.is_binder() or ext.supports_preemption())
    assert ext.filter(make_pod(), infos) == (infos, {}, {})
    assert ext.prioritize(make_pod(), infos) == ([("node1", 0), ("node2", 0)], 0)
    with pytest.raises(ExtenderError, match="unexpected empty bindVerb"):
        ext.bind(make_pod(), "node1")
    with pytest.raises(ExtenderError, match="preempt verb is not defined"):
        ext.process_preemption(make_pod(), {})
    assert server.requests == []


def test_bind(server: ExtenderServer) -> None:
    server.routes["/ext/bind"] = lambda a: {"Error": ""}
    ext = extender(server, bind_verb="bind")
    ext.bind(make_pod(), "node1")
    assert server.requests[0][1] == {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "node1"}
    server.routes["/ext/bind"] = lambda a: {"Error": "cannot bind"}
    with pytest.raises(ExtenderError, match="^cannot bind$"):
        ext.bind(make_pod(), "node1")


IS_INTERESTED_CASES = [
    ("Empty managed resources", [], "", True),
    ("Managed memory, empty resources", ["memory"], "", False),
    ("Managed memory, container memory with Requests", ["memory"],
     "    resources: {requests: {memory: '0'}}\n", True),
    ("Managed memory, container memory with Limits", ["memory"], "    resources: {limits: {memory: '0'}}\n", True),
    ("Managed memory, init container memory", ["memory"],
     "  initContainers:\n  - name: i\n    resources: {requests: {memory: '0'}}\n", True),
    ("Managed gpu, pod-level resources only are not looked at", ["example.com/gpu"],
     "  resources: {requests: {cpu: '1'}}\n", False),
    ("Managed gpu requested", ["example.com/gpu", "example.com/fpga"],
     "    resources: {limits: {example.com/gpu: '1'}}\n", True),
]


@pytest.mark.parametrize("managed,spec,want", [c[1:] for c in IS_INTERESTED_CASES], ids=[c[0] for c in IS_INTERESTED_CASES])
def test_is_interested(managed: list[str], spec: str, want: bool) -> None:
    ext = HTTPExtender(Extender(url_prefix="http://x", managed_resources=managed))
    assert ext.is_interested(make_pod(spec)) is want


# ---- preemption (TestConvertToMetaVictims / TestConvertToVictims) --------------------------------

def _victim_snapshot() -> tuple[Snapshot, dict[str, Pod]]:
    snap = Snapshot(make_nodes("node1", "node2"))
    pods = {}
    for i, node in ((1, "node1"), (3, "node1"), (2, "node2"), (4, "node2")):
        p = make_pod(name=f"pod{i}")
        p.meta.uid = f"uid{i}"
        snap.add_pod(p, node)
        pods[f"uid{i}"] = p
    return snap, pods


def test_preemption_node_cache_capable_sends_uids(server: ExtenderServer) -> None:
    snap, pods = _victim_snapshot()
    server.routes["/ext/preempt"] = lambda a: {"NodeNameToMetaVictims": {
        "node1": {"Pods": [{"UID": "uid1"}, {"UID": "uid3"}], "NumPDBViolations": 1}}}
    ext = extender(server, preempt_verb="preempt", node_cache_capable=True)
    victims = {"node1": Victims([pods["uid1"], pods["uid3"]], 1), "node2": Victims([pods["uid2"], pods["uid4"]], 2)}
    got = ext.process_preemption(make_pod(), victims, snap)
    assert got == {"node1": Victims([pods["uid1"], pods["uid3"]], 1)}
    body = server.requests[0][1]
    assert body["NodeNameToVictims"] is None
    assert body["NodeNameToMetaVictims"] == {
        "node1": {"Pods": [{"UID": "uid1"}, {"UID": "uid3"}], "NumPDBViolations": 1},
        "node2": {"Pods": [{"UID": "uid2"}, {"UID": "uid4"}], "NumPDBViolations": 2}}


def test_preemption_full_victims_and_other_pods_on_the_node(server: ExtenderServer) -> None:
    snap, pods = _victim_snapshot()
    # The extender may name any pod running on the node, not only the proposed victims.
    server.routes["/ext/preempt"] = lambda a: {"NodeNameToMetaVictims": {
        "node2": {"Pods": [{"UID": "uid4"}], "NumPDBViolations": 0}}}
    ext = extender(server, preempt_verb="preempt")
    got = ext.process_preemption(make_pod(), {"node2": Victims([pods["uid2"]], 0)}, snap)
    assert got == {"node2": Victims([pods["uid4"]], 0)}
    body = server.requests[0][1]
    assert body["NodeNameToMetaVictims"] is None
    assert [p["metadata"]["uid"] for p in body["NodeNameToVictims"]["node2"]["Pods"]] == ["uid2"]


@pytest.mark.parametrize("answer,message", [
    ({"NodeNameToMetaVictims": {"node1": {"Pods": [{"UID": "uid2"}]}}},
     "extender: {url}/ext claims to preempt pod (UID: &{{uid2}}) on node: node1, but the pod is not found on that node"),
    ({"NodeNameToMetaVictims": {"node9": {"Pods": []}}}, "nodeinfo not found for node name 'node9'"),
])
def test_preemption_inconsistent_answers(server: ExtenderServer, answer: dict, message: str) -> None:
    snap, pods = _victim_snapshot()
    server.routes["/ext/preempt"] = lambda a: answer
    with pytest.raises(ExtenderError) as ei:
        extender(server, preempt_verb="preempt", node_cache_capable=True).process_preemption(
            make_pod(), {"node1": Victims([pods["uid1"]], 0)}, snap)
    assert str(ei.value) == message.format(url=server.url)


def test_preemption_without_node_infos_resolves_sent_victims(server: ExtenderServer) -> None:
    _, pods = _victim_snapshot()
    server.routes["/ext/preempt"] = lambda a: {"NodeNameToMetaVictims": {"node1": {"Pods": [{"UID": "uid3"}]}}}
    got = extender(server, preempt_verb="preempt", node_cache_capable=True).process_preemption(
        make_pod(), {"node1": Victims([pods["uid1"], pods["uid3"]], 0)})
    assert got == {"node1": Victims([pods["uid3"]], 0)}


# ---------------------------------------------------------------------------------------------
# in the scheduling cycle (TestSchedulerWithExtenders)
# ---------------------------------------------------------------------------------------------

class SortForTest(QueueSortPlugin):
    name = "TestSort"


class BindForTest(BindPlugin):
    name = "TestBind"


class TrueFilter(FilterPlugin):
    name = "TrueFilter"

    def filter(self, state, pod, node_info):
        return None


class EqualPrioritizer(ScorePlugin):
    name = "EqualPrioritizer"

    def score(self, state, pod, node_info):
        return 1, None


class Node2Prioritizer(ScorePlugin):
    name = "Node2Prioritizer"

    def score(self, state, pod, node_info):
        return (MAX_NODE_SCORE if node_info.name == "node2" else 0), None


TEST_REGISTRY = Registry()
for _cls in (SortForTest, BindForTest, TrueFilter, EqualPrioritizer, Node2Prioritizer):
    TEST_REGISTRY.register(_cls)


def framework(filters: tuple[str, ...] = ("TrueFilter",), scores: tuple[tuple[str, int], ...] = ()) -> Framework:
    plugins = {"queueSort": PluginSet([PluginRef("TestSort")]), "bind": PluginSet([PluginRef("TestBind")])}
    if filters:
        plugins["filter"] = PluginSet([PluginRef(n) for n in filters])
    if scores:
        plugins["score"] = PluginSet([PluginRef(n, w) for n, w in scores])
    return Framework(Profile(plugins=plugins), TEST_REGISTRY)


@dataclass
class FakeExtender:
    """kube's tf.FakeExtender as routes of the test server."""

    name: str
    predicate: Optional[Callable] = None
    prioritizer: Optional[Callable] = None
    weight: int = 0
    bind: bool = False
    ignorable: bool = False
    uninterested: bool = False

    def build(self, srv: ExtenderServer) -> HTTPExtender:
        if self.predicate:
            srv.routes[f"/{self.name}/filter"] = self.predicate
        if self.prioritizer:
            srv.routes[f"/{self.name}/prioritize"] = self.prioritizer
        if self.bind:
            srv.routes[f"/{self.name}/bind"] = lambda a: {}
        return HTTPExtender(Extender(
            url_prefix=f"{srv.url}/{self.name}", filter_verb="filter" if self.predicate else "",
            prioritize_verb="prioritize" if self.prioritizer else "", bind_verb="bind" if self.bind else "",
            weight=self.weight, ignorable=self.ignorable, node_cache_capable=True,
            managed_resources=["example.com/not-requested"] if self.uninterested else []))


@dataclass
class Case:
    name: str
    extenders: list[FakeExtender]
    nodes: tuple[str, ...] = ("node1", "node2")
    filters: tuple[str, ...] = ("TrueFilter",)
    scores: tuple[tuple[str, int], ...] = ()
    want: Optional[tuple[str, int, int]] = None  # host, evaluated, feasible
    raises: Optional[type] = None
    extra: dict = field(default_factory=dict)


SCHEDULER_CASES = [
    Case("test 1: a filter extender errors", [FakeExtender("e1", TRUE_PREDICATE), FakeExtender("e2", error_route)],
         raises=Exception),
    Case("test 2: a filter extender rejects all", [FakeExtender("e1", TRUE_PREDICATE), FakeExtender("e2", FALSE_PREDICATE)],
         raises=FitError),
    Case("test 3: extenders narrow to node1", [FakeExtender("e1", TRUE_PREDICATE), FakeExtender("e2", NODE1_PREDICATE)],
         scores=(("EqualPrioritizer", 1),), want=("node1", 2, 1)),
    Case("test 4: extenders disagree", [FakeExtender("e1", NODE2_PREDICATE), FakeExtender("e2", NODE1_PREDICATE)],
         raises=FitError),
    Case("test 5: prioritizer errors are ignored (single node: not even called)",
         [FakeExtender("e1", TRUE_PREDICATE, error_route, weight=1)], nodes=("node1",), want=("node1", 1, 1)),
    Case("test 6: extender weights", [FakeExtender("e1", TRUE_PREDICATE, prioritizer("node1"), weight=1),
                                      FakeExtender("e2", TRUE_PREDICATE, prioritizer("node2"), weight=5)],
         want=("node2", 2, 2)),
    Case("test 7: plugin score outweighs the extender", [FakeExtender("e1", TRUE_PREDICATE, prioritizer("node1"), weight=1)],
         scores=(("Node2Prioritizer", 20),), want=("node2", 2, 2)),
    Case("test 8: an uninterested extender is not called",
         [FakeExtender("e1", error_route, error_route, weight=1, uninterested=True)],
         scores=(("Node2Prioritizer", 1),), want=("node2", 2, 2)),
    Case("test 9: an ignorable extender may fail", [FakeExtender("e1", error_route, ignorable=True),
                                                    FakeExtender("e2", NODE1_PREDICATE)],
         scores=(("EqualPrioritizer", 1),), want=("node1", 2, 1)),
    Case("test 10: no scoring, extender filters: every node is evaluated",
         [FakeExtender("e1", TRUE_PREDICATE), FakeExtender("e2", NODE1_PREDICATE)], want=("node1", 2, 1)),
    Case("test 11: no scoring, no filters: a single node is evaluated", [FakeExtender("e1", bind=True)],
         filters=(), want=("node1", 1, 1)),
    Case("prioritizer errors are ignored with several nodes",
         [FakeExtender("e1", TRUE_PREDICATE, error_route, weight=1)], scores=(("Node2Prioritizer", 1),),
         want=("node2", 2, 2)),
]


@pytest.mark.parametrize("case", SCHEDULER_CASES, ids=[c.name for c in SCHEDULER_CASES])
def test_scheduler_with_extenders(server: ExtenderServer, case: Case) -> None:
    algo = SchedulingAlgorithm(0, [e.build(server) for e in case.extenders], tie_break="name")
    snap = Snapshot(make_nodes(*case.nodes))
    fw = framework(case.filters, case.scores)
    if case.raises:
        with pytest.raises(case.raises):
            algo.schedule_pod(fw, CycleState(), make_pod(), snap)
        return
    res = algo.schedule_pod(fw, CycleState(), make_pod(), snap)
    assert (res.suggested_host, res.evaluated_nodes, res.feasible_nodes) == case.want
    if any(e.uninterested for e in case.extenders):
        assert server.requests == []


def test_extender_scores_are_scaled_and_weighted(server: ExtenderServer) -> None:
    """schedule_one.go: finalscore = score * weight * (MaxNodeScore / MaxExtenderPriority)."""
    server.routes["/e1/prioritize"] = lambda a: [{"Host": "node1", "Score": 10}, {"Host": "node2", "Score": 3},
                                                 {"Host": "node9", "Score": 10}]
    server.routes["/e2/prioritize"] = lambda a: [{"Host": "node2", "Score": 1}]
    e1 = HTTPExtender(Extender(url_prefix=f"{server.url}/e1", prioritize_verb="prioritize", weight=2))
    e2 = HTTPExtender(Extender(url_prefix=f"{server.url}/e2", prioritize_verb="prioritize", weight=3))
    snap = Snapshot(make_nodes("node1", "node2", "node3"))
    res = SchedulingAlgorithm(0, [e1, e2], tie_break="name").schedule_pod(
        framework(scores=(("Node2Prioritizer", 1),)), CycleState(), make_pod(), snap)
    scale = MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY
    names = [snap.cols.names[r] for r in res.feasible_rows]
    assert names == ["node1", "node2", "node3"]
    assert res.plugin_scores[e1.name].tolist() == [10 * 2 * scale, 3 * 2 * scale, 0]
    assert res.plugin_scores[e2.name].tolist() == [0, 1 * 3 * scale, 0]
    assert res.totals.tolist() == [200, 100 + 60 + 30, 0]  # node9 is not a candidate: ignored
    assert res.suggested_host == "node1"


def test_extender_rejections_reach_the_diagnosis(server: ExtenderServer) -> None:
    server.routes["/e1/filter"] = lambda a: {"NodeNames": [], "FailedNodes": {"node1": "no gpu", "node2": "no gpu"},
                                             "FailedAndUnresolvableNodes": {"node2": "wrong zone"}}
    e1 = HTTPExtender(Extender(url_prefix=f"{server.url}/e1", filter_verb="filter", node_cache_capable=True))
    with pytest.raises(FitError) as ei:
        SchedulingAlgorithm(0, [e1]).schedule_pod(framework(), CycleState(), make_pod(),
                                                  Snapshot(make_nodes("node1", "node2")))
    d = ei.value.diagnosis
    assert d.node_to_status.get("node1").reasons == ("no gpu",)
    assert d.node_to_status.get("node2").reasons == ("wrong zone",)
    assert "Extender" in d.unschedulable_plugins
    assert ei.value.message() == "0/2 nodes are available: 1 no gpu, 1 wrong zone."


def test_explain_with_a_configured_extender(server: ExtenderServer, tmp_path: Path) -> None:
    """End to end: a KubeSchedulerConfiguration with an extender, the default plugins, explain."""
    from schedmesh.api.load import Manifests
    from schedmesh.cli.explain import Explainer, load_profiles

    server.routes["/sched/filter"] = predicate(lambda n: n != "node3")
    server.routes["/sched/prioritize"] = lambda a: [{"Host": n, "Score": 10 if n == "node2" else 0}
                                                    for n in node_names(a)]
    cfg = tmp_path / "sched.yaml"
    cfg.write_text(f"""\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: {server.url}/sched
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 5
  nodeCacheCapable: true
  httpTimeout: 2s
""")
    profiles, percentage, extenders = load_profiles(str(cfg))
    assert [e.name for e in extenders] == [f"{server.url}/sched"]
    cluster = Manifests(nodes=make_nodes("node1", "node2", "node3"))
    decision = Explainer(cluster, profiles, "name", percentage, extenders).decide(make_pod())
    assert decision.chosen == "node2"
    assert decision.nodes["node3"]["feasible"] is False
    assert decision.nodes["node3"]["reasons"] == ["FakeExtender: node 'node3' failed"]
    assert decision.nodes["node2"]["scores"][f"{server.url}/sched"] == 10 * 5 * 10
    assert decision.nodes["node1"]["scores"][f"{server.url}/sched"] == 0


# ---------------------------------------------------------------------------------------------
# HTTPS
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def self_signed(tmp_path_factory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=ext.local", "-addext", "subjectAltName=DNS:ext.local"],
                   check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls_server(self_signed):
    import ssl

    srv = ExtenderServer()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(self_signed[0]), str(self_signed[1]))
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.routes["/ext/filter"] = TRUE_PREDICATE
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _https_filter(srv: ExtenderServer, enable_https: bool, tls: Optional[ExtenderTLSConfig]) -> list[str]:
    ext = HTTPExtender(Extender(url_prefix=f"https://127.0.0.1:{srv.server_address[1]}/ext", filter_verb="filter",
                                enable_https=enable_https, http_timeout_seconds=3), tls)
    return [ni.name for ni in ext.filter(make_pod(), Snapshot(make_nodes("node1")).node_info_list)[0]]


def test_https_without_ca_is_not_verified(tls_server, self_signed) -> None:
    assert _https_filter(tls_server, True, None) == ["node1"]


def test_https_with_ca_and_server_name(tls_server, self_signed) -> None:
    ca = self_signed[0].read_bytes()
    assert _https_filter(tls_server, True, ExtenderTLSConfig(ca_data=ca, server_name="ext.local")) == ["node1"]
    assert _https_filter(tls_server, False, ExtenderTLSConfig(ca_file=str(self_signed[0]),
                                                              server_name="ext.local")) == ["node1"]


@pytest.mark.parametrize("enable_https,tls", [
    (False, None),  # default verification: a self-signed certificate is refused
    (True, "ca without server name"),  # the certificate is for ext.local, not 127.0.0.1
])
def test_https_verification_failures(tls_server, self_signed, enable_https: bool, tls: Optional[str]) -> None:
    cfg = ExtenderTLSConfig(ca_data=self_signed[0].read_bytes()) if tls else None
    with pytest.raises(ExtenderError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed|match"):
        _https_filter(tls_server, enable_https, cfg)


def test_client_certificate_from_data(self_signed) -> None:
    cert, key = self_signed
    ext = HTTPExtender(Extender(url_prefix="https://x", enable_https=True),
                       ExtenderTLSConfig(cert_data=cert.read_bytes(), key_data=key.read_bytes()))
    assert ext._tls is not None
    with pytest.raises(ValueError, match="given together"):
        HTTPExtender(Extender(url_prefix="https://x"), ExtenderTLSConfig(cert_file=str(cert)))


def test_config_tls_reaches_the_extender(tls_server, self_signed, tmp_path: Path) -> None:
    import base64

    cfg = tmp_path / "sched.yaml"
    cfg.write_text(f"""\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: https://127.0.0.1:{tls_server.server_address[1]}/ext
  filterVerb: filter
  tlsConfig:
    serverName: ext.local
    caData: {base64.b64encode(self_signed[0].read_bytes()).decode()}
""")
    (ext,) = load_scheduler_config(cfg).build_extenders()
    assert [ni.name for ni in ext.filter(make_pod(), Snapshot(make_nodes("node1")).node_info_list)[0]] == ["node1"]


# ---------------------------------------------------------------------------------------------
# api.types -> Kubernetes JSON
# ---------------------------------------------------------------------------------------------

RICH_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: rich
  namespace: team
  uid: 1234
  labels: {app: web, tier: front}
  annotations: {a: b}
  creationTimestamp: "2026-01-02T03:04:05Z"
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: rs, uid: u1, controller: true}]
spec:
  schedulerName: other-scheduler
  priority: 5
  preemptionPolicy: Never
  nodeSelector: {disk: ssd}
  hostNetwork: false
  terminationGracePeriodSeconds: 5
  runtimeClassName: kata
  overhead: {cpu: 250m, memory: 120Mi}
  resources: {requests: {cpu: '2'}, limits: {cpu: '3'}}
  schedulingGates: [{name: wait}]
  tolerations:
  - {key: k, operator: Equal, value: v, effect: NoSchedule}
  - {operator: Exists}
  - {key: t, operator: Exists, effect: NoExecute, tolerationSeconds: 30}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: zone, operator: In, values: [a, b]}]
          matchFields: [{key: metadata.name, operator: NotIn, values: [n9]}]
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 10
        preference: {matchExpressions: [{key: gpu, operator: Exists}]}
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: zone
        labelSelector: {matchLabels: {app: db}}
        namespaceSelector: {}
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 50
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          namespaces: [team]
          labelSelector: {matchExpressions: [{key: app, operator: In, values: [web]}]}
  topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, minDomains: 2,
     labelSelector: {matchLabels: {app: web}}, nodeAffinityPolicy: Honor, matchLabelKeys: [tier]}
  initContainers:
  - {name: sidecar, image: envoy, restartPolicy: Always, resources: {requests: {cpu: 100m}}}
  containers:
  - name: c
    image: nginx:1.27
    ports: [{containerPort: 80, hostPort: 8080, protocol: TCP, name: http}]
    resources:
      requests: {cpu: 500m, memory: 1Gi, example.com/gpu: '1', ephemeral-storage: 1.5Gi}
      limits: {memory: 2Gi}
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
status:
  phase: Pending
  nominatedNodeName: n1
  startTime: "2026-01-02T03:04:06Z"
  conditions: [{type: PodScheduled, status: "False", reason: Unschedulable, message: nope}]
"""


def test_pod_to_json_round_trips() -> None:
    pod = load_text(RICH_POD.replace("uid: 1234", "uid: '1234'"), "rich.yaml").pods[0]
    j = pod_to_json(pod)
    again = load_text(json.dumps(j), "again.json").pods[0]
    assert pod_to_json(again) == j
    spec = j["spec"]
    assert j["metadata"]["creationTimestamp"] == "2026-01-02T03:04:05Z"
    assert spec["containers"][0]["resources"]["requests"] == {
        "cpu": "500m", "memory": "1Gi", "example.com/gpu": "1", "ephemeral-storage": "1536Mi"}
    assert spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaceSelector"] == {}
    assert spec["tolerations"][1] == {"operator": "Exists"}
    assert spec["tolerations"][2]["tolerationSeconds"] == 30
    assert spec["priority"] == 5 and spec["schedulerName"] == "other-scheduler"
    assert j["status"]["nominatedNodeName"] == "n1"


def test_pod_to_json_keeps_match_label_keys_as_stored() -> None:
    """The API server merges matchLabelKeys into the selector at creation and keeps the keys."""
    pod = load_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: web}}\nspec:\n"
                    "  containers: [{name: c}]\n  affinity:\n    podAffinity:\n"
                    "      requiredDuringSchedulingIgnoredDuringExecution:\n"
                    "      - {topologyKey: zone, labelSelector: {matchLabels: {tier: db}}, matchLabelKeys: [app]}\n",
                    "p.yaml").pods[0]
    term = pod_to_json(pod)["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term == {"topologyKey": "zone", "matchLabelKeys": ["app"],
                    "labelSelector": {"matchLabels": {"tier": "db"},
                                      "matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}}


def test_node_to_json_round_trips() -> None:
    text = """\
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {zone: a}}
spec:
  unschedulable: true
  taints: [{key: k, value: v, effect: NoSchedule}, {key: gone, effect: NoExecute}]
status:
  capacity: {cpu: '8', memory: 32Gi, pods: '110'}
  allocatable: {cpu: 7800m, memory: 30Gi, pods: '110', example.com/gpu: '2'}
  images: [{names: [nginx:1.27, nginx@sha256:abc], sizeBytes: 1000}]
  conditions: [{type: Ready, status: "True"}]
"""
    node = load_text(text, "n.yaml").nodes[0]
    j = node_to_json(node)
    assert node_to_json(load_text(json.dumps(j), "again.json").nodes[0]) == j
    assert j["status"]["allocatable"]["cpu"] == "7800m"
    assert j["spec"]["taints"][1] == {"key": "gone", "effect": "NoExecute"}


@pytest.mark.parametrize("value,text", [
    ("0", "0"), ("1", "1"), ("1000", "1000"), ("1024", "1Ki"), ("1Gi", "1Gi"), ("1.5Gi", "1536Mi"), ("100m", "100m"),
    ("0.5", "500m"), ("1u", "1u"), ("1n", "1n"), ("2500m", "2500m"), ("1e3", "1000"),
])
def test_quantity_string(value: str, text: str) -> None:
    from schedmesh.api.quantity import parse_quantity

    q = parse_quantity(value)
    assert quantity_string(q) == text
    assert parse_quantity(quantity_string(q)) == q
