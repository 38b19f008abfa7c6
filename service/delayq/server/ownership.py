"""Which calls this node may answer under its shard map (pure).

A keyed message belongs to ``jump_hash(key)`` over the map's active shards, and
so do the calls by key (``check_key_owner``); an id or receipt to the shard
written inside it. A call that reaches another shard
fails whole with ``WrongShard`` (FAILED_PRECONDITION naming the owner and the
map's topology epoch) before anything is written, so a client with a stale map
fetches it again and resends. A joining or leaving shard takes no schedules. A
node serving alone (no ``--shard-map``) owns everything. Malformed ids and
receipts are left to the engine, which names them.

While a rebalance finishes (``Moving``, set by the admin ``Prepare``), a
schedule whose key is about to belong to another shard, or any schedule at a
shard about to leave, is ``Held`` (``Unavailable`` with a retry hint): the job's
last pass then finds nothing new to move, and once the map switches the call
goes to the new owner (the servicer waits for the switch within the call's
deadline, so a producer sees a slower call, not an error).

Ids: another shard's id is this shard's when a rebalance moved its message here
(``moved_here``). An id of a shard the map no longer lists (drained and removed)
passes: the engine answers NOT_FOUND and the servicer asks the other shards
(``forwarding``). ``Mode`` says how the call came: from a client, passed on by
the shard the message left (not imported yet: ``Unavailable``, the rebalance is
between its two steps), or a search for a removed shard's message (NOT_FOUND
when not here).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import Unavailable, WrongShard
from ..ids import MessageId
from ..receipts import Receipt
from ..shardmap import ShardMap, key_shards

__all__ = [
    "RETRY_MOVING_MS",
    "Held",
    "Mode",
    "Moving",
    "check_ids",
    "check_key_owner",
    "check_keys",
    "check_receipts",
]

_ONE = ("id", "key", "name")
"""Fields naming one item (an id, a key, a schedule's name), named bare in a refusal."""
RETRY_MOVING_MS = 200
"""The retry hint of a schedule held back while a rebalance finishes: its last
pass and the map switch take about this long."""


class Held(Unavailable):
    """A schedule held back by a finishing rebalance (``Moving``)."""


class Mode(enum.Enum):
    CLIENT = "client"
    PASSED_ON = "passed-on"  # by the shard the message moved from
    SEARCH = "search"  # for a message of a removed shard


@dataclass(frozen=True, slots=True)
class Moving:
    """A rebalance finishing towards ``owners`` active shards (admin ``Prepare``)."""

    owners: int
    job: str = ""


def _first_foreign(owners: np.ndarray, shard: int, count: int) -> tuple[int, int] | None:
    """(index, owner) of the first row owned elsewhere; -1 rows (any shard) pass.
    An owner beyond the map is reported as -1 (no shard of the map)."""
    foreign = np.flatnonzero((owners != shard) & (owners != -1))
    if not len(foreign):
        return None
    i = int(foreign[0])
    owner = int(owners[i])
    return i, owner if 0 <= owner < count else -1


def _check(topology: ShardMap, shard: int, owners: np.ndarray, field: str, what: str) -> None:
    hit = _first_foreign(owners, shard, topology.count)
    if hit is not None:
        i, owner = hit
        name = field if field in _ONE else f"{field}[{i}]{what}"  # one, or a list
        raise WrongShard(name, owner, topology.topology_epoch, shard)


def check_keys(
    topology: ShardMap, shard: int, keys: Sequence[str], moving: Moving | None = None
) -> None:
    """Every keyed message of a Schedule batch belongs to ``shard``, an active shard
    (keyless ones may go to any active shard); none is held back by ``rebalance.transfer``."""
    if topology.standalone:
        return
    owners = topology.owners
    if shard >= owners:  # joining or leaving: no schedules
        placed = key_shards(keys, owners)
        placed[placed < 0] = 0  # keyless: any active shard; name the first
        _check(topology, shard, placed, "messages", ".key")
    if owners > 1 and any(keys):
        _check(topology, shard, key_shards(keys, owners), "messages", ".key")
    if moving is not None:
        _check_held(shard, keys, moving, "messages", ".key")


def _check_held(shard: int, keys: Sequence[str], moving: Moving, field: str, what: str) -> None:
    """``Held`` if the finishing rebalance ``moving`` places a key (or, this shard
    leaving, every key) elsewhere: the call waits for the map to switch, which
    then says where the key's messages are."""
    if shard >= moving.owners:
        raise Held(
            f"{field}: shard {shard} is leaving (rebalance {moving.job or 'running'}); "
            "retry shortly",
            RETRY_MOVING_MS,
        )
    if moving.owners > 1 and any(keys):
        after = key_shards(keys, moving.owners)
        held = np.flatnonzero((after != shard) & (after != -1))
        if len(held):
            i = int(held[0])
            name = field if field in _ONE else f"{field}[{i}]{what}"  # one, or a list
            raise Held(
                f"{name}: moves to shard {int(after[i])} "
                f"(rebalance {moving.job or 'running'}); retry shortly",
                RETRY_MOVING_MS,
            )


def check_key_owner(
    topology: ShardMap, shard: int, keys: Sequence[str], field: str, moving: Moving | None = None
) -> None:
    """Every key of a call by key (Lookup, Cancel, Reschedule; ``field`` ``"key"``
    or ``"keys"``) belongs to ``shard``: its pending messages are there. A joining or
    leaving shard owns no key. Held back like a schedule while a finishing rebalance
    (``moving``) places the key elsewhere: its messages were released to their new
    shard already (here they are forwarded, no longer the key's), so the call waits
    for the map to switch and is then sent there."""
    if topology.standalone:
        return
    _check(topology, shard, key_shards(keys, topology.owners), field, "")
    if moving is not None:
        _check_held(shard, keys, moving, field, "")


def check_ids(
    topology: ShardMap,
    shard: int,
    ids: Sequence[str],
    field: str,
    moved_here: Callable[[Sequence[str]], list[bool]] | None = None,
    mode: Mode = Mode.CLIENT,
) -> None:
    """Every well-formed message id names ``shard``, a message a rebalance moved
    here (``moved_here`` says which), or a shard the map no longer lists."""
    if topology.standalone:
        return
    cols, errors = MessageId.parse_columns(ids, field)
    owners = cols[:, 0].astype(np.int64)
    if errors:
        owners[list(errors)] = -1
    foreign = np.flatnonzero((owners != shard) & (owners != -1))
    if len(foreign) and moved_here is not None:
        here = np.array(moved_here([ids[i] for i in foreign.tolist()]), dtype=bool)
        owners[foreign[here]] = shard
        foreign = foreign[~here]
    if len(foreign) and mode is Mode.PASSED_ON:
        i = int(foreign[0])
        name = field if field == "id" else f"{field}[{i}]"
        raise Unavailable(
            f"{name}: its message is moving to this shard; retry shortly", RETRY_MOVING_MS
        )
    if mode is Mode.SEARCH:
        return
    owners[owners >= topology.count] = -1  # a removed shard's: the servicer searches
    _check(topology, shard, owners, field, "")


def check_receipts(topology: ShardMap, shard: int, receipts: Sequence[str]) -> None:
    """Every well-formed receipt was handed out by ``shard``."""
    if topology.standalone:
        return
    _check(topology, shard, np.array(Receipt.shards(receipts), dtype=np.int64), "receipts", "")
