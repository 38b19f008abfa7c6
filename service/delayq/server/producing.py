"""The producer's side of the ``delayq.v1.DelayQueue`` servicer (``Producing``, a
handler group of ``servicer.DelayQueueServicer``): Schedule, Cancel, Reschedule
and Lookup, converted from protobuf to engine calls and back.

Invariants: a schedule's keys must be this shard's by the map (``ownership``);
while a finishing rebalance holds some back (``ownership.Held``) the call waits
here for the map to switch, at most ``HOLD_WAIT_S`` and within its deadline.
An id must name this shard (or a message imported into it). A message that
moved away (``Forwarded``), or a client's id of a shard the map no longer lists
and not found here, is passed on (``forwarding``): Cancel per item, Reschedule
and Lookup whole, the other shard's error ending this call with its status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from ..engine import BatchOutcome, CancelOutcome, MessageState, ScheduleBatch
from ..errors import DelayqError, Forwarded, InvalidArgument, NotFound
from ..ids import MessageId
from ..packed import blob_texts, pack_fixed, pack_texts, read_schedule
from ..v1 import delayq_pb2 as pb
from .enginecalls import EngineCalls
from .forwarding import PassedOn, mode_of
from .ownership import Held, Mode, check_keys
from .statuscodes import abort_with, item_error

__all__ = [
    "HOLD_POLL_S",
    "HOLD_WAIT_S",
    "Producing",
    "message_batch",
    "message_results",
    "packed_batch",
    "packed_results",
]

T = TypeVar("T")

_CANCEL = {
    CancelOutcome.CANCELLED: pb.CANCEL_OUTCOME_CANCELLED,
    CancelOutcome.NOT_FOUND: pb.CANCEL_OUTCOME_NOT_FOUND,
    CancelOutcome.ALREADY_DELIVERED: pb.CANCEL_OUTCOME_ALREADY_DELIVERED,
    CancelOutcome.ALREADY_CANCELLED: pb.CANCEL_OUTCOME_ALREADY_CANCELLED,
}
_STATE = {
    MessageState.PENDING: pb.MESSAGE_STATE_PENDING,
    MessageState.CANCELLED: pb.MESSAGE_STATE_CANCELLED,
    MessageState.DELIVERED: pb.MESSAGE_STATE_DELIVERED,
    MessageState.RESCHEDULED: pb.MESSAGE_STATE_RESCHEDULED,
}
HOLD_WAIT_S = 10.0  # longest a schedule held back by a finishing rebalance waits here
HOLD_POLL_S = 0.05  # how often it looks whether the map switched


@dataclass(frozen=True, slots=True)
class _Elsewhere:
    """Where a call about a moved message goes: shard ``target``, or a search (None)."""

    target: int | None


def message_batch(ms: Any) -> ScheduleBatch:
    """A ScheduleRequest's messages as the engine's columns, straight from the
    protobuf: an unset oneof member reads 0, which is also the batch's "not given"
    (a oneof never has two set)."""
    return ScheduleBatch(
        topic=[m.topic for m in ms],
        bodies=[m.body for m in ms],
        deliver_at_ms=[m.deliver_at_ms for m in ms],
        delay_ms=[m.delay_ms for m in ms],
        delay_level=[m.delay_level for m in ms],
        keys=[m.key for m in ms],
        headers=[m.headers for m in ms],
    )


def _keys(request: Any, packed: bool) -> list[str]:
    """A ScheduleRequest's keys, read alone ([] when none, or when the packed keys
    are malformed: the call itself then says why)."""
    if not packed:
        return [m.key for m in request.messages]
    p = request.packed
    try:
        return blob_texts(p.keys, "packed.keys") if p.HasField("keys") else []
    except InvalidArgument:
        return []


def packed_batch(p: Any) -> ScheduleBatch:
    """A ``PackedSchedule`` as the engine's columns (``InvalidArgument`` naming the
    field of a malformed one)."""
    c = read_schedule(p)
    return ScheduleBatch(
        topic=c.topic,
        bodies=c.bodies,
        deliver_at_ms=c.deliver_at_ms,
        delay_ms=c.delay_ms,
        delay_level=c.delay_level,
        keys=c.keys,
        headers=c.headers,
    )


def message_results(results: Any, out: BatchOutcome) -> None:
    """A result per message into the response's repeated ``results`` (built in place,
    not copied from a list); an error's field names its message."""
    add = results.add
    errors = out.errors
    for i, (mid, due) in enumerate(zip(out.ids, out.deliver_at_ms, strict=True)):
        if i not in errors:
            add(id=mid, deliver_at_ms=due)
            continue
        add(error=_message_error(i, errors[i]))


def _message_error(i: int, exc: DelayqError) -> Any:
    """The ItemError of message ``i`` of a batch, its field named from the batch
    (``messages[i].body``) in either wire form."""
    err = item_error(exc)
    if err.field and not err.field.startswith("messages["):
        err.field = f"messages[{i}].{err.field}"
    return err


def packed_results(into: Any, out: BatchOutcome) -> None:
    """The outcome as a ``PackedScheduled``: ids ("" where refused), times, errors."""
    ids = out.ids
    if out.errors:
        ids = [i or "" for i in ids]
        for i, exc in sorted(out.errors.items()):
            into.errors.add(index=i).error.CopyFrom(_message_error(i, exc))
    pack_texts(ids, into.ids)  # type: ignore[arg-type]  # no None left
    into.deliver_at_ms = pack_fixed(out.deliver_at_ms, "<i8")


