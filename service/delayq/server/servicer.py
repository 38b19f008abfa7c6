"""The ``delayq.v1.DelayQueue`` servicer (grpc.aio) over one shard's engine: one
class, registered with gRPC, made of a handler group a side of the API.

Converts protobuf messages to engine calls and back; nothing else. Engine calls
that may block (an fsync) run on a dedicated thread pool, not on the event loop;
quick ones run on the loop. Receivers wait on the loop (``ReadySignal``, woken by
the engine), never inside the engine. Errors cross into gRPC status codes in one place
(``_call``, via ``server.statuscodes``); per-item problems of batched calls travel as
``ItemError`` inside the response. Any other exception ends the call INTERNAL,
logged (``server.internal``, around every handler of the server).

The groups: ``enginecalls`` (their base: the engine, the pool, ``_call``),
``producing`` (Schedule, Cancel, Reschedule, Lookup), ``consuming`` (Receive,
Subscribe, Ack, ChangeInvisibility); here the cluster's side (GetRoute, Stats).
"""

from __future__ import annotations

from typing import Any

import grpc

from ..argchecks import check_topic
from ..shardmap import ACTIVE, JOINING, LEAVING
from ..v1 import delayq_pb2 as pb
from ..v1 import delayq_pb2_grpc as pb_grpc
from .consuming import Consuming
from .producing import Producing

__all__ = ["DelayQueueServicer"]

_SHARD_STATE = {
    ACTIVE: pb.SHARD_STATE_ACTIVE,
    JOINING: pb.SHARD_STATE_JOINING,
    LEAVING: pb.SHARD_STATE_LEAVING,
}


class DelayQueueServicer(Producing, Consuming, pb_grpc.DelayQueueServicer):  # type: ignore[misc]
    async def GetRoute(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request.topic:  # not used (one map serves every topic), but bounded as anywhere
            await self._call(context, lambda: check_topic(request.topic), inline=True)
        m = self._topology.map
        return pb.GetRouteResponse(
            topology_epoch=m.topology_epoch,
            shard_count=m.count,
            shards=[
                pb.ShardRoute(
                    index=s.index,
                    master=s.master,
                    replicas=list(s.replicas),
                    epoch=s.epoch,
                    state=_SHARD_STATE[s.state],
                    admin=s.admin,
                )
                for s in m.shards
            ],
        )

    async def Stats(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        def run() -> Any:
            topics = self._engine.stats(request.topic or None)
            late = self._engine.lateness()
            return pb.StatsResponse(
                topics=[
                    pb.TopicStats(
                        topic=t.topic,
                        pending=t.pending,
                        delivered=t.delivered,
                        cancelled=t.cancelled,
                        group_backlog=t.groups,
                        due=[pb.DueBucket(within_ms=w, count=c) for w, c in t.due],
                        group_dead_lettered=t.dead_lettered,
                    )
                    for t in topics
                ],
                lateness_ms_p50=late["p50"],
                lateness_ms_p99=late["p99"],
                release_lag_ms=late["release_lag_ms"],
                node=pb.NodeStats(
                    shard=self._shard,
                    epoch=self._engine.epoch,
                    role=self._engine.role,
                    commitlog_end=self._engine.commitlog_end,
                    topology_epoch=self._topology.map.topology_epoch,
                    address=self._advertise,
                ),
            )

        return await self._call(context, run)
