"""Where the CLI's Scheduler API is and how to reach it: one place every client command uses.

Resolution, first match wins (kubectl's order: flags, then environment, then the config file):

1. ``--server HOST:PORT`` (with ``--certificate-authority``, ``--client-certificate``,
   ``--client-key``, ``--token``, ``--tls-server-name``);
2. ``SCHEDMESH_SERVER`` (with ``SCHEDMESH_CERTIFICATE_AUTHORITY``, ``SCHEDMESH_CLIENT_CERTIFICATE``,
   ``SCHEDMESH_CLIENT_KEY``, ``SCHEDMESH_TOKEN``);
3. the current context (or ``--context NAME``) of the config file (``--config-file``,
   ``SCHEDMESH_CONFIG``, default ``~/.schedmesh/config``), kubeconfig-like:

       apiVersion: schedmesh.io/v1
       kind: Config
       current-context: prod
       contexts:
       - name: prod
         context:
           server: scheduler.example.com:50051
           certificate-authority: /path/ca.crt      # relative paths: relative to the config file
           client-certificate: /path/admin.crt
           client-key: /path/admin.key
           token-file: /path/token                  # or token: ...
           tls-server-name: queue-manager           # optional, as kubeconfig's

4. the mesh started by ``schedmesh up`` in the current directory (``.schedmesh/mesh.json``), with
   the CA, client certificate and token that ``up`` made.

A credential flag given alone (e.g. ``--token`` with a local mesh) overrides that one value of
whatever was resolved. Without a CA the connection is plaintext, which schedmesh allows only to a
loopback address (schedmesh.security.credentials.channel).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import yaml

from schedmesh.local.client import Target, local_target, read_credential
from schedmesh.local.supervisor import NOT_RUNNING, MeshError, state_path

ENV_SERVER = "SCHEDMESH_SERVER"
ENV_CONFIG = "SCHEDMESH_CONFIG"
ENV_CA = "SCHEDMESH_CERTIFICATE_AUTHORITY"
ENV_CLIENT_CERT = "SCHEDMESH_CLIENT_CERTIFICATE"
ENV_CLIENT_KEY = "SCHEDMESH_CLIENT_KEY"
ENV_TOKEN = "SCHEDMESH_TOKEN"
DEFAULT_CONFIG = Path("~/.schedmesh/config")
CONFIG_API_VERSION = "schedmesh.io/v1"
# The keys of a context, as kubeconfig spells them; the flags carry the same names.
CONTEXT_KEYS = ("server", "certificate-authority", "client-certificate", "client-key", "token", "token-file",
                "tls-server-name")


def add_arguments(p: argparse.ArgumentParser, suppress_defaults: bool = False) -> None:
    """The connection flags. On subcommands they are added with suppressed defaults so that
    `schedmesh --server X get pods` and `schedmesh get pods --server X` both work."""
    d = argparse.SUPPRESS if suppress_defaults else None
    g = p.add_argument_group("connection (kubectl's flags; default: $SCHEDMESH_SERVER, the config file's "
                             "current context, else the mesh `schedmesh up` started here)")
    g.add_argument("--server", "-s", default=d, metavar="HOST:PORT", help="the Scheduler API (queue-manager)")
    g.add_argument("--certificate-authority", default=d, metavar="FILE", help="CA certificate to verify the server")
    g.add_argument("--client-certificate", default=d, metavar="FILE", help="client certificate (mutual TLS)")
    g.add_argument("--client-key", default=d, metavar="FILE", help="client certificate's key")
    g.add_argument("--token", default=d, help="bearer token for the Scheduler API")
    g.add_argument("--tls-server-name", default=d, metavar="NAME",
                   help="server name to verify in the server's certificate (default: the host of --server)")
    g.add_argument("--context", default=d, help="the config file's context to use (default: its current-context)")
    g.add_argument("--config-file", default=d, metavar="FILE",
                   help=f"the config file (default: ${ENV_CONFIG}, else {DEFAULT_CONFIG})")


_current: Optional[argparse.Namespace] = None


def configure(args: argparse.Namespace) -> None:
    """Remember the parsed flags for `resolve()` (called once by main)."""
    global _current
    _current = args


def _flag(args: Optional[argparse.Namespace], name: str) -> str:
    return str(getattr(args, name, None) or "") if args is not None else ""


# ------------------------------------------------------------------ config file
def config_path(args: Optional[argparse.Namespace] = None, env=os.environ) -> Path:
    return Path(_flag(args, "config_file") or env.get(ENV_CONFIG, "") or DEFAULT_CONFIG).expanduser()


def load_config(path: Path) -> dict[str, Any]:
    """The config file as a dict; an empty config when it does not exist; a clear error when it is bad."""
    if not path.exists():
        return {"apiVersion": CONFIG_API_VERSION, "kind": "Config", "current-context": "", "contexts": []}
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise MeshError(f"{path}: not a readable YAML config: {e}") from None
    if not isinstance(doc, dict):
        raise MeshError(f"{path}: a config is a mapping (apiVersion, kind: Config, contexts, current-context)")
    if doc.get("kind", "Config") != "Config":
        raise MeshError(f"{path}: kind must be Config, not {doc.get('kind')!r}")
    contexts = doc.get("contexts") or []
    if not isinstance(contexts, list):
        raise MeshError(f"{path}: contexts must be a list")
    for i, c in enumerate(contexts):
        if not isinstance(c, dict) or not c.get("name") or not isinstance(c.get("context", {}), dict):
            raise MeshError(f"{path}: contexts[{i}] needs a name and a context mapping")
        unknown = sorted(set(c.get("context") or {}) - set(CONTEXT_KEYS))
        if unknown:
            raise MeshError(f"{path}: contexts[{i}] ({c['name']}): unknown key(s) {', '.join(unknown)}; "
                            f"known: {', '.join(CONTEXT_KEYS)}")
    doc["contexts"] = contexts
    return doc


def save_config(path: Path, doc: dict[str, Any]) -> None:
    """Written owner-only: it may hold a token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
    os.replace(tmp, path)


