"""Where each consumer group of one topic stands (``of_topic``), for the Stats
call and metrics (pure but for one ready-entry read per group; runs under the
engine's lock).
"""

from __future__ import annotations

import collections

from ..errors import CorruptData
from ..store.readyindex import ReadyIndex
from .grouppolicies import GroupPolicies
from .groups import GroupState
from .types import GroupStats

__all__ = ["of_topic"]


def of_topic(
    idx: ReadyIndex | None,
    groups: dict[str, GroupState],
    policies: GroupPolicies,
    dead_lettered: collections.Counter[tuple[int, str]],
    topic_id: int,
    now_ms: int,
) -> dict[str, GroupStats]:
    """Per group of the topic: where it stands (``GroupStats``). Reads one ready
    entry per group (its oldest unacked message's release time; an entry that
    cannot be read gives no age, 0, and raises nothing: a scrape is no reader to
    report it to)."""
    length = idx.length if idx else 0
    out: dict[str, GroupStats] = {}
    for name, st in groups.items():
        oldest_ms = 0
        if idx is not None and idx.floor <= st.committed < length:
            try:
                delivered = int(idx.read_many(st.committed, 1)["delivered_ms"][0])
                oldest_ms = max(0, now_ms - delivered)
            except (CorruptData, OSError):  # an entry receiving would report: no age
                pass
        enforced = policies.enforced(topic_id, name)
        out[name] = GroupStats(
            backlog=st.backlog(length),
            ready=st.unhanded(length),
            inflight=st.flying(),
            oldest_unacked_ms=oldest_ms,
            redelivered=st.redelivered,
            dead_lettered=dead_lettered.get((topic_id, name), 0),
            policy=policies.get(topic_id, name),
            explicit=(topic_id, name) in policies.stored,
            paused=enforced.paused,
            inflight_limit=enforced.max_in_flight,
            waiting=len(st.waiting),
            attempts=tuple(st.attempts()),
            next_retry_ms=st.next_due_ms(),
            throttled=policies.throttled.get((topic_id, name), 0),
            retries=tuple(st.retries),
        )
    return out
