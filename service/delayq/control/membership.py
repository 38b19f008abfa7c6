"""The recorded in-sync set: who joins it and who may leave it (pure).

The in-sync set is the supervisor's record (``record.ShardRecord.insync``); the
master learns it from the ``insync`` field of every probe and counts those
members for sync acks and its high-water mark (the lowest ``flushed`` over the
set). ``failover.decide`` elects only from it. Both changes are read off the
recorded master's own answer, and only while that master is in office (it
answers as the master at the recorded epoch, unfenced): its replica list is the
one place where a replica's fsynced position is what the master counts.

**Join** (``joiners``): a replica the master lists as connected, with ``flushed``
at or above the master's high-water mark, that itself answers as an unfenced
replica at the master's epoch. Recorded first, then told to the master by the
next probe.

**Leave** (``leaver``): a member other than the master that has not counted as
in (``counts_in``: it answers at the recorded epoch and the master lists it
connected) for longer than the lease, or one that is *retiring* (its pod is
being deleted or scaled away) at once. A member the keeper has never heard
from since it began watching (a process still starting with its shard: on a
busy machine a node takes seconds, a master as long as its replicas) keeps its
place until ``START_GRACE_MS`` after the keeper first saw the master in office,
so a cluster's start drops nobody for being slow to come up. The master is
told first (a probe with the smaller set) and the smaller set recorded only
once that probe was answered.

Why the orders differ: the set the master counts must always be a subset of the
recorded one. The decision elects from the recorded set, so every member the
master counted toward an ack or its high-water mark must still be recorded when
the decision runs. Growing: record, then tell (until told, the master counts
the old, smaller set). Shrinking: tell, then record (until recorded, the record
still holds the member the master no longer counts). A crash between the two
steps leaves the record a superset, which is safe; the next tick tells the
master the recorded set again.

**Never shrink below safety** (``may_remove``): member X leaves only if at least
``min_insync`` of the remaining members (the master included) hold everything
that may depend on X:

- the master's high-water mark (records that may have been delivered), in
  either mode: rule 4 of the decision needs an elected node to hold it;
- in sync mode also X's own ``flushed``: a write acknowledged with X's fsync
  among the ``min_insync`` may lie above the high-water mark (the mark is the
  *lowest* member's position), and once X is out such a write must still be on
  ``min_insync`` recorded members, or rule 6 of the decision could elect a
  member without it. X is out of touch with the master, so its position no
  longer grows; the others' only do.

A remaining member counts only while it is in (a member that is not may have
lost what the master last heard it had); the master counts with its own
``flushed``. Async mode acks on the master's own append, so ``min_insync`` is 1
there and the master alone usually suffices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .failoverview import MASTER, REPLICA
from .views import Answer, Watch

__all__ = [
    "START_GRACE_MS",
    "caught_up",
    "counts_in",
    "in_office",
    "joiners",
    "leaver",
    "may_remove",
]


START_GRACE_MS = 10_000
"""How long after the master first came into office a member never heard from
keeps its place."""


def in_office(master: Answer | None, epoch: int) -> bool:
    """The recorded master's answer says it holds the office at ``epoch``."""
    return (
        master is not None and master.role == MASTER and master.epoch == epoch and not master.fenced
    )


def counts_in(name: str, epoch: int, master: Answer, own: Answer | None) -> bool:
    """Node ``name`` answers at ``epoch`` and the master lists it connected."""
    r = master.replica(name)
    return own is not None and own.epoch == epoch and r is not None and r.connected


def caught_up(master: Answer, name: str) -> bool:
    """The master lists node ``name`` connected and fsynced up to its high-water
    mark (all that may have been delivered)."""
    r = master.replica(name)
    return r is not None and r.connected and r.flushed >= master.high_water


def joiners(
    epoch: int,
    master_name: str,
    insync: frozenset[str],
    master: Answer,
    answers: Mapping[str, Answer | None],
) -> frozenset[str]:
    """The nodes to add to the recorded set now (empty: none)."""
    out = set()
    for r in master.replicas:
        own = answers.get(r.name)
        if (
            r.name not in insync
            and r.name != master_name
            and own is not None
            and own.role == REPLICA
            and own.epoch == epoch
            and not own.fenced
            and caught_up(master, r.name)
        ):
            out.add(r.name)
    return frozenset(out)


def may_remove(
    name: str,
    insync: Iterable[str],
    flushed: Mapping[str, int],
    *,
    name_flushed: int,
    high_water: int,
    min_insync: int,
    sync: bool,
) -> bool:
    """Whether ``name`` may leave the set (module notes): ``flushed`` is what each
    remaining member holds for sure (0 when unknown), ``name_flushed`` the most
    ``name`` was ever seen to hold at this epoch."""
    bar = max(high_water, name_flushed) if sync else high_water
    holders = [n for n in insync if n != name and flushed.get(n, 0) >= bar]
    return len(holders) >= min_insync


def leaver(
    epoch: int,
    master_name: str,
    insync: frozenset[str],
    master: Answer,
    watches: Mapping[str, Watch],
    *,
    now_ms: int,
    lease_ms: int,
    min_insync: int,
    sync: bool,
    retiring: frozenset[str] = frozenset(),
    started_ms: int | None = None,
) -> str | None:
    """The member to drop now (by name, the first that is out for longer than the
    lease, or is ``retiring``, and may leave), or None. ``watches[n].in_ms`` must
    be current; ``started_ms``: when the master first came into office (None: the
    start grace is over)."""
    answers = {n: (w.last if w.reachable else None) for n, w in watches.items()}
    flushed: dict[str, int] = {master_name: master.flushed}
    for n in insync:
        r = master.replica(n)
        if n != master_name and r is not None and counts_in(n, epoch, master, answers.get(n)):
            flushed[n] = r.flushed
    for name in sorted(insync):
        w = watches.get(name)
        if name == master_name:
            continue
        if name not in retiring and w is not None and _held(w, now_ms, lease_ms, started_ms):
            continue
        top = w.flushed_at(epoch) if w is not None else 0
        if may_remove(
            name,
            insync,
            flushed,
            name_flushed=top,
            high_water=master.high_water,
            min_insync=min_insync,
            sync=sync,
        ):
            return name
    return None


def _held(w: Watch, now_ms: int, lease_ms: int, started_ms: int | None) -> bool:
    """Member ``w`` keeps its place now: in touch within the lease, or never heard
    from while the shard is still starting."""
    starting = started_ms is not None and now_ms - started_ms <= START_GRACE_MS
    return (starting and w.last is None) or now_ms - w.in_ms <= lease_ms
