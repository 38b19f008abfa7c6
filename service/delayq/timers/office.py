"""The node's part in its shard (``Office``): role, fence, lease, epoch and
history, the fire and index limits replication puts on the stages, and when
this node began firing as the master.
``timers.lifecycle.roles`` changes it with the shard's lock held; the stages
read ``delivering`` to know whether they may fire, deliver and ack."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..clock import Clock
from ..epochs import EpochHistory
from ..role import Role

__all__ = ["Office"]


@dataclass(eq=False)
class Office:
    """The node's part in its shard as its state holds it: role, epoch, lease and
    the limits replication puts on the stages. ``timers.lifecycle.roles``
    changes it (lock held); the stages read it (``delivering``) to know whether
    they may fire, deliver and ack.

    A master delivers only while it is not fenced and its lease (a deadline on
    ``clock.monotonic_s()``; None: none needed, serving alone) runs."""

    clock: Clock
    role: Role = Role.MASTER
    fenced: bool = False
    lease_until: float | None = None
    epoch: int = 1  # the epoch new records are written in (see epochs, opening)
    epochs: EpochHistory = field(default_factory=EpochHistory)  # as saved in epochs.json
    # a replica's scan fires only slots before this one: where its master's scan
    # stood at its last PROGRESS record (None: nothing may fire yet)
    fire_limit: int | None = None
    # sync replication: the link stage indexes only records before this position
    # (the high-water mark: what the in-sync set holds); None: no limit
    index_limit: int | None = None
    progress_written: int = -1  # the scan resume point of this master's last PROGRESS
    # when this node began to fire as the master (its open, recovery done, its
    # promotion, or the renewal that ended a lapse of its lease; clock ms): a
    # schedule's nominal time before it was missed (the shard could not fire it),
    # one after it is fired late (``recurrence.catchup``)
    firing_since_ms: int = 0

    def delivering(self) -> bool:
        """Whether this node may fire, deliver and ack now: a master, not fenced,
        within its lease."""
        return (
            self.role is Role.MASTER
            and not self.fenced
            and (self.lease_until is None or self.clock.monotonic_s() < self.lease_until)
        )
