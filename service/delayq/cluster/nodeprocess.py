"""One node's process under ``delayq cluster up``: its command line
(``serve_argv``, pure), its start (``spawn``), how its exit is named and why it
failed (``exit_name``, ``last_line``), and the stop of several at once
(``stop_runs``: SIGTERM, then SIGKILL after the grace).

``NodeRun`` is the supervisor's bookkeeping of one node (mutable; changed only
under the supervisor's nodes lock, or once the watch loop has ended). Its
invariants: ``proc`` is None exactly while no process runs for the node (before
its first start, between an exit and the restart, once stopped); ``starts``
counts the processes started, so its restarts are ``starts - 1``; ``serving``
holds only while the current process serves; ``delay_s`` is None until the node
first died.

A node's stdout and stderr are appended to its log (``Node.log_path``); its
environment is the supervisor's with ``PYTHONUNBUFFERED=1``. Nodes stay in the
supervisor's process group (see ``supervisor``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .certs import LocalTls
from .layout import Node

__all__ = ["POLL_S", "NodeRun", "exit_name", "last_line", "serve_argv", "spawn", "stop_runs"]

log = logging.getLogger("delayq.cluster")

POLL_S = 0.1
"""How often processes are polled and starting nodes probed."""


def serve_argv(
    python: str,
    node: Node,
    map_path: Path,
    *,
    replication: str | None = None,
    min_insync: int = 1,
    follow: str | None = None,
    tls: LocalTls | None = None,
) -> list[str]:
    """The command line of a node's ``delayq serve`` (pure). With ``replication``
    (a shard of several nodes) it serves under its name with that mode, as a
    replica of ``follow`` when given, else as a master. With ``tls`` it serves TLS
    with the local CA's node certificate, its admin port only to that CA's."""
    extra: list[str] = []
    if tls is not None:
        extra += ["--tls-cert", str(tls.node_cert), "--tls-key", str(tls.node_key)]
        extra += ["--admin-client-ca", str(tls.ca)]
    if replication is not None:
        extra += ["--node-name", node.name, "--replication", replication]
        extra += ["--min-insync", str(min_insync)]
        if follow is not None:
            extra += ["--follow", follow]
    return [
        python,
        "-m",
        "delayq.cli.main",
        "serve",
        "--shard-map",
        str(map_path),
        "--shard",
        str(node.shard),
        "--data-dir",
        str(node.data_dir),
        "--listen",
        node.address,
        "--metrics-listen",
        node.metrics_address,
        "--admin-listen",
        node.admin_address,
        "--rocketmq-listen",
        node.rocketmq_address,
        "--log-format",
        "json",
        *extra,
    ]


@dataclass(kw_only=True)
class NodeRun:
    """A node and its current process (mutable: the supervisor's bookkeeping)."""

    node: Node
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    starts: int = 0
    delay_s: float | None = None
    """The back-off before the current run; None until the node first died."""
    due_at: float = 0.0
    """When a dead node is to start again."""
    serving: bool = False
    announced: bool = False
    """Its ``node_line`` was printed (once a run, before the ready line)."""

    @property
    def pid(self) -> int:
        return 0 if self.proc is None else self.proc.pid

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def running(self) -> bool:
        """A process runs for the node (started and not yet seen to exit)."""
        return self.proc is not None and self.proc.poll() is None

    def log_fields(self) -> dict[str, object]:
        """The node's fields of a supervisor log line."""
        return {
            "node": self.node.label,
            "address": self.node.address,
            "pid": self.pid,
            "restarts": self.restarts,
        }

    def send(self, sig: int) -> None:
        """Signal the node's process, if any (one that just exited is no error)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)


def spawn(argv: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` with stdin empty and stdout and stderr appended to
    ``log_path`` (its directory made); ``OSError`` when it cannot start."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:  # the child keeps its own copy
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )


def stop_runs(runs: Sequence[NodeRun], grace_s: float, signals: Callable[[], int]) -> None:
    """SIGTERM these nodes, SIGKILL those left after ``grace_s`` (or at once when
    ``signals()``, the supervisor's count of SIGINT/SIGTERM caught, rises past
    what it was and past 1: a second Ctrl-C); wait for all, each ``proc`` None."""
    live = [r for r in runs if r.running]
    log.info("stopping %d node(s)", len(live), extra={"nodes": len(live), "grace_s": grace_s})
    for r in live:
        r.send(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    before = signals()
    while any(r.running for r in live):
        if time.monotonic() >= deadline or signals() > max(before, 1):
            for r in live:
                if r.running:
                    log.warning("node %s killed", r.node.label, extra=r.log_fields())
                    r.send(signal.SIGKILL)
            break
        time.sleep(POLL_S)
    for r in runs:
        if r.proc is not None:
            code = exit_name(r.proc.wait())
            log.info(
                "node %s stopped (%s)",
                r.node.label,
                code,
                extra={**r.log_fields(), "exit": code},
            )
            r.proc = None


def exit_name(code: int) -> str:
    """``0``, ``2``, or the signal that ended the process: ``SIGKILL``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return str(code)


def last_line(path: Path, tail: int = 4096) -> str:
    """The log's last non-empty line (why a node that failed to start failed)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
