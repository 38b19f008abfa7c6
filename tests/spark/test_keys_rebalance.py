"""Keys through a rebalance, on real processes and real Spark: a 2-shard
``delayq cluster`` scaled to 3 (``delayq cluster scale``: the Spark job moves the
pending messages whose key the 3-shard map gives to another shard). Then, through
a client on the new map:

- every key finds its pending messages on the key's new shard (``lookup_key``),
  as many as before and the same bodies (a moved key's in the order they were
  imported): none lost, none twice (an export of every shard too); a key that
  stayed keeps its ids, a key that moved has new ids on its new shard;
- a key cancelled before the rebalance is still NOT_FOUND;
- a ``reject`` retry of a moved key answers the moved message's (new) id, and
  ``cancel_key`` cancels exactly the key's messages there;
- a moved message keeps its dedup window: cancelled on its new shard, its key is
  still held (``reject`` names it).

And with the job SIGKILLed midway (moved messages released on their old shard and
pending on the new one, the map not switched), keys stay once per key: the old
shard still holds a handed-over message's key (a ``reject`` retry names its old
id; by key it is found, cancelled and rescheduled, passed on to the new shard),
and after the job runs again each key has one message (a cancelled one none, a
rescheduled one each of its messages once).

Keys: ``DELAYQ_KEY_REBALANCE_KEYS`` (400; 20,000 with ``--long``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import delayq
from delayq import shardmap
from delayq.client import NotFound
from delayq.ids import MessageId
from delayq_spark.shards import ExportError
from tests.spark.test_rebalance import kill_the_job_once_it_moves, scale_to_3
from tests.spark.workload import exported
from tests.support.cluster import LocalCluster, cluster_cli, running_cluster_cli
from tests.support.keyed import schedule_keyed
from tests.support.sizes import size

pytestmark = [pytest.mark.timeout(900), pytest.mark.long]

KEYS = size("DELAYQ_KEY_REBALANCE_KEYS", ci=400, long=20_000)
ONCE = 50
"""Keys scheduled once each under ``reject`` with a dedup window."""
TOPIC = "orders"
DAY_S = 86_400


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("DELAYQ_SPARK_MASTER", "local[2]")  # the rebalance job's
    # partitions of 4 KiB (the least): the job's moves spread over many tasks, so the
    # killed-job test's kill lands before its last move (one partition a shard moved
    # them all between two looks of the test, and the job then succeeded)
    monkeypatch.setenv("DELAYQ_SPARK_PARTITION_BYTES", "4096")
    with LocalCluster(tmp_path / "cluster", shards=2) as c:
        yield c


def shard_of(message_id: str) -> int:
    return MessageId.parse(message_id).shard


def keyed_bodies(client: delayq.Client, key: str) -> list[tuple[str, bytes]]:
    """(id, body) of each pending message of ``key``, oldest first; [] when none."""
    try:
        return [(m.id, m.body) for m in client.lookup_key(TOPIC, key)]
    except NotFound:
        return []


def on_new_shard(cluster: LocalCluster) -> dict[str, str]:
    """Key -> id of the topic's messages pending on shard 2."""
    rows = exported(cluster.address(0))
    return {str(r["key"]): str(r["id"]) for r in rows if r["shard"] == 2 and r["topic"] == TOPIC}


def once_of(keys: dict[str, str]) -> list[str]:
    return sorted(k for k in keys if k.startswith("once-"))


def once_moved(cluster: LocalCluster) -> bool:
    """Whether a key with a window is on shard 2 (False while shard 2 starts)."""
    try:
        return bool(once_of(on_new_shard(cluster)))
    except ExportError:
        return False


def populate(client: delayq.Client) -> dict[str, list[tuple[str, bytes]]]:
    """Keys ``c-0``.. of 1..3 messages each, ``once-0``.. of one (``reject``, a day's
    dedup window), ``gone-0``.. cancelled by key; what each key holds. The ``once``
    keys first: in the first partitions of their shard's log, the first the job moves."""
    window = timedelta(days=1)
    for i in range(ONCE):
        key = f"once-{i}"
        sent = schedule_keyed(client, TOPIC, key.encode(), key, "reject", dedup_window=window)
        assert sent.outcome == "new", sent
    out = [
        delayq.Outgoing(topic=TOPIC, body=b"c-%d/%d" % (i, n), key=f"c-{i}", delay=DAY_S + n)
        for i in range(KEYS)
        for n in range(i % 3 + 1)
    ]
    out += [
        delayq.Outgoing(topic=TOPIC, body=b"gone-%d" % i, key=f"gone-{i}", delay=DAY_S)
        for i in range(ONCE)
    ]
    for start in range(0, len(out), 2_000):
        part = out[start : start + 2_000]
        assert all(s.ok for s in client.schedule_many(part))
    gone = [f"gone-{i}" for i in range(ONCE)]
    assert client.cancel_keys(TOPIC, gone) == [1] * ONCE
    keys = [f"c-{i}" for i in range(KEYS)] + [f"once-{i}" for i in range(ONCE)]
    return {k: keyed_bodies(client, k) for k in keys}


