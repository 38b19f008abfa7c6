"""What a rebalance moves where (pure: no Spark, no sockets).

``Rebalance.of`` checks a change to ``shards`` active shards against the shard
map the cluster serves:

- a scale-up: the map lists the new shards as *joining* (the orchestrator put
  them there and started them), ``shards`` counts them all;
- a scale-down: ``shards`` is below the active count (the shards from
  ``shards`` on leave; the map may already list them as *leaving*);
- ``shards`` equal to the active count, nothing joining: a tidy pass, moving
  what a previous job left on the wrong shard.

``targets`` says, per pending message of one shard, where it belongs after the
change: a message a rebalance already released goes where it was released to
(its import may be what is missing: a job that died between its two steps;
importing it again is a no-op when it is there); a keyed one to ``jump_hash(key, shards)``;
a keyless one stays, unless its shard leaves: then it goes to a shard chosen by
its id (spread evenly, the same on every re-run).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from delayq.shardmap import JOINING, LEAVING, ShardMap, key_shards

__all__ = ["PlanError", "Rebalance", "layout_of"]


class PlanError(ValueError):
    """A rebalance that cannot run on this shard map; the message says why."""


@dataclass(frozen=True)
class Rebalance:
    shards: int
    """Active shards once the rebalance is done."""
    topology_epoch: int
    """The shard map epoch it was planned on."""
    masters: tuple[str, ...]
    """Every listed shard's master (the sources and targets, by index)."""
    kind: str
    """``up``, ``down`` or ``tidy``."""
    admins: tuple[str, ...] = ()
    """Those masters' admin addresses, by index (the map's, else the environment's:
    ``delayq_spark.shards.admin_of``)."""
    layout: tuple[tuple[int, str], ...] = ()
    """The map's shards and their states: a later map with the same ones differs
    only in masters (failovers), and the job carries on on it (``moves.hold``)."""

    @classmethod
    def of(cls, route: ShardMap, shards: int, env: Mapping[str, str] | None = None) -> Rebalance:
        """``env``: where admin addresses the map does not name come from
        (``ShardEntry.admin_address``)."""
        owners, count = route.owners, route.count
        if shards < 1:
            raise PlanError(f"--shards must be at least 1, got {shards}")
        if route.changing == JOINING and shards != count:
            raise PlanError(
                f"the shard map lists {count - owners} joining shard(s) ({owners} active): "
                f"a rebalance to {count} finishes that change, not one to {shards}"
            )
        if shards > count:
            raise PlanError(
                f"the shard map lists {count} shard(s); shards {count}..{shards - 1} must be "
                "started and listed as joining first (delayq cluster scale and the operator "
                "do that)"
            )
        if route.changing == LEAVING and shards != owners:
            raise PlanError(
                f"the shard map lists shards {owners}..{count - 1} as leaving: a rebalance to "
                f"{owners} finishes that change, not one to {shards}"
            )
        kind = "up" if route.changing == JOINING else "down" if shards < count else "tidy"
        admins = tuple(e.admin_address(env or {}) for e in route.shards)
        return cls(shards, route.topology_epoch, route.masters(), kind, admins, layout_of(route))

    def targets(
        self,
        shard: int,
        ids: Sequence[str],
        keys: Sequence[str],
        forwarded_to: np.ndarray,
    ) -> np.ndarray:
        """The shard each of these messages of ``shard`` belongs on (int64)."""
        out = key_shards(keys, self.shards)
        keyless = out < 0
        if keyless.any():
            if shard < self.shards:
                out[keyless] = shard
            else:
                at = np.flatnonzero(keyless).tolist()
                out[keyless] = [_spread(ids[i], self.shards) for i in at]
        # released before: import it where it went (a no-op when it is there); a shard
        # the map no longer lists was drained before it went, so it had them all
        released = (forwarded_to >= 0) & (forwarded_to < len(self.masters))
        out[released] = forwarded_to[released]
        out[(forwarded_to >= len(self.masters))] = shard
        return out


def layout_of(route: ShardMap) -> tuple[tuple[int, str], ...]:
    """What a change of the shard count changes of a map: its shards and their
    states (``delayq.control.resharding.layout``, which the job may not import)."""
    return tuple((e.index, e.state) for e in route.shards)


def _spread(message_id: str, shards: int) -> int:
    """A keyless message's new shard when its own leaves: by a hash of its id."""
    digest = hashlib.blake2b(message_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % shards
