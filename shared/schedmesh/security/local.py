"""Security of a local mesh (`schedmesh up`): certificates under .schedmesh/pki (made on the first
`up`, re-issued when they near expiry), a fresh API token in .schedmesh/token each `up`, and what
each service process and the CLI are given."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from schedmesh.security import identity as ids
from schedmesh.security.credentials import ENV_TOKEN_FILE, TLSFiles, write_token
from schedmesh.security.pki import PKIFiles, ensure_pki

if TYPE_CHECKING:
    import grpc

PKI_DIR = "pki"
TOKEN_FILE = "token"

#: What plaintext mode leaves open; `up --insecure` and the README say it.
PLAINTEXT_WARNING = ("plaintext gRPC on 127.0.0.1: any local process can call the binder and the shards "
                     "(bind pods, install fake assumed pods); only the API token is checked")
#: Why the embedded broker is plaintext; `up` says it.
EMBEDDED_KAFKA_PLAINTEXT = ("Kafka: plaintext on 127.0.0.1 (the embedded Tansu 0.6.0 cannot serve TLS): "
                            "any local process can read and write the topics")


@dataclass
class LocalSecurity:
    state_dir: Path
    tls: bool
    token_file: Path
    note: Optional[str] = None  # what was made, for `up` to say

    @property
    def pki(self) -> Path:
        return self.state_dir / PKI_DIR

    def files(self, identity: str) -> Optional[TLSFiles]:
        if not self.tls:
            return None
        f = PKIFiles(self.pki, identity)
        return TLSFiles(str(f.ca), str(f.cert), str(f.key))

    @property
    def admin(self) -> Optional[TLSFiles]:
        """The user's client certificate: the CLI's and the supervisor's health checks."""
        return self.files(ids.ADMIN)

    def service_env(self, identity: str) -> dict[str, str]:
        """Environment of a service process: its certificate; the queue-manager also the token."""
        files = self.files(identity)
        env = files.env() if files is not None else {}
        if identity == ids.QUEUE_MANAGER:
            env[ENV_TOKEN_FILE] = str(self.token_file)
        return env


def prepare(state_dir: Path, tls: bool = True) -> LocalSecurity:
    """Certificates (with `tls`) and a new token for a mesh whose state lives in `state_dir`."""
    sec = LocalSecurity(state_dir=state_dir, tls=tls, token_file=state_dir / TOKEN_FILE)
    if tls:
        sec.note = ensure_pki(sec.pki)
    write_token(sec.token_file)
    return sec


def mesh_client_credentials(state) -> tuple[Optional[TLSFiles], list[tuple[str, str]]]:
    """What a client of the local mesh described by `state` (a MeshState, or mesh.json as a dict:
    fields tls, ca, client_cert, client_key, token_file) presents: its TLS files (None: plaintext)
    and the `authorization` metadata."""
    from schedmesh.security.credentials import bearer_metadata, read_token
    get = state.get if isinstance(state, dict) else (lambda k, d=None: getattr(state, k, d))
    tls = TLSFiles(get("ca"), get("client_cert"), get("client_key")) if get("tls", False) else None
    token_file = get("token_file", "")
    return tls, bearer_metadata(read_token(token_file) if token_file else None)


def mesh_channel(state, target: Optional[str] = None, options=()) -> "grpc.Channel":
    """A channel to `target` (default: the Scheduler API) of the local mesh `state` with the user's
    client certificate, every call carrying the API token."""
    import grpc
    from schedmesh.security.credentials import channel
    from schedmesh.security.interceptors import TokenClientInterceptor
    tls, metadata = mesh_client_credentials(state)
    get = state.get if isinstance(state, dict) else (lambda k, d=None: getattr(state, k, d))
    ch = channel(target or get("scheduler"), tls, options)
    return grpc.intercept_channel(ch, TokenClientInterceptor(metadata)) if metadata else ch