def _context_target(path: Path, name: str, ctx: dict[str, Any]) -> Target:
    origin = f"context {name!r} of {path}"
    if not ctx.get("server"):
        raise MeshError(f"{origin}: no server")

    def file(key: str) -> str:  # kubeconfig resolves relative paths against the file's directory
        v = str(ctx.get(key) or "")
        return str((path.parent / Path(v).expanduser()).resolve()) if v else ""

    token = str(ctx.get("token") or "")
    if not token and ctx.get("token-file"):
        token = read_credential(file("token-file"), "token-file", origin).decode().strip()
    return Target(server=str(ctx["server"]), certificate_authority=file("certificate-authority"),
                  client_certificate=file("client-certificate"), client_key=file("client-key"), token=token,
                  tls_server_name=str(ctx.get("tls-server-name") or ""), origin=origin)


# ------------------------------------------------------------------ resolution
def resolve(args: Optional[argparse.Namespace] = None, env=os.environ) -> Target:
    """The Scheduler API to talk to (see the module's docstring for the order)."""
    args = args if args is not None else _current
    overrides = {"certificate_authority": _flag(args, "certificate_authority") or env.get(ENV_CA, ""),
                 "client_certificate": _flag(args, "client_certificate") or env.get(ENV_CLIENT_CERT, ""),
                 "client_key": _flag(args, "client_key") or env.get(ENV_CLIENT_KEY, ""),
                 "token": _flag(args, "token") or env.get(ENV_TOKEN, ""),
                 "tls_server_name": _flag(args, "tls_server_name")}
    overrides = {k: v for k, v in overrides.items() if v}
    server = _flag(args, "server")
    if server:
        return Target(server=server, origin="--server", **overrides)
    if env.get(ENV_SERVER, "").strip():
        return Target(server=env[ENV_SERVER].strip(), origin=f"${ENV_SERVER}", **overrides)
    path = config_path(args, env)
    wanted = _flag(args, "context")
    if path.exists() or wanted:
        doc = load_config(path)
        name = wanted or str(doc.get("current-context") or "")
        if name:
            ctx = next((c for c in doc["contexts"] if c["name"] == name), None)
            if ctx is None:
                raise MeshError(f"{path}: no context named {name!r} (contexts: "
                                f"{', '.join(c['name'] for c in doc['contexts']) or 'none'})")
            return replace(_context_target(path, name, ctx.get("context") or {}), **overrides)
    if not state_path().exists():
        raise MeshError(f"{NOT_RUNNING}, and no --server, ${ENV_SERVER} or config context names a remote one")
    return replace(local_target(), **overrides)
