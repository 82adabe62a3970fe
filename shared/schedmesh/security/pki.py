"""The mesh's certificates: one CA, one certificate per service identity (CN = the service's role,
SANs for localhost, 127.0.0.1 and its compose/Kubernetes names) and a client certificate for the
user. Made with the `cryptography` library; `schedmesh certs` and `schedmesh up` write them.

Layout of a PKI directory (keys 0600, the directory 0700):

    ca.crt  ca.key                  the CA (keep ca.key away from the services)
    <identity>.crt  <identity>.key  one pair per identity (schedmesh.security.identity)
    kafka.pem                       kafka's key and certificate in one file (a PEM keystore)
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from schedmesh.security import identity as ids

CA_NAME = "ca"
#: The CA outlives the certificates it signs, so re-issuing them never needs a new trust root.
CA_VALIDITY_DAYS = 5 * 365
CERT_VALIDITY_DAYS = 365
#: A certificate expiring sooner than this is replaced by `ensure_pki` (`schedmesh up`).
RENEW_BEFORE_DAYS = 30
ORGANIZATION = "schedmesh"
LOOPBACK_IPS = ("127.0.0.1", "::1")


class PKIError(ValueError):
    """A PKI directory is missing something or holds something unusable; the message says what."""


@dataclass(frozen=True)
class PKIFiles:
    """Paths of one identity's files in a PKI directory."""
    directory: Path
    name: str

    @property
    def cert(self) -> Path:
        return self.directory / f"{self.name}.crt"

    @property
    def key(self) -> Path:
        return self.directory / f"{self.name}.key"

    @property
    def ca(self) -> Path:
        return self.directory / f"{CA_NAME}.crt"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256: fast to make and to handshake with; gRPC (BoringSSL), Java (Kafka) and rustls accept it.
    return ec.generate_private_key(ec.SECP256R1())


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` so that it is never readable by others, not even for a moment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # PKCS#8: the form gRPC, Python's ssl, rustls and Kafka's PEM keystore all read.
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(directory: Path, days: int = CA_VALIDITY_DAYS) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"{ORGANIZATION} CA")])
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate small clock skew
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256()))
    _write_private(directory / f"{CA_NAME}.key", _key_pem(key))
    (directory / f"{CA_NAME}.crt").write_bytes(_cert_pem(cert))
    return cert, key


def issue(directory: Path, name: str, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
          server: bool, extra_sans: Sequence[str] = (), days: int = CERT_VALIDITY_DAYS) -> x509.Certificate:
    """Sign a certificate for identity `name` (its CN). `server`: also a TLS server (serverAuth,
    SANs); otherwise a client only (clientAuth)."""
    key = _new_key()
    now = _now()
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                            content_commitment=False, key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False),
                              critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    # A URI SAN names the identity the way SPIFFE does; verifiers that require a SAN on client
    # certificates (webpki, cryptography's ClientVerifier) accept it. The CN is what the mesh checks.
    sans: list[x509.GeneralName] = [x509.UniformResourceIdentifier(spiffe_id(name))]
    if server:
        sans += [x509.DNSName(n) for n in dict.fromkeys([*ids.dns_names(name), *extra_sans]) if not _is_ip(n)]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in dict.fromkeys([*LOOPBACK_IPS, *extra_sans])
                 if _is_ip(ip)]
    builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_private(directory / f"{name}.key", _key_pem(key))
    (directory / f"{name}.crt").write_bytes(_cert_pem(cert))
    if name == ids.KAFKA:  # Kafka's ssl.keystore.type=PEM reads key and chain from one file
        _write_private(directory / "kafka.pem", _key_pem(key) + _cert_pem(cert))
    return cert


def spiffe_id(name: str) -> str:
    return f"spiffe://{ORGANIZATION}/{name}"


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


def load_ca(directory: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    files = PKIFiles(directory, CA_NAME)
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    except FileNotFoundError as e:
        raise PKIError(f"{directory}: no CA ({e.filename} is missing); run `schedmesh certs --out {directory}`") from None
    except ValueError as e:
        raise PKIError(f"{directory}: the CA files cannot be read: {e}") from None
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise PKIError(f"{files.key}: not an ECDSA or RSA private key")
    return cert, key  # type: ignore[return-value]


def make_pki(directory: Path, identities: Iterable[str] = ids.SERVICE_IDENTITIES,
             clients: Iterable[str] = ids.CLIENT_IDENTITIES, extra_sans: Sequence[str] = (),
             days: int = CERT_VALIDITY_DAYS, new_ca: bool = False) -> list[Path]:
    """Write a CA (unless one is there and `new_ca` is false) and a certificate per identity;
    returns the certificate paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    if new_ca or not (directory / f"{CA_NAME}.crt").exists():
        ca_cert, ca_key = make_ca(directory)
    else:
        ca_cert, ca_key = load_ca(directory)
    written = [directory / f"{CA_NAME}.crt"]
    for name in identities:
        issue(directory, name, ca_cert, ca_key, server=True, extra_sans=extra_sans, days=days)
        written.append(directory / f"{name}.crt")
    for name in clients:
        issue(directory, name, ca_cert, ca_key, server=False, days=days)
        written.append(directory / f"{name}.crt")
    return written


def problems(directory: Path, names: Iterable[str]) -> list[str]:
    """Why the PKI in `directory` cannot serve `names` as it is (missing, unreadable, not signed by
    its CA, expiring within RENEW_BEFORE_DAYS); empty when it can."""
    out = []
    try:
        ca_cert, _ = load_ca(directory)
    except PKIError as e:
        return [str(e)]
    soon = _now() + datetime.timedelta(days=RENEW_BEFORE_DAYS)
    if ca_cert.not_valid_after_utc < soon:
        out.append(f"the CA expires on {ca_cert.not_valid_after_utc:%Y-%m-%d}")
    for name in names:
        f = PKIFiles(directory, name)
        try:
            cert = x509.load_pem_x509_certificate(f.cert.read_bytes())
            f.key.stat()
        except (OSError, ValueError) as e:
            out.append(f"{name}: {e}")
            continue
        try:
            cert.verify_directly_issued_by(ca_cert)
        except (InvalidSignature, ValueError, TypeError):
            out.append(f"{name}: not signed by this CA")
            continue
        if cert.not_valid_after_utc < soon:
            out.append(f"{name}: expires on {cert.not_valid_after_utc:%Y-%m-%d}")
    return out


def ensure_pki(directory: Path, identities: Iterable[str] = ids.SERVICE_IDENTITIES,
               clients: Iterable[str] = ids.CLIENT_IDENTITIES) -> Optional[str]:
    """Make the PKI if it is missing or unusable, keeping a CA that is usable; returns what was
    done (for `up` to say), or None when the existing files were kept."""
    identities, clients = list(identities), list(clients)
    found = problems(directory, [*identities, *clients])
    if not found:
        return None
    try:
        ca_cert, _ = load_ca(directory)
        keep_ca = ca_cert.not_valid_after_utc >= _now() + datetime.timedelta(days=RENEW_BEFORE_DAYS)
    except PKIError:
        keep_ca = False
    make_pki(directory, identities, clients, new_ca=not keep_ca)
    if keep_ca:
        return f"re-issued the certificates in {directory} ({'; '.join(found)})"
    return f"made a new CA and certificates in {directory}"
