"""The node's shard map (``server.topology``) and who owns a call
(``server.ownership``), without sockets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from delayq import shardmap
from delayq.errors import WrongShard
from delayq.ids import MessageId
from delayq.receipts import Receipt
from delayq.server.ownership import check_ids, check_keys, check_receipts
from delayq.server.topology import Topology
from delayq.shardmap import ShardMap


def _map(epoch: int, count: int) -> ShardMap:
    return ShardMap.of_masters([f"n{i}:7420" for i in range(count)], epoch)


def test_no_file_serves_alone(tmp_path: Path) -> None:
    t = Topology(None, 4, "me:1")
    assert t.map.standalone and t.map.masters() == ("me:1",) and not t.reload()


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
    with pytest.raises(WrongShard, match="ids\\[1\\]: belongs to no shard of the map"):
        check_ids(m, 1, [str(MessageId(1, 1, 5)), str(MessageId(9, 1, 5))], "ids")
    with pytest.raises(WrongShard, match="receipts\\[0\\]: belongs to shard 0"):
        check_receipts(m, 1, [str(Receipt(0, 1, 1, 1))])
    alone = ShardMap.single("me:1")  # a node serving alone owns everything
    check_keys(alone, 0, [other])
    check_ids(alone, 0, [str(MessageId(2, 1, 5))], "id")
    check_receipts(alone, 0, [str(Receipt(2, 1, 1, 1))])
