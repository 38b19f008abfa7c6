"""A local cluster for a benchmark: ``delayq cluster up`` as a subprocess, returned
once its supervisor says every node is ready (``cluster.readylines``).

The supervisor's log goes to ``ROOT/supervisor.log`` and its data to ``ROOT/c``;
the caller stops it (``adapter.stop_process``). A cluster that exits before it is
ready ends the benchmark with its log.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from bench.adapter import stop_process
from delayq.cluster.readylines import READY_PREFIX

__all__ = ["start_cluster"]


def start_cluster(
    root: Path, port: int, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """``delayq cluster up --dir ROOT/c --base-port PORT ARGS...``, ready."""
    cmd = [
        sys.executable, "-m", "delayq.cli.main", "cluster", "up", "--dir", str(root / "c"),
        "--base-port", str(port), *args,
    ]  # fmt: skip
    log = root / "supervisor.log"
    with open(log, "w") as out:
        sup = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=out, text=True, env={**os.environ, **(env or {})}
        )
    assert sup.stdout is not None
    while not (line := sup.stdout.readline()).startswith(READY_PREFIX):
        if not line:
            stop_process(sup)
            raise SystemExit(f"cluster up failed: {log.read_text()}")
    return sup
