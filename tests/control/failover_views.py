"""Views of a shard for the failover decision's tests (``delayq.control.failover``): nodes
and views at ``NOW`` with leases of ``LEASE`` (``node``, ``master``, ``view``,
``gone``), and what a view says of its nodes, restated from the rules: a healthy
master (rule 1), a node that has surely stopped delivering (rule 3)."""

from __future__ import annotations

from typing import Any

from delayq.control.failover import (
    MASTER,
    REPLICA,
    NodeStatus,
    ShardView,
)

NOW = 100_000
LEASE = 3_000
NAMES = ("a", "b", "c", "d")
"""The nodes' names, in order (a shard of up to four nodes)."""


def node(
    name: str,
    *,
    up: bool = True,
    seen: int = NOW,
    role: str = REPLICA,
    epoch: int = 3,
    end: int = 100,
    flushed: int | None = None,
    fenced: bool = False,
    hw: int = 0,
) -> NodeStatus:
    return NodeStatus(
        name=name,
        reachable=up,
        seen_ms=seen,
        role=role,  # type: ignore[arg-type]
        epoch=epoch,
        log_end=end,
        flushed=end if flushed is None else flushed,
        fenced=fenced,
        high_water=hw,
    )


def master(name: str = "a", **kw: Any) -> NodeStatus:
    return node(name, role=MASTER, **kw)


def view(
    *nodes: NodeStatus,
    master: str = "a",
    epoch: int = 3,
    insync: tuple[str, ...] = ("a", "b", "c"),
    now: int = NOW,
    min_insync: int = 1,
) -> ShardView:
    return ShardView(
        epoch=epoch,
        master=master,
        insync=frozenset(insync),
        nodes=nodes,
        now_ms=now,
        lease_ms=LEASE,
        min_insync=min_insync,
    )


def gone(seen_ago: int = LEASE + 1, **kw: Any) -> NodeStatus:
    """The master "a", silent for ``seen_ago`` ms (by default just past its lease)."""
    return master(up=False, seen=NOW - seen_ago, **kw)


def healthy(v: ShardView) -> bool:
    m = v.status(v.master)
    assert m is not None
    top = max(n.epoch for n in v.nodes)
    return m.reachable and m.role == MASTER and not m.fenced and m.epoch == v.epoch >= top


def cannot_deliver(v: ShardView, n: NodeStatus) -> bool:
    """The spec of rule 3, restated: ``n`` has surely stopped acking and delivering."""
    if n.reachable:
        return n.role == REPLICA or n.fenced
    if v.now_ms - n.seen_ms > v.lease_ms:
        return True
    if n.name == v.master and n.epoch < v.epoch:
        return False
    return n.role == REPLICA or n.fenced
