"""Keys of messages in compaction blocks, on a real 2-shard cluster whose wheel
window is 2 s (``rolling_cluster``) compacted by ``delayq-spark compact``: a
blocked message is pending, so it holds its key.

- ``lookup_key`` finds it; ``reject`` and ``keep`` answer its id; ``replace`` ends
  it (it is never delivered) and stores the new one;
- ``cancel_key`` cancels it (its dedup window then still holds the key);
  ``reschedule_key`` moves every blocked message of a key;
- after a SIGKILL of each shard's node (the supervisor restarts it; the key
  index is built again, blocks included) the same holds."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import delayq
from tests.spark.test_export import run_cli
from tests.spark.workload import exported, wait_rolled
from tests.support.cluster import LocalCluster
from tests.support.keyed import schedule_keyed

TOPIC = "trials"
HOUR_MS = 3_600_000
ONCE, SHARED = 40, 10
"""Keys of one message (``reject``, a day's window) and of two (no ``if_exists``)."""


def held(client: delayq.Client, key: str) -> list[str]:
    return [m.id for m in client.lookup_key(TOPIC, key)]


def test_blocked_messages_hold_their_keys(rolling_cluster: LocalCluster) -> None:
    address = rolling_cluster.address(0)
    with delayq.Client(address, timeout_s=30) as client:
        due = int(time.time() * 1000) + HOUR_MS
        window = timedelta(days=1)
        once = {
            f"once-{i}": schedule_keyed(
                client, TOPIC, b"o", f"once-{i}", "reject", delay=3_600, dedup_window=window
            ).id
            for i in range(ONCE)
        }
        shared = client.schedule_many(
            [
                delayq.Outgoing(topic=TOPIC, body=b"s", key=f"shared-{i}", at=due + n)
                for i in range(SHARED)
                for n in range(2)
            ]
        )
        assert all(s.ok for s in shared)
        ids = [*once.values(), *(str(s.id) for s in shared)]
        wait_rolled(address, ids)
    got = run_cli("compact", "--server", address, "--beyond", "20s", "--block", "10s")
    assert got.returncode == 0, got.stderr[-2000:]
    assert json.loads(got.stdout)["blocked"] == len(ids)
    assert {str(r["id"]) for r in exported(address) if r["blocked"]} == set(ids)

    with delayq.Client(address, timeout_s=30) as client:
        for k, mid in once.items():
            assert held(client, k) == [mid]
        for k in list(once)[:10]:
            retry = schedule_keyed(client, TOPIC, b"again", k, "reject")
            assert (retry.outcome, retry.id) == ("exists", once[k])
            kept = schedule_keyed(client, TOPIC, b"again", k, "keep")
            assert (kept.outcome, kept.id) == ("kept", once[k])
        for k in list(once)[10:20]:
            assert client.cancel_key(TOPIC, k) == 1
            retry = schedule_keyed(client, TOPIC, b"again", k, "reject")
            assert (retry.outcome, retry.id) == ("exists", once[k]), "held by its window"
        for k in list(once)[20:30]:
            new = schedule_keyed(client, TOPIC, b"new", k, "replace")
            assert new.outcome == "replaced" and held(client, k) == [new.id]
            assert client.lookup(once[k]).state in ("rescheduled", "cancelled")
            once[k] = new.id
        for i in range(SHARED // 2):
            moved = client.reschedule_key(TOPIC, f"shared-{i}", delay=7_200)
            assert len(moved) == 2 and held(client, f"shared-{i}") == [s.id for s in moved]

    for shard in (0, 1):
        rolling_cluster.kill(shard)
    rolling_cluster.wait_serving()
    with delayq.Client(address, timeout_s=30) as client:
        for k, mid in list(once.items())[:10] + list(once.items())[20:]:
            assert held(client, k) == [mid], k
        for k in list(once)[:10]:
            retry = schedule_keyed(client, TOPIC, b"again", k, "reject")
            assert (retry.outcome, retry.id) == ("exists", once[k])
        for k in list(once)[10:20]:
            retry = schedule_keyed(client, TOPIC, b"again", k, "reject")
            assert (retry.outcome, retry.id) == ("exists", once[k]), "held by its window"
        for i in range(SHARED // 2, SHARED):
            assert len(held(client, f"shared-{i}")) == 2
            assert client.cancel_key(TOPIC, f"shared-{i}") == 2
