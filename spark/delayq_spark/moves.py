"""The moving half of a rebalance, run inside Spark tasks: each task takes the
pending messages of one partition of one shard (``shards.SCHEMA`` record
batches), finds those whose shard changes (``plan.Rebalance.targets``) and moves
them in batches, per target shard: admin ``Release`` on the source, then
``Import`` on the target of exactly those the source released (a message
delivered or cancelled meanwhile stays where it is).

Idempotent, so Spark may run a task twice and a job may be run again: a release
of a message already released to the same target answers RELEASED, and an
import makes at most one copy per source id. A shard that is failing over
(UNAVAILABLE, a replica's FAILED_PRECONDITION) is waited for: the map is fetched
again from any node and the batch sent again, for up to ``RETRY_S``.

A task yields one summary row per (source, target) it moved to (``SUMMARY``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import numpy as np
import pyarrow as pa

from delayq.admin.v1 import admin_pb2, admin_pb2_grpc
from delayq.argchecks import name_problem
from delayq.client.routing import route_of
from delayq.tls import TlsConfig, dial
from delayq.v1 import delayq_pb2, delayq_pb2_grpc

from .plan import Rebalance, layout_of

__all__ = ["MOVE_BATCH", "SUMMARY", "SUMMARY_DDL", "Mover", "move_partition"]

log = logging.getLogger("delayq_spark")

T = TypeVar("T")
MOVE_BATCH = 2_000
"""Messages a Release/Import pair carries: each call ends in an fsync, so fewer,
larger calls; small enough that a call is well under a second."""
MOVE_BYTES = 2 << 20  # ... and at most this much body: under gRPC's 4 MiB message limit
RETRY_S = 60.0
"""How long a batch waits for its shards (a failover takes a few seconds)."""
_RETRY = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.FAILED_PRECONDITION,  # a replica, or a master that stepped down
}
_OUTCOME = {
    admin_pb2.RELEASE_OUTCOME_RELEASED: "released",
    admin_pb2.RELEASE_OUTCOME_ALREADY_DELIVERED: "delivered_first",
    admin_pb2.RELEASE_OUTCOME_ALREADY_CANCELLED: "cancelled_first",
    admin_pb2.RELEASE_OUTCOME_NOT_FOUND: "not_found",
}
COUNTS = (
    "released",
    "imported",
    "delivered_first",
    "cancelled_first",
    "rewritten_first",
    "not_found",
    "failed",
)
"""Per pass: ``rewritten_first`` counts those of ``cancelled_first`` of delayq's own
topics (a name no client may give: a recurring schedule's plan), which their
shard itself rescheduled before the job reached them: their copy, written since,
is its to move (``jobs.settled``)."""
TIMES = ("release_s", "import_s")  # seconds spent in the calls (where a pass's time goes)
SUMMARY = pa.schema(
    [("source", pa.int32()), ("target", pa.int32())]
    + [(c, pa.int64()) for c in COUNTS]
    + [(t, pa.float64()) for t in TIMES]
    + [("first_error", pa.string())]
)
SUMMARY_DDL = (
    "source int, target int, "
    + ", ".join(f"{c} bigint" for c in COUNTS)
    + ", "
    + ", ".join(f"{t} double" for t in TIMES)
    + ", first_error string"
)


@dataclass
class _Tally:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    times: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIMES, 0.0))
    first_error: str = ""

    def failed(self, n: int, why: str) -> None:
        self.counts["failed"] += n
        self.first_error = self.first_error or why


class Mover:
    """Admin calls to the shards' masters, following the map when a master moves.
    Not thread-safe: one per task."""

    def __init__(self, plan: Rebalance, job: str, timeout_s: float = 30.0) -> None:
        self.plan = plan
        self.job = job
        self.timeout_s = timeout_s
        self.masters = list(plan.masters)
        self.admins = list(plan.admins)
        self.topology_epoch = plan.topology_epoch
        """The map epoch the hold names: the plan's, or a later map's that differs
        from it only in masters (a failover raised the epoch: same shards, same
        states), so a failover does not fail the job."""
        self._channels: dict[str, grpc.Channel] = {}

    def close(self) -> None:
        for c in self._channels.values():
            c.close()
        self._channels.clear()

    def _channel(self, address: str, *, public: bool = False) -> grpc.Channel:
        channel = self._channels.get(address)
        if channel is None:
            # DELAYQ_TLS_*: the control plane's certificate (DELAYQ_TLS_PUBLIC: and
            # whether the public ports take it too)
            tls = TlsConfig.from_env(os.environ, public=public)
            channel = self._channels[address] = dial(address, tls)
        return channel

    def admin(self, shard: int) -> admin_pb2_grpc.ShardAdminStub:
        return admin_pb2_grpc.ShardAdminStub(self._channel(self.admins[shard]))

    def _follow_map(self) -> None:
        """Fetch the map again from any node known (a master moved)."""
        for address in dict.fromkeys(self.masters):
            with contextlib.suppress(grpc.RpcError, ValueError):
                stub = delayq_pb2_grpc.DelayQueueStub(self._channel(address, public=True))
                route = route_of(stub.GetRoute(delayq_pb2.GetRouteRequest(), timeout=5))
                for entry in route.shards:
                    if entry.index < len(self.masters):
                        self.masters[entry.index] = entry.master
                        self.admins[entry.index] = entry.admin_address(os.environ)
                same = layout_of(route) == self.plan.layout
                if same and route.topology_epoch > self.topology_epoch:
                    log.info(
                        "the shard map moved on with the same shards (a failover): "
                        "carrying on with it",
                        extra={"job": self.job, "topology_epoch": route.topology_epoch},
                    )
                    self.topology_epoch = route.topology_epoch
                return

    def retried(self, call: Callable[[], T]) -> T:
        """``call`` until it succeeds, fails for good, or ``RETRY_S`` passes."""
        deadline = time.monotonic() + RETRY_S
        wait = 0.2
        while True:
            try:
                return call()
            except grpc.RpcError as exc:
                if exc.code() not in _RETRY or time.monotonic() + wait > deadline:
                    raise
            time.sleep(wait)
            wait = min(wait * 2, 2.0)
            self._follow_map()

    def move(self, source: int, target: int, rows: list[dict[str, Any]], tally: _Tally) -> None:
        """Release ``rows`` (messages of ``source``) to ``target``, then import those
        released there."""
        ids = [r["id"] for r in rows]
        started = time.monotonic()
        try:
            released = self.retried(
                lambda: self.admin(source).Release(
                    admin_pb2.ReleaseRequest(
                        ids=ids,
                        target=target,
                        target_address=self.masters[target],
                        job=self.job,
                    ),
                    timeout=self.timeout_s,
                )
            )
        except grpc.RpcError as exc:
            tally.failed(len(rows), f"Release at shard {source}: {_why(exc)}")
            return
        tally.times["release_s"] += time.monotonic() - started
        moving = []
        for row, result in zip(rows, released.results, strict=True):
            if result.error:
                tally.failed(1, f"Release {row['id']} at shard {source}: {result.error}")
                continue
            outcome = _OUTCOME.get(result.outcome, "not_found")
            tally.counts[outcome] += 1
            if outcome == "cancelled_first" and name_problem(row["topic"]):
                tally.counts["rewritten_first"] += 1
            if outcome == "released":
                moving.append(row)
        if not moving:
            return
        request = admin_pb2.ImportRequest(
            job=self.job,
            messages=[
                admin_pb2.MovedMessage(
                    source_id=r["id"],
                    topic=r["topic"],
                    key=r["key"] or "",
                    headers=dict(r["headers"] or ()),
                    body=r["body"],
                    deliver_at_ms=r["deliver_at_ms"],
                )
                for r in moving
            ],
        )
        started = time.monotonic()
        try:
            imported = self.retried(
                lambda: self.admin(target).Import(request, timeout=self.timeout_s)
            )
            tally.times["import_s"] += time.monotonic() - started
        except grpc.RpcError as exc:
            tally.failed(len(moving), f"Import at shard {target}: {_why(exc)}")
            return
        for row, result in zip(moving, imported.results, strict=True):
            if result.error:
                tally.failed(1, f"Import of {row['id']} at shard {target}: {result.error}")
            else:
                tally.counts["imported"] += 1


def _why(exc: grpc.RpcError) -> str:
    return f"{exc.code().name}: {exc.details()}"


def move_partition(
    plan: Rebalance,
    job: str,
    batches: Iterator[pa.RecordBatch],
    since: Mapping[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Move what must move among one partition's messages (of a shard S, only those
    at CommitLog positions from ``since[S]``); one summary row per target."""
    mover = Mover(plan, job)
    tallies: dict[tuple[int, int], _Tally] = {}
    pending: dict[tuple[int, int], list[dict[str, Any]]] = {}
    sizes: dict[tuple[int, int], int] = {}
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            shard = int(batch.column("shard")[0].as_py())
            targets = plan.targets(
                shard,
                batch.column("id").to_pylist(),
                batch.column("key").to_pylist(),
                batch.column("forwarded_to").to_numpy().astype(np.int64),
            )
            positions = batch.column("position").to_numpy()
            moving = (targets != shard) & (positions >= (since or {}).get(shard, 0))
            if not moving.any():
                continue
            rows = batch.filter(pa.array(moving)).to_pylist()
            for row, target in zip(rows, targets[moving].tolist(), strict=True):
                pair = (shard, target)
                pending.setdefault(pair, []).append(row)
                sizes[pair] = sizes.get(pair, 0) + len(row["body"]) + 200
                if len(pending[pair]) >= MOVE_BATCH or sizes[pair] >= MOVE_BYTES:
                    mover.move(*pair, pending.pop(pair), tallies.setdefault(pair, _Tally()))
                    sizes[pair] = 0
        for pair, rows in pending.items():
            mover.move(*pair, rows, tallies.setdefault(pair, _Tally()))
    finally:
        mover.close()
    if tallies:
        pairs = sorted(tallies)
        yield pa.RecordBatch.from_pydict(
            {
                "source": [p[0] for p in pairs],
                "target": [p[1] for p in pairs],
                **{c: [tallies[p].counts[c] for p in pairs] for c in COUNTS},
                **{t: [tallies[p].times[t] for p in pairs] for t in TIMES},
                "first_error": [tallies[p].first_error for p in pairs],
            },
            schema=SUMMARY,
        )


def unhold(plan: Rebalance, job: str) -> None:
    """Drop the hold (best effort: one not dropped runs out by itself)."""
    mover = Mover(plan, job)
    try:
        for shard in range(len(plan.masters)):
            with contextlib.suppress(grpc.RpcError):
                mover.admin(shard).Prepare(admin_pb2.PrepareRequest(owners=0, job=job), timeout=5)
    finally:
        mover.close()


def hold(plan: Rebalance, job: str, hold_ms: int) -> dict[int, int]:
    """Admin ``Prepare`` on every listed shard's master: schedules this rebalance
    would place elsewhere are held back until the map switches. Returns each
    shard's ``held_since_ms`` (a different one on a later call: the hold lapsed).

    A node that serves a later map than the plan's refuses the hold
    (FAILED_PRECONDITION); the map is fetched again, and when it differs from the
    plan's only in masters (a failover) the hold names its epoch instead: the
    job carries on, passing again under the new hold (it began anew)."""
    mover = Mover(plan, job)
    try:
        out = {}
        for shard in range(len(plan.masters)):

            def prepare(s: int = shard) -> Any:
                request = admin_pb2.PrepareRequest(
                    owners=plan.shards,
                    topology_epoch=mover.topology_epoch,
                    hold_ms=hold_ms,
                    job=job,
                )
                return mover.admin(s).Prepare(request, timeout=mover.timeout_s)

            out[shard] = mover.retried(prepare).held_since_ms
        return out
    finally:
        mover.close()
