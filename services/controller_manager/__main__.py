"""schedmesh controller-manager: PDB status, node lifecycle, taint eviction, DaemonSets, the replicas of
ReplicaSets, ReplicationControllers, StatefulSets and Jobs, the Eviction API."""
from __future__ import annotations

import argparse
import asyncio
import os

from schedmesh.mesh.controllers.manager import ControllerManagerConfig, serve


def _seconds(p: argparse.ArgumentParser, name: str, default: float) -> float:
    """Environment variable `name` as seconds (else `default`); a value that is no number is a
    usage error naming the variable, not a traceback."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        p.error(f"{name}={raw!r} is not a number of seconds")


def main() -> None:
    d = ControllerManagerConfig()
    p = argparse.ArgumentParser(prog="controller-manager", description=__doc__)
    p.add_argument("--port", type=int, default=int(os.environ.get("SCHEDMESH_PORT", "0")))
    p.add_argument("--bootstrap", default=os.environ.get("SCHEDMESH_KAFKA", "127.0.0.1:9092"))
    p.add_argument("--name", default=os.environ.get("SCHEDMESH_NAME", d.name))
    p.add_argument("--node-monitor-grace-period", type=float,
                   default=_seconds(p, "SCHEDMESH_NODE_MONITOR_GRACE_PERIOD", d.node_monitor_grace_period),
                   help="seconds without a heartbeat before a node is Ready=Unknown (kube's default: 50)")
    p.add_argument("--node-startup-grace-period", type=float,
                   default=_seconds(p, "SCHEDMESH_NODE_STARTUP_GRACE_PERIOD", d.node_startup_grace_period),
                   help="the same for a node that never posted Ready (kube's default: 60)")
    p.add_argument("--sync-period", type=float, default=_seconds(p, "SCHEDMESH_CONTROLLER_SYNC_PERIOD", d.sync_period),
                   help="seconds between controller passes")
    a = p.parse_args()
    cfg = ControllerManagerConfig(name=a.name, node_monitor_grace_period=a.node_monitor_grace_period,
                                  node_startup_grace_period=a.node_startup_grace_period, sync_period=a.sync_period)
    try:
        cfg.check()
    except ValueError as e:
        p.error(str(e))
    asyncio.run(serve(cfg, a.bootstrap, a.port))


main()
