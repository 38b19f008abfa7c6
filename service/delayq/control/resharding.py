"""A change of a topic's shard count, step by step (pure: maps in, maps out).

The local cluster's ``delayq cluster scale`` and the operator both drive a
change with ``next_step`` until it says ``DONE``; each step is decided from the
shard map alone, so a driver that stops midway resumes where it was:

=========  ====================================  ==========================================
step       when (map, target N active shards)    what the driver does
=========  ====================================  ==========================================
ADD        N above the active count, no shard    start shards A..N-1, then serve ``joining``:
           joining yet                           them listed as joining (topology epoch + 1)
REBALANCE  N shards listed, some joining; or N   run the rebalance job; when it succeeds,
           below the active count, none leaving  serve ``switched`` (joining ones active, or
                                                 those from N on leaving)
DRAIN      shards leaving, N active              wait until ``drained`` says the leaving
                                                 shards hold nothing, then serve ``dropped``
                                                 and stop them
DONE       N active, none joining or leaving
=========  ====================================  ==========================================

Between two steps the keepers may publish a failover (a shard's master, replicas
and epoch change, the topology epoch rises): ``same_layout`` tells such a map
from one a step changed (the shards and their states), so a driver carries on
with the map as it is then.

A map in the middle of another change (joining shards while N is below the
active count, say) is ``ChangeError``: finish that change first (``under_way``
names its target). The topology
never switches on a failed job: only a driver that saw it succeed serves
``switched``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence

from ..shardmap import ACTIVE, JOINING, LEAVING, MAX_SHARDS, ShardEntry, ShardMap

__all__ = [
    "ChangeError",
    "Step",
    "drained",
    "dropped",
    "joining",
    "layout",
    "next_step",
    "same_layout",
    "switched",
    "under_way",
]


class ChangeError(ValueError):
    """A change that cannot be made from this map; the message says why."""


class Step(enum.Enum):
    ADD = "add"
    REBALANCE = "rebalance"
    DRAIN = "drain"
    DONE = "done"


def next_step(current: ShardMap, target: int) -> Step:
    """What a driver does next to bring ``current`` to ``target`` active shards."""
    if not 1 <= target <= MAX_SHARDS:
        raise ChangeError(f"shards must be 1..{MAX_SHARDS}, got {target}")
    owners, count, changing = current.owners, current.count, current.changing
    if changing == JOINING:
        if target != count:
            raise ChangeError(
                f"shards {owners}..{count - 1} are joining (a change to {count} shards is under "
                f"way); finish it (scale to {count}) before scaling to {target}"
            )
        return Step.REBALANCE
    if changing == LEAVING:
        if target != owners:
            raise ChangeError(
                f"shards {owners}..{count - 1} are leaving (a change to {owners} shards is "
                f"under way); finish it (scale to {owners}) before scaling to {target}"
            )
        return Step.DRAIN
    if target > owners:
        return Step.ADD
    if target < owners:
        return Step.REBALANCE
    return Step.DONE


def under_way(current: ShardMap) -> int | None:
    """The target of the change ``current`` is in the middle of (every shard
    listed, when some are joining; the active ones, when some are leaving), or
    None when none is: the one target ``next_step`` takes besides a new change."""
    if current.changing == JOINING:
        return current.count
    if current.changing == LEAVING:
        return current.owners
    return None


def _raised(current: ShardMap, shards: Iterable[ShardEntry]) -> ShardMap:
    return dataclasses.replace(
        current, shards=tuple(shards), topology_epoch=current.topology_epoch + 1
    )


def joining(current: ShardMap, new: Sequence[ShardEntry]) -> ShardMap:
    """``current`` with ``new`` (shards A.., already serving) listed as joining."""
    if next_step(current, current.owners + len(new)) is not Step.ADD:
        raise ChangeError("shards can join only a map with no change under way")
    for i, e in enumerate(new):
        if e.index != current.count + i:
            raise ChangeError(f"shard index {e.index}: the next must be {current.count + i}")
    added = (dataclasses.replace(e, state=JOINING) for e in new)
    return _raised(current, (*current.shards, *added))


def switched(current: ShardMap, target: int) -> ShardMap:
    """The map once the rebalance to ``target`` succeeded: joining shards active,
    or shards from ``target`` on leaving."""
    if next_step(current, target) is not Step.REBALANCE:
        raise ChangeError(f"no rebalance to {target} shards is under way")
    return _raised(
        current,
        (
            dataclasses.replace(e, state=ACTIVE if e.index < target else LEAVING)
            for e in current.shards
        ),
    )


def dropped(current: ShardMap) -> ShardMap:
    """The map without its leaving shards (once ``drained``)."""
    if current.changing != LEAVING:
        raise ChangeError("no shard is leaving")
    return _raised(current, (e for e in current.shards if e.active))


def drained(topics: Iterable[Mapping[str, object]]) -> bool:
    """Whether a leaving shard holds nothing more, from its per-topic stats (the
    client's ``stats`` form: ``pending`` and ``group_backlog``): no message
    pending and every consumer group it knows has acked all it delivered."""
    for t in topics:
        backlog = t.get("group_backlog") or {}
        assert isinstance(backlog, Mapping)
        if t.get("pending") or any(backlog.values()):
            return False
    return True


def layout(current: ShardMap) -> tuple[tuple[int, str], ...]:
    """What a change of the shard count changes of a map: its shards and their
    states (not their masters, replicas or epochs, which failovers change)."""
    return tuple((e.index, e.state) for e in current.shards)


def same_layout(a: ShardMap, b: ShardMap) -> bool:
    """Whether ``a`` and ``b`` differ at most in masters, replicas, addresses and
    epochs: a failover (or a new address) between them, no step of a change."""
    return layout(a) == layout(b)
