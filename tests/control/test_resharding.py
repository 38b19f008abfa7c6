"""A change of the shard count, step by step (``delayq.control.resharding``): each step is
read off the map, so a driver that stops midway resumes; the map switches only
through ``switched`` (after a job succeeded); a change under way blocks another."""

from __future__ import annotations

import pytest

from delayq.control import resharding
from delayq.control.resharding import ChangeError, Step
from delayq.shardmap import JOINING, LEAVING, ShardEntry, ShardMap


def active(n: int, epoch: int = 5) -> ShardMap:
    return ShardMap.of_masters([f"n{i}:1" for i in range(n)], epoch)


def entry(i: int) -> ShardEntry:
    return ShardEntry(index=i, master=f"n{i}:1")


def test_scaling_up_adds_joining_shards_then_switches() -> None:
    m = active(2)
    assert resharding.next_step(m, 4) is Step.ADD
    j = resharding.joining(m, [entry(2), entry(3)])
    assert (j.count, j.owners, j.changing, j.topology_epoch) == (4, 2, JOINING, 6)
    assert resharding.next_step(j, 4) is Step.REBALANCE
    with pytest.raises(ChangeError, match="finish it \\(scale to 4\\) before scaling to 3"):
        resharding.next_step(j, 3)
    s = resharding.switched(j, 4)
    assert (s.count, s.owners, s.changing, s.topology_epoch) == (4, 4, "", 7)
    assert resharding.next_step(s, 4) is Step.DONE
    with pytest.raises(ChangeError, match="index 3: the next must be 2"):
        resharding.joining(m, [entry(3)])


def test_scaling_down_switches_then_drains_then_drops() -> None:
    m = active(3)
    assert resharding.next_step(m, 1) is Step.REBALANCE
    s = resharding.switched(m, 1)
    assert [e.state for e in s.shards] == ["active", LEAVING, LEAVING]
    assert resharding.next_step(s, 1) is Step.DRAIN
    with pytest.raises(ChangeError, match="leaving"):
        resharding.next_step(s, 3)
    d = resharding.dropped(s)
    assert (d.count, d.owners, d.topology_epoch) == (1, 1, 7)
    assert resharding.next_step(d, 1) is Step.DONE
    with pytest.raises(ChangeError, match="no shard is leaving"):
        resharding.dropped(d)
    with pytest.raises(ChangeError, match="no rebalance to 3"):
        resharding.switched(m, 3)
    with pytest.raises(ChangeError, match=r"1\.\.1024"):
        resharding.next_step(m, 0)


def test_drained_means_nothing_pending_and_every_group_acked() -> None:
    assert resharding.drained([])
    assert resharding.drained([{"pending": 0, "group_backlog": {"g": 0}}])
    assert not resharding.drained([{"pending": 1, "group_backlog": {}}])
    assert not resharding.drained([{"pending": 0, "group_backlog": {"g": 0, "h": 2}}])


def test_under_way_names_the_target_of_the_change_in_the_middle() -> None:
    m = active(2)
    assert resharding.under_way(m) is None
    up = resharding.joining(m, [entry(2)])
    assert resharding.under_way(up) == 3
    assert resharding.next_step(up, 3) is Step.REBALANCE
    down = resharding.switched(active(3), 2)
    assert resharding.under_way(down) == 2
    assert resharding.next_step(down, 2) is Step.DRAIN
