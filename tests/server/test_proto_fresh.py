"""The checked-in generated gRPC code matches proto/ (regenerate with `make proto`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_fresh() -> None:
    run = subprocess.run(
        [sys.executable, "scripts/gen_proto.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
