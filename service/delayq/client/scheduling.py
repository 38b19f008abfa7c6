# GENERATED from aioscheduling.py by scripts/gen_sync_client.py: edit that, then run it.
"""``delayq.client.scheduling.Scheduling``: ``Client``'s recurring
schedules (its base); generated from ``aioscheduling.py`` (``AsyncScheduling``), which
documents it.
"""

from __future__ import annotations

from typing import TypeVar

from ..recurrence.spec import ScheduleSpec
from . import core, schedules
from .routed import Routed
from .schedules import Schedule, SchedulePage

__all__ = ["Scheduling"]

R = TypeVar("R")


class Scheduling(Routed):
    """Recurring schedules, for ``AsyncClient``."""

    def _by_name(self, name: str, call: core.Call[R]) -> R:
        """``call`` at the master of the shard owning ``name``."""
        return (self._routed(self.fanout_by_key([name], lambda _: core.one(call))))[0]

    def create_schedule(self, name: str, spec: ScheduleSpec, *, paused: bool = False) -> Schedule:
        """Store a recurring schedule named ``name`` (``[A-Za-z0-9][A-Za-z0-9._-]*``,
        at most 128): each nominal time of ``spec`` fires one message made of its
        template, keyed by the name, exactly once; ``paused``: made paused, nothing
        fires until ``resume_schedule``. ``AlreadyExists`` when the name is taken."""
        call = schedules.create(name, spec, paused, self.timeout_s)
        return self._by_name(name, call)

    def get_schedule(self, name: str) -> Schedule:
        """The schedule and where it stands; ``NotFound`` when none has the name."""
        return self._by_name(name, schedules.get(name, self.timeout_s))

    def list_schedules(self, page_size: int = 100, page_token: str = "") -> SchedulePage:
        """The schedules of every shard by name, ``page_size`` (at most 1000) after
        ``page_token`` (a ``next_page_token``; "" from the first)."""
        route = self._table()
        call = schedules.listing(page_size, page_token, self.timeout_s)
        pages = self._routed(self.fanout_shards(route.count, lambda: call))
        return schedules.merged(pages, page_size or 100)

    def update_schedule(self, name: str, spec: ScheduleSpec) -> Schedule:
        """Replace the schedule's spec: its next firing is computed again from now (a
        pause is kept) and the firings written ahead and not yet due are cancelled."""
        return self._by_name(name, schedules.update(name, spec, self.timeout_s))

    def pause_schedule(self, name: str) -> Schedule:
        """Fire nothing until ``resume_schedule``."""
        return self._by_name(name, schedules.pause(name, True, self.timeout_s))

    def resume_schedule(self, name: str) -> Schedule:
        """Undo ``pause_schedule``: the times missed meanwhile go by its catch-up policy."""
        return self._by_name(name, schedules.pause(name, False, self.timeout_s))

    def delete_schedule(self, name: str) -> None:
        """Delete the schedule and its firings not yet due; ``NotFound`` when none."""
        self._by_name(name, schedules.delete(name, self.timeout_s))

    def next_firings(
        self, name: str | None = None, *, spec: ScheduleSpec | None = None, count: int = 10
    ) -> list[int]:
        """The next ``count`` (at most 1000) nominal firing times (epoch ms) of the
        schedule ``name`` (none while paused or ended), or of ``spec``, stored
        nowhere (a preview, from now)."""
        call = schedules.next_firings(name, spec, count, self.timeout_s)
        if name is not None:
            return self._by_name(name, call)
        return self._run(call)
