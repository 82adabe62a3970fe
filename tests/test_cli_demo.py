"""`schedmesh demo` (make run) starts from an empty mesh, as `up` does: the objects an earlier
demo in the same directory applied are moved aside, not published again (a second `make run`
found its pods "unchanged" and its acts never happened)."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from schedmesh.cli import mesh as mesh_cli


class Started(Exception):
    pass


def test_the_demo_sets_aside_what_an_earlier_run_applied(tmp_path: Path, monkeypatch, capsys) -> None:
    store = tmp_path / ".schedmesh" / "applied"
    store.mkdir(parents=True)
    (store / "applied.jsonl").write_text('{"topic": "schedmesh.pods"}\n')
    monkeypatch.chdir(tmp_path)
    seen = {}

    def start_mesh(*args, **kwargs):
        seen["store at start"] = sorted(p.name for p in store.iterdir()) if store.exists() else []
        raise Started

    monkeypatch.setattr(mesh_cli, "start_mesh", start_mesh)
    with pytest.raises(Started):
        mesh_cli.run_demo(argparse.Namespace(timeout=1.0))
    assert seen == {"store at start": []}
    aside = [p for p in (tmp_path / ".schedmesh").iterdir() if p.name.startswith("applied-")]
    assert len(aside) == 1 and (aside[0] / "applied.jsonl").exists()
    assert "starting empty" in capsys.readouterr().out
