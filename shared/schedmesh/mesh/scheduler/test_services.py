"""GetServices (`schedmesh get services --server`): every service the queue-manager is configured
with, the kubelet agents included, each with its /metrics URL as configured."""
from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from schedmesh.mesh.scheduler.services import mesh_services, parse_peer_metrics
from schedmesh.mesh.scheduler.state import QueueManagerConfig


def config(**kw) -> QueueManagerConfig:
    base = dict(filter_workers=["fw-0:50051", "fw-1:50051"], score_workers=["sw-0:50051"], binder="binder:50051",
                preemption="preemption:50051")
    return QueueManagerConfig(**{**base, **kw})


def listed(cfg, env, own="http://0.0.0.0:9464/metrics") -> dict:
    return {s.name: (s.address, s.metrics_url) for s in mesh_services(cfg, own, env)}


def test_every_peer_and_the_kubelet_agent_with_the_metrics_port_convention() -> None:
    env = {"SCHEDMESH_CONTROLLER_MANAGER": "controller-manager:50051",
           "SCHEDMESH_KUBELET_AGENTS": "kubelet-agent:50051", "SCHEDMESH_PEER_METRICS_PORT": "9464"}
    assert listed(config(), env) == {
        "queue-manager": ("", "http://0.0.0.0:9464/metrics"),
        "filter-worker-0": ("fw-0:50051", "http://fw-0:9464/metrics"),
        "filter-worker-1": ("fw-1:50051", "http://fw-1:9464/metrics"),
        "score-worker-0": ("sw-0:50051", "http://sw-0:9464/metrics"),
        "binder": ("binder:50051", "http://binder:9464/metrics"),
        "preemption": ("preemption:50051", "http://preemption:9464/metrics"),
        "controller-manager": ("controller-manager:50051", "http://controller-manager:9464/metrics"),
        "kubelet-agent": ("kubelet-agent:50051", "http://kubelet-agent:9464/metrics"),
    }


def test_explicit_urls_by_name_win_and_several_agents_are_numbered() -> None:
    """`schedmesh up`: every service on 127.0.0.1 with a /metrics port of its own."""
    env = {"SCHEDMESH_KUBELET_AGENTS": "127.0.0.1:7001, [::1]:7002",
           "SCHEDMESH_PEER_METRICS": "binder=http://127.0.0.1:9001/metrics,kubelet-agent-1=http://[::1]:9002/metrics",
           "SCHEDMESH_PEER_METRICS_PORT": "9464"}
    got = listed(config(filter_workers=[], score_workers=[], preemption=None, binder="127.0.0.1:6000"), env, own="")
    assert got == {"queue-manager": ("", ""),
                   "binder": ("127.0.0.1:6000", "http://127.0.0.1:9001/metrics"),
                   "kubelet-agent-0": ("127.0.0.1:7001", "http://127.0.0.1:9464/metrics"),
                   "kubelet-agent-1": ("[::1]:7002", "http://[::1]:9002/metrics")}


def test_without_metrics_configuration_no_url_is_made_up() -> None:
    got = listed(config(client_id="qm-a"), {})
    assert got["qm-a"] == ("", "http://0.0.0.0:9464/metrics")
    assert {n: url for n, (_, url) in got.items() if n != "qm-a"} == {
        "filter-worker-0": "", "filter-worker-1": "", "score-worker-0": "", "binder": "", "preemption": ""}


def test_a_malformed_metrics_entry_is_ignored_with_a_warning(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="schedmesh.queue_manager"):
        assert parse_peer_metrics("binder=http://b:1/metrics, nonsense ,=x,y=") == {"binder": "http://b:1/metrics"}
    assert caplog.text.count("is not name=URL") == 3


def test_get_services_answers_the_listing(monkeypatch) -> None:
    from schedmesh.mesh.scheduler.api import SchedulerServicer
    monkeypatch.setenv("SCHEDMESH_KUBELET_AGENTS", "agent:50051")
    monkeypatch.setenv("SCHEDMESH_PEER_METRICS_PORT", "9464")
    monkeypatch.delenv("SCHEDMESH_PEER_METRICS", raising=False)
    monkeypatch.delenv("SCHEDMESH_CONTROLLER_MANAGER", raising=False)
    servicer = SimpleNamespace(qm=SimpleNamespace(cfg=config()), metrics_url="http://0.0.0.0:1234/metrics")
    resp = asyncio.run(SchedulerServicer.GetServices(servicer, None, None))
    got = {s.name: (s.address, s.metrics_url) for s in resp.services}
    assert got["queue-manager"] == ("", "http://0.0.0.0:1234/metrics")
    assert got["kubelet-agent"] == ("agent:50051", "http://agent:9464/metrics")
    assert len(got) == 7 and all(url for _, url in got.values())


@pytest.mark.parametrize("value", ["", "  ,  "])
def test_no_agents_none_listed(value: str) -> None:
    assert not any(n.startswith("kubelet-agent") for n in listed(config(), {"SCHEDMESH_KUBELET_AGENTS": value}))
