"""Container entry point for every schedmesh service image: works out the shard settings a
scaled replica cannot be given statically, then execs the service command unchanged.

    entrypoint.py python -m services.filter_worker [args...]

Shard index (SCHEDMESH_SHARD), first match wins:
  * SCHEDMESH_SHARD already set: left alone (a hand-written or per-service setting).
  * POD_NAME set (Kubernetes StatefulSet, from the downward API): the pod ordinal,
    e.g. filter-worker-2 -> 2. Ordinals are stable across restarts, so shard = ordinal.
  * SCHEDMESH_REPLICA_NAME_TEMPLATE (docker compose --scale), e.g. "schedmesh-filter-worker-{n}":
    Compose names replicas <project>-<service>-<n> with n = 1..scale, and Docker's embedded
    DNS resolves those names; the replica whose name resolves to this container's own
    address is this one, and shard = n - 1. (A forward lookup on purpose: a reverse lookup
    would answer from /etc/hosts with the container id.)
The shard count (SCHEDMESH_SHARDS) is always given explicitly; it must equal the number of
replicas, and a replica whose index is outside it refuses to start (the worker checks).

Worker address lists for the queue-manager, expanded from a template and a count:
  SCHEDMESH_FILTER_WORKERS_TEMPLATE + SCHEDMESH_FILTER_SHARDS -> --filter-workers a,b,...
  SCHEDMESH_SCORE_WORKERS_TEMPLATE  + SCHEDMESH_SCORE_SHARDS  -> --score-workers  c,d,...
The template is a str.format pattern with {i} (0-based shard) and {n} (1-based replica),
e.g. "schedmesh-filter-worker-{n}:50051" or "filter-worker-{i}.filter-worker:50051".
"""
from __future__ import annotations

import os
import re
import socket
import sys
import time

_TRAILING_NUMBER = re.compile(r"-(\d+)$")


def _ordinal(name: str) -> int | None:
    m = _TRAILING_NUMBER.search(name.split(".", 1)[0])
    return int(m.group(1)) if m else None


def _replica_number(template: str, count: int, timeout: float = 60.0) -> int:
    """n (1-based) such that template.format(n=n) resolves to this container's address."""
    own = socket.gethostbyname(socket.gethostname())
    deadline = time.monotonic() + timeout
    while True:
        for n in range(1, count + 1):
            try:
                if own in socket.gethostbyname_ex(template.format(n=n, i=n - 1))[2]:
                    return n
            except OSError:  # that replica does not exist (yet)
                pass
        if time.monotonic() > deadline:
            raise SystemExit(f"entrypoint: none of {template} for n=1..{count} resolves to {own}; "
                             f"is the scale larger than SCHEDMESH_SHARDS={count}?")
        time.sleep(1.0)


def shard_from_environment(env: dict[str, str]) -> str | None:
    if env.get("SCHEDMESH_SHARD"):
        return None
    pod = env.get("POD_NAME")
    if pod:
        i = _ordinal(pod)
        if i is None:
            raise SystemExit(f"entrypoint: POD_NAME {pod!r} has no ordinal suffix")
        return str(i)
    template = env.get("SCHEDMESH_REPLICA_NAME_TEMPLATE")
    if template:
        return str(_replica_number(template, int(env.get("SCHEDMESH_SHARDS", "1"))) - 1)
    return None


def worker_list(template: str, count: str) -> str:
    k = int(count)
    if k < 1:
        raise SystemExit("entrypoint: a shard count must be at least 1")
    return ",".join(template.format(i=i, n=i + 1) for i in range(k))


def build(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    env = dict(env)
    shard = shard_from_environment(env)
    if shard is not None:
        env["SCHEDMESH_SHARD"] = shard
    args = list(argv)
    for kind in ("filter", "score"):
        template = env.get(f"SCHEDMESH_{kind.upper()}_WORKERS_TEMPLATE")
        count = env.get(f"SCHEDMESH_{kind.upper()}_SHARDS")
        if template and count and f"--{kind}-workers" not in args:
            args += [f"--{kind}-workers", worker_list(template, count)]
    return args, env


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: entrypoint.py COMMAND [ARGS...]")
    args, env = build(sys.argv[1:], dict(os.environ))
    os.execvpe(args[0], args, env)


if __name__ == "__main__":
    main()
