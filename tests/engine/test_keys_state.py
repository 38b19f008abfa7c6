"""The key index through the shard's life (real files, fake clock): a replica
applying its master's log answers key calls at once when promoted, a rewind
rebuilds it, a keyed message moved into a compaction block is still found (and
after a restart), retention keeps a pending keyed message's record (kept
records) and the index finds it after a restart, a rebalance moves a key to its
new shard (the old one holds it until the map switches: by key its message is
``Forwarded``, a reject answers its old id, a replace waits; through a restart and
the checkpoint's sweep), and the checkpoint's sweep drops ended entries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench.compaction import compact

from delayq import Engine, FakeClock, NotFound
from delayq.engine import ImportRow, ReleaseOutcome
from delayq.errors import Forwarded, Unavailable
from delayq.formats.messagestate import BLOCKED
from delayq.types import IfExists, KeyOutcome
from tests.engine.test_blocks import YEAR_SETTINGS, state_byte
from tests.replication.test_replica_engine import open_pair, replicate
from tests.support.engines import (
    SMALL,
    START_MS,
    Make,
    churn,
    drain,
    ids,
    req,
    run_until,
    small_settings,
)

REJECT, KEEP, REPLACE = IfExists.REJECT, IfExists.KEEP, IfExists.REPLACE
DAY = 86_400_000


def keyed(e: Engine, key: str, topic: str = "t") -> list[str]:
    try:
        return [r.id for r in e.lookup_key(topic, key)]
    except NotFound:
        return []


def test_a_promoted_replica_answers_key_calls_at_once(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    master, replica = open_pair(tmp_path, clock)
    try:
        [a] = ids(master.schedule([req(50_000, key="a", if_exists=REJECT)]))
        [b] = ids(master.schedule([req(100, key="b", if_exists=REJECT, dedup_window_ms=DAY)]))
        [c] = ids(master.schedule([req(50_000, key="c")]))
        [c2] = master.schedule([req(60_000, key="c", if_exists=REPLACE)])
        [d] = ids(master.schedule([req(50_000, dedup_id="m-1", dedup_window_ms=DAY)]))
        run_until(master, clock, clock.now_ms() + 500)
        assert len(drain(master)) == 1  # b
        replicate(master, replica)
        master.close()
        replica.replicating.promote(2)
        assert keyed(replica, "a") == [a] and keyed(replica, "c") == [c2.id] != [c]
        assert replica.schedule([req(100, key="a", if_exists=REJECT)])[0].id == a
        assert replica.schedule([req(100, key="b", if_exists=REJECT)])[0].id == b
        assert replica.schedule([req(100, dedup_id="m-1")])[0].id == d
        assert replica.cancel_keys("t", ["c"]) == [1]
    finally:
        replica.close()


def test_a_rewind_rebuilds_the_index_from_the_log_it_keeps(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    master, replica = open_pair(tmp_path, clock)
    try:
        [a] = ids(master.schedule([req(50_000, key="a", if_exists=REJECT)]))
        replicate(master, replica)
        cut_at = replica.commitlog_end
        # the old master (this replica, say) wrote a tail nobody else has
        replica.replicating.promote(2)
        [lost] = ids(replica.schedule([req(50_000, key="lost", if_exists=REJECT)]))
        assert keyed(replica, "lost") == [lost]
        replica.replicating.rewind(cut_at)
        assert keyed(replica, "lost") == [] and keyed(replica, "a") == [a]
    finally:
        master.close()
        replica.close()


def test_a_keyed_message_in_a_compaction_block_is_found_by_key(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    settings = small_settings(tmp_path / "d", **YEAR_SETTINGS)
    e = Engine(settings, clock, background=False).start()
    try:
        [far] = ids(e.schedule([req(60 * DAY, key="far", if_exists=REJECT)]))
        for _ in range(3):  # rolled at least once, then blocked
            run_until(e, clock, clock.now_ms() + DAY, step_ms=6 * 3_600_000)
        compact(e, beyond_ms=7 * DAY, block_ms=DAY)
        assert state_byte(e, far) == BLOCKED
        assert keyed(e, "far") == [far]
        assert e.schedule([req(100, key="far", if_exists=KEEP)])[0].id == far
        e.close()
        e = Engine(settings, clock, background=False).start()
        assert keyed(e, "far") == [far]
        [new] = e.schedule([req(100, key="far", if_exists=REPLACE)])
        assert new.key_outcome is KeyOutcome.REPLACED and keyed(e, "far") == [new.id]
    finally:
        e.close()


def test_retention_keeps_a_pending_keyed_record_and_the_index_finds_it(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(retention_ms=5_000, **SMALL)
    [old] = ids(e.schedule([req(60_000, key="old", if_exists=REJECT)]))
    churn(e, clock, 30)  # the segment holding its SCHEDULE record is deleted
    assert e.observing.counters["records_kept"] == 1
    assert keyed(e, "old") == [old]
    e.abandon()
    e = make_engine(retention_ms=5_000, **SMALL)
    assert keyed(e, "old") == [old]
    assert e.schedule([req(100, key="old", if_exists=REJECT)])[0].id == old
    assert e.cancel_keys("t", ["old"]) == [1]


def test_a_rebalance_moves_the_key_to_its_new_shard(tmp_path: Path, clock: FakeClock) -> None:
    def shard(n: int) -> Engine:
        return Engine(small_settings(tmp_path / f"s{n}", shard=n), clock, background=False).start()

    src, dst = shard(0), shard(1)
    try:
        [a] = ids(src.schedule([req(60_000, key="k", if_exists=REJECT, dedup_window_ms=DAY)]))
        m = src.lookup(a)
        src.set_map_shards(frozenset({0, 1}), frozenset({1}))  # the server's map: 1 joins
        assert src.moving.release([a], target=1) == [ReleaseOutcome.RELEASED]
        assert keyed(src, "k") == [a]  # handed over: still the old shard's key
        assert src.schedule([req(100, key="k", if_exists=REJECT)])[0].id == a
        [found] = src.lookup_key("t", "k")
        assert isinstance(found, Forwarded) and (found.id, found.target) == (a, 1)
        moved: list[tuple[int, Forwarded]] = []
        assert src.cancel_keys("t", ["k"], moved) == [0]  # passed on by the server
        assert [(k, f.id, f.target) for k, f in moved] == [(0, a, 1)]
        [again] = src.reschedule_key("t", "k", delay_ms=5)
        assert isinstance(again, Forwarded) and again.id == a
        with pytest.raises(Unavailable, match="key"):
            src.schedule([req(100, key="k", if_exists=REPLACE)])
        src.checkpoint()
        assert keyed(src, "k") == [a], "the sweep keeps it"
        [copy] = dst.moving.import_messages(
            [ImportRow(a, m.topic, m.body, m.deliver_at_ms, m.key, m.headers)]
        )
        assert keyed(dst, "k") == [copy]
        assert dst.schedule([req(100, key="k", if_exists=KEEP)])[0].id == copy
        assert dst.cancel_keys("t", ["k"]) == [1]
        # the window came along: the key is still held on the new shard
        assert dst.schedule([req(100, key="k", if_exists=REJECT)])[0].id == copy
        src.close()
        src = shard(0)  # a restart: the index built from the log (not told yet: held)
        assert keyed(src, "k") == [a]
        src.set_map_shards(frozenset({0}), frozenset())  # 1 left again: the key is 0's
        assert keyed(src, "k") == []
        assert src.schedule([req(100, key="k", if_exists=REJECT)])[0].key_outcome is (
            KeyOutcome.NEW
        )
    finally:
        src.close()
        dst.close()


def test_a_scale_down_hands_a_key_over_to_an_active_shard(tmp_path: Path, clock: FakeClock) -> None:
    """Shard 1 of 2 (both active, the map not switched) releases to shard 0: the
    key still holds on shard 1 (its owner until the switch)."""
    src = Engine(small_settings(tmp_path / "s1", shard=1), clock, background=False).start()
    try:
        src.set_map_shards(frozenset({0, 1}), frozenset())
        [a] = ids(src.schedule([req(60_000, key="k", if_exists=REJECT)]))
        assert src.moving.release([a], target=0) == [ReleaseOutcome.RELEASED]
        assert src.schedule([req(100, key="k", if_exists=KEEP)])[0].id == a
        [found] = src.lookup_key("t", "k")
        assert isinstance(found, Forwarded) and (found.id, found.target) == (a, 0)
    finally:
        src.close()


def test_the_checkpoint_sweeps_ended_entries(tmp_path: Path, clock: FakeClock) -> None:
    over: dict[str, Any] = {"flush_interval_ms": 200}
    e = Engine(small_settings(tmp_path / "d", **over), clock, background=False).start()
    try:
        n = 5000
        for i in range(0, n, 500):
            ids(e.schedule([req(100, key=f"k{j}") for j in range(i, i + 500)]))
        ids(e.schedule([req(100, key="held", if_exists=REJECT, dedup_window_ms=DAY)]))
        assert e.observing.gauges()["key_index_entries"] == n + 1
        run_until(e, clock, clock.now_ms() + 500)
        assert len(drain(e)) == n + 1
        e.checkpoint()
        assert e.observing.gauges()["key_index_entries"] == 1  # the held one stays
        assert e.observing.counters["key_entries_swept"] == n
        assert e.schedule([req(100, key="held", if_exists=REJECT)])[0].error is not None
    finally:
        e.close()
