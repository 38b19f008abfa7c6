"""Which calls this node may answer under its shard map (pure).

A keyed message belongs to ``jump_hash(key)`` of the map; an id or receipt to
the shard written inside it. A call that reaches another shard fails whole
with ``WrongShard`` (FAILED_PRECONDITION naming the owner and the map's
topology epoch) before anything is written, so a client with a stale map
fetches it again and resends. A node serving alone (no ``--shard-map``) owns
everything. Malformed ids and receipts are left to the engine, which names them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import Unavailable, WrongShard
from ..ids import MessageId
from ..receipts import Receipt
from ..shardmap import ShardMap, key_shards

__all__ = ["check_ids", "check_keys", "check_receipts"]


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
        name = field if field == "id" else f"{field}[{i}]{what}"  # one id, or a list
        raise WrongShard(name, owner, topology.topology_epoch, shard)


def check_keys(topology: ShardMap, shard: int, keys: Sequence[str]) -> None:
    """Every keyed message of a Schedule batch belongs to ``shard``."""
    if topology.standalone or topology.count == 1 or not any(keys):
        return
    _check(topology, shard, key_shards(keys, topology.count), "messages", ".key")


def check_ids(
    topology: ShardMap,
    shard: int,
    ids: Sequence[str],
    field: str,
    moved_here: Callable[[Sequence[str]], list[bool]] | None = None,
    passed_on: bool = False,
) -> None:
    """Every well-formed message id names ``shard``, or another shard's message a
    rebalance moved here (``moved_here`` says which). ``passed_on``: another shard
    passed these ids on as moved here; one not imported yet is ``Unavailable``
    (the rebalance is between its release and its import)."""
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
    if len(foreign) and passed_on:
        i = int(foreign[0])
        name = field if field == "id" else f"{field}[{i}]"
        raise Unavailable(f"{name}: its message is moving to this shard; retry shortly")
    _check(topology, shard, owners, field, "")


def check_receipts(topology: ShardMap, shard: int, receipts: Sequence[str]) -> None:
    """Every well-formed receipt was handed out by ``shard``."""
    if topology.standalone:
        return
    _check(topology, shard, np.array(Receipt.shards(receipts), dtype=np.int64), "receipts", "")
