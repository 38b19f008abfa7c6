"""Reading a running cluster from Spark (the ``delayq`` data source over each
shard's admin export) and ``delayq-spark export`` to Parquet: every pending
message exactly once, with its id, shard, content, due time and roll count;
nothing cancelled, moved or delivered; in local mode and on a real Spark
standalone cluster (a master and a worker process started from pyspark's own
distribution)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

import delayq
from delayq.ids import MessageId
from delayq_spark import jobs
from tests.spark.standalone import StandaloneSpark
from tests.spark.workload import Workload, populate, wait_rolled
from tests.support.cluster import LocalCluster
from tests.support.servers import ROOT


def check_rows(rows: list[dict[str, object]], w: Workload) -> None:
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a message was read twice"
    assert set(ids) == set(w.pending), (
        f"missing {len(set(w.pending) - set(ids))}, extra {len(set(ids) - set(w.pending))}"
    )
    for r in rows:
        want = w.pending[str(r["id"])]
        mid = MessageId.parse(str(r["id"]))
        assert (r["shard"], r["epoch"], r["position"]) == (mid.shard, mid.epoch, mid.position)
        assert (r["topic"], r["key"], bytes(r["body"])) == (want.topic, want.key, want.body)  # type: ignore[arg-type]
        assert dict(r["headers"] or {}) == want.headers  # type: ignore[call-overload]
        assert r["deliver_at_ms"] == want.deliver_at_ms
    rolled = [r for r in rows if r["id"] in w.far]
    assert rolled and all(int(r["roll_count"]) >= 1 for r in rolled), "far ones rolled"  # type: ignore[call-overload]


def test_the_data_source_reads_every_pending_message_once(
    spark: SparkSession, rolling_cluster: LocalCluster
) -> None:
    with delayq.Client(rolling_cluster.address(1)) as client:
        w = populate(client)
        wait_rolled(rolling_cluster.address(0), w.far - w.gone)
    df = (
        spark.read.format("delayq")
        .option("server", rolling_cluster.address(0))
        .option("partitionBytes", "16384")
        .load()
    )
    assert df.rdd.getNumPartitions() > 4, "several partitions a shard"
    rows = [r.asDict() for r in df.collect()]
    check_rows(rows, w)
    assert {r["shard"] for r in rows} == {0, 1}


def test_export_writes_parquet_by_topic_and_due_day(
    spark: SparkSession, rolling_cluster: LocalCluster, tmp_path: Path
) -> None:
    with delayq.Client(rolling_cluster.address(0)) as client:
        w = populate(client, keyed=300, unkeyed=50)
        wait_rolled(rolling_cluster.address(0), w.far - w.gone)
    out = tmp_path / "pending"
    route = jobs.route_of(rolling_cluster.address(0))
    summary = jobs.export(spark, route, str(out), partition_bytes=8192)
    assert summary["rows"] == len(w.pending) == summary["pending_at_snapshot"]
    assert summary["shards"] == 2 and summary["partitions"] > 2
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    check_rows(table.to_pylist(), w)
    for r in table.to_pylist():
        due = datetime.fromtimestamp(r["deliver_at_ms"] / 1000, UTC).date()
        assert str(r["due_day"]) == due.isoformat()
    assert summary["topics"] == {
        t: sum(1 for e in w.pending.values() if e.topic == t) for t in ("orders", "payments")
    }
    with pytest.raises(jobs.JobError, match="already exists"):
        jobs.export(spark, route, str(out))
    assert jobs.export(spark, route, str(out), overwrite=True)["rows"] == len(w.pending)


def run_cli(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "delayq_spark.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_cli_refuses_an_unreachable_cluster_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    got = run_cli("export", "--server", "127.0.0.1:1", "--to", str(tmp_path / "x"))
    assert got.returncode == 1
    assert got.stderr.startswith("delayq-spark export: no shard map from 127.0.0.1:1: UNAVAILABLE")
    assert time.monotonic() - started < 30, "before any Spark session starts"
    bad = run_cli("export", "--server", "127.0.0.1:1", "--to", "x", "--conf", "novalue")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


def test_export_on_a_standalone_spark_cluster(
    rolling_cluster: LocalCluster, standalone_spark: StandaloneSpark, tmp_path: Path
) -> None:
    with delayq.Client(rolling_cluster.address(0)) as client:
        w = populate(client, keyed=300, unkeyed=50)
        wait_rolled(rolling_cluster.address(0), w.far - w.gone)
    out = tmp_path / "pending"
    got = run_cli(
        "export",
        "--master",
        standalone_spark.master_url,
        "--server",
        rolling_cluster.address(1),
        "--to",
        str(out),
        "--partition-bytes",
        "8192",
    )
    assert got.returncode == 0, got.stderr[-3000:]
    summary = json.loads(got.stdout.strip().splitlines()[-1])
    assert "delayq-export" in standalone_spark.apps(), "it ran on the cluster"
    assert summary["rows"] == len(w.pending)
    check_rows(ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist(), w)
