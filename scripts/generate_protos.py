"""Regenerate the Python code and type stubs for the kubelet plugin protos.

Every ``api.proto`` under ``api/kubelet/`` is compiled with the pinned
grpcio-tools (messages and gRPC stubs) and mypy-protobuf (``.pyi`` stubs for
both). The generated files are committed so that installing the package needs
no code generation.

    python scripts/generate_protos.py           # rewrite the generated files
    python scripts/generate_protos.py --check   # fail if they are out of date
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = Path("api") / "kubelet"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
# Both kinds: the DRA socket is served by grpcio's synchronous server, the others
# by grpc.aio, and the tests call them through either.
MYPY_GRPC_OPTIONS = "quiet"
MYPY_OPTIONS = "quiet"
DIFF_LINES_PER_FILE = 40


@dataclass(frozen=True)
class Comparison:
    changed: list[Path]
    missing: list[Path]
    stale: list[Path]

    @property
    def clean(self) -> bool:
        return not (self.changed or self.missing or self.stale)


def find_protos(root: Path = REPO_ROOT) -> list[Path]:
    """Proto files relative to ``root``, sorted so generation order is stable."""
    return sorted(p.relative_to(root) for p in (root / PROTO_DIR).rglob("*.proto"))


def _plugin(name: str) -> Path:
    # Prefer the plugin installed next to this interpreter so a venv's pinned
    # mypy-protobuf wins over whatever else is on PATH.
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return beside
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: install the dev extras (pip install -e '.[dev]')")
    return Path(found)


def generate(out_dir: Path, root: Path = REPO_ROOT) -> None:
    """Compile every proto under ``root`` into ``out_dir``, mirroring the tree.

    Protos are passed relative to ``root`` so each is registered in the
    descriptor pool under a distinct name such as ``api/kubelet/dra/v1/api.proto``
    and the generated imports are absolute (``api.kubelet.dra.v1.api_pb2``).
    """
    protos = find_protos(root)
    if not protos:
        raise SystemExit(f"no .proto files under {root / PROTO_DIR}")
    out = str(out_dir)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "--proto_path=.",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={MYPY_OPTIONS}:{out}",
        f"--mypy_grpc_out={MYPY_GRPC_OPTIONS}:{out}",
        *(p.as_posix() for p in protos),
    ]
    result = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"protoc failed with exit code {result.returncode}")


def generated_files(base: Path) -> dict[Path, bytes]:
    """Generated files under ``base/api/kubelet``, keyed by path relative to ``base``."""
    tree = base / PROTO_DIR
    if not tree.is_dir():
        return {}
    return {
        path.relative_to(base): path.read_bytes()
        for path in sorted(tree.rglob("*"))
        if path.is_file() and path.name.endswith(GENERATED_SUFFIXES)
    }


def compare(expected: dict[Path, bytes], actual: dict[Path, bytes]) -> Comparison:
    return Comparison(
        changed=sorted(p for p in expected.keys() & actual.keys() if expected[p] != actual[p]),
        missing=sorted(expected.keys() - actual.keys()),
        stale=sorted(actual.keys() - expected.keys()),
    )


def _diff_excerpt(path: Path, expected: bytes, actual: bytes) -> list[str]:
    lines = list(
        difflib.unified_diff(
            actual.decode("utf-8", errors="replace").splitlines(),
            expected.decode("utf-8", errors="replace").splitlines(),
            fromfile=f"{path} (committed)",
            tofile=f"{path} (regenerated)",
            lineterm="",
        )
    )
    if len(lines) > DIFF_LINES_PER_FILE:
        dropped = len(lines) - DIFF_LINES_PER_FILE
        lines = [*lines[:DIFF_LINES_PER_FILE], f"... {dropped} more diff lines"]
    return lines


def report(comparison: Comparison, expected: dict[Path, bytes], actual: dict[Path, bytes]) -> str:
    out: list[str] = []
    for path in comparison.missing:
        out.append(f"missing: {path}")
    for path in comparison.stale:
        out.append(f"stale (no proto generates it): {path}")
    for path in comparison.changed:
        out.append(f"differs: {path}")
    for path in comparison.changed:
        out.extend(_diff_excerpt(path, expected[path], actual[path]))
    return "\n".join(out)


def regenerate(root: Path = REPO_ROOT) -> tuple[Comparison, dict[Path, bytes], dict[Path, bytes]]:
    # Generating into a scratch tree first lets the check mode leave the work
    # tree untouched and lets write mode also drop files of deleted protos.
    with tempfile.TemporaryDirectory(prefix="protos-") as tmp:
        generate(Path(tmp), root)
        expected = generated_files(Path(tmp))
    actual = generated_files(root)
    return compare(expected, actual), expected, actual


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary directory and exit 1 if the committed files differ",
    )
    args = parser.parse_args(argv)

    comparison, expected, actual = regenerate()
    if args.check:
        if comparison.clean:
            print(f"generated protobuf code is up to date ({len(expected)} files)")
            return 0
        print(report(comparison, expected, actual))
        print("generated protobuf code is out of date: run python scripts/generate_protos.py")
        return 1

    for path in [*comparison.changed, *comparison.missing]:
        target = REPO_ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(expected[path])
        print(f"wrote {path}")
    for path in comparison.stale:
        (REPO_ROOT / path).unlink()
        print(f"removed {path}")
    if comparison.clean:
        print(f"generated protobuf code already up to date ({len(expected)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
