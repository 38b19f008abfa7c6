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
  counter fell (a restart), or when no shard reports the group's delivery;
- a push group's (``GroupStats.push``, on the masters that push it):
  ``pushes_per_s`` (its 2xx answers' rise a second, as the rates above),
  ``push_failing`` (the most failed requests in a row of its shards) and
  ``push_ok_age_s`` (seconds from its latest 2xx on any shard to the sample's
  wall time; None before the first); all None for a pull group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter

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
    pushes_per_s: float | None = None
    push_failing: int | None = None
    push_ok_age_s: float | None = None


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
    value: Callable[[GroupStats], int],
    now: Mapping[int, GroupStats],
    before: Mapping[int, Mapping[tuple[str, str], GroupStats]],
    key: tuple[str, str],
    elapsed_s: float | None,
) -> float | None:
    """The sum over the shards of counter ``value``'s rise a second (0 before a
    group its master did not report yet)."""
    total = 0.0
    for shard, g in now.items():
        old = before.get(shard)
        was = None if old is None else old.get(key)
        rise = per_s(
            value(g),
            None if old is None else 0 if was is None else value(was),
            elapsed_s,
        )
        if rise is None:
            return None
        total += rise
    return total if now else None


def _pushed(g: GroupStats) -> int:
    """A push group's 2xx answers (0 for a pull group)."""
    return g.push.requests.get("2xx", 0) if g.push is not None else 0


def _push_figures(
    shards: Mapping[int, GroupStats],
    before: Mapping[int, Mapping[tuple[str, str], GroupStats]],
    key: tuple[str, str],
    elapsed_s: float | None,
    wall_ms: int,
) -> tuple[float | None, int | None, float | None]:
    """``GroupRow``'s ``pushes_per_s``, ``push_failing`` and ``push_ok_age_s``
    (module notes): all None for a pull group."""
    pushing = {shard: g for shard, g in shards.items() if g.push is not None}
    pushes = [g.push for g in pushing.values() if g.push is not None]
    if not pushes:
        return None, None, None
    last_ok = max(p.last_success_ms for p in pushes)
    return (
        _rise(_pushed, pushing, before, key, elapsed_s),
        max(p.consecutive_failures for p in pushes),
        max(0.0, (wall_ms - last_ok) / 1000) if last_ok else None,
    )


def group_rows(
    merged: Iterable[TopicStats],
    cur: Mapping[int, NodeSample],
    prev: Mapping[int, NodeSample],
    elapsed_s: float | None,
    wall_ms: int = 0,
) -> tuple[GroupRow, ...]:
    """A row per group of the masters ``cur`` (shard -> its master, its Stats in;
    ``merged``: their topics summed, ``client.routing.merge_stats``), with rates
    since ``prev`` (the masters of the sample before; module notes); ``wall_ms``:
    the sample's Unix ms (push groups' time since their last 2xx)."""
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
        pushes_per_s, push_failing, push_ok_age_s = _push_figures(
            shards, before, key, elapsed_s, wall_ms
        )
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
                throttled_per_s=_rise(attrgetter("throttled"), shards, before, key, elapsed_s),
                retries_per_s=_rise(attrgetter("retries"), shards, before, key, elapsed_s),
                pushes_per_s=pushes_per_s,
                push_failing=push_failing,
                push_ok_age_s=push_ok_age_s,
            )
        )
    return tuple(rows)
