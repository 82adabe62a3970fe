"""The `schedmesh` command."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Optional, Sequence

# Commands whose modules bring in the whole scheduling framework, NumPy or the PKI (about 0.6 s
# of the CLI's 1.4 s start): (name, module, its run function, help). Their arguments are built
# only when argv names them (any token: building an unused one is harmless), so `get pods` and
# the other kubectl-shaped commands start without them.
_HEAVY = (
    ("explain", "schedmesh.cli.explain", "run", "place pending pods on a cluster and show every decision"),
    ("bench-cycle", "schedmesh.bench.cycle_bench", "main",
     "benchmark one scheduling cycle per pod in this process (JSON)"),
    ("certs", "schedmesh.cli.certs", "run",
     "make the mesh's CA, service certificates and the user's client certificate"),
    ("bench", "schedmesh.bench.mesh_bench", "main", "benchmark scheduling throughput through the running mesh (JSON)"),
)


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The whole command line; with `argv`, the heavy commands it does not name get their help
    line only (every command in full for shell completion, or when `argv` is None)."""
    parser = argparse.ArgumentParser(prog="schedmesh", description="A Kubernetes-compatible pod scheduler mesh.")
    from schedmesh.cli import connection, kubectl
    parser.add_argument("--version", action="version", version=f"schedmesh {kubectl.version()}")
    connection.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    named = None if argv is None or "_ARGCOMPLETE" in os.environ else set(argv)
    for name, module, run, helptext in _HEAVY:
        p = sub.add_parser(name, help=helptext)
        if named is None or name in named:
            mod = importlib.import_module(module)
            mod.add_arguments(p)
            p.set_defaults(func=getattr(mod, run))
    from schedmesh.cli import mesh
    mesh.register(sub)
    from schedmesh.cli import nodes
    nodes.register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
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
    except ValueError as e:  # a bad manifest (ManifestError), configuration or arguments: one line, no traceback
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
