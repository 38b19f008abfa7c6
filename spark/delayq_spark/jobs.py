"""The jobs ``delayq-spark`` runs, each a function of a SparkSession and the
cluster's address that returns a summary (plain data, printed as JSON).

The shard map is fetched first (``route_of``), before Spark starts.

- ``export``: the pending messages as Parquet, partitioned by ``topic`` and
  ``due_day`` (UTC), from one snapshot per shard taken at the start (ended at the
  end, also on failure). Messages a rebalance released are left out (their copy
  on the shard they moved to is exported).
- ``rebalance``: moves every pending message whose shard changes under the new
  shard count (``plan``) in passes, each over fresh snapshots of every shard
  (one Spark task per export partition, moving what it reads):
  a bulk pass over everything; catch-up passes over what was written since the
  last pass, while one still moves many; then schedules that would land on the
  wrong shard are held back (``moves.hold``) and a last pass moves the rest.
  The hold is checked once more after it (a shard that restarted or failed
  over meanwhile lost it: hold again, pass again), and so is what the pass met
  (a recurring schedule's plan its shard rescheduled after the snapshot, as it
  does at each firing, left its copy behind: pass again; ``settled``). Then
  nothing the old map placed is left where it does not belong, and the caller
  switches the map (the job never writes it). Safe to kill and run again: every step is
  idempotent, and a message released but not yet imported is listed by its
  source's snapshot with the shard it was released to.
- ``compact``: rolled messages due ``beyond`` or more ahead, not in a block yet
  and not released by a rebalance, grouped by shard and due block (``block``
  long, aligned to multiples of it, the first starting at or after now +
  ``beyond``), each group sorted by due time and sent to its shard's master in
  ``AddBlock`` calls of at most 10,000 rows from the Spark tasks. Idempotent: a
  re-run skips what is blocked (the export flags it) and a row sent twice is
  ALREADY_BLOCKED.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delayq.client.errors import ClientError, from_rpc
from delayq.shardmap import JOINING, ShardMap, ShardMapError

from . import moves, shards
from .plan import PlanError, Rebalance

__all__ = ["JobError", "compact", "export", "pending", "rebalance", "route_of", "settled"]

log = logging.getLogger("delayq_spark")

CATCH_UP_AT = 5_000
"""A pass that moved more than this is followed by another pass without the hold:
the hold's pass should be short, as producers of the keys it moves wait for it."""
MAX_PASSES = 8
HELD_PASSES = 4
"""Of ``MAX_PASSES``, those kept for passes under the hold (a hold that lapsed, or
a pass that met messages rewritten meanwhile, passes again)."""
IN_DRIVER_BYTES = 32 << 20
"""A catch-up pass over at most this much log runs in the driver, not as a Spark job."""
HOLD_MS = 15_000
"""How long a hold lasts unless renewed: longer than the last pass plus the map
switch by the caller (``delayq cluster scale``, the operator)."""
MAX_ROWS = 10_000  # rows per AddBlock call (the shards' limit)
_OUTCOMES = ("blocked", "already_blocked", "not_pending", "error", "refused")
_COUNTS = ("blocks", "calls", *_OUTCOMES)  # a compaction's summary counts
_COUNTS_DDL = ", ".join(f"{k} bigint" for k in _COUNTS)


class JobError(RuntimeError):
    """A job that could not be done; the message says why in a line."""


def pending(spark: SparkSession, snaps: list[shards.ShardSnapshot]) -> DataFrame:
    """The pending messages of these snapshots (``shards.SCHEMA``)."""
    return spark.read.format("delayq").option("snapshots", shards.ShardSnapshot.dumps(snaps)).load()


def route_of(server: str) -> ShardMap:
    """The cluster's shard map (before a Spark session starts: a wrong address fails
    in a second, not after the JVM came up)."""
    try:
        return shards.shard_map(server)
    except (ClientError, ShardMapError) as exc:  # the client's errors read "CODE: details"
        raise JobError(f"no shard map from {server}: {exc}") from exc


def export(
    spark: SparkSession,
    route: ShardMap,
    to: str,
    partition_bytes: int = 0,
    *,
    overwrite: bool = False,
) -> dict[str, Any]:
    with _explained():
        snaps = shards.begin(route, partition_bytes)
        try:
            df = pending(spark, snaps).withColumn(
                "due_day", F.to_date(F.timestamp_millis("deliver_at_ms"))
            )
            mode = "overwrite" if overwrite else "errorifexists"
            df = df.where("forwarded_to < 0").drop("forwarded_to")
            df.write.mode(mode).partitionBy("topic", "due_day").parquet(to)
        finally:
            shards.end(snaps)
        written = spark.read.parquet(to).groupBy("topic").count().collect()
    topics = {r["topic"]: r["count"] for r in written}
    return {
        "job": "export",
        "to": to,
        "rows": sum(topics.values()),
        "topics": topics,
        "shards": len(snaps),
        "topology_epoch": route.topology_epoch,
        "partitions": sum(len(s.partitions) for s in snaps),
        "pending_at_snapshot": sum(s.pending for s in snaps),
    }


