"""What a topic's status becomes after a round (pure: no cluster, no I/O).

Every writer of a DelayTopic's status (the reconcile handler, a refusal, the
certificates' round, a keeper publishing a new master, the resharding driver,
the daemon's periodic round, an owned pod's or StatefulSet's event) says what it
knows as a ``StatusUpdate``; ``statuswriter.StatusWriter`` reads the topic and
its shards and patches ``next_status`` of them, under the topic's lock. What an
update leaves unset is kept as the status holds it: ``observedGeneration`` and
``topologyEpoch`` are written by the map's writers only, ``rebalance`` follows
the change of the shard count's ``Progress`` (given, else as recorded), and
``tls`` by the certificates' round, ``groups`` by the groups' round
(``groupplan.group_status``). ``status.replication`` is not written here:
it is the shard keepers' records, swapped by compare-and-set
(``kube.Cluster.swap_record``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .changes import Progress
from .records import records_of
from .status import ShardView, topic_status

__all__ = ["StatusUpdate", "next_status", "observed"]


@dataclass(frozen=True, kw_only=True)
class StatusUpdate:
    """What one writer adds to the status it recomputes from the cluster."""

    generation: int | None = None
    """``observedGeneration``: the spec's generation just applied (or refused)."""
    conditions: tuple[dict[str, Any], ...] = ()
    """Conditions that replace those of their types (Reconciled, AdminTLS)."""
    topology_epoch: int | None = None
    """The epoch of the shard map just written (never recorded below the status')."""
    progress: Progress | None = None
    """The change of the shard count's progress (its condition Rebalanced with it)."""
    tls: dict[str, Any] | None = None
    """``status.tls`` (``status.tls_status``)."""
    groups: tuple[dict[str, Any], ...] | None = None
    """``status.groups`` (``groupplan.group_status``)."""


def observed(
    views: list[ShardView],
    status: Mapping[str, Any] | None,
    lag: Callable[[int], tuple[int, int]],
) -> list[ShardView]:
    """The shards as the cluster shows them, with each one's replication record
    and last failover as the status holds them and its lag (bytes, ms) as its
    keeper last heard."""
    current = status or {}
    records = records_of(current)
    docs = current.get("replication") or {}
    out = []
    for view in views:
        lag_bytes, lag_ms = lag(view.index)
        last = (docs.get(str(view.index)) or {}).get("lastFailover") or ""
        out.append(
            replace(
                view,
                record=records.get(view.index),
                last_failover=str(last),
                lag_bytes=lag_bytes,
                lag_ms=lag_ms,
            )
        )
    return out


def next_status(
    topic: Mapping[str, Any], shards: list[ShardView], update: StatusUpdate, now: str
) -> dict[str, Any] | None:
    """The status fields to patch on ``topic`` for ``shards`` (``observed``) and
    ``update``; None when none differs from what the topic holds."""
    current = topic.get("status") or {}
    conditions = update.conditions
    progress = update.progress
    if progress is not None:
        conditions = (*conditions, progress.condition())
    else:
        progress = Progress.of(current.get("rebalance"))
    status = topic_status(
        wanted_shards=int((topic.get("spec") or {}).get("shards", 1)),
        shards=shards,
        conditions=list(current.get("conditions") or []),
        generation=update.generation,
        now=now,
        updates=conditions,
        topology_epoch=update.topology_epoch,
        recorded_epoch=int(current.get("topologyEpoch") or 0),
        rebalance=progress.doc() if progress else None,
        changing=progress.phase if progress else None,
    )
    if update.tls is not None:
        status["tls"] = update.tls
    if update.groups is not None:
        status["groups"] = list(update.groups)
    if all(current.get(k) == v for k, v in status.items()):
        return None
    return status
