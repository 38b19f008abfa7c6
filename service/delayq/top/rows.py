"""``delayq top``'s figures (pure: no I/O, no clock; times are parameters): two
consecutive samples of a cluster (``samples.Sample``) made into a frame (a row
a node, a topic section and a group section), its rows ordered by a sort key,
and the frame's JSON document. From the samples:

- a node's ``pending`` sums its topics', ``due_next_minute`` the pending whose
  due bucket is within 60 s or overdue (``within_ms`` 0 is overdue, -1 later than
  the last bucket; buckets count a message by the last ms of its minute, so this
  is the Stats' own coarseness), ``lateness_p99_ms`` is its Stats';
- a shard's master (for lag, in-sync and the sections) is the serving node that
  answers as an unfenced master, the highest epoch if two do; none if none does;
- a replica's lag is what its master's admin answer lists for it by name (bytes
  and ms), else the master's log end minus its own (bytes; ms unknown); its
  ``insync`` whether its name is in the master's in-sync set (None: unknown; a
  replica down may still be in it);
- ``delivered_per_s`` is the rise of a delivered counter from the previous sample
  to this one over the time between them: of the same node (by address), which
  answered both; None on the first frame, or when the counter fell (a restart);
- the topic and group sections sum the masters' Stats
  (``client.routing.merge_stats``; a group's delivery: ``grouprows``); a shard
  without a master in this sample is left out of them (``shards_answering``
  counts those that are in), and a topic's rate is None when one of its shards
  cannot be compared; so are the recurring schedules (``ScheduleRow``: held and
  missed summed, firings a second as a topic's rate, the worst lateness p99).

What is not known is None: JSON null, "-" on screen.

The JSON document (``to_json``; ``delayq top --once --json``), keys only ever
added::

    {"source": "dir /tmp/c", "sampled_ms": 1767225600000, "took_ms": 12,
     "elapsed_s": 1.0, "topology_epoch": 1, "shards": 3, "shards_answering": 3,
     "nodes_answering": 6, "sort": "name", "error": "",
     "nodes": [{"shard": 0, "node": "node-0", "address": "127.0.0.1:7500",
                "role": "master", "epoch": 1, "state": "serving", "fenced": false,
                "pending": 120, "due_next_minute": 4, "delivered": 300,
                "delivered_per_s": 12.5, "lateness_p50_ms": 1, "lateness_p99_ms": 5,
                "log_end": 4096, "lag_bytes": 0, "lag_ms": 0, "insync": true,
                "insync_set": ["node-0", "node-1"]}, ...],
     "topics": [{"topic": "orders", "pending": 360, "due_next_minute": 12,
                 "delivered": 900, "delivered_per_s": 37.5, "cancelled": 0}, ...],
     "groups": [{"topic": "orders", "group": "billing", "backlog": 40,
                 "dead_lettered": 0, "shards": 3, "paused_shards": 0,
                 "in_flight": 12, "in_flight_limit": 60, "throttled_per_s": 2.0,
                 "retries_per_s": 0.5, "pushes_per_s": null, "push_failing": null,
                 "push_ok_age_s": null}, ...],
     "schedules": {"schedules": 40, "fired_per_s": 0.67, "missed": 0,
                   "lateness_p99_ms": 0}}

``insync_set`` is the in-sync set a master counts (empty for a replica, or when
unknown); ``elapsed_s`` the seconds between the two samples (null with one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..client.results import ShardStats, TopicStats
from ..client.routing import merge_stats
from ..role import Role
from .grouprows import GroupRow, group_rows, per_s
from .samples import NodeSample, Sample

__all__ = [
    "DUE_SOON_MS",
    "SORTS",
    "Frame",
    "GroupRow",
    "NodeRow",
    "TopicRow",
    "due_soon",
    "frame",
    "order",
    "to_json",
]

DUE_SOON_MS = 60_000
""""Due next minute": the due buckets up to this (and the overdue one, 0)."""

SORTS = ("name", "pending", "delivered", "lateness")
"""Sort keys, in the order ``s`` cycles through them: by shard and node (topics by
name), by pending, by delivered/s, by lateness p99 (each highest first)."""


@dataclass(frozen=True, kw_only=True)
class NodeRow:
    shard: int
    node: str
    address: str
    role: str
    epoch: int
    state: str
    fenced: bool = False
    pending: int | None = None
    due_next_minute: int | None = None
    delivered: int | None = None
    delivered_per_s: float | None = None
    lateness_p50_ms: int | None = None
    lateness_p99_ms: int | None = None
    log_end: int | None = None
    lag_bytes: int | None = None
    lag_ms: int | None = None
    insync: bool | None = None
    insync_set: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TopicRow:
    topic: str
    pending: int
    due_next_minute: int
    delivered: int
    delivered_per_s: float | None
    cancelled: int


@dataclass(frozen=True, kw_only=True)
class ScheduleRow:
    """The recurring schedules of the shards that answered: held, nominal times
    fired a second since the sample before (None: not known, a master new or
    restarted), missed since each master started, the worst firing lateness p99."""

    schedules: int
    fired_per_s: float | None
    missed: int
    lateness_p99_ms: int


@dataclass(frozen=True, kw_only=True)
class Frame:
    """What one refresh shows."""

    source: str
    wall_ms: int
    took_ms: int
    elapsed_s: float | None
    topology_epoch: int
    shards: int
    shards_answering: int
    nodes_answering: int
    nodes: tuple[NodeRow, ...]
    topics: tuple[TopicRow, ...]
    groups: tuple[GroupRow, ...]
    schedules: ScheduleRow = ScheduleRow(schedules=0, fired_per_s=None, missed=0, lateness_p99_ms=0)
    sort: str = "name"
    error: str = ""


def due_soon(topics: Iterable[TopicStats]) -> int:
    """Pending messages due within ``DUE_SOON_MS`` or overdue."""
    return sum(b.count for t in topics for b in t.due if 0 <= b.within_ms <= DUE_SOON_MS)


def _masters(sample: Sample) -> dict[int, NodeSample]:
    out: dict[int, NodeSample] = {}
    for n in sample.nodes:  # map order: the map's master first, so it wins a tie
        if n.acting_master and (n.shard not in out or n.epoch > out[n.shard].epoch):
            out[n.shard] = n
    return out


def _delivered(stats: ShardStats) -> int:
    return sum(t.delivered for t in stats.topics)


def _node_row(
    n: NodeSample, master: NodeSample | None, before: NodeSample | None, elapsed_s: float | None
) -> NodeRow:
    row = NodeRow(
        shard=n.shard,
        node=n.label,
        address=n.address,
        role=n.role,
        epoch=n.epoch,
        state=n.state,
        fenced=n.fenced,
        log_end=n.log_end,
    )
    changes: dict[str, Any] = {}
    if n.stats is not None:
        delivered = _delivered(n.stats)
        old = before.stats if before is not None else None
        changes |= {
            "pending": sum(t.pending for t in n.stats.topics),
            "due_next_minute": due_soon(n.stats.topics),
            "delivered": delivered,
            "delivered_per_s": per_s(
                delivered, None if old is None else _delivered(old), elapsed_s
            ),
            "lateness_p50_ms": n.stats.lateness_ms_p50,
            "lateness_p99_ms": n.stats.lateness_ms_p99,
        }
    if master is n:
        insync_set = tuple(sorted(n.admin.insync)) if n.admin is not None else ()
        changes |= {"lag_bytes": 0, "lag_ms": 0, "insync_set": insync_set}
        changes["insync"] = (n.label in insync_set) if n.admin is not None else None
    elif master is not None:
        listed = master.admin.replica(n.label) if master.admin is not None else None
        if n.state != "down":  # (of a node down, how far behind is not known)
            if listed is not None:
                changes |= {"lag_bytes": listed.lag_bytes, "lag_ms": listed.lag_ms}
            elif master.log_end is not None and n.log_end is not None:
                changes["lag_bytes"] = max(0, master.log_end - n.log_end)
        if master.admin is not None and (
            n.named or listed is not None or n.label in master.admin.insync
        ):  # (a replica known by its address only may have another name in the set)
            changes["insync"] = n.label in master.admin.insync
    return dataclasses.replace(row, **changes)


def _sections(
    cur: Mapping[int, NodeSample],
    prev: Mapping[int, NodeSample],
    elapsed_s: float | None,
    wall_ms: int,
) -> tuple[tuple[TopicRow, ...], tuple[GroupRow, ...]]:
    merged = merge_stats([m.stats for _, m in sorted(cur.items())])
    rates: dict[str, float] = {}
    unknown: set[str] = set()
    for shard, m in cur.items():
        assert m.stats is not None  # (only masters whose Stats came are counted)
        old = prev.get(shard)
        if old is None or old.address != m.address or old.stats is None:
            unknown |= {t.topic for t in m.stats.topics}  # a new master: nothing to compare
            continue
        before = {t.topic: t.delivered for t in old.stats.topics}
        deltas = {
            t.topic: per_s(t.delivered, before.get(t.topic, 0), elapsed_s) for t in m.stats.topics
        }
        if any(d is None for d in deltas.values()):  # a counter fell: the node restarted
            unknown |= set(deltas)
            continue
        for topic, d in deltas.items():
            rates[topic] = rates.get(topic, 0.0) + (d or 0.0)
    topics = tuple(
        TopicRow(
            topic=t.topic,
            pending=t.pending,
            due_next_minute=due_soon([t]),
            delivered=t.delivered,
            delivered_per_s=None if t.topic in unknown else rates.get(t.topic),
            cancelled=t.cancelled,
        )
        for t in merged.topics
    )
    groups = group_rows(merged.topics, cur, prev, elapsed_s, wall_ms)
    return topics, groups


def _schedule_row(
    cur: Mapping[int, NodeSample], prev: Mapping[int, NodeSample], elapsed_s: float | None
) -> ScheduleRow:
    per_shard = {shard: m.stats.schedules for shard, m in cur.items() if m.stats is not None}
    rates: list[float | None] = []
    for shard, m in cur.items():
        old = prev.get(shard)
        if old is None or old.address != m.address or old.stats is None or m.stats is None:
            rates.append(None)  # a new master: nothing to compare
            continue
        rates.append(per_s(m.stats.schedules.firings, old.stats.schedules.firings, elapsed_s))
    known = [r for r in rates if r is not None]
    rate = sum(known) if len(known) == len(rates) else None
    return ScheduleRow(
        schedules=sum(s.schedules for s in per_shard.values()),
        fired_per_s=rate if per_shard else None,
        missed=sum(s.missed for s in per_shard.values()),
        lateness_p99_ms=max((s.lateness_ms_p99 for s in per_shard.values()), default=0),
    )


def frame(cur: Sample, prev: Sample | None = None, sort: str = "name") -> Frame:
    """The frame of ``cur``, with rates since ``prev`` (the sample before it, if
    any), its rows ordered by ``sort``."""
    elapsed = cur.at_s - prev.at_s if prev is not None and cur.at_s > prev.at_s else None
    before = {n.address: n for n in prev.nodes} if prev is not None and elapsed else {}
    masters = _masters(cur)
    rows = tuple(
        _node_row(n, masters.get(n.shard), before.get(n.address), elapsed) for n in cur.nodes
    )
    counted = {s: m for s, m in masters.items() if m.stats is not None}
    old = _masters(prev) if prev is not None and elapsed else {}
    topics, groups = _sections(counted, old, elapsed, cur.wall_ms)
    return order(
        Frame(
            source=cur.source,
            wall_ms=cur.wall_ms,
            took_ms=cur.took_ms,
            elapsed_s=elapsed,
            topology_epoch=cur.topology_epoch,
            shards=len({n.shard for n in cur.nodes}),
            shards_answering=len(counted),
            nodes_answering=cur.answered,
            nodes=rows,
            topics=topics,
            groups=groups,
            schedules=_schedule_row(counted, old, elapsed),
            error=cur.error,
        ),
        sort,
    )


T = TypeVar("T")


def _by(
    rows: Sequence[T], value: Callable[[T], float | None], name: Callable[[T], Any]
) -> tuple[T, ...]:
    """Highest ``value`` first, unknown ones last, ties by ``name``."""

    def key(r: T) -> tuple[bool, float, Any]:
        v = value(r)
        return (v is None, -(v or 0.0), name(r))

    return tuple(sorted(rows, key=key))


def _node_name(r: NodeRow) -> tuple[int, bool, str]:
    return (r.shard, r.role != Role.MASTER, r.node)


def _topic_name(t: TopicRow) -> str:
    return t.topic


def _group_name(g: GroupRow) -> tuple[str, str]:
    return (g.topic, g.group)


def order(f: Frame, sort: str) -> Frame:
    """``f`` with its rows ordered by ``sort`` (one of ``SORTS``; raises ValueError
    otherwise). Topics have no lateness of their own: ``lateness`` orders them by
    name, as it does the groups (``pending`` orders groups by backlog)."""
    if sort not in SORTS:
        raise ValueError(f"sort: one of {', '.join(SORTS)}, not {sort!r}")
    if sort == "name":
        nodes = tuple(sorted(f.nodes, key=_node_name))
        topics = tuple(sorted(f.topics, key=_topic_name))
        groups = tuple(sorted(f.groups, key=_group_name))
    elif sort == "pending":
        nodes = _by(f.nodes, lambda r: r.pending, _node_name)
        topics = _by(f.topics, lambda t: t.pending, _topic_name)
        groups = _by(f.groups, lambda g: g.backlog, _group_name)
    elif sort == "delivered":
        nodes = _by(f.nodes, lambda r: r.delivered_per_s, _node_name)
        topics = _by(f.topics, lambda t: t.delivered_per_s, _topic_name)
        groups = tuple(sorted(f.groups, key=_group_name))
    else:
        nodes = _by(f.nodes, lambda r: r.lateness_p99_ms, _node_name)
        topics = tuple(sorted(f.topics, key=_topic_name))
        groups = tuple(sorted(f.groups, key=_group_name))
    return dataclasses.replace(f, nodes=nodes, topics=topics, groups=groups, sort=sort)


def to_json(f: Frame) -> dict[str, Any]:
    """The frame as the JSON document of the module notes."""
    return {
        "source": f.source,
        "sampled_ms": f.wall_ms,
        "took_ms": f.took_ms,
        "elapsed_s": f.elapsed_s,
        "topology_epoch": f.topology_epoch,
        "shards": f.shards,
        "shards_answering": f.shards_answering,
        "nodes_answering": f.nodes_answering,
        "sort": f.sort,
        "error": f.error,
        "nodes": [{**dataclasses.asdict(r), "insync_set": list(r.insync_set)} for r in f.nodes],
        "topics": [dataclasses.asdict(t) for t in f.topics],
        "groups": [dataclasses.asdict(g) for g in f.groups],
        "schedules": dataclasses.asdict(f.schedules),
    }
