"""``delayq cluster scale``: changing a running local cluster's shard count.

The command writes a request into ``DIR/scale.json``; the supervisor's
``Scaler`` (a thread) carries it out with ``resharding.next_step`` until done,
and writes its progress into the same file, which the command follows::

    {"shards": 3, "state": "running",      # requested, running, done, failed
     "step": "rebalance", "error": "",
     "requested_ms": ..., "ended_ms": 0,
     "job": {...}}                          # the last rebalance job's summary

Steps (each decided from the shard map, so a supervisor started again resumes):
ADD writes the map with the new shards joining and starts their nodes; REBALANCE
runs ``delayq-spark rebalance`` (local Spark; its output appended to
``DIR/rebalance.log``; with TLS the supervisor's certificate in ``DELAYQ_TLS_*``)
and, only when it succeeds, serves the switched map; DRAIN
waits until the leaving shards hold nothing (no pending message, every group's
backlog acked), then serves the map without them, waits until the kept nodes
serve it (so no client fetches the old map from them once the leaving nodes
refuse), stops their nodes and sets their directories aside as
``DIR/shard-S.removed-E`` (E: the topology epoch).
A failed job leaves the map as it was (``failed``, with the job's last line);
scaling again runs it again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc

from ..admin.v1 import admin_pb2, admin_pb2_grpc
from ..atomicfile import read_text, write_atomic
from ..control import resharding
from ..shardmap import ShardEntry, ShardMap
from ..tls import ENV_CA, ENV_CERT, ENV_KEY, TlsConfig, dial
from . import probe
from .certs import LocalTls, control_tls, public_tls
from .errors import ClusterError

__all__ = [
    "DONE",
    "FAILED",
    "REQUESTED",
    "RUNNING",
    "ScaleHost",
    "ScaleRequest",
    "Scaler",
    "read_request",
    "request",
]

log = logging.getLogger("delayq.cluster")

REQUESTED, RUNNING, DONE, FAILED = "requested", "running", "done", "failed"
POLL_S = 0.2
MAP_SERVED_TIMEOUT_S = 10.0
"""How long a scale-down waits for the kept nodes to serve the smaller map before it
stops the removed shards' nodes."""
START_TIMEOUT_S = 120.0
"""How long new shards' nodes get to serve before the change fails."""


