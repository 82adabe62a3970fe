"""`schedmesh certs`: its output verifies as a chain for the names each service is reached by,
with the key usages mutual TLS needs; bad input is a clear error. No mesh needed."""
from __future__ import annotations

import base64
import datetime
import ipaddress
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID

from schedmesh.security import identity as ids
from schedmesh.security.pki import ensure_pki, problems


def run_certs(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "schedmesh.cli.main", "certs", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    r = run_certs("--out", "pki", "--san", "sched.example.com", "--san", "10.1.2.3", "--new-token", "token",
                  "--kubernetes-secrets", "secrets.yaml", cwd=d)
    assert r.returncode == 0, r.stderr
    return d


def test_chain_sans_and_key_usage(pki: Path) -> None:
    out = pki / "pki"
    ca = load(out / "ca.crt")
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert ku.key_cert_sign and ku.crl_sign
    store = verification.Store([ca])
    now = datetime.datetime.now(datetime.timezone.utc)
    for name in ids.SERVICE_IDENTITIES:
        cert = load(out / f"{name}.crt")
        assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == name
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
        assert ku.critical and ku.value.digital_signature and not ku.value.key_cert_sign
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        assert datetime.timedelta(days=364) < cert.not_valid_after_utc - now <= datetime.timedelta(days=366)
        # The full chain verifies for every name the service is reached by, in each mode.
        for subject in (verification.DNSName("localhost"), verification.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        verification.DNSName(name),  # compose service
                        verification.DNSName(f"schedmesh-{name}-3"),  # compose replica
                        verification.DNSName(f"{name}.schedmesh.svc.cluster.local"),  # Kubernetes Service
                        verification.DNSName(f"{name}-0.{name}.schedmesh.svc.cluster.local"),  # StatefulSet pod
                        verification.DNSName(f"{name}-1.{name}"),  # the same, as the manifests name it
                        verification.DNSName("sched.example.com"),
                        verification.IPAddress(ipaddress.ip_address("10.1.2.3"))):
            verifier = verification.PolicyBuilder().store(store).build_server_verifier(subject)
            verifier.verify(cert, [])
        with pytest.raises(verification.VerificationError):
            verification.PolicyBuilder().store(store).build_server_verifier(
                verification.DNSName("evil.example.org")).verify(cert, [])
        assert (out / f"{name}.key").stat().st_mode & 0o777 == 0o600
    admin = load(out / f"{ids.ADMIN}.crt")
    assert list(admin.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    # a client only: no DNS name or address it could serve as, its identity as a URI
    assert admin.extensions.get_extension_for_class(x509.SubjectAlternativeName).value == x509.SubjectAlternativeName(
        [x509.UniformResourceIdentifier(f"spiffe://schedmesh/{ids.ADMIN}")])
    verified = verification.PolicyBuilder().store(store).build_client_verifier().verify(admin, [])
    assert verified.chain[-1] == ca
    assert (out / "ca.key").stat().st_mode & 0o777 == 0o600 and out.stat().st_mode & 0o777 == 0o700
    assert (pki / "token").stat().st_mode & 0o777 == 0o600 and len((pki / "token").read_text().strip()) >= 40
    assert problems(out, [*ids.SERVICE_IDENTITIES, ids.ADMIN]) == []


def test_kubernetes_secrets_hold_one_identity_each_and_never_the_ca_key(pki: Path) -> None:
    docs = list(yaml.safe_load_all((pki / "secrets.yaml").read_text()))
    by_name = {d["metadata"]["name"]: d for d in docs}
    assert set(by_name) == {f"schedmesh-tls-{n}" for n in (*ids.SERVICE_IDENTITIES, *ids.CLIENT_IDENTITIES)} | {
        "schedmesh-api-token"}
    for name, d in by_name.items():
        assert d["metadata"]["namespace"] == "schedmesh"
        if name == "schedmesh-api-token":
            assert base64.b64decode(d["data"]["token"]).decode() == (pki / "token").read_text().strip()
        elif name == "schedmesh-tls-kafka":
            assert set(d["data"]) == {"ca.crt", "tls.crt", "tls.key", "kafka.pem"}
        else:
            assert set(d["data"]) == {"ca.crt", "tls.crt", "tls.key"}
    assert "BEGIN PRIVATE KEY" not in base64.b64decode(by_name["schedmesh-tls-binder"]["data"]["ca.crt"]).decode()
    assert base64.b64decode(by_name["schedmesh-tls-binder"]["data"]["ca.crt"]) == (pki / "pki" / "ca.crt").read_bytes()
    assert (pki / "secrets.yaml").stat().st_mode & 0o777 == 0o600


def test_rerun_keeps_the_ca_and_new_ca_replaces_it(pki: Path, tmp_path: Path) -> None:
    import shutil
    d = tmp_path / "again"
    shutil.copytree(pki / "pki", d)
    before = load(d / "ca.crt").fingerprint(load(d / "ca.crt").signature_hash_algorithm)
    r = run_certs("--out", str(d), "--identity", "binder", cwd=tmp_path)
    assert r.returncode == 0 and "kept the CA" in r.stdout
    assert load(d / "ca.crt").fingerprint(load(d / "ca.crt").signature_hash_algorithm) == before
    assert problems(d, ["binder", "queue-manager"]) == []  # old and new both chain to it
    r = run_certs("--out", str(d), "--identity", "binder", "--new-ca", cwd=tmp_path)
    assert r.returncode == 0 and "made a CA" in r.stdout
    assert [p for p in problems(d, ["queue-manager"]) if "not signed by this CA" in p]
    assert ensure_pki(d, ["queue-manager"], []) .startswith("re-issued")  # up repairs it
    assert problems(d, ["queue-manager"]) == []


@pytest.mark.parametrize("args, message", [
    (["--identity", "Bad_Name"], "--identity 'Bad_Name': must be a DNS label"),
    (["--identity", "ca"], "--identity 'ca': the name is taken by the CA's files"),
    (["--days", "0"], "--days 0: must be positive"),
    (["--identity", "binder", "--client-identity", "binder"], "binder: given both as --identity and --client-identity"),
])
def test_bad_input_is_a_clear_error(tmp_path: Path, monkeypatch, capsys, args: list, message: str) -> None:
    from schedmesh.cli.main import main
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:  # in process: the command line is the same, no interpreter start-up
        main(["certs", "--out", "pki", *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"schedmesh: error: {message}" in err and "Traceback" not in err
    assert not (tmp_path / "pki" / "binder.crt").exists()
