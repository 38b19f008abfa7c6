"""A node's calls about recurring schedules, in the engine's own values
(``ScheduleCalls``, one per node, ``Calls.recurring``): create, read, list,
update, pause, resume, delete and the next firing times, onto the engine's
facade (``Engine.create_schedule`` ...), and a spec's preview (``recurrence.calendar``).

A schedule belongs to the shard its name hashes to, as a message key does
(``ownership.check_key_owner`` of the name): another shard refuses a call about it
with WRONG SHARD naming the owner before anything is read or written, and while a
finishing rebalance moves the name the servicer waits for the map to switch, as
for a call by key (``Calls.until_unheld``). A list is this shard's schedules
alone (the clients merge every shard's); a preview needs no shard.

Invariants: a write is logged by the engine as its shard's writes are and may
wait for an fsync, so it runs on the node's pool (on the loop with async flush);
a read (a plan's record, a list's records, the calendar's arithmetic) runs on the
pool, off the loop. Names are checked before ownership (a malformed name is
INVALID_ARGUMENT naming ``name``, never a wrong shard). A replica refuses a write
(``NotMaster``). Errors are raised as ``DelayqError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..engine import Engine
from ..recurrence.calendar import firings
from ..recurrence.spec import ScheduleSpec, check_schedule_name
from ..types import Schedule, SchedulePage
from .groupcalls import Runs
from .ownership import check_key_owner
from .topology import Topology

__all__ = ["ScheduleCalls"]

T = TypeVar("T")


class ScheduleCalls:
    def __init__(self, engine: Engine, topology: Topology, run: Runs, inline_writes: bool) -> None:
        """``run``: ``Calls.run`` (the pool, the map's re-read on a wrong shard);
        ``inline_writes``: writes run on the loop (async flush)."""
        self._engine = engine
        self._topology = topology
        self._shard = engine.settings.shard
        self._run = run
        self._inline_writes = inline_writes

    def _owned(self, name: str, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn`` run once ``name`` is checked and found this shard's."""

        def run() -> T:
            check_schedule_name(name, "name")
            check_key_owner(
                self._topology.map, self._shard, [name], "name", self._topology.moving()
            )
            return fn()

        return run

    async def _write(self, name: str, fn: Callable[[], T]) -> T:
        return await self._run(self._owned(name, fn), inline=self._inline_writes)

    async def _read(self, name: str, fn: Callable[[], T]) -> T:
        return await self._run(self._owned(name, fn))

    async def create(self, name: str, spec: ScheduleSpec, paused: bool = False) -> Schedule:
        """Store a new schedule (``AlreadyExists`` when the name is taken)."""
        return await self._write(name, lambda: self._engine.create_schedule(name, spec, paused))

    async def get(self, name: str) -> Schedule:
        return await self._read(name, lambda: self._engine.get_schedule(name))

    async def update(self, name: str, spec: ScheduleSpec) -> Schedule:
        return await self._write(name, lambda: self._engine.update_schedule(name, spec))

    async def pause(self, name: str, paused: bool) -> Schedule:
        """Pause the schedule (``paused``) or resume it."""
        e = self._engine
        act = e.pause_schedule if paused else e.resume_schedule
        return await self._write(name, lambda: act(name))

    async def delete(self, name: str) -> None:
        await self._write(name, lambda: self._engine.delete_schedule(name))

    async def next_firings(self, name: str, count: int) -> list[int]:
        """The next ``count`` nominal times of a stored schedule."""
        return await self._read(name, lambda: self._engine.next_firings(name, count))

    async def listing(self, limit: int, after: str) -> SchedulePage:
        """This shard's schedules by name, the first ``limit`` after ``after``."""
        return await self._run(lambda: self._engine.list_schedules(limit, after))

    async def preview(self, spec: ScheduleSpec, count: int) -> list[int]:
        """The first ``count`` nominal times of ``spec`` from now, stored nowhere (an
        interval anchored at its start, else now)."""
        now = self._engine.clock.now_ms()
        return await self._run(lambda: firings(spec, now, count, spec.start_ms or now))
