"""`schedmesh drain` with DaemonSet pods on the node, as kubectl drain: refused naming them, or
with --ignore-daemonsets left in place (their controller would make them again there) while the
other pods are evicted."""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from schedmesh.cli import nodes
from schedmesh.v1 import objects_pb2


def view(name: str, daemon: bool):
    pod = objects_pb2.Pod(node_name="n1")
    pod.metadata.name, pod.metadata.namespace, pod.metadata.uid = name, "default", f"uid-{name}"
    if daemon:
        pod.metadata.owner_references.add(kind="DaemonSet", name="logs", controller=True)
    return SimpleNamespace(pod=pod)


class Client:
    def __init__(self) -> None:
        self.live = [view("logs-abcde", True), view("web", False)]
        self.evicted: list[str] = []

    def call(self, method: str, request):
        if method == "Cordon":
            return SimpleNamespace(changed=True)
        assert method == "Evict"
        self.evicted.append(request.name)
        self.live = [v for v in self.live if v.pod.metadata.name != request.name]
        return SimpleNamespace()

    def pods(self, namespace: str = ""):
        return list(self.live)

    def close(self) -> None:
        pass


def drain(monkeypatch: pytest.MonkeyPatch, ignore: bool) -> tuple[int, Client]:
    client = Client()
    monkeypatch.setattr(nodes, "PolicyClient", lambda: client)
    return nodes.run_drain(argparse.Namespace(node="n1", timeout=0.0, ignore_daemonsets=ignore)), client


def test_daemon_set_pods_refuse_the_drain(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    rc, client = drain(monkeypatch, ignore=False)
    assert rc == 1 and client.evicted == []
    assert ("error: cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): default/logs-abcde"
            in capsys.readouterr().err)


def test_ignore_daemonsets_leaves_them(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    rc, client = drain(monkeypatch, ignore=True)
    assert rc == 0 and client.evicted == ["web"]
    out = capsys.readouterr()
    assert "Warning: ignoring DaemonSet-managed Pods: default/logs-abcde" in out.err
    assert out.out.splitlines() == ["node/n1 cordoned", "evicting pod default/web", "pod/web evicted", "node/n1 drained"]
