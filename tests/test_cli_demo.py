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


def test_the_demo_brings_the_mesh_down_when_its_output_is_closed(tmp_path: Path, monkeypatch) -> None:
    """`schedmesh demo | head`: the pipe closes while the demo prints; the mesh it started must
    still be stopped (it was left running, nine processes)."""
    monkeypatch.chdir(tmp_path)
    stopped, started = [], []
    monkeypatch.setattr(mesh_cli, "start_mesh", lambda *a, **k: started.append(True) or (object(), None))

    def closed_pipe(_state):
        raise BrokenPipeError(32, "Broken pipe")
    monkeypatch.setattr(mesh_cli, "print_summary", closed_pipe)
    monkeypatch.setattr(mesh_cli, "stop_mesh", lambda **k: stopped.append(k))
    real_print = print

    def printing(*args, **kwargs):  # once the mesh is up, every line meets the closed pipe
        if started:
            raise BrokenPipeError(32, "Broken pipe")
        real_print(*args, **kwargs)
    monkeypatch.setattr("builtins.print", printing)
    try:
        with pytest.raises(BrokenPipeError):
            mesh_cli.run_demo(argparse.Namespace(timeout=1.0, keep=False))
    finally:
        monkeypatch.setattr("builtins.print", real_print)
    assert stopped == [{"quiet": True}]
