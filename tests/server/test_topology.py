"""The node's shard map (``server.topology``) and who owns a call
(``server.ownership``), without sockets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from delayq import shardmap
from delayq.clock import FakeClock
from delayq.errors import FailedPrecondition, Unavailable, WrongShard
from delayq.ids import MessageId
from delayq.receipts import Receipt
from delayq.server.ownership import Mode, Moving, check_ids, check_keys, check_receipts
from delayq.server.topology import RELOAD_GAP_S, Topology
from delayq.shardmap import ACTIVE, JOINING, LEAVING, ShardEntry, ShardMap


def _map(epoch: int, count: int) -> ShardMap:
    return ShardMap.of_masters([f"n{i}:7420" for i in range(count)], epoch)


def test_no_file_serves_alone(tmp_path: Path) -> None:
    t = Topology(None, 4, "me:1")
    assert t.map.standalone and t.map.masters() == ("me:1",) and not t.reload()


def test_a_watcher_hears_the_map_now_and_every_new_one_until_it_stops(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    f.write_text(_map(1, 2).dumps())
    t = Topology(f, 0, "n0:7420")
    heard: list[int] = []
    stop = t.on_change(lambda m: heard.append(m.count))
    assert heard == [2], "the map served now, at once"
    f.write_text("{")  # refused: the map served stays
    assert not t.reload() and heard == [2]
    f.write_text(_map(2, 3).dumps())
    assert t.reload() and heard == [2, 3]
    stop()
    f.write_text(_map(3, 5).dumps())
    assert t.reload() and heard == [2, 3]
    alone = Topology(None, 0, "me:1")
    counts: list[int] = []
    alone.on_change(lambda m: counts.append(m.count))
    alone.standalone_master("other:2")
    assert counts == [1, 1]


def test_a_bad_file_at_start_is_refused_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    with pytest.raises(ValueError, match=r"m\.json: .*No such file"):
        Topology(f, 0, "me:1")
    f.write_text(_map(1, 2).dumps())
    with pytest.raises(ValueError, match="none is this node's shard 2"):
        Topology(f, 2, "me:1")


def test_reload_takes_a_raised_epoch_and_keeps_the_last_good_map(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = tmp_path / "m.json"
    f.write_text(_map(2, 3).dumps())
    t = Topology(f, 1, "n1:7420")
    assert not t.map.standalone and t.map.count == 3 and not t.reload()
    caplog.set_level(logging.WARNING, "delayq.server")
    refused = {
        "{": "not JSON",
        _map(1, 4).dumps(): "below the served 2",
        _map(2, 4).dumps(): "topology_epoch stayed 2",
        _map(3, 1).dumps(): "none is this node's shard 1",
    }
    for text, why in refused.items():
        f.write_text(text)
        assert not t.reload() and not t.reload()  # refused, and logged once
        assert t.map == _map(2, 3)
        assert why in caplog.records[-1].__dict__["error"]
    assert len(caplog.records) == len(refused)
    f.write_text(_map(5, 4).dumps())
    assert t.reload() and t.map == _map(5, 4)
    f.unlink()  # a missing file keeps the map too
    assert not t.reload() and t.map == _map(5, 4)


def test_a_map_that_does_not_name_this_node_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = tmp_path / "m.json"
    f.write_text(_map(1, 2).dumps())
    caplog.set_level(logging.WARNING, "delayq.server")
    Topology(f, 1, "n1:7420")
    assert not caplog.records  # n1:7420 is shard 1's master
    Topology(f, 1, "n0:7420")
    (rec,) = caplog.records
    assert rec.getMessage() == "this node is not in the shard map under its shard"
    assert rec.__dict__["master"] == "n1:7420"


def test_ownership_of_keys_ids_and_receipts() -> None:
    m = _map(7, 3)
    mine = next(f"k{i}" for i in range(50) if shardmap.shard_of_key(f"k{i}", 3) == 0)
    other = next(f"k{i}" for i in range(50) if shardmap.shard_of_key(f"k{i}", 3) == 2)
    check_keys(m, 0, [mine, "", mine])
    with pytest.raises(WrongShard) as err:
        check_keys(m, 0, [mine, "", other])
    assert (err.value.field, err.value.owner, err.value.topology_epoch) == ("messages[2].key", 2, 7)
    check_ids(m, 1, [str(MessageId(1, 1, 5)), "malformed"], "ids")  # the engine names that one
    with pytest.raises(WrongShard, match="id: belongs to shard 2 under shard map epoch 7"):
        check_ids(m, 1, [str(MessageId(2, 1, 5))], "id")
    # a shard the map no longer lists (removed): passes; the servicer searches
    check_ids(m, 1, [str(MessageId(1, 1, 5)), str(MessageId(9, 1, 5))], "ids")
    with pytest.raises(WrongShard, match="receipts\\[0\\]: belongs to shard 0"):
        check_receipts(m, 1, [str(Receipt(0, 1, 1, 1))])
    alone = ShardMap.single("me:1")  # a node serving alone owns everything
    check_keys(alone, 0, [other])
    check_ids(alone, 0, [str(MessageId(2, 1, 5))], "id")
    check_receipts(alone, 0, [str(Receipt(2, 1, 1, 1))])


KEYS = [f"k{i}" for i in range(200)]


def _changing(epoch: int, active: int, extra: int, state: str) -> ShardMap:
    """``active`` active shards, then ``extra`` joining or leaving ones."""
    entries = tuple(
        ShardEntry(index=i, master=f"n{i}:7420", state=ACTIVE if i < active else state)
        for i in range(active + extra)
    )
    return ShardMap(topology_epoch=epoch, shards=entries)


def test_a_joining_or_leaving_shard_takes_no_schedules() -> None:
    m = _changing(3, 2, 1, JOINING)
    assert (m.count, m.owners, m.changing) == (3, 2, JOINING)
    key = next(f"k{i}" for i in range(50) if shardmap.shard_of_key(f"k{i}", 2) == 1)
    assert m.shard_of_key(key) == 1, "keys hash over the active shards only"
    check_keys(m, 1, [key, ""])
    with pytest.raises(WrongShard) as err:
        check_keys(m, 2, [""])  # keyless: any active shard; the first is named
    assert (err.value.owner, err.value.field) == (0, "messages[0].key")
    with pytest.raises(WrongShard) as err:
        check_keys(_changing(4, 2, 1, LEAVING), 2, [key])
    assert err.value.owner == 1
    check_ids(m, 2, [str(MessageId(2, 1, 5))], "id")  # its own ids: yes


def test_a_finishing_rebalance_holds_back_the_keys_it_moves() -> None:
    m = _changing(3, 2, 1, JOINING)
    places = {k: (shardmap.shard_of_key(k, 2), shardmap.shard_of_key(k, 3)) for k in KEYS}
    stays = next(k for k, p in places.items() if p == (0, 0))
    goes = next(k for k, p in places.items() if p == (0, 2))
    moving = Moving(owners=3, job="j1")
    check_keys(m, 0, [stays, ""], moving)
    held = r"messages\[1\]\.key: moves to shard 2 \(rebalance j1\)"
    with pytest.raises(Unavailable, match=held) as err:
        check_keys(m, 0, [stays, goes], moving)
    assert err.value.retry_after_ms > 0
    down = _changing(4, 3, 0, ACTIVE)
    with pytest.raises(Unavailable, match="shard 2 is leaving"):
        check_keys(down, 2, [""], Moving(owners=2))


def test_ids_passed_on_or_searched() -> None:
    m = _map(7, 3)
    foreign = [str(MessageId(2, 1, 5))]
    with pytest.raises(Unavailable, match="moving to this shard"):
        check_ids(m, 1, foreign, "id", lambda ids: [False] * len(ids), Mode.PASSED_ON)
    check_ids(m, 1, foreign, "id", lambda ids: [True] * len(ids), Mode.PASSED_ON)  # imported
    check_ids(m, 1, foreign, "id", lambda ids: [False] * len(ids), Mode.SEARCH)  # NOT_FOUND later


def test_prepare_holds_until_the_map_moves_on_or_the_hold_runs_out(tmp_path: Path) -> None:
    f = tmp_path / "map.json"
    f.write_text(_changing(3, 2, 1, JOINING).dumps())
    clock = FakeClock()
    t = Topology(f, 0, "n0:7420", clock=clock)
    since = t.prepare(3, 3, 30.0, "j")
    assert since == clock.now_ms()
    assert t.moving() == Moving(3, "j")
    clock.advance(1)
    assert t.prepare(3, 3, 30.0, "j") == since, "renewed, not taken again"
    with pytest.raises(FailedPrecondition, match="past the 2"):
        t.prepare(3, 2, 30.0, "j")
    f.write_text(_map(4, 3).dumps())
    assert t.reload()
    assert t.moving() is None, "the map switched: nothing held back"
    taken = t.prepare(3, 4, 30.0, "j")
    clock.advance(20_000)
    t.prepare(3, 4, 30.0, "j")  # renewed: held 30 s from now
    clock.advance(30_000)
    assert t.moving() == Moving(3, "j"), "held to the end of the renewed hold"
    clock.advance(1)
    assert t.moving() is None, "a hold not renewed runs out"
    assert t.prepare(3, 4, 30.0, "j") == clock.now_ms() > taken, "taken again, not renewed"
    t.prepare(0, 4, 30.0, "j")
    assert t.moving() is None, "owners 0 drops it"


def test_a_storm_of_reloads_reads_the_file_once_a_gap(tmp_path: Path) -> None:
    f = tmp_path / "map.json"
    f.write_text(_map(1, 2).dumps())
    clock = FakeClock()
    t = Topology(f, 0, "n0:7420", clock=clock)
    f.write_text(_map(2, 2).dumps())
    assert t.reload_now() and t.map.topology_epoch == 2
    f.write_text(_map(3, 2).dumps())
    gap_ms = int(RELOAD_GAP_S * 1000)
    clock.advance(gap_ms - 1)
    assert not t.reload_now() and t.map.topology_epoch == 2, "read again too soon"
    clock.advance(2)  # past the gap
    assert t.reload_now() and t.map.topology_epoch == 3
