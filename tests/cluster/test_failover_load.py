"""Failover under load, counted the way Jepsen's total-queue checker counts
(``bench/queuecheck.py``): 1 shard x 3 real nodes, a producer, a canceller and a
consumer running through the client, and the master SIGKILLed again and again,
each time waiting for the new master and for the dead node to rejoin the in-sync
set. Every acknowledged schedule must be received at least once, none early,
and no acknowledged cancel broken; duplicates and recovered writes are counted
and printed. The kills: 6, 20 with ``--long``, or ``DELAYQ_FAILOVER_KILLS``."""

from __future__ import annotations

import dataclasses
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from bench.queuecheck import QueueLoad, check

from delayq.ids import MessageId
from tests.support.cluster import LocalCluster
from tests.support.sizes import size

pytestmark = pytest.mark.timeout(900)

KILLS = size("DELAYQ_FAILOVER_KILLS", ci=6, long=20)
FAST = ("--lease", "1s", "--probe-interval", "100ms")


def _master(c: LocalCluster) -> int:
    return int(c.record(0)["master"].removeprefix("node-"))


def _explain(c: LocalCluster, found: dict[str, Any]) -> str:
    """A failure's evidence, taken while the cluster still runs (empty when nothing
    failed): each bad id decoded (epoch, position) and looked up on every node, each
    node's role, epochs and positions, the record, and the supervisor's story."""
    if not (found["lost"] or found["early"] or found["cancel_broken"]):
        return ""
    bad = sorted({*found["lost_ids"], *found["cancel_broken_ids"]})
    doc = c.explain(0, bad)
    doc["decoded"] = {i: dataclasses.asdict(MessageId.parse(i)) for i in bad}
    story = ("promoting", "joined", "left", "exited", "fenc", "lease", "stuck")
    doc["supervisor"] = [
        f"{r.get('ts')}: {r.get('msg')}"
        for r in c.log_records()
        if any(word in str(r.get("msg", "")) for word in story)
    ]
    text = json.dumps(doc, indent=1, default=str)
    print(text)
    return text


@pytest.mark.long
def test_sync_failover_under_load_loses_no_acknowledged_message(tmp_path: Path) -> None:
    args = ("--replication", "sync", *FAST)
    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=args) as c:
        c.wait_insync(0, 3)
        load = QueueLoad(c.node_address(0, 1)).start()
        took: list[float] = []
        rejoin: list[float] = []
        try:
            for _ in range(KILLS):
                time.sleep(0.5)  # load runs on the settled shard for a while
                epoch = c.record(0)["epoch"]
                dead = _master(c)
                killed_at = time.monotonic()
                c.kill(0, dead, signal.SIGKILL)
                rec = c.wait_record(0, lambda r, e=epoch: r["epoch"] > e, timeout_s=30)
                took.append(time.monotonic() - killed_at)
                assert rec["master"] != f"node-{dead}"
                back_at = time.monotonic()
                c.wait_insync(0, 3, timeout_s=60)  # the dead one back, caught up, in
                rejoin.append(time.monotonic() - back_at)
            load.drain(quiet_s=2)
        finally:
            load.stop()
        found = check(load.history)
        why = _explain(c, found)
        times = {
            "failover_s": [round(t, 2) for t in took],
            "rejoin_s": [round(t, 2) for t in rejoin],
        }
        print(json.dumps({"kills": KILLS, **times, **found}))
        assert c.record(0)["failovers"] >= KILLS
    assert found["acked"] > 500 and found["cancelled"] > 10, found
    assert (found["lost"], found["early"], found["cancel_broken"]) == (0, 0, 0), (found, why)


def test_two_failovers_in_quick_succession_lose_nothing(tmp_path: Path) -> None:
    """The new master killed as soon as it counts a second in-sync member (before
    the first dead node is back): the shard fails over again, to the one node
    that holds everything acknowledged."""
    args = ("--replication", "sync", *FAST)
    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=args) as c:
        c.wait_insync(0, 3)
        load = QueueLoad(c.node_address(0, 1)).start()
        try:
            time.sleep(1)
            first = _master(c)
            c.kill(0, first, signal.SIGKILL)
            rec = c.wait_record(0, lambda r: r["epoch"] == 2 and len(r["insync"]) >= 2)
            second = _master(c)
            c.kill(0, second, signal.SIGKILL)
            rec = c.wait_record(0, lambda r: r["epoch"] == 3, timeout_s=30)
            assert rec["master"] not in (f"node-{first}", f"node-{second}")
            c.wait_insync(0, 3, timeout_s=60)
            time.sleep(1)
            load.drain(quiet_s=2)
        finally:
            load.stop()
        found = check(load.history)
        print(json.dumps(found))
        why = _explain(c, found)
    assert found["acked"] > 100, found
    assert (found["lost"], found["early"], found["cancel_broken"]) == (0, 0, 0), (found, why)
