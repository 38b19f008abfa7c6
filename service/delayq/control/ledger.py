"""A shard keeper's record of its shard (``Ledger``) and what follows a change of
it: the durable record first (``store``), the new master published into the shard
map once it took office (``publish``), the story told (``on_event``) and logged.

Invariants: ``record`` is what ``store`` last accepted (a failed store changes
nothing and says so); a master is published once per (master, epoch), only after
the record says it is in office; a ``Nothing`` or ``Stuck`` reason is logged when
its gist (numbers blanked) changes, not every tick. One keeper thread owns it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable

from .failoveractions import Action, Fence, Follow, Nothing, Promote, Stuck
from .record import ShardRecord

__all__ = ["Ledger", "gist", "log"]

log = logging.getLogger("delayq.cluster")


def gist(action: Action) -> str:
    """The action with its numbers blanked: what 'the same reason' means for logs."""
    return re.sub(r"\d+", "#", repr(action))


class Ledger:
    def __init__(
        self,
        shard: int,
        record: ShardRecord,
        *,
        store: Callable[[ShardRecord], None],
        publish: Callable[[ShardRecord], None],
        on_event: Callable[[str, str], None] | None = None,
    ) -> None:
        """``store`` records durably and ``publish`` puts a master change into the
        shard map (both raise ``OSError``); ``on_event(reason, message)`` must not
        raise (see ``keeper``'s notes for the reasons)."""
        self.shard = shard
        self._record = record
        self._store = store
        self._publish = publish
        self._on_event = on_event
        self._published = (record.master, record.epoch)
        self._said = ""
        self._lost_epoch = 0
        self.seen_in_office = False
        """The recorded master was seen in office by this keeper (since it began)."""
        self.office_since_ms: int | None = None
        """When this keeper first saw a recorded master in office (None: not yet):
        the shard's start, from which a member never heard from keeps its place
        (``membership.START_GRACE_MS``)."""

    @property
    def record(self) -> ShardRecord:
        return self._record

    def save(self, new: ShardRecord) -> bool:
        """Record ``new`` durably; False (logged) when that failed."""
        try:
            self._store(new)
        except OSError as exc:
            log.error("shard %d: cannot record %s: %s", self.shard, new, exc, extra=self.fields())
            return False
        self._record = new
        return True

    def took_office(self, now_ms: int) -> None:
        """The recorded master answered as the master at the recorded epoch."""
        self.seen_in_office = True
        if self.office_since_ms is None:
            self.office_since_ms = now_ms
        if not self._record.in_office:
            self.save(dataclasses.replace(self._record, in_office=True))

    def stuck(self, action: Stuck) -> None:
        """Record the reason the shard cannot fail over (once a gist)."""
        rec = self._record
        if rec.stuck != action.reason and gist(action) != gist(Stuck(rec.stuck)):
            self.save(dataclasses.replace(rec, stuck=action.reason))
            self.event("FailoverStuck", f"shard {self.shard}: {action.reason}")

    def unstuck(self) -> None:
        if self._record.stuck:
            self.save(dataclasses.replace(self._record, stuck=""))

    def first_loss(self) -> bool:
        """True once per recorded epoch: the first sign its master is going (a
        hand-over or a failover begins), for the one event that says so."""
        if self._lost_epoch == self._record.epoch:
            return False
        self._lost_epoch = self._record.epoch
        return True

    def publish_if_due(self) -> None:
        rec = self._record
        if not rec.in_office or (rec.master, rec.epoch) == self._published:
            return
        try:
            self._publish(rec)
        except OSError as exc:
            log.error("shard %d: cannot write the shard map: %s", self.shard, exc)
            return
        self._published = (rec.master, rec.epoch)

    def event(self, reason: str, message: str) -> None:
        if self._on_event is not None:
            self._on_event(reason, message)

    def say(self, action: Action) -> None:
        """Log a ``Nothing`` or ``Stuck`` when its gist changes (commands are
        logged where they are sent)."""
        g = gist(action)
        if g == self._said or isinstance(action, (Fence, Promote, Follow)):
            return
        self._said = g
        if isinstance(action, Stuck):
            log.error(
                "shard %d: stuck: %s",
                self.shard,
                action.reason,
                extra=self.fields(stuck=action.reason),
            )
        elif isinstance(action, Nothing):
            log.info("shard %d: %s", self.shard, action.reason, extra=self.fields())

    def fields(self, **more: object) -> dict[str, object]:
        """Structured log fields naming the shard and its record."""
        rec = self._record
        return {"shard": self.shard, "recorded_epoch": rec.epoch, "master": rec.master, **more}