@dataclass(kw_only=True)
class ScaleRequest:
    shards: int
    state: str = REQUESTED
    step: str = ""
    error: str = ""
    requested_ms: int = 0
    ended_ms: int = 0
    job: dict[str, Any] = field(default_factory=dict)

    def dumps(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @property
    def open(self) -> bool:
        return self.state in (REQUESTED, RUNNING)


def scale_path(dir: Path) -> Path:
    return dir / "scale.json"


def read_request(dir: Path) -> ScaleRequest | None:
    """The request in DIR (None: none); ``ClusterError`` when it cannot be read."""
    text = read_text(scale_path(dir))
    if text is None:
        return None
    try:
        doc = json.loads(text)
        return ScaleRequest(**doc)
    except (ValueError, TypeError) as exc:
        raise ClusterError(f"{scale_path(dir)}: {exc}") from None


def request(dir: Path, shards: int, current: ShardMap) -> ScaleRequest:
    """Ask the supervisor of DIR for ``shards`` active shards (checked against
    ``current`` first: ``ClusterError`` names what is in the way)."""
    try:
        resharding.next_step(current, shards)
    except resharding.ChangeError as exc:
        raise ClusterError(str(exc)) from None
    old = read_request(dir)
    if old is not None and old.open and old.shards != shards:
        raise ClusterError(
            f"a change to {old.shards} shard(s) is under way ({old.state}, step "
            f"{old.step or '-'}); wait for it, or scale to {old.shards} to follow it"
        )
    req = ScaleRequest(shards=shards, requested_ms=int(time.time() * 1000))
    if old is not None and old.open:
        return old  # the same change, already asked for: follow it
    write_atomic(scale_path(dir), req.dumps())
    return req


class ScaleHost(Protocol):
    """What the scaler needs of the supervisor."""

    python: str
    tls_files: LocalTls | None
    """The local CA and certificates when the nodes serve TLS."""

    @property
    def dir(self) -> Path: ...

    def current_map(self) -> ShardMap: ...
    def serve_map(self, new: ShardMap) -> None: ...
    def add_shards(self, shards: int) -> list[ShardEntry]:
        """Take on shards up to ``shards`` (not started yet); their map entries."""
        ...

    def start_shards(self, first: int) -> None: ...
    def shards_serving(self, first: int) -> bool: ...
    def remove_shards(self, keep: int) -> None:
        """Stop the shards from ``keep`` on and set their directories aside."""
        ...


class Scaler:
    """Carries out the requests in ``DIR/scale.json`` (a thread of the supervisor)."""

    def __init__(self, host: ScaleHost) -> None:
        self._host = host
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="delayq-scale", daemon=True)
        self._job: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop (a job running is killed; the change resumes on the next start)."""
        self._stop.set()
        job = self._job
        if job is not None and job.poll() is None:
            job.kill()
        if self._thread.is_alive():
            self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                req = read_request(self._host.dir)
            except ClusterError as exc:
                log.warning("scale request unreadable", extra={"error": str(exc)})
                continue
            if req is not None and req.open:
                self._run(req)

    def _save(self, req: ScaleRequest) -> None:
        with contextlib.suppress(OSError):
            write_atomic(scale_path(self._host.dir), req.dumps())

    def _run(self, req: ScaleRequest) -> None:
        req.state = RUNNING
        try:
            while not self._stop.is_set():
                current = self._host.current_map()
                step = resharding.next_step(current, req.shards)
                if step.value != req.step:
                    req.step = step.value
                    self._save(req)
                    log.info(
                        "scaling to %d shard(s): %s",
                        req.shards,
                        step.value,
                        extra={"shards": req.shards, "step": step.value},
                    )
                if step is resharding.Step.DONE:
                    req.state, req.ended_ms = DONE, int(time.time() * 1000)
                    self._save(req)
                    return
                if step is resharding.Step.ADD:
                    self._add(current, req.shards)
                elif step is resharding.Step.REBALANCE:
                    req.job = self._rebalance(current, req.shards)
                    self._host.serve_map(resharding.switched(current, req.shards))
                else:
                    self._drain(current, req.shards)
        except (resharding.ChangeError, ClusterError, OSError) as exc:
            req.state, req.error = FAILED, str(exc)
            req.ended_ms = int(time.time() * 1000)
            log.error(
                "scaling to %d shard(s) failed: %s", req.shards, exc, extra={"step": req.step}
            )
            self._save(req)

    def _add(self, current: ShardMap, shards: int) -> None:
        entries = self._host.add_shards(shards)
        self._host.serve_map(resharding.joining(current, entries))  # a node needs its shard listed
        self._host.start_shards(current.count)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._host.shards_serving(current.count):
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the new shards' nodes did not serve within {START_TIMEOUT_S:.0f}s "
                    "(see their logs under DIR/shard-S/)"
                )
            if self._stop.wait(POLL_S):
                return

    def _rebalance(self, current: ShardMap, shards: int) -> dict[str, Any]:
        """Run the job to its end; its summary, or ``ClusterError`` when it failed."""
        log_path = self._host.dir / "rebalance.log"
        argv = [
            self._host.python,
            "-m",
            "delayq_spark.main",
            "rebalance",
            "--server",
            current.shards[0].master,
            "--shards",
            str(shards),
            "--log-format",
            "json",
        ]
        with open(log_path, "ab") as out:
            out.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            start = out.tell()
            env = dict(os.environ)
            if (files := self._host.tls_files) is not None:  # the supervisor's certificate
                env |= {ENV_CA: str(files.ca), ENV_CERT: str(files.control_cert)}
                env |= {ENV_KEY: str(files.control_key)}
            self._job = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env
            )
        job = self._job
        try:
            while job.poll() is None:
                # the job prints its summary when its moves are done, while it still
                # holds back new schedules: switch then, not once Spark has stopped
                summary, _ = _job_output(log_path, since=start)
                if summary:
                    threading.Thread(target=job.wait, daemon=True).start()  # reaped later
                    return summary
                time.sleep(POLL_S / 4)
        finally:
            self._job = None
        # a job killed while it held back new schedules
        _unhold(current, control_tls(self._host.tls_files))
        if self._stop.is_set():
            raise ClusterError("stopped while the rebalance ran; it runs again on the next start")
        summary, last = _job_output(log_path, since=start)
        if job.returncode != 0 or not summary:
            raise ClusterError(
                f"the rebalance job failed (exit {job.returncode}): {last}; see {log_path}"
            )
        return summary

    def _drain(self, current: ShardMap, shards: int) -> None:
        leaving = [e for e in current.shards if not e.active]
        while not self._stop.is_set():
            tls = public_tls(self._host.tls_files)
            answers = [probe.stats(e.master, tls=tls) for e in leaving]
            if all(a is not None and resharding.drained(a["topics"]) for a in answers):
                smaller = resharding.dropped(current)
                self._host.serve_map(smaller)
                self._await_served(smaller, tls)
                self._host.remove_shards(shards)
                return
            self._stop.wait(POLL_S * 5)

    def _await_served(self, new: ShardMap, tls: TlsConfig | None) -> None:
        """Wait until every node of the kept shards serves ``new`` (each re-reads the
        map file within about a second), at most ``MAP_SERVED_TIMEOUT_S``: a client
        that fetches the map from any of them then gets one without the shards about
        to stop, instead of the old one naming addresses that refuse."""
        nodes = [a for e in new.shards for a in (e.master, *e.replicas) if a]
        deadline = time.monotonic() + MAP_SERVED_TIMEOUT_S
        while nodes and time.monotonic() < deadline and not self._stop.is_set():
            answers = [probe.stats(a, tls=tls) for a in nodes]
            nodes = [
                a
                for a, got in zip(nodes, answers, strict=True)
                if got is None or got["node"]["topology_epoch"] < new.topology_epoch
            ]
            if nodes:
                self._stop.wait(POLL_S)
        if nodes:
            log.warning(
                "nodes not serving the new map before the shards stop: %s",
                ", ".join(nodes),
                extra={"topology_epoch": new.topology_epoch},
            )


def _unhold(current: ShardMap, tls: TlsConfig | None) -> None:
    """Drop a rebalance's hold on new schedules on every shard (admin ``Prepare``
    with no owners): the job that held them back is gone."""
    for entry in current.shards:
        address = entry.admin or entry.master
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