def test_keys_are_found_on_their_new_shard_after_a_rebalance_from_2_to_3(
    cluster: LocalCluster,
) -> None:
    with delayq.Client(cluster.address(0), timeout_s=30) as client:
        before = populate(client)
    assert all(before.values()), "every key holds its messages"
    up = cluster_cli("scale", "--dir", str(cluster.dir), "--shards", "3", timeout_s=900)
    assert up.returncode == 0, (up.stdout, up.stderr, cluster.logs())
    m = cluster.current_map()
    assert (m.count, m.owners) == (3, 3)
    moved = {k for k in before if shardmap.shard_of_key(k, 3) != shardmap.shard_of_key(k, 2)}
    assert moved and len(moved) < len(before), "some keys move, some stay"

    with delayq.Client(m.shards[0].master, timeout_s=30) as client:
        after = {k: keyed_bodies(client, k) for k in before}
        for k, held in after.items():
            assert sorted(b for _, b in held) == sorted(b for _, b in before[k]), k
            assert {shard_of(i) for i, _ in held} == {shardmap.shard_of_key(k, 3)}, k
            if k in moved:
                assert not {i for i, _ in held} & {i for i, _ in before[k]}, f"{k}: new ids"
            else:
                assert held == before[k], f"{k} stayed: its ids"
        for i in range(ONCE):
            assert keyed_bodies(client, f"gone-{i}") == []

        rows = [r for r in exported(m.shards[0].master) if r["topic"] == TOPIC]
        count = Counter(bytes(r["body"]) for r in rows)  # type: ignore[arg-type]
        assert count == Counter(b for held in before.values() for _, b in held), "none lost"
        assert max(count.values()) == 1, "none twice"

        once_moved = sorted(k for k in moved if k.startswith("once-"))
        assert once_moved, "some keys with a window moved"
        for k in once_moved:
            [(mid, _)] = after[k]
            retry = schedule_keyed(client, TOPIC, k.encode(), k, "reject")
            assert (retry.outcome, retry.id) == ("exists", mid), k
        for k in sorted(moved - set(once_moved))[:100]:
            assert client.cancel_key(TOPIC, k) == len(after[k])
            assert keyed_bodies(client, k) == []
        for k in once_moved:  # the window came along: held once cancelled
            [(mid, _)] = after[k]
            assert client.cancel_key(TOPIC, k) == 1
            retry = schedule_keyed(client, TOPIC, b"again", k, "reject")
            assert (retry.outcome, retry.id) == ("exists", mid), f"{k}: its window moved with it"


def test_keys_stay_once_while_a_killed_rebalance_job_left_them_moved(
    cluster: LocalCluster,
) -> None:
    """The job SIGKILLed once the new shard holds messages: the map still has 2
    owners, the moved keys' messages are released on their old shard and pending on
    shard 2. By key (through the old map) each is still found, and a ``reject``
    retry still names it; after the job runs again, each key has one message."""
    with delayq.Client(cluster.address(0), timeout_s=30) as client:
        populate(client)
    with running_cluster_cli("scale", *scale_to_3(cluster)) as running:
        # killed once a key with a window is on shard 2: the job moves partitions two
        # at a time, in no set order, and those keys lie in the first of each shard
        kill_the_job_once_it_moves(cluster, moved=lambda: once_moved(cluster))
        running.communicate(timeout=120)
    assert running.returncode == 1 and cluster.current_map().owners == 2
    on_new = on_new_shard(cluster)
    once = once_of(on_new)
    assert once, "a key with a window moved before the kill"
    with delayq.Client(cluster.address(0), timeout_s=30) as client:
        retries = {k: schedule_keyed(client, TOPIC, b"again", k, "reject") for k in once}
        found = {k: keyed_bodies(client, k) for k in on_new}
        # by key, the moved messages are passed on to shard 2 by their old ids
        gone, later = sorted(k for k in on_new if k.startswith("c-"))[:2]
        assert client.cancel_key(TOPIC, gone) == len(found[gone])
        moved_on = client.reschedule_key(TOPIC, later, delay=2 * DAY_S)
        assert len(moved_on) == len(found[later])
    up = cluster_cli("scale", "--dir", str(cluster.dir), "--shards", "3", timeout_s=900)
    assert up.returncode == 0, (up.stdout, up.stderr, cluster.logs())
    with delayq.Client(cluster.current_map().shards[0].master, timeout_s=30) as client:
        for k in once:
            assert len(keyed_bodies(client, k)) == 1, f"{k}: once per key"
        assert keyed_bodies(client, gone) == [], "cancelled by key, not brought back"
        assert sorted(b for _, b in keyed_bodies(client, later)) == sorted(
            b for _, b in found[later]
        ), "rescheduled by key: each once"
    assert all(r.outcome == "exists" for r in retries.values()), retries
    assert all(found.values()), [k for k, held in found.items() if not held]
