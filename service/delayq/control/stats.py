"""What a shard holds, asked of one node through the public ``Stats`` RPC: the
shard map epoch it serves and, per topic, its pending messages and consumer
groups' backlogs (and which groups are paused).

For drivers of a change of the shard count that may not import the client
(the operator): ``delayq.control.resharding.drained`` takes ``topics`` as it is, and a
driver waits for every node to serve a map before it runs the job on it.
One fresh channel a call: the caller asks rarely (once a second at most).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from ..v1 import delayq_pb2, delayq_pb2_grpc

__all__ = ["ShardStats", "shard_stats"]


@dataclass(frozen=True, kw_only=True)
class ShardStats:
    shard: int
    role: str
    topology_epoch: int
    """Of the shard map the node serves."""
    topics: tuple[dict[str, Any], ...]
    """Per topic: ``topic``, ``pending``, ``group_backlog`` (group -> delivered
    and not acked) and ``groups`` (each a ``group`` and whether ``paused``), the
    form ``resharding.drained`` and ``reshardingdriver.paused_groups`` read."""


def shard_stats(address: str, timeout_s: float = 2.0) -> ShardStats | None:
    """The node at ``address``'s stats; None when it does not answer in time (or
    refuses: a recovering node)."""
    with grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        try:
            r = delayq_pb2_grpc.DelayQueueStub(ch).Stats(
                delayq_pb2.StatsRequest(), timeout=timeout_s
            )
        except grpc.RpcError:
            return None
    return ShardStats(
        shard=r.node.shard,
        role=r.node.role,
        topology_epoch=r.node.topology_epoch,
        topics=tuple(
            {
                "topic": t.topic,
                "pending": t.pending,
                "group_backlog": dict(t.group_backlog),
                "groups": [{"group": g.group, "paused": g.paused} for g in t.groups],
            }
            for t in r.topics
        ),
    )
