"""``delayq-spark compact`` on a real 2-shard cluster whose wheel window is 2 s:
rolled messages due beyond the horizon go into blocks on their own shards (the
export then flags them), a re-run blocks nothing twice, and every message is
delivered once, none early; a cancelled blocked one never. And the command."""

from __future__ import annotations

import json
import time

from pyspark.sql import SparkSession

import delayq
from delayq.ids import MessageId
from delayq_spark import jobs
from tests.spark.test_export import run_cli
from tests.spark.workload import wait_rolled
from tests.support.cluster import LocalCluster
from tests.support.receiving import receive_each_once

FAR_MS, BLOCK_MS = 90_000, 5_000


def beyond_for(first_due_ms: int, block_ms: int) -> int:
    """A ``beyond_ms`` that makes the job take every message due from
    ``first_due_ms`` on: the first whole block it takes is the one that holds it."""
    left = (first_due_ms // block_ms) * block_ms - int(time.time() * 1000) - block_ms
    assert left > 0, f"the messages come due in {left + block_ms} ms: too soon to compact"
    return left


def test_compact_blocks_rolled_messages_on_their_shards(
    spark: SparkSession, rolling_cluster: LocalCluster
) -> None:
    with delayq.Client(rolling_cluster.address(0), timeout_s=10) as client:
        now = int(time.time() * 1000)
        # due 90 s ahead: soon enough to receive them here; --beyond is what is left
        # once they rolled, so the job takes all of them however long that took
        far = [
            delayq.Outgoing(topic="far", body=b"f%d" % i, key=f"k{i}", at=now + FAR_MS + 50 * i)
            for i in range(200)
        ]
        near = [delayq.Outgoing(topic="far", body=b"n%d" % i, at=now + 3_000) for i in range(20)]
        sent = {s.id: s.deliver_at_ms for s in client.schedule_many(far + near) if s.id}
        assert len(sent) == 220
        assert {MessageId.parse(i).shard for i in sent} == {0, 1}
        wait_rolled(rolling_cluster.address(0), [i for i, d in sent.items() if d >= now + FAR_MS])
        route = jobs.route_of(rolling_cluster.address(0))
        beyond = beyond_for(now + FAR_MS, BLOCK_MS)
        summary = jobs.compact(spark, route, beyond_ms=beyond, block_ms=BLOCK_MS, job="t")
        assert summary["blocked"] == 200, summary
        assert summary["error"] == summary["refused"] == 0
        assert summary["blocks"] >= 4 and summary["shards"] == 2
        flagged = spark.read.format("delayq").option("server", rolling_cluster.address(1)).load()
        assert flagged.where("blocked").count() == 200
        again = jobs.compact(spark, route, beyond_ms=beyond, block_ms=BLOCK_MS, job="t")
        assert again["blocked"] == again["calls"] == 0, "a re-run skips what is blocked"
        gone = next(i for i, d in sent.items() if d >= now + FAR_MS)
        assert client.cancel(gone) == ["cancelled"]
        got = receive_each_once(client, "far", "g", sent, 219, timeout_s=120)
        assert set(got) == set(sent) - {gone}


def test_the_cli_compacts(rolling_cluster: LocalCluster) -> None:
    with delayq.Client(rolling_cluster.address(0), timeout_s=10) as client:
        now = int(time.time() * 1000)
        out = client.schedule_many(
            [
                delayq.Outgoing(topic="far", body=b"c", key=f"k{i}", at=now + 3_600_000)
                for i in range(30)
            ]
        )
        assert all(s.ok and s.id for s in out)
        wait_rolled(rolling_cluster.address(0), [s.id for s in out if s.id])
    args = ["compact", "--server", rolling_cluster.address(1), "--beyond", "20s", "--block", "10s"]
    got = run_cli(*args)
    assert got.returncode == 0, got.stderr[-2000:]
    summary = json.loads(got.stdout)
    assert (summary["job"], summary["blocked"], summary["shards"]) == ("compact", 30, 2)
    bad = run_cli("compact", "--server", rolling_cluster.address(1), "--beyond", "soon")
    assert bad.returncode == 2 and "bad duration" in bad.stderr
