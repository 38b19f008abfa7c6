"""The supervisor of a replicated cluster end to end, on real ``delayq serve``
nodes: flags, the in-sync set growing, failover of a stopped master with the
map rewritten, the old master told to follow, a restart as a replica, a restart
of the whole cluster keeping the recorded master, and a shard that cannot fail
over safely stuck and saying why."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import LocalCluster, cluster_cli

pytestmark = pytest.mark.timeout(120)

LEASE_S, PROBE_S = 2.0, 0.1
FAST = ("--lease", f"{LEASE_S:g}s", "--probe-interval", f"{PROBE_S * 1000:g}ms")
"""Short enough for quick failovers, long enough that a busy machine (other
suites beside this one) never lets a healthy master's lease lapse."""


def _argv(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _rows(c: LocalCluster) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in c.status()["nodes"] if n["shard"] == 0}


def _wait(what: Any, timeout_s: float = 20) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := what()):
        assert time.monotonic() < deadline, "never"
        time.sleep(0.05)
    return got


def test_the_supervisor_fails_a_stopped_master_over_and_the_map_follows(tmp_path: Path) -> None:
    args = ("--replication", "sync", "--min-insync", "2", *FAST)
    cluster = LocalCluster(tmp_path / "c", shards=2, replicas=3, args=args)
    with cluster as c:
        assert c.lines[-1].endswith("2 shard(s), 3 node(s) each, map " + str(c.dir / "shards.json"))
        for s in range(2):
            assert c.wait_insync(s, 3)["insync"] == ["node-0", "node-1", "node-2"]
        argv = _argv(c.node_pid(0, 2))
        assert (_flag(argv, "--node-name"), _flag(argv, "--follow")) == (
            "node-2",
            c.admin_address(0, 0),
        )
        assert (_flag(argv, "--replication"), _flag(argv, "--min-insync")) == ("sync", "2")
        assert _flag(_argv(c.node_pid(0, 0)), "--follow") is None
        rows = _rows(c)
        assert rows["node-0"]["role"] == "master" and rows["node-0"]["lease_valid"]
        assert rows["node-0"]["insync"] == ["node-0", "node-1", "node-2"]
        assert {rows[n]["role"] for n in ("node-1", "node-2")} == {"replica"}

        old = c.node_pid(0, 0)
        began = time.monotonic()
        os.kill(old, signal.SIGSTOP)
        try:
            rec = c.wait_record(0, lambda r: r["epoch"] == 2, timeout_s=20)
            took = time.monotonic() - began
            new = int(rec["master"][-1])
            assert new in (1, 2) and rec["insync"] == [rec["master"]] and rec["failovers"] == 1
            m = _wait(lambda: (m := c.current_map()).shards[0].epoch == 2 and m)
            assert m.topology_epoch == 2 and m.shards[0].master == c.node_address(0, new)
            assert set(m.shards[0].replicas) == {c.node_address(0, k) for k in range(3) if k != new}
            assert m.shards[1] == c.map.shards[1]  # type: ignore[union-attr]
            assert c.record(1)["epoch"] == 1, "the other shard is untouched"
        finally:
            os.kill(old, signal.SIGCONT)
        # the lease runs from the last probe answered before the stop
        assert took > LEASE_S - PROBE_S, f"promoted {took:.2f} s after the stop: within the lease"
        # the resumed old master is told to follow the new one, then rejoins the set
        _wait(lambda: _rows(c)["node-0"]["role"] == "replica")
        rows = _rows(c)
        assert rows["node-0"]["epoch"] == 2 and rows[rec["master"]]["role"] == "master"
        assert c.wait_insync(0, 3)["epoch"] == 2
        assert c.node_pid(0, 0) == old
        msgs = [r.get("msg", "") for r in c.log_records()]
        assert any(f"promoting {rec['master']} to master at epoch 2" in x for x in msgs)
        assert any("telling node-0 to follow" in x for x in msgs)

        # node-0 killed now restarts as a replica of the new master
        c.kill(0, 0)
        pid = _wait(lambda: c.node_pid(0, 0))
        assert _flag(_argv(pid), "--follow") == c.admin_address(0, new)
        # the master killed, with in-sync peers alive, is failed over (not restarted
        # as the master) and comes back as a replica of its successor
        c.wait_insync(0, 3)
        dead = new
        c.kill(0, dead)
        rec = c.wait_record(0, lambda r: r["epoch"] == 3, timeout_s=30)
        assert rec["master"] != f"node-{dead}"
        new = int(rec["master"][-1])
        pid = _wait(lambda: c.node_pid(0, dead))
        assert _flag(_argv(pid), "--follow") == c.admin_address(0, new)
        st = c.status()
        assert [r["epoch"] for r in st["shards"]] == [3, 1]
        assert c.stop() == 0
    with LocalCluster(
        tmp_path / "c", shards=2, replicas=3, args=args,
        base_port=c.base_port,
    ) as again:  # fmt: skip
        assert again.record(0)["master"] == rec["master"] and again.record(0)["epoch"] == 3
        assert again.current_map().shards[0].master == again.node_address(0, new)
        assert again.current_map().topology_epoch == 3
        assert _flag(_argv(again.node_pid(0, new)), "--follow") is None
        for k in {0, 1, 2} - {new}:
            assert _flag(_argv(again.node_pid(0, k)), "--follow") == again.admin_address(0, new)
        again.wait_insync(0, 3)
        again.wait_insync(1, 3)
        records = again.log_records()
        starts = [i for i, r in enumerate(records) if r["msg"].startswith("starting ")]
        left = [r["msg"] for r in records[starts[-1] :] if "left the in-sync" in r["msg"]]
        assert not left, f"nobody leaves for being slow to connect at a start\n{again.logs(60)}"


def test_a_shard_whose_only_in_sync_member_is_gone_is_stuck_and_says_why(tmp_path: Path) -> None:
    """Async, 1 x 2: the replica, stopped past the lease, leaves the in-sync set;
    then the master stopped too cannot be replaced (the replica may lack what
    the master delivered since): stuck, recorded, and shown by status, until the
    master answers again."""
    cluster = LocalCluster(tmp_path / "c", shards=1, replicas=2, args=FAST)
    with cluster as c:
        c.wait_insync(0, 2)
        replica, master = c.node_pid(0, 1), c.node_pid(0, 0)
        os.kill(replica, signal.SIGSTOP)
        try:
            rec = c.wait_record(0, lambda r: r["insync"] == ["node-0"], timeout_s=20)
            assert rec["epoch"] == 1
            os.kill(master, signal.SIGSTOP)
            rec = c.wait_record(0, lambda r: r["stuck"] != "", timeout_s=20)
            assert rec["stuck"].startswith("master node-0 has not answered for ")
            assert rec["stuck"].endswith(
                "the in-sync set ['node-0'] has no member but the old master; "
                "an unclean election is never automatic"
            )
            assert rec["epoch"] == 1 and rec["master"] == "node-0"
            text = cluster_cli("status", "--dir", str(c.dir), "--timeout", "300ms").stdout
            assert "stuck: master node-0 has not answered" in text, text
            os.kill(master, signal.SIGCONT)
            c.wait_record(0, lambda r: r["stuck"] == "", timeout_s=20)
        finally:
            os.kill(master, signal.SIGCONT)
            os.kill(replica, signal.SIGCONT)
        assert c.wait_insync(0, 2)["epoch"] == 1
        errors = [r for r in c.log_records() if r.get("level") == "error"]
        assert len(errors) == 1 and "stuck" in errors[0]["msg"], errors
