"""``delayq cluster up --replicas R`` with real node processes: masters and
replicas, failover by the supervisor, rejoin, restarts.

A short lease and probe interval keep each test to seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

import delayq
from delayq.client import RetryPolicy
from delayq.ids import MessageId
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

FAST = ("--lease", "1500ms", "--probe-interval", "100ms")
RETRY = RetryPolicy(attempts=200, base_s=0.05, max_s=0.3)


def _argv(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _rows(c: LocalCluster) -> dict[tuple[int, str], dict[str, Any]]:
    return {(n["shard"], n["node"]): n for n in c.status()["nodes"]}


def _wait_rows(c: LocalCluster, ok: Any, timeout_s: float = 30) -> dict[tuple[int, str], Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _rows(c)
        if ok(rows):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"status never settled: {rows}\n{c.logs()}")
        time.sleep(0.1)


def _schedule(client: delayq.Client, n: int, tag: str, delay: float = 3600) -> list[str]:
    batch = [  # keyed, so that every shard gets some
        delayq.Outgoing(topic="t", key=f"{tag}{i}", body=f"{tag}{i}".encode(), delay=delay)
        for i in range(n)
    ]
    out = []
    for sent in client.schedule_many(batch):
        assert sent.ok and sent.id is not None, sent.error
        out.append(sent.id)
    return out


def test_each_shard_runs_a_master_and_replicas_that_copy_it_and_join_the_in_sync_set(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "c", shards=2, replicas=3, args=FAST) as c:
        m = c.current_map()
        assert [len(s.replicas) for s in m.shards] == [2, 2] and m.topology_epoch == 1
        assert [s.master for s in m.shards] == [c.node_address(s, 0) for s in range(2)]
        for s in range(2):
            assert c.wait_insync(s, 3)["insync"] == ["node-0", "node-1", "node-2"]
            master_argv = _argv(c.node_pid(s, 0))
            assert _flag(master_argv, "--node-name") == "node-0"
            assert _flag(master_argv, "--follow") is None
            assert _flag(master_argv, "--replication") == "async"
            for k in (1, 2):
                argv = _argv(c.node_pid(s, k))
                assert _flag(argv, "--node-name") == f"node-{k}"
                assert _flag(argv, "--follow") == c.admin_address(s, 0)
        with delayq.Client(c.node_address(1, 1), retry=RETRY) as client:
            ids = _schedule(client, 300, "m")
        rows = _wait_rows(
            c,
            lambda r: all(
                r[(s, f"node-{k}")]["log_end"] == r[(s, "node-0")]["log_end"] > 0
                and r[(s, f"node-{k}")]["lag_bytes"] == 0
                for s in range(2)
                for k in (1, 2)
            ),
        )
        for s in range(2):
            assert rows[(s, "node-0")]["role"] == "master"
            assert rows[(s, "node-0")]["insync"] == ["node-0", "node-1", "node-2"]
            assert rows[(s, "node-0")]["high_water"] > 0
            for k in (1, 2):
                assert (rows[(s, f"node-{k}")]["role"], rows[(s, f"node-{k}")]["epoch"]) == (
                    "replica",
                    1,
                )
        assert {MessageId.parse(i).shard for i in ids} == {0, 1}
        st = c.status()
        assert [r["epoch"] for r in st["shards"]] == [1, 1]
        assert all(r["failovers"] == 0 and r["stuck"] == "" for r in st["shards"])


def test_a_master_stopped_past_its_lease_is_failed_over_and_rejoins_as_a_replica(
    tmp_path: Path,
) -> None:
    """Sync mode, 1 shard x 3: SIGSTOP the master; the supervisor promotes an
    in-sync replica, records it first, rewrites the map; every write acknowledged
    before is on the new master, writes go on there; the old master, resumed,
    neither serves writes as a master nor keeps its place: it is told to follow."""
    args = ("--replication", "sync", *FAST)
    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=args) as c:
        c.wait_insync(0, 3)
        with delayq.Client(c.node_address(0, 1), timeout_s=30, retry=RETRY) as client:
            before = _schedule(client, 100, "b")
            due = _schedule(client, 20, "d", delay=2)
            old = c.node_pid(0, 0)
            stopped_at = time.monotonic()
            os.kill(old, signal.SIGSTOP)
            try:
                rec = c.wait_record(0, lambda r: r["epoch"] >= 2, timeout_s=30)
                took_s = time.monotonic() - stopped_at
                assert rec["master"] in ("node-1", "node-2") and rec["failovers"] == 1
                assert rec["insync"][0] == rec["master"]
                new = c.node_address(0, int(rec["master"][-1]))
                deadline = time.monotonic() + 10
                while c.current_map().shards[0].master != new:
                    assert time.monotonic() < deadline, c.logs()
                    time.sleep(0.05)
                entry = c.current_map().shards[0]
                assert entry.epoch == rec["epoch"] and c.node_address(0, 0) in entry.replicas
                assert c.current_map().topology_epoch == 2
                for i in before:
                    assert client.lookup(i).state == "pending", i
                after = _schedule(client, 50, "a")
                assert {MessageId.parse(i).epoch for i in after} == {rec["epoch"]}
                got = []
                deadline = time.monotonic() + 30
                while len(got) < len(due) and time.monotonic() < deadline:
                    ms = client.receive("t", "g", max_messages=100, wait_s=1)
                    got += [m.id for m in ms if m.id in due]
                    if ms:
                        client.ack("t", "g", [m.receipt for m in ms])
                assert set(due) <= set(got), "the new master delivers what came due"
            finally:
                os.kill(old, signal.SIGCONT)
            # resumed past its lease, the old master acks nothing (it may not know
            # yet that it was replaced: its lease ran out, it stopped on its own)
            stub = pb_grpc.DelayQueueStub(grpc.insecure_channel(c.node_address(0, 0)))
            with pytest.raises(grpc.RpcError) as err:
                stub.Schedule(
                    pb.ScheduleRequest(messages=[pb.NewMessage(topic="t", body=b"x")]), timeout=5
                )
            assert err.value.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.FAILED_PRECONDITION,
            ), err.value
            rows = _wait_rows(
                c,
                lambda r: (
                    r[(0, "node-0")]["role"] == "replica"
                    and r[(0, "node-0")]["epoch"] == rec["epoch"]
                ),
            )
            assert rows[(0, rec["master"])]["role"] == "master"
            c.wait_insync(0, 3)  # the old master caught up and is back in the set
            assert c.node_pid(0, 0) == old, "resumed, not restarted"
        print(f"failover after SIGSTOP took {took_s:.2f}s (lease 1.5s)")


def test_a_dead_master_that_cannot_restart_is_replaced_then_restarts_as_a_replica(
    tmp_path: Path,
) -> None:
    """SIGKILL the master while its data directory is in the way: it crash-loops,
    the supervisor fails over after the lease, and once it can start again it
    starts with ``--follow`` the new master, not as a master."""
    with LocalCluster(tmp_path / "c", shards=1, replicas=2, args=FAST) as c:
        c.wait_insync(0, 2)
        with delayq.Client(c.node_address(0, 1), timeout_s=30, retry=RETRY) as client:
            ids = _schedule(client, 50, "x")
            # async acks on the master's own append: wait until the replica has it all
            _wait_rows(c, lambda r: r[(0, "node-1")]["flushed"] == r[(0, "node-0")]["log_end"])
            data = c.dir / "shard-0" / "node-0"
            moved = data.with_name("moved")
            data.rename(moved)  # (the running node keeps its open files)
            data.write_text("in the way")  # every start now fails at once
            c.kill(0, 0)
            rec = c.wait_record(0, lambda r: r["master"] == "node-1", timeout_s=30)
            assert rec["epoch"] == 2 and rec["insync"] == ["node-1"]
            data.unlink()
            shutil.move(str(moved), str(data))
            deadline = time.monotonic() + 60
            while not c.node_pid(0, 0) or _flag(_argv(c.node_pid(0, 0)), "--follow") is None:
                assert time.monotonic() < deadline, c.logs()
                time.sleep(0.1)
            assert _flag(_argv(c.node_pid(0, 0)), "--follow") == c.admin_address(0, 1)
            c.wait_insync(0, 2)
            for i in ids:
                assert client.lookup(i).state == "pending"
        assert any("promoting node-1" in r.get("msg", "") for r in c.log_records()), c.logs()


def test_a_killed_replica_comes_back_following_the_master_and_catches_up(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=FAST) as c:
        c.wait_insync(0, 3)
        with delayq.Client(c.node_address(0, 0), timeout_s=30, retry=RETRY) as client:
            c.kill(0, 2)
            _schedule(client, 200, "w")  # written while node-2 is down
        rows = _wait_rows(
            c,
            lambda r: (
                r[(0, "node-2")]["log_end"] == r[(0, "node-0")]["log_end"]
                and r[(0, "node-2")]["role"] == "replica"
            ),
        )
        assert rows[(0, "node-0")]["role"] == "master" and rows[(0, "node-0")]["epoch"] == 1
        assert _flag(_argv(c.node_pid(0, 2)), "--follow") == c.admin_address(0, 0)
        assert c.record(0)["epoch"] == 1 and c.record(0)["failovers"] == 0


def test_a_cluster_restarted_after_a_failover_keeps_the_recorded_master(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", shards=1, replicas=2, args=FAST) as c:
        c.wait_insync(0, 2)
        old = c.node_pid(0, 0)
        os.kill(old, signal.SIGSTOP)
        try:
            rec = c.wait_record(0, lambda r: r["master"] == "node-1", timeout_s=30)
        finally:
            os.kill(old, signal.SIGCONT)
        c.wait_insync(0, 2)
        assert c.stop() == 0
    with LocalCluster(
        tmp_path / "c", shards=1, replicas=2, args=FAST, base_port=c.base_port
    ) as again:
        assert again.record(0)["master"] == "node-1" and again.record(0)["epoch"] == rec["epoch"]
        assert again.current_map().shards[0].master == again.node_address(0, 1)
        assert _flag(_argv(again.node_pid(0, 1)), "--follow") is None
        assert _flag(_argv(again.node_pid(0, 0)), "--follow") == again.admin_address(0, 1)
        rows = _wait_rows(again, lambda r: r[(0, "node-0")]["role"] == "replica")
        assert rows[(0, "node-1")]["role"] == "master"
