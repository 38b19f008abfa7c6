"""The jobs ``delayq-spark`` runs, each a function of a SparkSession and the
cluster's address that returns a summary (plain data, printed as JSON).

The shard map is fetched first (``route_of``), before Spark starts.

- ``export``: the pending messages as Parquet, partitioned by ``topic`` and
  ``due_day`` (UTC), from one snapshot per shard taken at the start (ended at the
  end, also on failure).
"""

from __future__ import annotations

import re
from typing import Any

import grpc
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delayq.shardmap import ShardMap, ShardMapError

from . import shards

__all__ = ["JobError", "export", "pending", "route_of"]


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
    except (grpc.RpcError, ShardMapError) as exc:
        why = f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.RpcError) else exc
        raise JobError(f"no shard map from {server}: {why}") from exc


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
        if isinstance(exc, grpc.RpcError):
            raise JobError(f"{exc.code().name}: {exc.details()}") from exc
        if isinstance(exc, PySparkException | Py4JError):
            raise JobError(_first_line(str(exc))) from exc


def _first_line(text: str) -> str:
    """The line that says why: a worker's delayq error when there is one."""
    found = re.search(r"(ExportError|ValueError|ShardMapError): (.+)", text)
    if found:
        return found.group(2).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else "Spark failed"