class Producing(EngineCalls):
    async def _until_unheld(self, keys: list[str], context: grpc.aio.ServicerContext) -> None:
        """While a finishing rebalance holds these keys back (``ownership.Held``), wait
        for the map to switch (it then says where they go), as long as the call's
        deadline allows; the check in the call itself then answers."""
        loop = asyncio.get_running_loop()
        left = context.time_remaining()
        until = loop.time() + min(HOLD_WAIT_S, left - 0.5 if left is not None else HOLD_WAIT_S)
        while loop.time() < until:
            moving = self._topology.moving()
            if moving is None:
                return
            try:
                check_keys(self._topology.map, self._shard, keys, moving)
                return
            except Held:
                await asyncio.sleep(HOLD_POLL_S)
                self._topology.reload()
            except DelayqError:
                return

    async def Schedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        packed = request.HasField("packed")
        if self._topology.moving() is not None:
            await self._until_unheld(_keys(request, packed), context)

        def run() -> Any:
            batch = packed_batch(request.packed) if packed else message_batch(request.messages)
            n = len(batch.bodies)
            self._batch_size(n, "packed.bodies" if packed else "messages")
            m = self._topology.map
            check_keys(m, self._shard, batch.keys or [""] * n, self._topology.moving())
            out = self._engine.schedule_batch(batch)
            resp = pb.ScheduleResponse(topology_epoch=m.topology_epoch)
            if packed:
                packed_results(resp.packed, out)
            else:
                message_results(resp.results, out)
            return resp

        return await self._call(context, run, inline=self._inline_writes)

    async def Cancel(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        mode = mode_of(context.invocation_metadata())

        def run() -> Any:
            ids = list(request.ids)
            self._batch_size(len(ids), "ids")
            self._owns_ids(ids, "ids", mode)
            out = self._engine.cancel(ids)
            resp = pb.CancelResponse(topology_epoch=self._topology.map.topology_epoch)
            add = resp.results.add
            moved: list[tuple[int, str, int | None]] = []
            for k, (i, o) in enumerate(zip(request.ids, out, strict=True)):
                if isinstance(o, Forwarded):
                    moved.append((k, o.id, o.target))
                elif o is CancelOutcome.NOT_FOUND and self._searched(i, mode):
                    moved.append((k, i, None))
                if isinstance(o, DelayqError):
                    add(id=i, error=item_error(o))
                else:
                    add(id=i, outcome=_CANCEL[o])
            return resp, moved

        resp, moved = await self._call(context, run, inline=self._inline_writes)
        if moved:
            await self._forwarder.cancel_moved(resp, moved, context.time_remaining())
        return resp

    def _searched(self, message_id: str, mode: Mode) -> bool:
        """Whether a client's id names a shard the map no longer lists (drained and
        removed): the other shards are asked for its message (``forwarding``)."""
        m = self._topology.map
        if mode is not Mode.CLIENT or m.standalone:
            return False
        try:
            return MessageId.parse(message_id).shard >= m.count
        except DelayqError:
            return False

    def _by_id(self, message_id: str, mode: Mode, fn: Callable[[], T]) -> T | _Elsewhere:
        """``fn`` (an engine call about one message), or where else to ask."""
        self._owns_ids([message_id], "id", mode)
        try:
            return fn()
        except Forwarded as moved:
            return _Elsewhere(moved.target)
        except NotFound:
            if self._searched(message_id, mode):
                return _Elsewhere(None)
            raise

    async def _pass_on(
        self, context: grpc.aio.ServicerContext, where: _Elsewhere, method: str, request: Any
    ) -> Any:
        """``method`` where the message went (``forwarding``); its error ends this call
        with the same status."""
        try:
            return await self._forwarder.call(
                where.target, method, request, context.time_remaining()
            )
        except PassedOn as exc:
            await context.abort(exc.code, exc.details)
        except DelayqError as exc:
            await abort_with(context, exc)
        raise AssertionError("unreachable: abort raises")

    async def Reschedule(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        when = request.WhichOneof("when")
        mode = mode_of(context.invocation_metadata())

        def run() -> Any:
            return self._by_id(
                request.id,
                mode,
                lambda: self._engine.reschedule(
                    request.id,
                    deliver_at_ms=request.deliver_at_ms if when == "deliver_at_ms" else None,
                    delay_ms=request.delay_ms if when == "delay_ms" else None,
                ),
            )

        out = await self._call(context, run)
        if isinstance(out, _Elsewhere):
            return await self._pass_on(context, out, "Reschedule", request)
        return pb.RescheduleResponse(id=out.id, deliver_at_ms=out.deliver_at_ms)

    async def Lookup(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        mode = mode_of(context.invocation_metadata())

        def run() -> Any:
            return self._by_id(request.id, mode, lambda: self._engine.lookup(request.id))

        r = await self._call(context, run, inline=True)
        if isinstance(r, _Elsewhere):
            return await self._pass_on(context, r, "Lookup", request)
        return pb.LookupResponse(
            id=r.id,
            state=_STATE[r.state],
            topic=r.topic,
            deliver_at_ms=r.deliver_at_ms,
            accepted_at_ms=r.accepted_ms,
            key=r.key,
            headers=r.headers,
            body=r.body,
        )
