"""`schedmesh delete -f FILE`: every object the manifest applied is deleted through the Scheduler
API (a workload by its kind and name: its pods, replacements included, go with it); objects of
kinds apply skips get the same "skipped" line and are not asked for."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from schedmesh.cli import kubectl, mesh

MANIFEST = """
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec: {containers: [{name: c}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate}
spec:
  template:
    spec: {restartPolicy: Never, containers: [{name: c}]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
"""


class Client:
    def __init__(self) -> None:
        self.deleted: list[tuple[str, str, str]] = []

    def call(self, method: str, request):
        assert method == "Delete"
        self.deleted.append((request.kind, request.namespace, request.name))
        return argparse.Namespace(result=f'{request.kind} "{request.name}" deleted')

    def close(self) -> None:
        pass


def delete_f(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Client | None]:
    clients: list[Client] = []
    monkeypatch.setattr(mesh, "_client", lambda: clients.append(Client()) or clients[-1])
    rc = kubectl.run_delete(argparse.Namespace(filename=[str(path)], kind=None, name=[], namespace="default"))
    return rc, (clients[0] if clients else None)


def test_delete_f_skips_what_apply_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(MANIFEST)
    rc, client = delete_f(f, monkeypatch)
    assert rc == 0 and client.deleted == [("job", "default", "migrate"), ("pod", "default", "web")]
    assert capsys.readouterr().out.splitlines() == [
        'job "migrate" deleted', 'pod "web" deleted',
        "configmap/default/settings skipped: not used for scheduling",
        "clusterrole.rbac.authorization.k8s.io/reader skipped: not used for scheduling"]


def test_a_manifest_of_skipped_kinds_needs_no_mesh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "config.yaml"
    f.write_text(MANIFEST.split("---")[0])
    assert delete_f(f, monkeypatch) == (0, None)
    assert capsys.readouterr().out == "configmap/default/settings skipped: not used for scheduling\n"


def test_delete_f_deletes_a_daemon_set_whose_controller_deletes_its_pods(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    f = tmp_path / "agents.yaml"
    f.write_text("""
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: logs, namespace: infra}
spec:
  selector: {matchLabels: {app: logs}}
  template:
    metadata: {labels: {app: logs}}
    spec: {containers: [{name: c}]}
""")
    rc, client = delete_f(f, monkeypatch)
    assert rc == 0 and client.deleted == [("daemonset", "infra", "logs")]
    assert capsys.readouterr().out == 'daemonset "logs" deleted\n'


def test_a_limit_range_is_deleted_by_name_in_its_namespace(tmp_path: Path) -> None:
    f = tmp_path / "limits.yaml"
    f.write_text("apiVersion: v1\nkind: LimitRange\nmetadata: {name: defaults, namespace: shop}\n"
                 "spec: {limits: [{type: Container, max: {cpu: '1'}}]}\n")
    assert kubectl.manifest_objects([str(f)]) == ([("limitrange", "shop", "defaults")], [])


def test_a_deployment_is_deleted_by_its_name_not_by_the_pods_it_expands_to(tmp_path: Path) -> None:
    """Its controller may have replaced the pods the manifest expands to: the Deployment's name
    stands for all of them (the queue-manager deletes its ReplicaSets and every pod they own)."""
    f = tmp_path / "web.yaml"
    f.write_text("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c}]}
""")
    assert kubectl.manifest_objects([str(f)]) == ([("deployment", "shop", "web"), ("statefulset", "shop", "db")], [])