def rebalance(
    spark: SparkSession,
    route: ShardMap,
    target: int,
    job: str = "",
    partition_bytes: int = 0,
    *,
    hold_ms: int = HOLD_MS,
) -> dict[str, Any]:
    """Move every message whose shard changes when the cluster has ``target``
    active shards (see the module docstring); a summary of what moved."""
    try:
        plan = Rebalance.of(route, target, os.environ)
    except PlanError as exc:
        raise JobError(str(exc)) from None
    job = job or f"rebalance-e{route.topology_epoch}-to{target}"
    started = time.monotonic()
    passes: list[dict[str, Any]] = []
    since: dict[int, int] = {}
    held: dict[int, int] | None = None
    with _explained(), _unheld_on_failure(plan, job):
        while True:
            holding = held is not None
            last = _move_pass(spark, plan, job, route, since, partition_bytes, held=holding)
            since = last.pop("positions")
            last["held"] = holding
            passes.append(last)
            log.info(
                "rebalance pass done",
                extra={"job": job, "pass": len(passes), **_loggable(last)},
            )
            if last["failed"]:
                raise JobError(
                    f"{last['failed']} message(s) could not be moved (pass {len(passes)}); "
                    f"the first: {last['first_error']}; run the job again"
                )
            if held is not None:
                again = moves.hold(plan, job, hold_ms)
                if settled(held, again, last):
                    break
                held = again
            elif last["moved"] <= CATCH_UP_AT or len(passes) >= MAX_PASSES - HELD_PASSES:
                held = moves.hold(plan, job, hold_ms)
            if len(passes) >= MAX_PASSES:
                raise JobError(
                    f"the hold on new schedules kept lapsing, or messages kept being "
                    f"rewritten under it, over {len(passes)} passes (shards restarting or "
                    "failing over?); run the job again"
                )
    return {
        "job": "rebalance",
        "id": job,
        "kind": plan.kind,
        "from_shards": route.owners,
        "to_shards": target,
        "topology_epoch": route.topology_epoch,
        "moved": sum(p["moved"] for p in passes),
        "passes": passes,
        "seconds": round(time.monotonic() - started, 2),
    }


def settled(held: dict[int, int], again: dict[int, int], last: dict[str, Any]) -> bool:
    """Whether a pass under the hold (``last``, held since ``held``; held since
    ``again`` after it) left nothing the old map placed misplaced: the hold lasted
    throughout it (a client's new schedule of a moving key waited), and it met no
    message of delayq's own that its shard rescheduled after the snapshot
    (``rewritten_first``): the firer's next plan of a recurring schedule
    (docs/schedules.md), written unheld. Else the job passes again, over what
    was written since."""
    return again == held and not last["rewritten_first"]


def _loggable(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "read_from"}


def _move_pass(
    spark: SparkSession,
    plan: Rebalance,
    job: str,
    route: ShardMap,
    since: dict[int, int],
    partition_bytes: int,
    *,
    held: bool = False,
) -> dict[str, Any]:
    """One pass over fresh snapshots of every shard (of what lies past ``since``):
    a Spark job; or, under the hold or over little log (a catch-up), the same moves
    run here, partition by partition, without a Spark job's overhead (seconds), so
    that the hold is short."""
    started = time.monotonic()
    # partitions from ``since`` (or all, when a shard could not: a restart, say;
    # the moves then skip what lies before it)
    snaps = shards.begin(route, partition_bytes, since=since)
    try:
        # after the first pass a joining shard holds nothing new but this job's
        # imports (it takes no schedules), each already where it belongs: unread
        joining = {e.index for e in route.shards if e.state == JOINING}
        reading = [
            dataclasses.replace(s, partitions=()) if since and s.shard in joining else s
            for s in snaps
        ]
        rows: list[Any] = []
        log_bytes = sum(b - a for s in reading for a, b in s.partitions)
        if held or (since and log_bytes <= IN_DRIVER_BYTES):
            for s in reading:
                for part in s.parts():
                    for b in moves.move_partition(plan, job, shards.read(part), since):
                        rows += b.to_pylist()
        elif any(s.partitions for s in reading):
            # one Spark task per export partition, reading it straight from its shard:
            # the rows never pass through the JVM (through the data source and
            # mapInArrow they cost 5x the time); only each task's summary comes back
            parts = [p for s in reading for p in s.parts()]
            tasks = spark.sparkContext.parallelize(parts, len(parts))
            rows = tasks.mapPartitions(
                lambda it: (
                    r
                    for part in it
                    for b in moves.move_partition(plan, job, shards.read(part), since)
                    for r in b.to_pylist()
                )
            ).collect()
    finally:
        shards.end(snaps)
    counts = dict.fromkeys(moves.COUNTS, 0)
    times = dict.fromkeys(moves.TIMES, 0.0)
    first_error = ""
    for r in rows:
        for c in moves.COUNTS:
            counts[c] += r[c]
        for t in moves.TIMES:
            times[t] += r[t]
        first_error = first_error or r["first_error"]
    return {
        "moved": counts["imported"],
        **counts,
        **{t: round(v, 2) for t, v in times.items()},
        "first_error": first_error,
        "read_from": dict(since),
        "seconds": round(time.monotonic() - started, 2),
        "positions": {s.shard: s.position for s in snaps},
    }


