"""TLS material for a process, and the gRPC credentials and Kafka SSL context made from it.

A service finds its files in the environment (set by `schedmesh up`, compose and the Kubernetes
manifests):

* ``SCHEDMESH_TLS_CA``: the CA certificate every peer's certificate must chain to;
* ``SCHEDMESH_TLS_CERT`` / ``SCHEDMESH_TLS_KEY``: this process's certificate and key, presented
  both when serving (mutual TLS: clients must present one too) and when calling other services;
* ``SCHEDMESH_KAFKA_TLS=1``: talk SSL to Kafka with the same files (Apache Kafka with client auth).

None of them set: plaintext, which `ServiceProcess` allows only on a loopback address.
``SCHEDMESH_API_TOKEN`` or ``SCHEDMESH_API_TOKEN_FILE``: the bearer token the Scheduler API
requires (the queue-manager) or sends (clients).
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import grpc

ENV_CA = "SCHEDMESH_TLS_CA"
ENV_CERT = "SCHEDMESH_TLS_CERT"
ENV_KEY = "SCHEDMESH_TLS_KEY"
ENV_KAFKA_TLS = "SCHEDMESH_KAFKA_TLS"
ENV_TOKEN = "SCHEDMESH_API_TOKEN"
ENV_TOKEN_FILE = "SCHEDMESH_API_TOKEN_FILE"


class CredentialsError(ValueError):
    """TLS or token configuration that cannot work; the message names the variable or file."""


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise CredentialsError(f"{what}: cannot read {path}: {e.strerror}") from None
    if not data.strip():
        raise CredentialsError(f"{what}: {path} is empty")
    return data


@dataclass(frozen=True)
class TLSFiles:
    """A process's CA, certificate and key (paths)."""
    ca: str
    cert: str
    key: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Optional["TLSFiles"]:
        """The files named by SCHEDMESH_TLS_*; None when none is set; an error when only some are."""
        values = {k: env.get(k, "").strip() for k in (ENV_CA, ENV_CERT, ENV_KEY)}
        if not any(values.values()):
            return None
        missing = [k for k, v in values.items() if not v]
        if missing:
            raise CredentialsError(f"TLS needs {ENV_CA}, {ENV_CERT} and {ENV_KEY} together; "
                                   f"{', '.join(missing)} not set")
        return cls(values[ENV_CA], values[ENV_CERT], values[ENV_KEY])

    def env(self) -> dict[str, str]:
        """The environment that gives a child process these files."""
        return {ENV_CA: self.ca, ENV_CERT: self.cert, ENV_KEY: self.key}

    def identity(self) -> str:
        """The common name of this certificate: the role the process plays (security.identity)."""
        from cryptography import x509
        from cryptography.x509.oid import NameOID
        try:
            cert = x509.load_pem_x509_certificate(_read(self.cert, ENV_CERT))
        except ValueError as e:
            raise CredentialsError(f"{ENV_CERT}: {self.cert} is not a PEM certificate: {e}") from None
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        if not names:
            raise CredentialsError(f"{ENV_CERT}: {self.cert} has no common name (the mesh's identity)")
        return str(names[0].value)

    def read(self) -> tuple[bytes, bytes, bytes]:
        return (_read(self.ca, ENV_CA), _read(self.cert, ENV_CERT), _read(self.key, ENV_KEY))

    def server_credentials(self) -> grpc.ServerCredentials:
        """Mutual TLS: a client without a certificate signed by the CA is refused at the handshake."""
        ca, cert, key = self.read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        ca, cert, key = self.read()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def kafka_ssl_context(self) -> ssl.SSLContext:
        """For aiokafka (security_protocol="SSL"): verify the broker against the CA, present our cert."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca)
        try:
            ctx.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as e:
            raise CredentialsError(f"{ENV_CERT}/{ENV_KEY}: {self.cert}, {self.key}: {e}") from None
        return ctx


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name to listen on/connect to) stays on this machine."""
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def target_host(target: str) -> str:
    """The host of a gRPC target "host:port" / "[v6]:port" / "dns:///host:port"."""
    t = target.split("///", 1)[-1]
    return t.rsplit(":", 1)[0] if ":" in t else t


def channel(target: str, tls: Optional[TLSFiles], options: Sequence[tuple] = (),
            aio: bool = False, interceptors: Sequence = ()):
    """A gRPC channel to `target`: mutual TLS with `tls`; plaintext only to a loopback target."""
    if tls is None:
        if not is_loopback(target_host(target)):
            raise CredentialsError(f"refusing plaintext gRPC to {target} (not a loopback address): "
                                   f"set {ENV_CA}, {ENV_CERT} and {ENV_KEY}")
        if aio:
            return grpc.aio.insecure_channel(target, options=list(options), interceptors=list(interceptors) or None)
        return grpc.insecure_channel(target, options=list(options))
    creds = tls.channel_credentials()
    if aio:
        return grpc.aio.secure_channel(target, creds, options=list(options), interceptors=list(interceptors) or None)
    return grpc.secure_channel(target, creds, options=list(options))


def kafka_client_options(env: Mapping[str, str] = os.environ) -> dict:
    """Keyword arguments for aiokafka clients: SSL with the process's files when
    SCHEDMESH_KAFKA_TLS=1, else nothing (PLAINTEXT)."""
    if env.get(ENV_KAFKA_TLS, "").strip().lower() not in ("1", "true", "yes"):
        return {}
    tls = TLSFiles.from_env(env)
    if tls is None:
        raise CredentialsError(f"{ENV_KAFKA_TLS}=1 needs {ENV_CA}, {ENV_CERT} and {ENV_KEY}")
    return {"security_protocol": "SSL", "ssl_context": tls.kafka_ssl_context()}


# ------------------------------------------------------------------ the Scheduler API token
def new_token() -> str:
    """256 random bits as hex: no leading "-" (a urlsafe token starting with one was read as an
    option by `--token TOKEN`) and nothing a shell or a header needs quoted."""
    return secrets.token_hex(32)


def write_token(path: Path) -> str:
    """A fresh token in `path`, readable by its owner only."""
    token = new_token()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, path)
    return token


def read_token(path: str) -> str:
    token = _read(path, "the API token file").decode().strip()
    if not token or any(c.isspace() for c in token):
        raise CredentialsError(f"the API token file {path} must hold one token on one line")
    return token


def token_from_env(env: Mapping[str, str] = os.environ) -> Optional[str]:
    """SCHEDMESH_API_TOKEN, else the token in SCHEDMESH_API_TOKEN_FILE, else None."""
    value = env.get(ENV_TOKEN, "").strip()
    if value:
        return value
    path = env.get(ENV_TOKEN_FILE, "").strip()
    return read_token(path) if path else None


def bearer_metadata(token: Optional[str]) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")] if token else []
