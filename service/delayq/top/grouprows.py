"""``delayq top``'s group section (pure: no I/O, no clock): a row per consumer group
of a topic, from the ``Stats`` of each shard's master (``samples.NodeSample``):

- ``backlog`` and ``dead_lettered`` summed over the shards (the merged
  ``TopicStats``' ``group_backlog`` and ``group_dead_lettered``);
- its delivery (``TopicStats.groups``, one shard's ``GroupStats``): ``shards``
  that report it, ``paused_shards`` of them paused (a pause is set on every
  shard; fewer is a shard that disagrees, which ``delayq group set`` mends),
  ``in_flight`` summed against ``in_flight_limit``, the sum of the shards'
  shares (0: none);
- ``throttled_per_s`` (receives its rate cut short) and ``retries_per_s``
  (retries its backoff scheduled) as the rise of the shards' counters since the
  previous sample over the time between them, each shard against the same master
  (by address) then; None on the first frame, when a shard's master changed or a
  counter fell (a restart), or when no shard reports the group's delivery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..client.results import GroupStats, TopicStats
from .samples import NodeSample

__all__ = ["GroupRow", "group_rows", "per_s"]


@dataclass(frozen=True, kw_only=True)
class GroupRow:
    topic: str
    group: str
    backlog: int
    dead_lettered: int
    shards: int = 0
    paused_shards: int = 0
    in_flight: int = 0
    in_flight_limit: int = 0
    throttled_per_s: float | None = None
    retries_per_s: float | None = None


def per_s(now: int, before: int | None, elapsed_s: float | None) -> float | None:
    """The rise from ``before`` to ``now`` a second; None when not known (no
    ``before`` or elapsed time, or the counter fell)."""
    if before is None or elapsed_s is None or now < before:
        return None
    return (now - before) / elapsed_s


def _delivery(node: NodeSample) -> dict[tuple[str, str], GroupStats]:
    stats = node.stats
    if stats is None:
        return {}
    return {(t.topic, g.group): g for t in stats.topics for g in t.groups}


def _rise(
    name: str,
    now: Mapping[int, GroupStats],
    before: Mapping[int, Mapping[tuple[str, str], GroupStats]],
    key: tuple[str, str],
    elapsed_s: float | None,
) -> float | None:
    """The sum over the shards of counter ``name``'s rise a second."""
    total = 0.0
    for shard, g in now.items():
        old = before.get(shard)
        rise = per_s(
            getattr(g, name),
            None if old is None else getattr(old.get(key), name, 0),
            elapsed_s,
        )
        if rise is None:
            return None
        total += rise
    return total if now else None


def group_rows(
    merged: Iterable[TopicStats],
    cur: Mapping[int, NodeSample],
    prev: Mapping[int, NodeSample],
    elapsed_s: float | None,
) -> tuple[GroupRow, ...]:
    """A row per group of the masters ``cur`` (shard -> its master, its Stats in;
    ``merged``: their topics summed, ``client.routing.merge_stats``), with rates
    since ``prev`` (the masters of the sample before; module notes)."""
    backlog = {(t.topic, g): n for t in merged for g, n in t.group_backlog.items()}
    dead = {(t.topic, g): n for t in merged for g, n in t.group_dead_lettered.items()}
    delivery: dict[tuple[str, str], dict[int, GroupStats]] = {}
    before: dict[int, dict[tuple[str, str], GroupStats]] = {}
    for shard, m in sorted(cur.items()):
        for key, gs in _delivery(m).items():
            delivery.setdefault(key, {})[shard] = gs
        old = prev.get(shard)
        if old is not None and old.address == m.address and old.stats is not None:
            before[shard] = _delivery(old)
    rows = []
    for key in sorted(set(backlog) | set(dead) | set(delivery)):
        shards = delivery.get(key, {})
        rows.append(
            GroupRow(
                topic=key[0],
                group=key[1],
                backlog=backlog.get(key, 0),
                dead_lettered=dead.get(key, 0),
                shards=len(shards),
                paused_shards=sum(g.paused for g in shards.values()),
                in_flight=sum(g.in_flight for g in shards.values()),
                in_flight_limit=sum(g.in_flight_limit for g in shards.values()),
                throttled_per_s=_rise("throttled", shards, before, key, elapsed_s),
                retries_per_s=_rise("retries", shards, before, key, elapsed_s),
            )
        )
    return tuple(rows)
