"""A failover during a rebalance does not fail it: ``delayq cluster scale --shards
3`` on a 2-shard cluster (2 nodes a shard, sync) with pending messages, a
producer, a canceller and a consumer running, and shard 0's master lost once the
job has begun moving (silent until the shard failed over, then SIGKILLed),
completes in one run (exit 0): the failover raises the map's epoch under the job,
which carries on with the map that differs only in masters (or, failing that,
the driver runs it again at once). Then nothing acknowledged is lost, nothing
comes early, no cancel is broken, and every pending message is pending exactly
once, on its key's owner (and looks up by its old id)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.queuecheck import QueueLoad, check

import delayq
from delayq import shardmap
from tests.spark.test_rebalance import NODE_ENV, job_processes, shard_stats
from tests.support.cluster import LocalCluster, running_cluster_cli
from tests.support.sizes import size

MESSAGES = size("DELAYQ_REBALANCE_FAILOVER_MESSAGES", ci=4_000, long=40_000)
ARGS = ("--replication", "sync", "--lease", "1500ms", "--probe-interval", "100ms")


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    for key, value in NODE_ENV.items():
        monkeypatch.setenv(key, value)
    with LocalCluster(tmp_path / "cluster", shards=2, replicas=2, args=ARGS) as c:
        c.wait_insync(0, 2)
        c.wait_insync(1, 2)
        yield c


def populate(client: delayq.Client, n: int) -> dict[str, str]:
    """``n`` keyed messages due in an hour or more: id -> key."""
    at = int(time.time() * 1000) + 3_600_000
    out: dict[str, str] = {}
    for start in range(0, n, 2_000):
        batch = [
            delayq.Outgoing(topic="p", body=b"p-%d" % i, key=f"k{i}", at=at + i)
            for i in range(start, min(n, start + 2_000))
        ]
        for m, sent in zip(batch, client.schedule_many(batch), strict=True):
            assert sent.ok and sent.id is not None, sent.error
            out[sent.id] = m.key
    return out


def wait_for_moves(
    cluster: LocalCluster, scale: subprocess.Popen[str], timeout_s: float = 600
) -> None:
    """Until the job runs and the new shard holds moved messages (the scale command
    ending first fails at once, with what it said)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if scale.poll() is not None:
            out, err = scale.communicate()
            raise AssertionError(f"cluster scale ended first ({scale.returncode}): {out}{err}")
        m = cluster.current_map()
        if m.count == 3 and job_processes(cluster):
            answer = shard_stats(m.shards[2].master)
            if answer is not None and sum(t["pending"] for t in answer["topics"]) > 0:  # type: ignore[attr-defined]
                return
        time.sleep(0.1)
    raise AssertionError(f"the job moved nothing within {timeout_s}s\n{cluster.logs()}")


def lost(cluster: LocalCluster, pid: int, timeout_s: float = 120) -> None:
    """Shard 0's master ``pid`` lost: silent (SIGSTOP) until the shard has failed
    over, then SIGKILLed (it comes back as a replica of the new master). A SIGKILL
    alone may not fail the shard over: when the keeper sees no live in-sync peer at
    that moment (a probe missed on a loaded machine), it restarts the dead master
    in place, as it should, and the failover this test is about never happens."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + timeout_s
        while cluster.record(0)["failovers"] < 1:
            assert time.monotonic() < deadline, f"no failover within {timeout_s}s"
            time.sleep(0.1)
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.long
@pytest.mark.timeout(1200)
def test_a_master_killed_mid_rebalance_does_not_fail_the_scale(cluster: LocalCluster) -> None:
    address = cluster.address(1)
    with delayq.Client(address, timeout_s=30) as client:
        pending = populate(client, MESSAGES)
    load = QueueLoad(address, topic="live", keys=50, delay_s=(0.5, 4.0)).start()
    try:
        with running_cluster_cli("scale", "--dir", str(cluster.dir), "--shards", "3") as scale:
            wait_for_moves(cluster, scale)
            master = int(cluster.record(0)["master"].removeprefix("node-"))
            epoch = cluster.current_map().topology_epoch
            lost(cluster, cluster.node_pid(0, master))
            out, err = scale.communicate(timeout=900)
        assert scale.returncode == 0, (out, err, cluster.logs())
        assert "done: 3 shard(s)" in out, out
        m = cluster.current_map()
        assert (m.count, m.owners) == (3, 3)
        assert cluster.record(0)["failovers"] >= 1 and m.topology_epoch > epoch + 1
        time.sleep(2)
        load.drain()
    finally:
        load.stop()
    findings = check(load.history)
    assert findings["lost"] == 0, findings
    assert findings["early"] == 0 and findings["cancel_broken"] == 0, findings
    assert findings["two_shards"] == 0, findings
    with delayq.Client(address, timeout_s=30) as client:
        for mid in list(pending)[:: max(1, len(pending) // 400)]:
            assert client.lookup(mid).state == "pending", mid  # by its old id
        stats = client.stats()
    want = [0, 0, 0]
    for key in pending.values():
        want[shardmap.shard_of_key(key, 3)] += 1
    got = [0, 0, 0]
    for s in stats.shards:
        got[s.node.shard] = sum(t.pending for t in s.topics if t.topic == "p")
    assert got == want, "each pending once, on its key's owner"
