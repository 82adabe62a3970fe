"""`schedmesh certs`: make the mesh's CA and certificates (schedmesh.security.pki)."""
from __future__ import annotations

import argparse
import base64
from pathlib import Path

from schedmesh.security import identity as ids
from schedmesh.security.credentials import write_token
from schedmesh.security.pki import CA_NAME, CERT_VALIDITY_DAYS, PKIFiles, make_pki, problems

DEFAULT_OUT = Path(".schedmesh") / "pki"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=str(DEFAULT_OUT),
                   help=f"directory for the files (default {DEFAULT_OUT}, where `schedmesh up` looks); "
                        "an existing CA there is kept and signs the new certificates")
    p.add_argument("--identity", action="append", metavar="NAME",
                   help="service identities (certificate CN) to issue; repeatable "
                        f"(default: {', '.join(ids.SERVICE_IDENTITIES)})")
    p.add_argument("--client-identity", action="append", metavar="NAME",
                   help=f"client-only identities; repeatable (default: {', '.join(ids.CLIENT_IDENTITIES)})")
    p.add_argument("--san", action="append", default=[], metavar="NAME_OR_IP",
                   help="an extra DNS name or IP address for every service certificate; repeatable")
    p.add_argument("--days", type=int, default=CERT_VALIDITY_DAYS, help="validity of the certificates, in days")
    p.add_argument("--new-ca", action="store_true", help="replace the CA too (every old certificate stops working)")
    p.add_argument("--new-token", metavar="FILE", help="also write a new Scheduler API token to FILE (mode 0600)")
    p.add_argument("--kubernetes-secrets", metavar="FILE",
                   help="also write one Kubernetes Secret per identity (schedmesh-tls-<identity>: ca.crt, tls.crt, "
                        "tls.key; never the CA key), and schedmesh-api-token with --new-token, to FILE, for "
                        "deploy/kubernetes")


def _validate_name(name: str, flag: str) -> str:
    import re
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
        raise ValueError(f"{flag} {name!r}: must be a DNS label (lowercase letters, digits, '-'; at most 63)")
    if name == CA_NAME:
        raise ValueError(f"{flag} {name!r}: the name is taken by the CA's files")
    return name


def _secret(name: str, data: dict[str, bytes], namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "schedmesh"}},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


def kubernetes_secrets(directory: Path, names: list[str], token_file: Path | None = None,
                       namespace: str = ids.K8S_NAMESPACE) -> str:
    """One Secret per identity (what deploy/kubernetes mounts), and the API token's Secret."""
    import yaml
    docs = []
    for name in names:
        f = PKIFiles(directory, name)
        data = {"ca.crt": f.ca.read_bytes(), "tls.crt": f.cert.read_bytes(), "tls.key": f.key.read_bytes()}
        if name == ids.KAFKA:  # Kafka's PEM keystore: key and certificate in one file
            data["kafka.pem"] = (directory / "kafka.pem").read_bytes()
        docs.append(_secret(f"schedmesh-tls-{name}", data, namespace))
    if token_file is not None:
        docs.append(_secret("schedmesh-api-token", {"token": token_file.read_text().strip().encode()}, namespace))
    return yaml.safe_dump_all(docs, sort_keys=False)


def run(args: argparse.Namespace) -> int:
    if args.days <= 0:
        raise ValueError(f"--days {args.days}: must be positive")
    identities = [_validate_name(n, "--identity") for n in (args.identity or ids.SERVICE_IDENTITIES)]
    clients = [_validate_name(n, "--client-identity") for n in (args.client_identity or ids.CLIENT_IDENTITIES)]
    clash = set(identities) & set(clients)
    if clash:
        raise ValueError(f"{', '.join(sorted(clash))}: given both as --identity and --client-identity")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a directory")
    kept_ca = (out / f"{CA_NAME}.crt").exists() and not args.new_ca
    written = make_pki(out, identities, clients, extra_sans=args.san, days=args.days, new_ca=args.new_ca)
    bad = problems(out, [*identities, *clients])
    if bad:
        raise ValueError(f"{out}: the certificates do not verify: {'; '.join(bad)}")
    print(f"{'kept the CA in' if kept_ca else 'made a CA in'} {out}; issued: "
          + ", ".join(p.stem for p in written if p.stem != CA_NAME))
    for p in written:
        print(f"  {p}  {p.with_suffix('.key')}" if p.stem != CA_NAME else f"  {p}  (CA; {p.with_suffix('.key')} signs)")
    if args.new_token:
        write_token(Path(args.new_token))
        print(f"wrote a new API token to {args.new_token}")
    if args.kubernetes_secrets:
        token = Path(args.new_token) if args.new_token else None
        Path(args.kubernetes_secrets).write_text(kubernetes_secrets(out, [*identities, *clients], token))
        Path(args.kubernetes_secrets).chmod(0o600)
        print(f"wrote {len(identities) + len(clients) + bool(args.new_token)} Secrets to {args.kubernetes_secrets} "
              "(`kubectl apply -f` it; it holds private keys)")
    return 0
