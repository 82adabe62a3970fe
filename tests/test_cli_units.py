"""The CLI's pieces without a mesh: kubectl's age format, label selectors, where a command connects."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from schedmesh.api.labels import parse_selector
from schedmesh.cli import connection
from schedmesh.cli.kubectl import human_duration
from schedmesh.local.supervisor import MeshError, MeshState


@pytest.mark.parametrize("seconds,text", [
    (-5, "<invalid>"), (0, "0s"), (5, "5s"), (119, "119s"), (120, "2m"), (182, "3m2s"), (599, "9m59s"),
    (600, "10m"), (179 * 60, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (8 * 3600, "8h"), (47 * 3600, "47h"),
    (2 * 86400 + 3 * 3600, "2d3h"), (3 * 86400, "3d"), (30 * 86400, "30d"), (800 * 86400, "2y70d"),
    (9 * 365 * 86400, "9y"),
])
def test_human_duration_is_apimachinerys(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_label_selector_syntax() -> None:
    sel = parse_selector("app=web,tier!=front,env in (prod, staging),zone notin (z1),gpu,!spot")
    assert sel.matches({"app": "web", "env": "prod", "zone": "z2", "gpu": "1"})
    assert not sel.matches({"app": "web", "env": "prod", "gpu": "1", "tier": "front"})
    assert not sel.matches({"app": "web", "env": "dev", "gpu": "1"})
    assert not sel.matches({"app": "web", "env": "prod", "gpu": "1", "spot": "yes"})
    assert parse_selector("a==b").matches({"a": "b"}) and not parse_selector("a==b").matches({})
    assert parse_selector("a!=b").matches({})  # kube: != also matches a missing key
    for bad in ("a in (b", "a in ()", "=b", "a=b,,c", "a b c"):
        with pytest.raises(ValueError, match="label selector"):
            parse_selector(bad)


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**kw)


def test_connection_order_flags_env_config_local(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config"
    token_file = tmp_path / "tok"
    token_file.write_text("from-file\n")
    config.write_text(f"""
apiVersion: schedmesh.io/v1
kind: Config
current-context: a
contexts:
- name: a
  context: {{server: "10.0.0.1:443", certificate-authority: ca.crt, token-file: {token_file}}}
- name: b
  context: {{server: "10.0.0.2:443", token: tb}}
""")
    env = {"SCHEDMESH_CONFIG": str(config)}
    t = connection.resolve(_args(), env)
    assert (t.server, t.certificate_authority, t.token) == ("10.0.0.1:443", str(tmp_path / "ca.crt"), "from-file")
    assert connection.resolve(_args(context="b"), env).server == "10.0.0.2:443"
    t = connection.resolve(_args(), {**env, "SCHEDMESH_SERVER": "h:1", "SCHEDMESH_TOKEN": "te"})
    assert (t.server, t.token, t.origin) == ("h:1", "te", "$SCHEDMESH_SERVER")
    t = connection.resolve(_args(server="f:2", token="tf"), {**env, "SCHEDMESH_SERVER": "h:1"})
    assert (t.server, t.token, t.origin) == ("f:2", "tf", "--server")
    # a credential flag alone overrides that value of the context
    assert connection.resolve(_args(token="x"), env).token == "x"
    with pytest.raises(MeshError, match="no context named 'c'"):
        connection.resolve(_args(context="c"), env)
    # no config, no server: the local mesh, else the clear error
    with pytest.raises(MeshError, match="the mesh is not running"):
        connection.resolve(_args(), {"SCHEDMESH_CONFIG": str(tmp_path / "none")})
    MeshState(scheduler="127.0.0.1:5", tls=False).save(tmp_path / ".schedmesh" / "mesh.json")
    t = connection.resolve(_args(), {"SCHEDMESH_CONFIG": str(tmp_path / "none")})
    assert t.server == "127.0.0.1:5" and t.state is not None and not t.certificate_authority


def test_connection_refuses_what_cannot_work(tmp_path: Path) -> None:
    with pytest.raises(MeshError, match="refusing plaintext gRPC to 10.1.1.1:50051"):
        connection.Target(server="10.1.1.1:50051", origin="--server").channel()
    with pytest.raises(MeshError, match="client-certificate and client-key go together"):
        connection.Target(server="h:1", certificate_authority="ca", client_certificate="c", origin="--server").channel()
    with pytest.raises(MeshError, match=r"certificate-authority .*nope\.crt: No such file"):
        connection.Target(server="h:1", certificate_authority=str(tmp_path / "nope.crt"), origin="--server").channel()
    bad = tmp_path / "bad"
    bad.write_text("contexts:\n- name: x\n  context: {server: 'h:1', tokn: y}\n")
    with pytest.raises(MeshError, match="unknown key.*tokn"):
        connection.load_config(bad)
    assert connection.Target(server="h:1", token="t").metadata() == [("authorization", "Bearer t")]


def test_version_and_completion() -> None:
    run = lambda *a: subprocess.run([sys.executable, "-m", "schedmesh.cli.main", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("schedmesh ")
    r = run("completion", "bash")
    assert r.returncode == 0 and "complete " in r.stdout and "schedmesh" in r.stdout


def test_commands_that_do_not_need_the_scheduling_framework_start_without_it() -> None:
    """`get pods` and the other kubectl-shaped commands took 1.1-1.2 s to start, 0.6 s of it
    importing what only explain, bench and certs use; those are built when argv names them."""
    probe = ("import sys; from schedmesh.cli.main import build_parser; "
             "p = build_parser(sys.argv[1:]); "
             "print(sorted(m for m in ('schedmesh.framework.runtime', 'schedmesh.security.pki', 'numpy') "
             "if m in sys.modules)); "
             "print(p.parse_args(sys.argv[1:]).func.__module__)")
    run = lambda *a: subprocess.run([sys.executable, "-c", probe, *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    r = run("get", "pods")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "schedmesh.cli.kubectl"]
    r = run("explain", "--cluster", "c.yaml", "--pods", "p.yaml")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1] == "schedmesh.cli.explain"
    r = run("--server", "localhost:1", "certs", "--out", "x")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1] == "schedmesh.cli.certs"
