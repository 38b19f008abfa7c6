"""Which consumer groups' delivery policies the shards of a change of the shard
count lack (pure: what shards hold in, what to set out), for the resharding
driver (``reshardingdriver.copy_policies``, before the job starts), so that a
shard taking moved messages enforces its topics' groups' policies before it
hands any out. The calls that read and set them: ``policycopy``.

A policy is topic-wide, but each shard keeps its own copy (POLICY records of its
log): the typed client sets it on every shard's master, and a shard that joins
later holds none. The sources are the shards the map lists as not joining;
every listed shard gets each policy set explicitly on a source that it does not
hold explicitly itself (``missing``): a policy a shard holds is never
overwritten, so a policy set through the client during the change (it reaches
every listed shard, joining ones too) is kept. Sources that disagree (a set that
reached some shards only) give the lowest-numbered source's policy, and are
named (``disagreeing``). ``paused`` is part of a policy: a paused group stays
paused on the shards it joins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..v1 import delayq_pb2

__all__ = ["HeldPolicy", "disagreeing", "missing"]


@dataclass(frozen=True, kw_only=True)
class HeldPolicy:
    """A group's policy as one shard holds it (set explicitly), as on the wire."""

    topic: str
    group: str
    policy: delayq_pb2.GroupPolicy

    @property
    def name(self) -> tuple[str, str]:
        return self.topic, self.group


def _first(held: Mapping[int, Sequence[HeldPolicy]], sources: Iterable[int]) -> list[HeldPolicy]:
    """Each group's policy on the lowest-numbered source holding it."""
    out: dict[tuple[str, str], HeldPolicy] = {}
    for shard in sorted(sources):
        for h in held.get(shard, ()):
            out.setdefault(h.name, h)
    return [out[k] for k in sorted(out)]


def missing(
    held: Mapping[int, Sequence[HeldPolicy]], sources: Iterable[int], targets: Iterable[int]
) -> dict[int, list[HeldPolicy]]:
    """Per target shard, the sources' policies it does not hold explicitly (by
    topic and group; none listed for a shard lacking nothing)."""
    wanted = _first(held, sources)
    out: dict[int, list[HeldPolicy]] = {}
    for shard in sorted(targets):
        has = {h.name for h in held.get(shard, ())}
        lacking = [h for h in wanted if h.name not in has]
        if lacking:
            out[shard] = lacking
    return out


def disagreeing(held: Mapping[int, Sequence[HeldPolicy]], sources: Iterable[int]) -> list[str]:
    """The groups whose policy differs between sources: ``topic/group``."""
    seen: dict[tuple[str, str], delayq_pb2.GroupPolicy] = {}
    odd: set[tuple[str, str]] = set()
    for shard in sorted(sources):
        for h in held.get(shard, ()):
            first = seen.setdefault(h.name, h.policy)
            if first != h.policy:
                odd.add(h.name)
    return [f"{t}/{g}" for t, g in sorted(odd)]
