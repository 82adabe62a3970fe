"""schedmesh queue-manager: the Scheduler API, the priority queue and the scheduling loop."""
from __future__ import annotations

import argparse
import asyncio
import os

from schedmesh.mesh.scheduler import QueueManagerConfig, serve


def _targets(s: str | None) -> list[str]:
    return [t.strip() for t in (s or "").split(",") if t.strip()]


def main() -> None:
    p = argparse.ArgumentParser(prog="queue-manager", description=__doc__)
    p.add_argument("--port", type=int, default=int(os.environ.get("SCHEDMESH_PORT", "0")))
    p.add_argument("--bootstrap", default=os.environ.get("SCHEDMESH_KAFKA", "127.0.0.1:9092"))
    p.add_argument("--filter-workers", default=os.environ.get("SCHEDMESH_FILTER_WORKERS"),
                   help="host:port,... of the filter shards (none: filter in this process)")
    p.add_argument("--score-workers", default=os.environ.get("SCHEDMESH_SCORE_WORKERS"),
                   help="host:port,... of the score shards (none: score in this process)")
    p.add_argument("--binder", default=os.environ.get("SCHEDMESH_BINDER"), help="host:port of the binder")
    p.add_argument("--preemption", default=os.environ.get("SCHEDMESH_PREEMPTION"),
                   help="host:port of the preemption service (none: preemption is computed for the message only)")
    p.add_argument("--config", default=os.environ.get("SCHEDMESH_CONFIG"),
                   help="KubeSchedulerConfiguration file (default: the default profile)")
    p.add_argument("--client-id", default=os.environ.get("SCHEDMESH_CLIENT_ID", "queue-manager"))
    p.add_argument("--tie-break", choices=("random", "name"), default="random")
    p.add_argument("--strict-names", action="store_true", default=os.environ.get("SCHEDMESH_STRICT_NAMES") == "1",
                   help="refuse object names the Kubernetes API server refuses (default: accept with a warning)")
    p.add_argument("--strict-admission", action="store_true",
                   default=os.environ.get("SCHEDMESH_STRICT_ADMISSION") == "1",
                   help="refuse pods naming a RuntimeClass that does not exist, as the Kubernetes API server "
                        "does (default: accept them as written with a warning)")
    p.add_argument("--shard-batch-size", type=int, default=None,
                   help=f"node-local pods asked of the shards in one request (1: pod by pod; default "
                        f"$SCHEDMESH_SHARD_BATCH_SIZE, else {QueueManagerConfig.shard_batch_size})")
    a = p.parse_args()
    if a.shard_batch_size is None:
        raw = os.environ.get("SCHEDMESH_SHARD_BATCH_SIZE", "").strip()
        try:
            a.shard_batch_size = int(raw) if raw else QueueManagerConfig.shard_batch_size
        except ValueError:
            p.error(f"SCHEDMESH_SHARD_BATCH_SIZE={raw!r} is not a whole number")
    if a.shard_batch_size < 1:
        p.error("--shard-batch-size must be at least 1")
    filters, scores = _targets(a.filter_workers), _targets(a.score_workers)
    if bool(filters) != bool(scores):
        p.error("--filter-workers and --score-workers go together: both empty (evaluate in this process) or both set")
    if not a.binder:
        p.error("--binder is required")
    cfg = QueueManagerConfig(filter_workers=filters, score_workers=scores, binder=a.binder, client_id=a.client_id,
                             preemption=a.preemption or None,
                             tie_break=a.tie_break, strict_names=a.strict_names,
                             strict_admission=a.strict_admission, shard_batch_size=a.shard_batch_size)
    if a.config:
        cfg.use_scheduler_config(a.config)
    asyncio.run(serve(cfg, a.bootstrap, a.port))


main()
