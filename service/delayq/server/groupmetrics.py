"""The families with a series per consumer group of a topic (pure: from the
engine's ``GroupStats``, for ``metrics.topic_families``): where the group stands
(backlog, ready, in flight and its limit, waiting out a backoff, oldest unacked),
its policy's state (paused) and what delivery did (redelivered, dead-lettered,
throttled, retries by attempt). Names, types and labels are pinned by
``tests/server/test_metric_names.py`` and listed in ``docs/operations.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import pairwise
from operator import attrgetter

from ..delivery.types import ATTEMPT_BUCKETS
from ..engine import GroupStats
from .exposition import Family, labels

__all__ = ["ATTEMPT_LABELS", "group_families"]

ATTEMPT_LABELS = (
    *(str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}" for lo, hi in pairwise(ATTEMPT_BUCKETS)),
    f"{ATTEMPT_BUCKETS[-1]}+",
)
"""``delayq_group_retries_total``'s ``attempt`` label: the buckets of
``GroupStats.retries`` (the attempt that failed)."""

_FAMILIES: tuple[tuple[str, str, str, Callable[[GroupStats], float]], ...] = (
    # (name, type, help, how a GroupStats gives the value)
    (
        "delayq_group_backlog_messages",
        "gauge",
        "Messages delivered to the topic, not yet acked by the group.",
        attrgetter("backlog"),
    ),
    (
        "delayq_group_ready_messages",
        "gauge",
        "Messages delivered to the topic, not yet handed to the group.",
        attrgetter("ready"),
    ),
    (
        "delayq_group_inflight_messages",
        "gauge",
        "Messages handed to the group, not acked (their invisibility running).",
        attrgetter("inflight"),
    ),
    (
        "delayq_group_inflight_limit_messages",
        "gauge",
        "This shard's share of the group's in-flight limit (0: none).",
        attrgetter("inflight_limit"),
    ),
    (
        "delayq_group_waiting_messages",
        "gauge",
        "Messages handed to the group that failed (lapsed or nacked), waiting out the backoff.",
        attrgetter("waiting"),
    ),
    (
        "delayq_group_oldest_unacked_age_seconds",
        "gauge",
        "Age since its release of the group's oldest unacked message (0: none).",
        lambda g: g.oldest_unacked_ms / 1000,
    ),
    (
        "delayq_group_paused",
        "gauge",
        "1 while the group is paused (handed nothing), else 0.",
        lambda g: int(g.paused),
    ),
    (
        "delayq_group_redelivered_total",
        "counter",
        "Messages handed to the group again after their invisibility ran out.",
        attrgetter("redelivered"),
    ),
    (
        "delayq_group_dead_lettered_total",
        "counter",
        "Messages the group sent to its dead-letter topic (dlq.<group>).",
        attrgetter("dead_lettered"),
    ),
    (
        "delayq_group_throttled_total",
        "counter",
        "Receives of the group its rate limit cut short.",
        attrgetter("throttled"),
    ),
)


def group_families(stats: Mapping[tuple[str, str], GroupStats]) -> list[Family]:
    """The per-group families of ``stats`` ((topic, group) -> its ``GroupStats``)."""
    rows = [(labels(topic=t, group=g), s) for (t, g), s in sorted(stats.items())]
    out = [
        Family(name, kind, doc, [(text, value(s)) for text, s in rows])
        for name, kind, doc, value in _FAMILIES
    ]
    retries = Family(
        "delayq_group_retries_total",
        "counter",
        "Retries the group's backoff scheduled (a lapse or a nack), by the attempt that failed.",
        [
            (f'{text},attempt="{attempt}"', n)
            for text, s in rows
            for attempt, n in zip(ATTEMPT_LABELS, s.retries, strict=True)
        ],
    )
    return [*out, retries]
