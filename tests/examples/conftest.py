"""A real ``delayq serve`` on a free loopback port and a temp data dir, for the examples."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """Start ``delayq serve``, yield its address, stop it."""
    data = str(tmp_path / "data")
    cmd = [sys.executable, "-m", "delayq.cli.main", "serve", "--data-dir", data]
    cmd += ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "off"]
    log = tmp_path / "serve.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "delayq serving on HOST:PORT (admin ..., data in ...)"
        assert "serving on" in line, f"server did not start: {line!r}\n{log.read_text()}"
        yield line.split("serving on ")[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(20)
        assert proc.stdout is not None
        proc.stdout.close()
