"""The local cluster's rebalance job: ``delayq-spark rebalance`` (local Spark) as a
subprocess of the supervisor, its output appended to ``DIR/rebalance.log``.

``ScaleJob.start`` returns at once; ``state`` is read off the process and the
log: the job prints its summary (a JSON line) when its moves are done, while it
still holds back new schedules, so it counts as succeeded then, not once Spark
has stopped (the map switches at once; the process is reaped later). A job that
exits without a summary failed; its hold on new schedules is dropped on every
shard (admin ``Prepare`` with no owners), since the job that held them is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from ..admin.v1 import admin_pb2, admin_pb2_grpc
from ..control.reshardinghost import JobRun, JobState
from ..shardmap import ShardMap
from ..tls import ENV_CA, ENV_CERT, ENV_KEY, TlsConfig, dial
from .certs import LocalTls

__all__ = ["ScaleJob"]


class ScaleJob:
    """One run of the job (not thread-safe: the scaler's thread reads it)."""

    def __init__(
        self,
        *,
        python: str,
        dir: Path,
        current: ShardMap,
        target: int,
        tls_files: LocalTls | None,
    ) -> None:
        self.planned = current
        self.target = target
        self.log_path = dir / "rebalance.log"
        self.summary: dict[str, Any] = {}
        self.error = ""
        self._argv = [
            python,
            "-m",
            "delayq_spark.main",
            "rebalance",
            "--server",
            current.shards[0].master,
            "--shards",
            str(target),
            "--log-format",
            "json",
        ]
        self._tls_files = tls_files
        self._proc: subprocess.Popen[bytes] | None = None
        self._since = 0
        self._state = JobState.NONE

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            out.write(f"# {stamp} {' '.join(self._argv)}\n".encode())
            out.flush()
            self._since = out.tell()
            env = dict(os.environ)
            if (files := self._tls_files) is not None:  # the supervisor's certificate
                env |= {ENV_CA: str(files.ca), ENV_CERT: str(files.control_cert)}
                env |= {ENV_KEY: str(files.control_key)}
            self._proc = subprocess.Popen(
                self._argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env
            )
        self._state = JobState.RUNNING

    def run(self, current: ShardMap, control_tls: TlsConfig | None) -> JobRun:
        """The job as it stands now (``current``, the map now, and ``control_tls``: to
        drop a failed job's hold on the masters it planned on and those of now)."""
        if self._state is JobState.RUNNING:
            self._poll(current, control_tls)
        note = self.error if self._state is JobState.FAILED else f"rebalance (pid {self.pid})"
        return JobRun(state=self._state, planned_epoch=self.planned.topology_epoch, note=note)

    @property
    def pid(self) -> int:
        return 0 if self._proc is None else self._proc.pid

    def _poll(self, current: ShardMap, control_tls: TlsConfig | None) -> None:
        proc = self._proc
        assert proc is not None
        code = proc.poll()
        summary, last = _job_output(self.log_path, since=self._since)
        if summary:
            self.summary, self._state = summary, JobState.SUCCEEDED
            if code is None:
                threading.Thread(target=proc.wait, daemon=True).start()  # reaped later
            return
        if code is None:
            return
        self._state = JobState.FAILED
        self.error = f"the rebalance job failed (exit {code}): {last}; see {self.log_path}"
        _unhold((self.planned, current), control_tls)

    def kill(self) -> None:
        """Kill it if it runs (the change resumes on the supervisor's next start)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def _unhold(maps: Sequence[ShardMap], tls: TlsConfig | None) -> None:
    """Drop a rebalance's hold on new schedules on every shard of ``maps`` (admin
    ``Prepare`` with no owners): the job that held them back is gone (it may have
    held a master of the map it planned on, or one of a failover since)."""
    addresses = dict.fromkeys(e.admin or e.master for m in maps for e in m.shards)
    for address in addresses:
        with contextlib.suppress(grpc.RpcError), dial(address, tls) as channel:
            admin_pb2_grpc.ShardAdminStub(channel).Prepare(
                admin_pb2.PrepareRequest(owners=0, job="unhold"), timeout=5
            )


def _job_output(path: Path, since: int, tail: int = 1 << 16) -> tuple[dict[str, Any], str]:
    """The job's summary (its last JSON line) and its last line, from its log (what
    this run appended: from ``since``)."""
    with open(path, "rb") as f:
        f.seek(max(since, f.seek(0, 2) - tail))
        lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    for line in reversed(lines):
        if line.startswith('{"'):
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if doc.get("job") == "rebalance":
                    return doc, line
    return {}, lines[-1] if lines else "no output"
