"""A real ``delayq serve`` process on a free loopback port (``ServerProcess``), and
the repository root it runs in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.systems import served_addresses, stop_process

ROOT = Path(__file__).resolve().parents[2]
EPHEMERAL = ("--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "off")
"""``delayq serve`` options for free loopback ports and no metrics server."""


def rocketmq_address_in(line: str) -> str:
    """C in ``delayq serving on A (admin B, rocketmq C, data in D)``; "" when the line
    names no RocketMQ port (the server serves none)."""
    inside = line.partition("(admin ")[2]
    for part in inside.split(", "):
        if part.startswith("rocketmq "):
            return part.removeprefix("rocketmq ").rstrip(")\n")
    return ""


@dataclass
class ServerProcess:
    data_dir: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    address: str = ""
    admin_address: str = ""
    rocketmq_address: str = ""  # the RocketMQ port's, when --rocketmq-listen asked for one
    log_path: Path | None = None
    prefix: list[str] = field(default_factory=list)  # runs the server (e.g. in a namespace)

    def start(self) -> ServerProcess:
        self.log_path = self.data_dir.with_suffix(f".{time.monotonic_ns()}.log")
        cmd = [
            *self.prefix,
            sys.executable,
            "-m",
            "delayq.cli.main",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            *self.args,
        ]
        with open(self.log_path, "w") as log:  # the child writes to its own copy
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=ROOT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "serving on" not in line:
            self.stop(signal.SIGKILL)
            raise AssertionError(f"server did not start: {line!r}\n{self.logs()}")
        self.address, self.admin_address = served_addresses(line)
        self.rocketmq_address = rocketmq_address_in(line)
        return self

    def logs(self) -> str:
        return self.log_path.read_text() if self.log_path else ""

    def log_records(self) -> list[dict[str, object]]:
        out = []
        for line in self.logs().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def metrics_address(self) -> str:
        for rec in self.log_records():
            if rec.get("msg") == "serving":
                return str(rec["metrics"])
        raise AssertionError("no serving log line")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        assert self.proc is not None
        return stop_process(self.proc, sig, timeout)
