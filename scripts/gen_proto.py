"""Regenerate the Python code for proto/ into service/ (``make proto``).

delayq's own protos land beside their package (``delayq/v1``, ``delayq/admin/v1``);
the vendored RocketMQ 5 protos (``proto/apache/rocketmq/v2``, package
``apache.rocketmq.v2`` on the wire) land in ``delayq/rocketmq/v2``, their imports
rewritten to that module path, so delayq installs no top-level ``apache`` package.

``--check`` regenerates into a temp dir and fails if the checked-in code differs
(CI runs it through tests/server/test_proto_fresh.py)."""

from __future__ import annotations

import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
PROTOS = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
MOVES = {"apache/rocketmq/v2": "delayq/rocketmq/v2"}
"""Generated directory -> where it is checked in (under service/)."""
OUTPUTS = [
    f"{d}/{n}{x}"
    for d, n in (
        ("delayq/v1", "delayq"),
        ("delayq/admin/v1", "admin"),
        ("delayq/rocketmq/v2", "definition"),
        ("delayq/rocketmq/v2", "service"),
    )
    for x in SUFFIXES
]
PACKAGES = ("v1", "admin", "admin/v1", "rocketmq/v2")
"""Generated packages under service/delayq that get a stock ``__init__``."""


def generate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp)
        args = [
            "protoc",
            f"-I{ROOT / 'proto'}",
            f"-I{Path(grpc_tools.__file__).parent / '_proto'}",  # google/protobuf/*.proto
            f"--python_out={raw}",
            f"--pyi_out={raw}",
            f"--grpc_python_out={raw}",
            *PROTOS,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        for src, dst in MOVES.items():
            old, new = src.replace("/", "."), dst.replace("/", ".")
            for f in (raw / src).iterdir():
                # imports only: the wire names (apache.rocketmq.v2.MessagingService) stay
                text = re.sub(rf"^from {re.escape(old)} import", f"from {new} import",
                              f.read_text(), flags=re.M)
                (raw / dst).mkdir(parents=True, exist_ok=True)
                (raw / dst / f.name).write_text(text)
            shutil.rmtree(raw / src.split("/")[0])
        # files alone (copytree would give ``out`` the temporary directory's 0700: a
        # checkout's service/ then unreadable to anyone else, the local pods' user too)
        for f in raw.rglob("*"):
            if f.is_file():
                (out / f.relative_to(raw)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, out / f.relative_to(raw))


def main() -> None:
    if "--check" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            stale = [
                f
                for f in OUTPUTS
                if not filecmp.cmp(Path(tmp) / f, ROOT / "service" / f, shallow=False)
            ]
        if stale:
            raise SystemExit(f"generated code is stale: {stale}; run `make proto`")
        print("generated code is up to date")
        return
    generate(ROOT / "service")
    for pkg in PACKAGES:
        (ROOT / "service/delayq" / pkg / "__init__.py").write_text(
            '"""Generated gRPC code (make proto)."""\n'
        )


if __name__ == "__main__":
    main()
