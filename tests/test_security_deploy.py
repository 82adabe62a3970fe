"""Offline checks of the security parts of docker-compose.yml and deploy/kubernetes: Kafka SSL with
client certificates and ACLs (each topic writable by its owners only), each container given
only its own key, the Scheduler API token. (No Docker engine or cluster here: these check the
files, not a running deployment.)"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml
from cryptography import x509

from schedmesh.bus.topics import ALL_TOPICS
from schedmesh.security import identity as ids
from schedmesh.security.kafka_acls import KAFKA_CLIENTS, PRINCIPAL_MAPPING_RULES, SUPER_USERS, script
from schedmesh.security.pki import make_pki

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "kubernetes"
SERVICES = {"queue-manager": ids.QUEUE_MANAGER, "binder": ids.BINDER, "filter-worker": ids.FILTER_WORKER,
            "score-worker": ids.SCORE_WORKER, "kubelet-agent": ids.KUBELET_AGENT}
TLS_ENV = {"SCHEDMESH_TLS_CA": "/etc/schedmesh/tls/ca.crt", "SCHEDMESH_TLS_CERT": "/etc/schedmesh/tls/tls.crt",
           "SCHEDMESH_TLS_KEY": "/etc/schedmesh/tls/tls.key", "SCHEDMESH_KAFKA_TLS": "1"}


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def acl_calls() -> list[list[str]]:
    calls = []
    for line in (K8S / "kafka-acls.sh").read_text().splitlines():
        if line.startswith('"$ACLS"'):
            calls.append(shlex.split(line)[5:])  # after --bootstrap-server X --command-config Y
    return calls


def principals(call: list[str]) -> set[str]:
    return {call[i + 1] for i, a in enumerate(call) if a == "--allow-principal"}


def test_acl_script_is_current_and_topics_are_writable_by_their_owners_only() -> None:
    assert (K8S / "kafka-acls.sh").read_text() == script(), \
        "run: python -m schedmesh.security.kafka_acls > deploy/kubernetes/kafka-acls.sh"
    assert set(ids.TOPIC_WRITERS) == set(ALL_TOPICS)
    writes: dict[str, set[str]] = {}
    for call in acl_calls():
        assert "--deny-principal" not in call and "User:*" not in principals(call)
        if "Write" in call:
            assert call.count("--operation") == 1, "Write is granted alone"
            assert "--resource-pattern-type" not in call, "Write is granted per topic, never by prefix"
            topic = call[call.index("--topic") + 1]
            writes.setdefault(topic, set()).update(principals(call))
        elif "--topic" in call:
            assert set(call[i + 1] for i, a in enumerate(call) if a == "--operation") == {
                "Read", "Describe", "Create", "DescribeConfigs"}
    assert writes == {t: {f"User:{w}" for w in who} for t, who in ids.TOPIC_WRITERS.items()}
    # the user's certificate has no Kafka access; the broker is the only super user
    assert ids.ADMIN not in KAFKA_CLIENTS and SUPER_USERS == f"User:{ids.KAFKA}"
    assert "User:kubelet-agent" not in writes["schedmesh.pdbs"] and writes["schedmesh.leases"] == {"User:kubelet-agent"}


def test_principal_mapping_rule_maps_our_certificates_to_their_identity(tmp_path: Path) -> None:
    make_pki(tmp_path, identities=[ids.BINDER], clients=[])
    dn = x509.load_pem_x509_certificate((tmp_path / "binder.crt").read_bytes()).subject.rfc4514_string()
    assert dn == "CN=binder,O=schedmesh"  # RFC 2253 order, as Kafka formats the peer's principal
    rule = re.fullmatch(r"RULE:(.+)/(.+)/,DEFAULT", PRINCIPAL_MAPPING_RULES)
    assert rule and re.sub(rule.group(1), rule.group(2).replace("$1", r"\1"), dn) == "binder"


def kafka_env_compose() -> dict:
    return {k: str(v).replace("$$", "$") for k, v in compose()["services"]["kafka"]["environment"].items()}


def kafka_env_k8s() -> dict:
    docs = list(yaml.safe_load_all((K8S / "kafka.yaml").read_text()))
    sts = next(d for d in docs if d and d["kind"] == "StatefulSet")
    return {e["name"]: e["value"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_kafka_is_ssl_with_client_auth_and_acls_in_both_modes() -> None:
    for env in (kafka_env_compose(), kafka_env_k8s()):
        protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
        listeners = [l.split("://")[0] for l in env["KAFKA_LISTENERS"].split(",")]
        assert set(listeners) == set(protocols) and set(protocols.values()) == {"SSL"}
        assert env["KAFKA_SSL_CLIENT_AUTH"] == "required"
        assert env["KAFKA_SSL_PRINCIPAL_MAPPING_RULES"] == PRINCIPAL_MAPPING_RULES
        assert env["KAFKA_AUTHORIZER_CLASS_NAME"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
        assert env["KAFKA_SUPER_USERS"] == SUPER_USERS
        assert env["KAFKA_SSL_KEYSTORE_TYPE"] == env["KAFKA_SSL_TRUSTSTORE_TYPE"] == "PEM"
        # the image's own SSL set-up (JKS with passwords) starts only for listeners named SSL
        assert "SSL://" not in env["KAFKA_ADVERTISED_LISTENERS"]
    props = dict(l.split("=", 1) for l in (K8S / "kafka-client-ssl.properties").read_text().splitlines()
                 if l and not l.startswith("#"))
    assert props["security.protocol"] == "SSL"
    assert props["ssl.keystore.location"] == kafka_env_compose()["KAFKA_SSL_KEYSTORE_LOCATION"]
    assert props["ssl.truststore.location"] == kafka_env_compose()["KAFKA_SSL_TRUSTSTORE_LOCATION"]


def test_compose_gives_each_container_its_own_key_only() -> None:
    c = compose()
    secrets = c["secrets"]
    for name, s in c["services"].items():
        for ref in s.get("secrets", []):
            assert ref["source"] in secrets, (name, ref)
        sources = {r["source"] for r in s.get("secrets", [])}
        keys = {src for src in sources if src.endswith("-key") or src == "kafka-pem"}
        env = s.get("environment") or {}
        if "SCHEDMESH_TLS_KEY" in env:  # a schedmesh service: its compose name is its identity
            assert name in ids.SERVICE_IDENTITIES and keys == {f"{name}-key"}, name
            targets = {r["source"]: r["target"] for r in s["secrets"]}
            assert targets[f"{name}-key"] == env["SCHEDMESH_TLS_KEY"]
            assert targets[f"{name}-crt"] == env["SCHEDMESH_TLS_CERT"]
            assert targets["ca-crt"] == env["SCHEDMESH_TLS_CA"]
            assert {k: env[k] for k in TLS_ENV} == TLS_ENV
            if name in KAFKA_CLIENTS:  # (the shards read no topic)
                assert s["depends_on"]["kafka-acls"]["condition"] == "service_healthy"
            else:
                assert "kafka" not in s["depends_on"] and "kafka-acls" not in s["depends_on"], name
        elif name in ("kafka", "kafka-acls"):
            assert keys == {"kafka-pem"}, name
        else:
            assert not keys, f"{name} must not hold a key"
    assert set(SERVICES) <= {n for n, s in c["services"].items() if "SCHEDMESH_TLS_KEY" in (s.get("environment") or {})}
    qm = c["services"]["queue-manager"]
    token_target = next(r["target"] for r in qm["secrets"] if r["source"] == "api-token")
    assert qm["environment"]["SCHEDMESH_API_TOKEN_FILE"] == token_target
    for name, spec in secrets.items():
        assert spec["file"].startswith(("${SCHEDMESH_PKI:-./.schedmesh/pki}/", "${SCHEDMESH_TOKEN_FILE:-./")), name
    assert "ca-key" not in secrets and not any("ca.key" in spec["file"] for spec in secrets.values())


def test_kubernetes_pods_mount_their_own_certificate() -> None:
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    env = dict(l.split("=", 1) for l in next(g for g in k["configMapGenerator"]
                                              if g["name"] == "schedmesh-env")["literals"])
    assert {key: env[key] for key in TLS_ENV} == TLS_ENV
    for f, ident in SERVICES.items():
        docs = [d for d in yaml.safe_load_all((K8S / f"{f}.yaml").read_text()) if d]
        workload = next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))
        pod = workload["spec"]["template"]["spec"]
        secrets = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
        assert secrets == [f"schedmesh-tls-{ident}"], f
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls")
        assert mount["mountPath"] == "/etc/schedmesh/tls" and mount["readOnly"]
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
        if f == "queue-manager":
            token = next(e for e in pod["containers"][0]["env"] if e["name"] == "SCHEDMESH_API_TOKEN")
            assert token["valueFrom"]["secretKeyRef"] == {"name": "schedmesh-api-token", "key": "token"}
    job = yaml.safe_load((K8S / "kafka-acls.yaml").read_text())
    assert job["kind"] == "Job" and "kafka-acls.yaml" in k["resources"]
    assert next(g for g in k["configMapGenerator"] if g["name"] == "kafka-acls")["files"] == [
        "kafka-acls.sh", "kafka-client-ssl.properties"]
