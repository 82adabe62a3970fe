"""Generate the protobuf/gRPC code during the build, so every wheel and sdist install carries it.

The .proto files live in protos/ (outside the package); `build_py` runs grpc_tools.protoc (a
build requirement, see pyproject.toml) into the build directory, next to the package's own
schedmesh/v1/__init__.py. Editable installs (`make install`) use `make protos` instead, which
writes the same files into shared/schedmesh/v1/.
"""
from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
PROTOS = ROOT / "protos"


def generate_protos(out_dir: Path) -> None:
    """protoc --python_out --pyi_out --grpc_python_out for every protos/schedmesh/v1/*.proto."""
    import grpc_tools
    from grpc_tools import protoc
    files = sorted(str(p.relative_to(PROTOS)) for p in (PROTOS / "schedmesh" / "v1").glob("*.proto"))
    if not files:
        raise RuntimeError(f"no .proto files under {PROTOS / 'schedmesh' / 'v1'}")
    out_dir.mkdir(parents=True, exist_ok=True)
    include = str(Path(grpc_tools.__file__).parent / "_proto")  # google/protobuf/*.proto
    code = protoc.main(["grpc_tools.protoc", f"-I{PROTOS}", f"-I{include}", f"--python_out={out_dir}",
                        f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}", *files])
    if code != 0:
        raise RuntimeError(f"grpc_tools.protoc failed ({code}) on {', '.join(files)}")


class BuildPyWithProtos(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            generate_protos(Path(self.build_lib))


class SdistChecked(sdist):
    """An sdist must carry protos/ (MANIFEST.in) so that building its wheel can generate the code."""

    def make_release_tree(self, base_dir, files) -> None:
        super().make_release_tree(base_dir, files)
        if not list((Path(base_dir) / "protos" / "schedmesh" / "v1").glob("*.proto")):
            raise RuntimeError("the sdist has no protos/schedmesh/v1/*.proto: check MANIFEST.in")


setup(cmdclass={"build_py": BuildPyWithProtos, "sdist": SdistChecked})
