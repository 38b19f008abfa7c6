"""The ``delayq.v1.DelayQueue`` servicer (grpc.aio): delayq's own protocol over
the node's calls layer (``calls.Calls``, shared with every other protocol).

A translator and nothing more: each handler converts its request to the
engine's values (``convert``), makes one call of ``Calls`` (which runs the
engine, checks ownership, waits, and passes calls on to other shards) and
converts the answer back (``convert``). Errors cross into gRPC status codes in
one place (``_answer``, via ``statuscodes``): a ``DelayqError`` by its kind, a
``PassedOn`` as the other shard answered it; per-item problems of batched calls
travel as ``ItemError`` inside the response. Any other exception ends the call
INTERNAL, logged (``server.internal``, around every handler of the server).

Schedule, Cancel, Reschedule, Lookup (the producer's side; the last three by id,
or by topic and key: ``keywire``); Receive, Subscribe,
Ack, ChangeInvisibility, Nack (the consumer's); GetRoute, Stats (the cluster's);
SetGroupPolicy, GetGroupPolicy, ListGroups, PauseGroup, ResumeGroup (a consumer
group's delivery policy on this shard: ``calls.Calls.groups``); CreateSchedule,
GetSchedule, ListSchedules, UpdateSchedule, PauseSchedule, ResumeSchedule,
DeleteSchedule, NextFirings (recurring schedules, each at the shard its name
hashes to: ``calls.Calls.recurring``, the wire in ``schedulewire``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from typing import Any, TypeVar

import grpc

from ..argchecks import RECEIVE_INVISIBLE_MS, RECEIVE_MAX_MESSAGES, check_topic
from ..engine import GroupStats, ReceivedBatch
from ..errors import DelayqError
from ..packed import blob_texts
from ..shardmap import ACTIVE, JOINING, LEAVING
from ..v1 import delayq_pb2 as pb
from ..v1 import delayq_pb2_grpc as pb_grpc
from . import convert, keywire, schedulewire
from .calls import Calls
from .forwarding import mode_of
from .groupcalls import GroupEntry
from .statuscodes import PassedOn, abort_with

__all__ = ["DelayQueueServicer"]

T = TypeVar("T")

_SHARD_STATE = {
    ACTIVE: pb.SHARD_STATE_ACTIVE,
    JOINING: pb.SHARD_STATE_JOINING,
    LEAVING: pb.SHARD_STATE_LEAVING,
}


async def _answer(context: grpc.aio.ServicerContext, call: Awaitable[T]) -> T:
    """``call``'s value; its error ends the call with its gRPC status."""
    try:
        return await call
    except DelayqError as exc:
        await abort_with(context, exc)
    except PassedOn as exc:
        await context.abort(exc.code, exc.details)
    raise AssertionError("unreachable: abort raises")


async def _keyed(has_id: bool, topic: str, has_key: bool, id_field: str, key_field: str) -> bool:
    """Whether a call names its messages by topic and key (``keywire.by_key``:
    both, or a key without its topic, refused), as a call ``_answer`` awaits."""
    return keywire.by_key(has_id, topic, has_key, id_field, key_field)


def _by_key(request: Any) -> Awaitable[bool]:
    """``_keyed`` of a Lookup or Reschedule (an ``id``, or ``topic`` and ``key``)."""
    return _keyed(bool(request.id), request.topic, bool(request.key), "id", "key")


async def _unheld(calls: Calls, keys: list[str], context: grpc.aio.ServicerContext) -> None:
    """A call by key waits, like a schedule, while a finishing rebalance moves its
    keys (``Calls.until_unheld``): they are then answered by their new shard."""
    if calls.topology.moving() is not None:
        await calls.until_unheld(keys, context.time_remaining())


def _receive_limits(request: Any) -> tuple[int, int]:
    """A Receive/Subscribe request's max_messages and invisible_ms (0: the default)."""
    return (
        request.max_messages or RECEIVE_MAX_MESSAGES,
        request.invisible_ms or RECEIVE_INVISIBLE_MS,
    )


