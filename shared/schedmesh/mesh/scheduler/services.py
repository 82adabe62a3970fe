"""What the queue-manager knows of the mesh's services, for GetServices (`schedmesh get services
--server`): itself, the filter and score shards, the binder, the preemption service, the
controller-manager and the kubelet agents, each with its gRPC address and its /metrics URL, as
the queue-manager's configuration gives them (so: names and addresses of the mesh's network).

Configuration (the queue-manager's environment; compose, the Kubernetes manifests and
`schedmesh up` set it):

* ``SCHEDMESH_KUBELET_AGENTS``: host:port,... of the kubelet agents. The queue-manager never
  calls them; they are listed only. One is named ``kubelet-agent``, several
  ``kubelet-agent-0``, ``kubelet-agent-1``, ...
* ``SCHEDMESH_PEER_METRICS``: name=URL,... : a service's /metrics URL by the name it is listed
  under (``binder``, ``filter-worker-0``, ``kubelet-agent``, ...). `schedmesh up` gives every
  service's, each on its own port.
* ``SCHEDMESH_PEER_METRICS_PORT``: otherwise, the port every service serves /metrics on, on the
  host of its gRPC address: ``http://<host>:<port>/metrics`` (compose and Kubernetes: 9464, the
  SCHEDMESH_METRICS_PORT they give every container).

A service with neither has no metrics URL listed.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from schedmesh.mesh.controllers.forwarding import ENV_CONTROLLER_MANAGER

log = logging.getLogger("schedmesh.queue_manager")

ENV_KUBELET_AGENTS = "SCHEDMESH_KUBELET_AGENTS"
ENV_PEER_METRICS = "SCHEDMESH_PEER_METRICS"
ENV_PEER_METRICS_PORT = "SCHEDMESH_PEER_METRICS_PORT"


@dataclass(frozen=True)
class Service:
    name: str
    address: str  # host:port of its gRPC server as the queue-manager reaches it ("": the queue-manager)
    metrics_url: str = ""


def _split(value: Optional[str]) -> list[str]:
    return [t.strip() for t in (value or "").split(",") if t.strip()]


def parse_peer_metrics(value: Optional[str]) -> dict[str, str]:
    """"binder=http://h:1/metrics,kubelet-agent=http://h:2/metrics" -> {name: url}; an entry that
    is not name=URL is left out with a warning (a listing is no reason to stop scheduling)."""
    out = {}
    for item in _split(value):
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or not url.strip():
            log.warning("%s: %r is not name=URL; ignored", ENV_PEER_METRICS, item)
            continue
        out[name.strip()] = url.strip()
    return out


def _host(address: str) -> str:
    """host:port -> host ("[::1]:50051" -> "[::1]", bracketed as a URL wants it)."""
    return address.rsplit(":", 1)[0]


def mesh_services(cfg, own_metrics_url: str = "", env: Mapping[str, str] = os.environ) -> list[Service]:
    """The queue-manager (address "": the one the client reached) and every peer it is configured
    with, in a stable order, each with its /metrics URL when configured (module docstring)."""
    explicit = parse_peer_metrics(env.get(ENV_PEER_METRICS))
    port = (env.get(ENV_PEER_METRICS_PORT) or "").strip()

    def metrics_of(name: str, address: str) -> str:
        if name in explicit:
            return explicit[name]
        return f"http://{_host(address)}:{port}/metrics" if port and address else ""

    peers: list[tuple[str, str]] = []
    for kind, addresses in (("filter-worker", cfg.filter_workers), ("score-worker", cfg.score_workers)):
        peers += [(f"{kind}-{i}", a) for i, a in enumerate(addresses)]
    peers += [("binder", cfg.binder or ""), ("preemption", cfg.preemption or ""),
              ("controller-manager", env.get(ENV_CONTROLLER_MANAGER, ""))]
    agents: Sequence[str] = _split(env.get(ENV_KUBELET_AGENTS))
    peers += [("kubelet-agent" if len(agents) == 1 else f"kubelet-agent-{i}", a) for i, a in enumerate(agents)]
    return [Service(cfg.client_id, "", own_metrics_url)] + [
        Service(name, address, metrics_of(name, address)) for name, address in peers if address]
