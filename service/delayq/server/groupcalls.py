"""A node's calls about consumer groups' delivery policies, in the engine's own
values (``GroupCalls``, one per node, ``Calls.groups``): set, read, list, pause
and resume, onto the engine's facade (``Engine.set_group_policy`` ...). Shared by
every protocol like ``calls`` (delayq's servicer; the RocketMQ front-end reads a
group's backoff for its consumers' Settings).

Invariants: a write (set, pause, resume) is logged by the engine as its shard's
writes are and may wait for an fsync, so it runs on the node's pool, never on the
event loop (with async flush it runs on the loop, as every write then does); a
read runs on the loop. A replica refuses a write as it refuses an Ack
(``NotMaster``: FAILED_PRECONDITION naming the shard, whose master takes it).
The engine checks the policy and the names (``InvalidArgument`` naming the
field); errors are raised as ``DelayqError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol, TypeVar

from ..delivery.policy import GroupPolicy
from ..engine import Engine
from ..role import Role

__all__ = ["GroupCalls", "GroupEntry", "Runs"]

T = TypeVar("T")


class Runs(Protocol):
    """``Calls.run``: an engine call on the pool (on the loop when ``inline``)."""

    def __call__(self, fn: Callable[[], T], *, inline: bool = False) -> Awaitable[T]: ...


class GroupEntry(NamedTuple):
    """One group of one topic as this shard knows it: its policy, and whether it was
    set (else the server's defaults)."""

    topic: str
    group: str
    policy: GroupPolicy
    explicit: bool


class GroupCalls:
    def __init__(self, engine: Engine, run: Runs, inline_writes: bool) -> None:
        """``run``: ``Calls.run`` (the pool, the map's re-read on a wrong shard);
        ``inline_writes``: writes run on the loop (async flush)."""
        self._engine = engine
        self._run = run
        self._inline_writes = inline_writes

    async def _write(self, fn: Callable[[], GroupPolicy]) -> GroupPolicy:
        return await self._run(fn, inline=self._inline_writes)

    async def set_policy(self, topic: str, group: str, policy: GroupPolicy) -> GroupEntry:
        """Set the group's policy; the one stored."""
        stored = await self._write(lambda: self._engine.set_group_policy(topic, group, policy))
        return GroupEntry(topic, group, stored, True)

    def default_attempts(self, group: str) -> int:
        """The server's ``max_attempts`` for ``group`` (``--max-delivery-attempts``):
        what a policy set without one stores."""
        return self._engine.settings.delivery_attempts.for_group(group)

    async def pause(self, topic: str, group: str, paused: bool) -> GroupEntry:
        """Pause the group (``paused``) or resume it; the policy stored."""
        stored = await self._write(lambda: self._engine.pause_group(topic, group, paused))
        return GroupEntry(topic, group, stored, True)

    async def policy(self, topic: str, group: str) -> GroupEntry:
        """The group's policy: the one set, else the server's defaults."""

        def read() -> GroupEntry:
            for entry in self._entries(topic):
                if entry.group == group:
                    return entry
            return GroupEntry(topic, group, self._engine.group_policy(topic, group), False)

        return await self._run(read, inline=True)

    async def entries(self, topic: str | None) -> list[GroupEntry]:
        """Every group this shard knows (set, or received by), by topic then group;
        of ``topic`` alone when given."""
        return await self._run(lambda: self._entries(topic), inline=True)

    def node(self) -> tuple[int, Role, int]:
        """The node's epoch, role and CommitLog end now (what answered: the clients
        name the shard and its node in an error)."""
        e = self._engine
        return e.epoch, e.role, e.commitlog_end

    def _entries(self, topic: str | None) -> list[GroupEntry]:
        return [GroupEntry(*e) for e in self._engine.group_policies(topic)]  # sorted there
