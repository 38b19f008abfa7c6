"""The official RocketMQ 5 Java client against a 3-shard replicated ``delayq cluster
up`` (3 nodes a shard, sync replication: a send is acknowledged once two nodes have
fsynced it) while a shard's master is SIGKILLed mid-run.

A producer keeps sending DELAY messages (due a few seconds ahead) through one node's
RocketMQ port and a SimpleConsumer receives and acks throughout; shard 1's master is
killed, the supervisor fails it over, and the client finds the new master. Then:
every acknowledged send is received (by the client's message id, with its body),
none before its delivery timestamp, and sends land on shard 1's queue again. How
long the client took to send to shard 1 again is printed, not asserted.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from delayq.ids import MessageId
from delayq.rocketmq.handles import recalled
from tests.rocketmq.javaclient import DriverFailed, Drivers, Event, of, sent_by_id
from tests.support.cluster import LocalCluster

pytestmark = pytest.mark.timeout(300)

TOPIC = "orders"
GROUP = "billing"
DELAY_MS = 3000
KILLED = 1
"""The shard whose master is killed; the client's access point is shard 0's master."""
FAST = ("--replication", "sync", "--lease", "1500ms", "--probe-interval", "100ms")
"""A short lease keeps the failover to seconds; 1.5 s, not 1 s, so that masters of a
loaded machine (two cores) seldom lose theirs and refuse sends unasked."""
MOVE_S = 90
"""How long the client may take to send to the killed shard again: a bound for a
clear failure, not a target. The Java client queries its route 10 s after it starts,
then 30 s after each query; nothing else makes it (``docs/rocketmq.md``)."""


def delayq_id(sent: Event) -> str:
    """delayq's id of an acknowledged send (its recall handle names it)."""
    return recalled(sent["recall_handle"], TOPIC).id


def shard_of(sent: Event) -> int:
    """The shard that acknowledged a send."""
    return MessageId.parse(delayq_id(sent)).shard


def test_a_master_sigkilled_mid_run_loses_no_acknowledged_send(
    tmp_path: Path, drivers_for: Callable[[str], Drivers]
) -> None:
    began = time.monotonic()
    with LocalCluster(tmp_path / "c", shards=3, replicas=3, args=FAST) as c:
        for s in range(3):
            c.wait_insync(s, 3)
        up_s = time.monotonic() - began
        drivers = drivers_for(c.current_map().shards[0].rocketmq)
        stop_consuming, stop_producing = tmp_path / "stop-consuming", tmp_path / "stop-producing"
        consumer = drivers.start(  # (both JVMs start at once: two cores)
            *("simple-consume", TOPIC, "--group", GROUP, "--count", "0", "--keep-going"),
            *("--await-ms", "2000", "--stop-file", str(stop_consuming)),
            deadline_s=240,
        )
        producer = drivers.start(
            *("keep-producing", TOPIC, "--delay-ms", str(DELAY_MS), "--for-ms", "180000"),
            *("--in-flight", "2", "--interval-ms", "50", "--stop-file", str(stop_producing)),
            deadline_s=200,
        )

        def on_shard(shard: int, after_ms: float) -> Callable[[list[Event]], Event | None]:
            def first(events: list[Event]) -> Event | None:
                return next(
                    (
                        e
                        for e in of(events, "sent")
                        if e["sent_ms"] >= after_ms and shard_of(e) == shard
                    ),
                    None,
                )

            return first

        producer.wait_until(on_shard(KILLED, 0), f"no send acknowledged by shard {KILLED}")
        # a client starting while a master is down fails to start (its start waits for
        # every broker's Settings, 3 quick attempts): kill only once both have started
        consumer.wait_for("started")
        epoch = c.record(KILLED)["epoch"]
        dead = int(c.record(KILLED)["master"].removeprefix("node-"))
        killed_ms = time.time() * 1000
        c.kill(KILLED, dead, signal.SIGKILL)
        rec = c.wait_record(KILLED, lambda r: r["epoch"] > epoch)
        failed_over_ms = time.time() * 1000
        assert rec["master"] != f"node-{dead}", rec
        back = producer.wait_until(
            on_shard(KILLED, failed_over_ms),
            f"no send acknowledged by shard {KILLED} since its failover",
            MOVE_S,
        )
        stop_producing.touch()
        produced = producer.result()
        sends = sent_by_id(produced)

        def all_received(events: list[Event]) -> bool | None:
            got = {e["message_id"] for e in of(events, "received")}
            return True if got >= sends.keys() else None

        with contextlib.suppress(DriverFailed):  # (what is missing is told below)
            consumer.wait_until(all_received, "not every acknowledged send received", 60)
        stop_consuming.touch()
        consumed = consumer.result()
        ran_s = time.monotonic() - began
        missing = sends.keys() - {e["message_id"] for e in of(consumed, "received")}
        why = {  # while the cluster runs: each missing send looked up on its shard's nodes
            s: c.explain(s, [delayq_id(sends[m]) for m in missing if shard_of(sends[m]) == s])
            for s in {shard_of(sends[m]) for m in missing}
        }

    received = of(consumed, "received")
    by_id: dict[str, list[Event]] = {}
    for r in received:
        by_id.setdefault(r["message_id"], []).append(r)
    early = [
        (r["message_id"], sends[r["message_id"]]["due_ms"] - r["ms"])
        for r in received
        if r["message_id"] in sends and r["ms"] < sends[r["message_id"]]["due_ms"]
    ]
    summary = {
        "acknowledged": len(sends),
        "send_failed": len(of(produced, "send_failed")),
        "received": len(received),
        "duplicates": sum(len(v) - 1 for v in by_id.values()),
        "unacknowledged_received": len(by_id.keys() - sends.keys()),
        "receive_failed": len(of(consumed, "receive_failed")),
        "ack_failed": len(of(consumed, "ack_failed")),
        "failover_s": round((failed_over_ms - killed_ms) / 1000, 2),
        "back_on_shard_s": round((back["ms"] - killed_ms) / 1000, 2),
        "cluster_up_s": round(up_s, 1),
        "ran_s": round(ran_s, 1),
    }
    print(json.dumps(summary))
    assert not missing, f"acknowledged sends never received: {json.dumps(why, default=str)}"
    assert not early, f"received before due (id, ms early): {early}"
    for mid, s in sends.items():
        assert {r["body"] for r in by_id[mid]} == {s["body"]}
        assert {r["delivery_ms"] for r in by_id[mid]} == {s["due_ms"]}
    assert {shard_of(s) for s in sends.values()} == {0, 1, 2}
