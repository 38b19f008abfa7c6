"""Where a rebalance moves each message (``delayq_spark.plan``, pure), and when
its passes under the hold are done (``jobs.settled``)."""

from __future__ import annotations

import numpy as np
import pytest

from delayq import shardmap
from delayq.shardmap import ACTIVE, JOINING, LEAVING, ShardEntry, ShardMap
from delayq_spark.jobs import settled
from delayq_spark.plan import PlanError, Rebalance


def listed(active: int, extra: int = 0, state: str = JOINING) -> ShardMap:
    return ShardMap(
        topology_epoch=3,
        shards=tuple(
            ShardEntry(index=i, master=f"n{i}:1", state=ACTIVE if i < active else state)
            for i in range(active + extra)
        ),
    )


def test_the_change_must_match_the_map() -> None:
    assert Rebalance.of(listed(2, 1), 3).kind == "up"
    assert Rebalance.of(listed(3), 2).kind == "down"
    assert Rebalance.of(listed(2, 1, LEAVING), 2).kind == "down"
    assert Rebalance.of(listed(2), 2).kind == "tidy"
    with pytest.raises(PlanError, match="must be started and listed as joining first"):
        Rebalance.of(listed(2), 3)
    with pytest.raises(PlanError, match="finishes that change, not one to 2"):
        Rebalance.of(listed(2, 1), 2)
    with pytest.raises(PlanError, match="leaving: a rebalance to 2 finishes"):
        Rebalance.of(listed(2, 1, LEAVING), 1)


def test_targets_keys_by_jump_hash_keyless_stay_unless_their_shard_leaves() -> None:
    keys = [f"k{i}" for i in range(40)] + [""] * 40
    ids = [f"id{i}" for i in range(80)]
    none = np.full(80, -1, dtype=np.int64)
    up = Rebalance.of(listed(2, 1), 3)
    t = up.targets(1, ids, keys, none)
    assert t[:40].tolist() == [shardmap.shard_of_key(k, 3) for k in keys[:40]]
    assert set(t[40:].tolist()) == {1}, "keyless: stay"
    down = Rebalance.of(listed(3), 2)
    t = down.targets(2, ids, keys, none)
    assert set(t[40:].tolist()) == {0, 1}, "keyless of a leaving shard: spread"
    assert t.tolist() == down.targets(2, ids, keys, none).tolist(), "the same on a re-run"
    released = none.copy()
    released[0], released[1] = 2, 7  # released to 2 before; to a shard no longer listed
    t = up.targets(0, ids, keys, released)
    assert t[0] == 2 and t[1] == 0, "import where it went; a removed shard had them all"


def test_a_pass_under_the_hold_is_the_last_once_nothing_was_rewritten_under_it() -> None:
    held = {0: 1_700_000_000_000, 1: 1_700_000_000_000}
    done = {"moved": 12, "cancelled_first": 3, "rewritten_first": 0}  # a client's cancels
    assert settled(held, dict(held), done)
    # a plan fired (its next copy written, unheld) between the snapshot and its release
    assert not settled(held, dict(held), {**done, "rewritten_first": 1})
    assert not settled(held, {**held, 1: held[1] + 5}, done)
