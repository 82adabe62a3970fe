"""The `schedmesh` command."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from schedmesh.api.load import ManifestError


def build_parser() -> argparse.ArgumentParser:
    from schedmesh.cli import explain

    parser = argparse.ArgumentParser(prog="schedmesh", description="A Kubernetes-compatible pod scheduler mesh.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("explain", help="place pending pods on a cluster and show every decision")
    explain.add_arguments(p)
    p.set_defaults(func=explain.run)

    from schedmesh.bench import cycle_bench
    p = sub.add_parser("bench-cycle", help="benchmark one scheduling cycle per pod in this process (JSON)")
    cycle_bench.add_arguments(p)
    p.set_defaults(func=cycle_bench.main)

    from schedmesh.cli import mesh
    mesh.register(sub)
    from schedmesh.cli import nodes
    nodes.register(sub)
    from schedmesh.cli import certs
    p = sub.add_parser("certs", help="make the mesh's CA, service certificates and the user's client certificate")
    certs.add_arguments(p)
    p.set_defaults(func=certs.run)
    from schedmesh.bench import mesh_bench
    p = sub.add_parser("bench", help="benchmark scheduling throughput through the running mesh (JSON)")
    mesh_bench.add_arguments(p)
    p.set_defaults(func=mesh_bench.main)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except ManifestError as e:
        print(f"schedmesh: error: {e}", file=sys.stderr)
        sys.exit(2)
    except ValueError as e:  # bad configuration or arguments: one line, no traceback
        print(f"schedmesh: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
