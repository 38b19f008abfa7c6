"""Regenerate the Python code for proto/ into service/ (``make proto``).

``--check`` regenerates into a temp dir and fails if the checked-in code differs
(CI runs it through tests/server/test_proto_fresh.py)."""

from __future__ import annotations

import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[1]
PROTOS = sorted(str(p.relative_to(ROOT / "proto")) for p in (ROOT / "proto").rglob("*.proto"))
OUTPUTS = [
    f"delayq/{v}/{n}{x}"
    for v, n in (("v1", "delayq"), ("admin/v1", "admin"))
    for x in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
]


def generate(out: Path) -> None:
    args = [
        "protoc",
        f"-I{ROOT / 'proto'}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *PROTOS,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


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
    for pkg in ("v1", "admin", "admin/v1"):
        (ROOT / "service/delayq" / pkg / "__init__.py").write_text(
            '"""Generated gRPC code (make proto)."""\n'
        )


if __name__ == "__main__":
    main()
