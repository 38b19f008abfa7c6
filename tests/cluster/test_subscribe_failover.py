"""A subscription follows a shard's master: on real ``delayq serve`` nodes under
the supervisor, SIGKILL the master while a subscriber reads, and the subscriber
still sees every message (its stream is reopened at the new master; what was
handed out and not acked comes again from there: at-least-once)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from delayq.client import Client, ClientError, Outgoing
from tests.cluster.test_supervisor_failover import FAST
from tests.support.cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

COUNT = 120
GIVE_UP_S = 90.0
"""The watchdog cancels the subscription after this (then the test fails saying
what was missing); far longer than a failover takes."""


def test_a_subscriber_sees_every_message_through_a_master_sigkill(tmp_path: Path) -> None:
    args = ("--replication", "sync", "--min-insync", "2", *FAST)
    with LocalCluster(tmp_path / "c", shards=1, replicas=3, args=args) as c:
        c.wait_insync(0, 3)
        with Client(c.address(0)) as client:
            sent = client.schedule_many(
                [
                    Outgoing(topic="t", body=b"%d" % i, delay=1 + i * 0.05, key=str(i))
                    for i in range(COUNT)
                ]
            )  # due over 1..7 s: some before the kill, most after
            assert all(s.ok for s in sent)
            ids = {s.id for s in sent}
            seen: set[str] = set()
            killed = 0
            sub = client.subscribe("t", "g", wait_s=0.2, invisible_s=3)
            watchdog = threading.Timer(GIVE_UP_S, sub.cancel)
            watchdog.start()
            try:
                for batch in sub:
                    seen |= {m.id for m in batch}
                    # mid-failover an ack may fail: those come again after their invisibility
                    with contextlib.suppress(ClientError):
                        client.ack("t", "g", [m.receipt for m in batch])
                    if not killed and len(seen) >= 10:
                        killed = c.kill(0, 0)  # the master, with in-sync replicas alive
                    if ids <= seen:
                        break
            finally:
                watchdog.cancel()
                sub.cancel()
        assert killed, "the master was never killed: too few messages came"
        assert ids <= seen, f"{len(ids - seen)} of {COUNT} never came after the failover"
        rec = c.record(0)
        assert rec["epoch"] >= 2 and rec["master"] != "node-0", "a failover happened"