@contextlib.contextmanager
def _unheld_on_failure(plan: Rebalance, job: str) -> Iterator[None]:
    """A job that fails drops its hold on new schedules (the map does not switch)."""
    try:
        yield
    except BaseException:
        moves.unhold(plan, job)
        raise


def compact(
    spark: SparkSession,
    route: ShardMap,
    beyond_ms: int,
    block_ms: int,
    partition_bytes: int = 0,
    *,
    job: str = "",
) -> dict[str, Any]:
    if beyond_ms <= 0 or block_ms <= 0:
        raise JobError("--beyond and --block must be positive")
    now = int(time.time() * 1000)
    first = -(-(now + beyond_ms) // block_ms) * block_ms  # the first whole block past it
    name = job or f"compact-{now}"
    masters = {e.index: shards.admin_of(e) for e in route.shards}  # their admin services
    with _explained():
        snaps = shards.begin(route, partition_bytes)
        try:
            rows = (
                pending(spark, snaps)
                .where(~F.col("blocked") & (F.col("forwarded_to") < 0) & (F.col("roll_count") > 0))
                .withColumn("block_start", F.floor(F.col("deliver_at_ms") / block_ms) * block_ms)
                .where(F.col("block_start") >= first)
                .select("shard", "block_start", "id", "topic", "deliver_at_ms", "roll_count")
                .repartition("shard", "block_start")
                .sortWithinPartitions("shard", "block_start", "deliver_at_ms")
            )
            send = functools.partial(_send_blocks, masters, name, block_ms)
            counts = rows.mapInArrow(send, _COUNTS_DDL).groupBy().sum().collect()[0]
        finally:
            shards.end(snaps)
    got = {k: int(counts[f"sum({k})"] or 0) for k in _COUNTS}
    return {
        "job": "compact",
        "name": name,
        "beyond_ms": beyond_ms,
        "block_ms": block_ms,
        "first_block_ms": first,
        "shards": len(snaps),
        "topology_epoch": route.topology_epoch,
        "pending_at_snapshot": sum(s.pending for s in snaps),
        **got,
    }


def _send_blocks(
    masters: dict[int, str], job: str, block_ms: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """A Spark task: the rows of its partition (sorted by shard, block, due time)
    sent to their shards' masters as blocks; yields one row of counts."""
    counts = dict.fromkeys(_COUNTS, 0)
    group: list[shards.BlockRow] = []
    key: tuple[int, int] | None = None

    def flush() -> None:
        if key is None or not group:
            return
        shard, start = key
        for outcome in shards.add_block(masters[shard], job, start, start + block_ms, group):
            counts[outcome.split(":")[0]] += 1
        counts["calls"] += 1
        group.clear()

    for batch in batches:
        cols = batch.to_pydict()
        for shard, start, mid, topic, due, rolls in zip(
            cols["shard"],
            cols["block_start"],
            cols["id"],
            cols["topic"],
            cols["deliver_at_ms"],
            cols["roll_count"],
            strict=True,
        ):
            if (shard, start) != key:
                flush()
                key = (shard, start)
                counts["blocks"] += 1
            group.append((mid, topic, due, rolls))
            if len(group) == MAX_ROWS:
                flush()
    flush()
    yield pa.RecordBatch.from_pydict({k: [v] for k, v in counts.items()})


class _explained:
    """Turns what Spark, gRPC or a shard raised into a ``JobError`` of one line."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc is None or isinstance(exc, JobError):
            return
        if isinstance(exc, shards.ExportError | ShardMapError):
            raise JobError(str(exc)) from exc
        if isinstance(exc, ClientError | grpc.RpcError):  # the client's, or an admin stub's
            raise JobError(str(from_rpc(exc))) from exc
        if isinstance(exc, PySparkException | Py4JError):
            raise JobError(_first_line(str(exc))) from exc


def _first_line(text: str) -> str:
    """The line that says why: a worker's delayq error when there is one."""
    found = re.search(r"(ExportError|ValueError|ShardMapError): (.+)", text)
    if found:
        return found.group(2).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "Spark failed"
