"""`python -m schedmesh.security.healthcheck [HOST:PORT]`: exit 0 when the service answers
grpc.health.v1 SERVING, 1 otherwise. For container health checks and Kubernetes exec probes:
kubelet's built-in gRPC probe cannot present a client certificate, and the mesh's servers
require one. Uses the container's own certificate (SCHEDMESH_TLS_*), plaintext without it."""
from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from schedmesh.security.credentials import CredentialsError, TLSFiles, channel


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m schedmesh.security.healthcheck", description=__doc__)
    p.add_argument("target", nargs="?", default=f"127.0.0.1:{os.environ.get('SCHEDMESH_PORT', '50051')}")
    p.add_argument("--timeout", type=float, default=3.0)
    a = p.parse_args(argv)
    try:
        with channel(a.target, TLSFiles.from_env()) as ch:
            status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=a.timeout).status
    except CredentialsError as e:
        print(f"healthcheck: {e}", file=sys.stderr)
        return 1
    except grpc.RpcError as e:
        print(f"healthcheck: {a.target}: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    if status != health_pb2.HealthCheckResponse.SERVING:
        print(f"healthcheck: {a.target}: {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
