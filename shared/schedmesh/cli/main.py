"""The `schedmesh` command."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from schedmesh.api.load import ManifestError


def build_parser() -> argparse.ArgumentParser:
    from schedmesh.cli import explain

    parser = argparse.ArgumentParser(prog="schedmesh", description="A Kubernetes-compatible pod scheduler mesh.")
    from schedmesh.cli import connection, kubectl
    parser.add_argument("--version", action="version", version=f"schedmesh {kubectl.version()}")
    connection.add_arguments(parser)
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
    try:  # shell completion (`schedmesh completion bash`): answers and exits when the shell asks
        import argcomplete
        argcomplete.autocomplete(parser)
    except ImportError:
        pass
    args = parser.parse_args(argv)
    from schedmesh.cli import connection
    connection.configure(args)
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
    except BrokenPipeError:  # `schedmesh get pods | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
