"""``delayq cluster scale``: changing a running local cluster's shard count.

The command writes a request into ``DIR/scale.json``; the supervisor's
``Scaler`` (a thread) carries it out with the resharding driver
(``control.reshardingdriver``, a round every ``POLL_S``), being its host
(``control.reshardinghost.ReshardingHost``) over the supervisor's nodes and
map, and writes its progress into the same file, which the command follows::

    {"shards": 3, "state": "running",      # requested, running, done, failed
     "step": "rebalance", "error": "",
     "requested_ms": ..., "ended_ms": 0,
     "job": {...}}                          # the last rebalance job's summary

The steps and their order are the driver's (each decided from the shard map, so
a supervisor started again resumes); here their side effects: new shards'
nodes and keepers (``ScaleHost.add_shards``), consumer groups' policies read
and set at shards' masters (``control.policycopy``), the map written by compare-and-set
under the registry's lock (the keepers publish failovers under it too), the job
``delayq-spark rebalance`` as a subprocess (``scalejob``; with TLS the
supervisor's certificate in ``DELAYQ_TLS_*``), nodes asked for their ``Stats``
(``probe``), and removed shards' nodes stopped, their directories set aside as
``DIR/shard-S.removed-E`` (E: the topology epoch).
A failed job leaves the map as it was (``failed``, with the job's last line;
scaling again runs it again), unless a failover moved the map on under it: the
driver then runs it again at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..atomicfile import read_text, write_atomic
from ..control import resharding
from ..control.policycopy import held_policies, set_policy
from ..control.policyspread import HeldPolicy
from ..control.reshardingdriver import ReshardingDriver
from ..control.reshardinghost import JobRun, JobState, Milestone, Round
from ..control.stats import ShardStats
from ..shardmap import ShardEntry, ShardMap
from . import probe
from .certs import LocalTls, control_tls, public_tls
from .errors import ClusterError
from .scalejob import ScaleJob

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
    def change_map(self, change: Callable[[ShardMap], ShardMap | None]) -> ShardMap | None:
        """Serve ``change(map)`` unless None, the map read and written under the
        lock the keepers publish under (compare-and-set)."""
        ...

    def add_shards(self, shards: int) -> list[ShardEntry]:
        """Take on shards up to ``shards`` (not started yet); their map entries."""
        ...

    def start_shards(self, first: int) -> None: ...
    def shards_serving(self, first: int) -> bool: ...
    def shards_running(self) -> int:
        """How many shards have nodes (the map's, or more while removed ones stop)."""
        ...

    def node_addresses(self, shards: Sequence[int]) -> dict[str, str]:
        """Every node of these shards: its name (``shard-S/node-K``) -> address."""
        ...

    def remove_shards(self, keep: int) -> None:
        """Stop the shards from ``keep`` on and set their directories aside."""
        ...


class Scaler:
    """Carries out the requests in ``DIR/scale.json`` (a thread of the supervisor),
    the resharding driver's host for the local cluster (``ReshardingHost``)."""

    def __init__(self, host: ScaleHost) -> None:
        self._host = host
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="delayq-scale", daemon=True)
        self._job: ScaleJob | None = None
        self._req: ScaleRequest | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop (a job running is killed; the change resumes on the next start)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        if self._job is not None:
            self._job.kill()

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
        req.state, self._req, self._job = RUNNING, req, None
        driver = ReshardingDriver(self, served_timeout_s=MAP_SERVED_TIMEOUT_S)
        waiting_since: float | None = None
        try:
            while not self._stop.wait(POLL_S):
                done = driver.round(req.shards)
                assert done is not None  # (the supervisor always has a map)
                if done.done or done.failed:
                    req.state = DONE if done.done else FAILED
                    req.error, req.ended_ms = done.failed, int(time.time() * 1000)
                    if done.failed:
                        log.error("scaling to %d shard(s) failed: %s", req.shards, done.failed)
                    self._save(req)
                    return
                if not done.waiting:
                    waiting_since = None
                elif waiting_since is None:
                    waiting_since = time.monotonic()
                elif time.monotonic() - waiting_since > START_TIMEOUT_S:
                    raise ClusterError(
                        f"the shards were not ready within {START_TIMEOUT_S:.0f}s ({done.note}; "
                        "see their logs under DIR/shard-S/)"
                    )
        except (resharding.ChangeError, ClusterError, OSError) as exc:
            req.state, req.error = FAILED, str(exc)
            req.ended_ms = int(time.time() * 1000)
            log.error(
                "scaling to %d shard(s) failed: %s", req.shards, exc, extra={"step": req.step}
            )
            self._save(req)
        finally:
            if self._job is not None and self._stop.is_set():
                self._job.kill()  # the change resumes on the next start

    # -- the driver's host (``control.reshardinghost.ReshardingHost``)
    def read_map(self) -> ShardMap:
        return self._host.current_map()

    def write_map(self, change: Callable[[ShardMap], ShardMap | None]) -> ShardMap | None:
        return self._host.change_map(change)

    def add_shards(self, current: ShardMap, target: int) -> Sequence[ShardEntry]:
        return self._host.add_shards(target)

    def start_shards(self, first: int) -> None:
        self._host.start_shards(first)

    def unready(self, current: ShardMap) -> str:
        if current.owners < current.count and not self._host.shards_serving(current.owners):
            new = ", ".join(str(s) for s in range(current.owners, current.count))
            return f"the nodes of shard(s) {new} are not serving yet"
        return ""

    def running_beyond(self, count: int) -> Sequence[int]:
        return list(range(count, self._host.shards_running()))

    def stop_shards(self, keep: int) -> None:
        self._host.remove_shards(keep)

    def job(self, current: ShardMap, target: int) -> JobRun:
        job = self._job
        if job is None or job.target != target:
            return JobRun(state=JobState.NONE)
        return job.run(current, control_tls(self._host.tls_files))

    def start_job(self, current: ShardMap, target: int) -> str:
        job = ScaleJob(
            python=self._host.python,
            dir=self._host.dir,
            current=current,
            target=target,
            tls_files=self._host.tls_files,
        )
        job.start()
        self._job = job
        return f"rebalance (pid {job.pid}) on topology epoch {current.topology_epoch} started"

    def shard_stats(self, shard: int) -> ShardStats | None:
        current = self._host.current_map()
        if shard >= current.count:
            return None
        return self._stats(current.shards[shard].master)

    def node_stats(self, shards: Sequence[int]) -> Mapping[str, ShardStats | None]:
        return {n: self._stats(a) for n, a in self._host.node_addresses(shards).items()}

    def group_policies(self, shard: int) -> Sequence[HeldPolicy] | None:
        current = self._host.current_map()
        if shard >= current.count:
            return None
        tls = public_tls(self._host.tls_files)
        return held_policies(current.shards[shard].master, tls)

    def set_group_policy(self, shard: int, held: HeldPolicy) -> str:
        current = self._host.current_map()
        if shard >= current.count:
            return f"shard {shard} is not in the map"
        return set_policy(current.shards[shard].master, held, public_tls(self._host.tls_files))

    def _stats(self, address: str) -> ShardStats | None:
        got = probe.stats(address, tls=public_tls(self._host.tls_files))
        if got is None:
            return None
        node = got["node"]
        return ShardStats(
            shard=node["shard"],
            role=node["role"],
            topology_epoch=node["topology_epoch"],
            topics=tuple(got["topics"]),
        )

    def record(self, done: Round) -> None:
        req, step, note = self._req, done.shown, done.note
        if req is None or step == req.step:
            return
        req.step = step
        self._save(req)
        log.info(
            "scaling to %d shard(s): %s",
            req.shards,
            step,
            extra={"shards": req.shards, "step": step, "note": note},
        )

    def reached(self, milestone: Milestone, note: str) -> None:
        log.warning("scaling: %s", note, extra={"milestone": milestone.value})
        if milestone is Milestone.SWITCHED and self._req is not None and self._job is not None:
            self._req.job = self._job.summary
            self._save(self._req)
