"""Role changes of a shard's node (master, replica, fenced, leased), on its
``OfficeState``, with the shard's lock held; each wakes the stages whose work it
changes.

- ``promote``: a replica (or fenced master) becomes the master in a higher epoch:
  the epoch is recorded (fsynced) before anything is written in it; its scan
  resumes where its last PROGRESS record put it, its release buffer holds what
  the old master may not have delivered (duplicates at most, nothing lost); it
  fires from now (``Office.firing_since_ms``: a schedule's nominal times before
  it were missed, ``recurrence.catchup``). The
  index limit (sync replication) is set in the same step as the role: no write
  of the new epoch is linked for delivery before the in-sync set holds it.
- ``follow``: stop acking and delivering and apply a master's log from now on.
- ``fence``: stop acking and delivering now; only a promotion or a follow of a
  higher epoch (the caller checks epochs) lifts it.
- ``renew``: a master's lease (a deadline on the shard clock's ``monotonic_s``;
  None: none). A deadline only moves later: a grant that arrives late
  (``replication.lease``) never cuts a lease a later grant gave. A renewal that
  ends a lapse is a new start of firing (``Office.firing_since_ms``): the
  nominal times that came while the lease had lapsed were missed.
- ``refuse_unless_master``: the check every acking call makes first, and
  ``refuse_unless_still``, the one it makes again before it acknowledges (after
  its fsync and in-sync wait): the lease it was admitted under may have lapsed
  meanwhile, and a successor may have been promoted without the write.
"""

from __future__ import annotations

from typing import Protocol

from ...clock import Clock
from ...errors import FailedPrecondition, NotMaster, Unavailable
from ...role import Role
from ...settings import EngineSettings
from ..wakeups import Wakeups
from .newepoch import EpochState, begin_epoch

__all__ = [
    "OfficeState",
    "fence",
    "follow",
    "promote",
    "refuse_unless_master",
    "refuse_unless_still",
    "renew",
]


class OfficeState(EpochState, Protocol):
    """What the role transitions use of the shard's state: the epoch's part
    (a promotion begins one) and their own."""

    clock: Clock
    scan_cursor: int
    settings: EngineSettings
    wakeups: Wakeups


def promote(
    state: OfficeState, epoch: int, lease_until: float | None, index_limit: int | None = None
) -> None:
    if epoch <= state.office.epoch:
        raise FailedPrecondition(
            f"promote: epoch {epoch} is not above this node's epoch {state.office.epoch}"
        )
    begin_epoch(state, epoch)
    state.office.role = Role.MASTER
    state.office.fenced = False
    state.office.lease_until = lease_until
    state.office.index_limit = index_limit
    state.office.fire_limit = None
    state.office.progress_written = -1
    state.office.firing_since_ms = state.clock.now_ms()
    _wake(state)


def follow(state: OfficeState) -> None:
    state.office.role = Role.REPLICA
    state.office.fenced = False
    state.office.lease_until = None
    state.office.index_limit = None
    # nothing past the scan's own point fires until the master's PROGRESS says so
    state.office.fire_limit = min(state.office.fire_limit or state.scan_cursor, state.scan_cursor)
    _wake(state)


def fence(state: OfficeState) -> None:
    state.office.fenced = True


def renew(state: OfficeState, until: float | None) -> None:
    was = state.office.delivering()
    if until is None or state.office.lease_until is None:
        state.office.lease_until = until
    else:
        state.office.lease_until = max(state.office.lease_until, until)
    if not was and state.office.delivering():  # a lapse ended: firing again from now
        state.office.firing_since_ms = state.clock.now_ms()
        _wake(state)


def refuse_unless_master(state: OfficeState, what: str, master: str = "") -> None:
    """Raise unless this node may ack ``what`` now: ``NotMaster`` on a replica (the
    client goes to the master), ``Unavailable`` on a fenced master or one whose
    lease lapsed (the next master takes it, or this one once renewed)."""
    if state.office.role is Role.REPLICA:
        raise NotMaster(what, state.settings.shard, state.office.epoch, master, 0)
    if state.office.fenced:
        raise Unavailable(
            f"{what}: the master of shard {state.settings.shard} (epoch {state.office.epoch}) is "
            "fenced: a failover is under way; retry shortly"
        )
    if (
        state.office.lease_until is not None
        and state.clock.monotonic_s() >= state.office.lease_until
    ):
        raise Unavailable(
            f"{what}: the master of shard {state.settings.shard} (epoch {state.office.epoch}) lost "
            "its lease (its control plane has not reached it); retry shortly"
        )


def refuse_unless_still(state: OfficeState, what: str, epoch: int, master: str = "") -> None:
    """Raise unless this node may still ack ``what``, admitted in ``epoch``: the
    checks of ``refuse_unless_master``, and ``Unavailable`` when the node has
    changed epoch since (the write's fate is then the new epoch's: it is in this
    log, and a client that retries gets at-least-once)."""
    refuse_unless_master(state, what, master)
    if state.office.epoch != epoch:
        raise Unavailable(
            f"{what}: the master of shard {state.settings.shard} moved from epoch {epoch} "
            f"to {state.office.epoch} while writing; retry shortly"
        )


def _wake(state: OfficeState) -> None:
    w = state.wakeups
    for cv in (w.link, w.scan, w.release):
        cv.notify()