class DelayQueueServicer(pb_grpc.DelayQueueServicer):  # type: ignore[misc]
    def __init__(self, calls: Calls, advertise: str) -> None:
        """``advertise``: the address clients dial for this shard (in Stats)."""
        self._calls = calls
        self._advertise = advertise

    # -- the producer's side
    async def Schedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        packed = request.HasField("packed")
        calls = self._calls
        if calls.topology.moving() is not None:
            keys = convert.schedule_keys(request, packed)
            await calls.until_unheld(keys, context.time_remaining())

        async def call() -> Any:
            if packed:
                out = await calls.schedule(convert.packed_batch(request.packed), "packed.bodies")
            else:
                out = await calls.schedule(convert.message_batch(request.messages), "messages")
            resp = pb.ScheduleResponse(topology_epoch=calls.map.topology_epoch)
            if packed:
                convert.packed_results(resp.packed, out)
            else:
                convert.message_results(resp.results, out)
            return resp

        return await _answer(context, call())

    async def Cancel(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        calls = self._calls
        given = (bool(request.ids), request.topic, bool(request.keys), "ids", "keys")
        keyed = await _answer(context, _keyed(*given))
        resp = pb.CancelResponse()
        if keyed:
            keys = list(request.keys)
            await _unheld(calls, keys, context)
            by_key = calls.keys.cancel(request.topic, keys, context.time_remaining())
            out = await _answer(context, by_key)
            keywire.cancel_key_results(resp.results, keys, out)
        else:
            ids = list(request.ids)
            mode = mode_of(context.invocation_metadata())
            got = await _answer(context, calls.cancel(ids, mode, context.time_remaining()))
            convert.cancel_results(resp.results, ids, got)
        resp.topology_epoch = calls.map.topology_epoch
        return resp

    async def Reschedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        when = request.WhichOneof("when")
        deliver_at_ms = request.deliver_at_ms if when == "deliver_at_ms" else None
        delay_ms = request.delay_ms if when == "delay_ms" else None
        if await _answer(context, _by_key(request)):
            await _unheld(self._calls, [request.key], context)
            got = self._calls.keys.reschedule(
                request.topic,
                request.key,
                deliver_at_ms=deliver_at_ms,
                delay_ms=delay_ms,
                timeout_s=context.time_remaining(),
            )
            return keywire.rescheduled_keys(await _answer(context, got))
        out = await _answer(
            context,
            self._calls.reschedule(
                request.id,
                mode_of(context.invocation_metadata()),
                context.time_remaining(),
                deliver_at_ms=deliver_at_ms,
                delay_ms=delay_ms,
            ),
        )
        return pb.RescheduleResponse(id=out.id, deliver_at_ms=out.deliver_at_ms)

    async def Lookup(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if await _answer(context, _by_key(request)):
            await _unheld(self._calls, [request.key], context)
            found = self._calls.keys.lookup(request.topic, request.key, context.time_remaining())
            return keywire.lookup_key_response(await _answer(context, found))
        mode = mode_of(context.invocation_metadata())
        got = self._calls.lookup(request.id, mode, context.time_remaining())
        return convert.lookup_response(await _answer(context, got))

    # -- the consumer's side
    def _looks(
        self, request: Any, wait_ms: int, *, stream: bool
    ) -> AsyncGenerator[ReceivedBatch, None]:
        max_messages, invisible_ms = _receive_limits(request)
        return self._calls.consuming.looks(
            request.topic,
            request.group,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            wait_ms=wait_ms,
            auto_ack=request.auto_ack,
            stream=stream,
        )

    async def Receive(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """What is ready, else the first batch within ``wait_ms`` (empty if none)."""

        async def first() -> Any:
            got = None
            looks = self._looks(request, request.wait_ms, stream=False)
            async with contextlib.aclosing(looks):
                async for got in looks:
                    if got.ids:
                        break
            return got

        got = await _answer(context, first())
        return convert.receive_response(got, request.packed, self._calls.map.topology_epoch)

    async def Subscribe(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        looks = self._looks(request, request.wait_ms or 1000, stream=True)
        try:
            async with contextlib.aclosing(looks):
                async for got in looks:
                    if got.ids:
                        epoch = self._calls.map.topology_epoch
                        yield convert.receive_response(got, request.packed, epoch)
        except DelayqError as exc:
            await abort_with(context, exc)

    async def Ack(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        packed = request.HasField("packed_receipts")

        async def call() -> tuple[list[str], Any]:
            if packed:
                receipts = blob_texts(request.packed_receipts, "packed_receipts")
            else:
                receipts = list(request.receipts)
            field = "packed_receipts" if packed else "receipts"
            return receipts, await self._calls.consuming.ack(
                request.topic, request.group, receipts, field
            )

        receipts, out = await _answer(context, call())
        resp = pb.AckResponse(topology_epoch=self._calls.map.topology_epoch)
        if packed:
            resp.outcomes = convert.packed_outcomes(resp.errors, out)
        else:
            resp.results.extend(convert.ack_results(receipts, out))
        return resp

    async def ChangeInvisibility(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        receipts = list(request.receipts)
        out = await _answer(
            context,
            self._calls.consuming.change_invisibility(
                request.topic, request.group, receipts, request.invisible_ms
            ),
        )
        return pb.ChangeInvisibilityResponse(results=convert.ack_results(receipts, out))

    async def Nack(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        receipts = list(request.receipts)
        out = await _answer(
            context, self._calls.consuming.nack(request.topic, request.group, receipts)
        )
        return pb.NackResponse(
            results=convert.ack_results(receipts, out),
            topology_epoch=self._calls.map.topology_epoch,
        )

    # -- consumer groups' policies
    def _group(self, entry: GroupEntry, node: bool = True) -> Any:
        """A ``GroupPolicyResponse`` of ``entry`` (naming this node when ``node``)."""
        resp = pb.GroupPolicyResponse(topic=entry.topic, group=entry.group, explicit=entry.explicit)
        convert.group_policy_wire(entry.policy, resp.policy)
        if node:
            resp.node.CopyFrom(self._node(*self._calls.groups.node()))
        return resp

    async def SetGroupPolicy(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> GroupEntry:
            groups = self._calls.groups
            policy = convert.group_policy(request.policy, groups.default_attempts(request.group))
            if (push := policy.push) is not None:  # (reads the secret dir: off the loop)
                await self._calls.run(lambda: self._calls.check_push(push))
            return await groups.set_policy(request.topic, request.group, policy)

        return self._group(await _answer(context, call()))

    async def GetGroupPolicy(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        got = self._calls.groups.policy(request.topic, request.group)
        return self._group(await _answer(context, got))

    async def ListGroups(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        got = await _answer(context, self._calls.groups.entries(request.topic or None))
        return pb.ListGroupsResponse(
            groups=[self._group(e, node=False) for e in got],
            node=self._node(*self._calls.groups.node()),
        )

    async def PauseGroup(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        got = self._calls.groups.pause(request.topic, request.group, True)
        return self._group(await _answer(context, got))

    async def ResumeGroup(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        got = self._calls.groups.pause(request.topic, request.group, False)
        return self._group(await _answer(context, got))

    # -- recurring schedules (at the shard owning the name)
    async def _named(self, name: str, call: Any, context: grpc.aio.ServicerContext) -> Any:
        """``call``'s stored schedule as the wire's, once a finishing rebalance has
        placed ``name`` (``_unheld``)."""
        await _unheld(self._calls, [name], context)
        return schedulewire.schedule_wire(await _answer(context, call))

    async def _with_spec(
        self, request: Any, context: grpc.aio.ServicerContext, create: bool
    ) -> Any:
        async def call() -> Any:
            spec = schedulewire.spec_of(request.spec)
            recurring = self._calls.recurring
            if create:
                return await recurring.create(request.name, spec, request.paused)
            return await recurring.update(request.name, spec)

        return await self._named(request.name, call(), context)

    async def CreateSchedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._with_spec(request, context, create=True)

    async def UpdateSchedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._with_spec(request, context, create=False)

    async def GetSchedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._named(request.name, self._calls.recurring.get(request.name), context)

    async def PauseSchedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        got = self._calls.recurring.pause(request.name, True)
        return await self._named(request.name, got, context)

    async def ResumeSchedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        got = self._calls.recurring.pause(request.name, False)
        return await self._named(request.name, got, context)

    async def DeleteSchedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _unheld(self._calls, [request.name], context)
        await _answer(context, self._calls.recurring.delete(request.name))
        return pb.DeleteScheduleResponse()

    async def ListSchedules(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        async def call() -> Any:
            limit = schedulewire.page_size_of(request.page_size)
            after = schedulewire.page_token_of(request.page_token)
            return await self._calls.recurring.listing(limit, after)

        page = await _answer(context, call())
        resp = pb.ListSchedulesResponse(next_page_token=page.next_after)
        for s in page.schedules:
            schedulewire.schedule_wire(s, resp.schedules.add())
        return resp

    async def NextFirings(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        recurring = self._calls.recurring
        by_name = request.WhichOneof("what") != "spec"

        async def call() -> list[int]:
            count = schedulewire.count_of(request.count)
            if by_name:
                return await recurring.next_firings(request.name, count)
            return await recurring.preview(schedulewire.spec_of(request.spec), count)

        if by_name:
            await _unheld(self._calls, [request.name], context)
        return pb.NextFiringsResponse(times_ms=await _answer(context, call()))

    # -- the cluster's side
    async def GetRoute(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request.topic:  # not used (one map serves every topic), but bounded as anywhere
            try:
                check_topic(request.topic)
            except DelayqError as exc:
                await abort_with(context, exc)
        m = self._calls.map
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
        s = await _answer(context, self._calls.stats(request.topic or None))
        late = s.lateness
        groups: dict[str, list[tuple[str, GroupStats]]] = {}
        for (topic, group), g in sorted(s.groups.items()):
            groups.setdefault(topic, []).append((group, g))
        topics = []
        for t in s.topics:
            out = pb.TopicStats(
                topic=t.topic,
                pending=t.pending,
                delivered=t.delivered,
                cancelled=t.cancelled,
                group_backlog=t.groups,
                due=[pb.DueBucket(within_ms=w, count=c) for w, c in t.due],
                group_dead_lettered=t.dead_lettered,
            )
            for group, g in groups.get(t.topic, ()):
                convert.group_stats(out.groups, group, g, s.push.get((t.topic, group)))
            topics.append(out)
        return pb.StatsResponse(
            topics=topics,
            lateness_ms_p50=late["p50"],
            lateness_ms_p99=late["p99"],
            release_lag_ms=late["release_lag_ms"],
            node=self._node(s.epoch, s.role, s.commitlog_end),
            schedules=pb.ScheduleStats(
                schedules=s.schedules["schedules"],
                firings=s.schedules["firings"],
                missed=s.schedules["missed"],
                lateness_ms_p50=s.schedules["p50"],
                lateness_ms_p99=s.schedules["p99"],
            ),
        )

    def _node(self, epoch: int, role: str, commitlog_end: int) -> Any:
        """This node's ``NodeStats``."""
        return pb.NodeStats(
            shard=self._calls.shard,
            epoch=epoch,
            role=role,
            commitlog_end=commitlog_end,
            topology_epoch=self._calls.map.topology_epoch,
            address=self._advertise,
        )
