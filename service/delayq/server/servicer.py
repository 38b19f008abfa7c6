"""The ``delayq.v1.DelayQueue`` servicer (grpc.aio) over one shard's engine.

Converts protobuf messages to engine calls and back; nothing else. Engine calls
that may block (an fsync) run on a dedicated thread pool, not on the event loop;
quick ones run on the loop. Receivers wait on the loop (``ReadySignal``, woken by
the engine), never inside the engine. Errors cross into gRPC status codes in one place
(``_call``, via ``server.status``); per-item problems of batched calls travel as
``ItemError`` inside the response. Any other exception ends the call INTERNAL,
logged (``server.internal``, around every handler of the server).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from ..engine import (
    RECEIVE_LOOK_AGAIN_S,
    AckOutcome,
    CancelOutcome,
    Engine,
    MessageState,
    ScheduleBatch,
    check_receive,
)
from ..errors import DelayqError, Forwarded, InvalidArgument, NotFound, WrongShard
from ..ids import MessageId
from ..names import check_topic
from ..settings import FlushPolicy
from ..shardmap import ACTIVE, JOINING, LEAVING
from ..tls import TlsConfig
from ..v1 import delayq_pb2 as pb
from ..v1 import delayq_pb2_grpc as pb_grpc
from .forwarding import Forwarder, PassedOn, mode_of
from .ownership import Held, Mode, check_ids, check_keys, check_receipts
from .readysignal import ReadySignal
from .status import abort_with, item_error
from .topology import Topology

__all__ = ["DelayQueueServicer"]

T = TypeVar("T")

_CANCEL = {
    CancelOutcome.CANCELLED: pb.CANCEL_OUTCOME_CANCELLED,
    CancelOutcome.NOT_FOUND: pb.CANCEL_OUTCOME_NOT_FOUND,
    CancelOutcome.ALREADY_DELIVERED: pb.CANCEL_OUTCOME_ALREADY_DELIVERED,
    CancelOutcome.ALREADY_CANCELLED: pb.CANCEL_OUTCOME_ALREADY_CANCELLED,
}
_ACK = {
    AckOutcome.ACKED: pb.ACK_OUTCOME_ACKED,
    AckOutcome.ALREADY_ACKED: pb.ACK_OUTCOME_ALREADY_ACKED,
    AckOutcome.STALE: pb.ACK_OUTCOME_STALE,
    AckOutcome.NOT_FOUND: pb.ACK_OUTCOME_NOT_FOUND,
    AckOutcome.INVALID_RECEIPT: pb.ACK_OUTCOME_INVALID_RECEIPT,
}
_STATE = {
    MessageState.PENDING: pb.MESSAGE_STATE_PENDING,
    MessageState.CANCELLED: pb.MESSAGE_STATE_CANCELLED,
    MessageState.DELIVERED: pb.MESSAGE_STATE_DELIVERED,
    MessageState.RESCHEDULED: pb.MESSAGE_STATE_RESCHEDULED,
}
_SHARD_STATE = {
    ACTIVE: pb.SHARD_STATE_ACTIVE,
    JOINING: pb.SHARD_STATE_JOINING,
    LEAVING: pb.SHARD_STATE_LEAVING,
}
MAX_BATCH = 10_000
HOLD_WAIT_S = 10.0  # longest a schedule held back by a finishing rebalance waits here
HOLD_POLL_S = 0.05  # how often it looks whether the map switched


@dataclass(frozen=True, slots=True)
class _Elsewhere:
    """Where a call about a moved message goes: shard ``target``, or a search (None)."""

    target: int | None


def _fill(messages: Any, column: list[T], set_: Callable[[Any, T], None]) -> None:
    """Set one optional field where its column has a value (most columns are empty)."""
    if any(column):
        for msg, value in zip(messages, column, strict=True):
            if value:
                set_(msg, value)


def _receive_limits(request: Any) -> tuple[int, int]:
    """A Receive/Subscribe request's max_messages and invisible_ms (0: the default)."""
    return request.max_messages or 32, request.invisible_ms or 30_000


def _set_receipt(msg: Any, value: str) -> None:
    msg.receipt = value


def _set_key(msg: Any, value: str) -> None:
    msg.key = value


def _set_headers(msg: Any, value: dict[str, str]) -> None:
    msg.headers.update(value)


class DelayQueueServicer(pb_grpc.DelayQueueServicer):  # type: ignore[misc]
    def __init__(
        self,
        engine: Engine,
        topology: Topology,
        advertise: str,
        *,
        threads: int = 64,
        peer_tls: TlsConfig | None = None,
    ) -> None:
        """``peer_tls``: how calls forwarded to other shards are made (``tls``)."""
        self._engine = engine
        self._topology = topology
        self._shard = engine.settings.shard
        self._advertise = advertise
        # With async flush no write waits for an fsync, so short engine calls run on the
        # event loop itself: the hop to a pool thread cost more than the call.
        self._inline_writes = engine.settings.flush is FlushPolicy.ASYNC
        # Each engine call that may block holds one thread, never the event loop.
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="delayq-rpc")
        self._forwarder = Forwarder(topology, self._shard, peer_tls)
        self._ready = ReadySignal(asyncio.get_running_loop())
        self._unhook = engine.on_receivable(self._ready.fire)

    def shutdown(self) -> None:
        self._unhook()
        self._pool.shutdown(wait=True, cancel_futures=True)

    async def close_channels(self) -> None:
        """Close the channels calls were passed on through (after ``shutdown``)."""
        await self._forwarder.close()

    async def _call(
        self, context: grpc.aio.ServicerContext, fn: Callable[[], T], *, inline: bool = False
    ) -> T:
        """Run an engine call (on the loop when ``inline``, else on the pool); turn its
        delayq error into a gRPC status (others: ``server.internal``)."""
        for first in (True, False):
            try:
                if inline:
                    return fn()
                return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
            except DelayqError as exc:
                # another shard's, by this node's map: the file may hold a newer one
                # this node has not read yet (a client that has it would be refused
                # until then): read it now, and answer by it when it changed
                if first and type(exc) is WrongShard and self._topology.reload_now():
                    continue
                if isinstance(exc, WrongShard):
                    self._topology.refused += 1
                await abort_with(context, exc)
        raise AssertionError("unreachable: abort raises")

    def _owns_ids(self, ids: list[str], field: str, mode: Mode) -> None:
        check_ids(self._topology.map, self._shard, ids, field, self._engine.imported, mode)

    @staticmethod
    def _batch_size(n: int, field: str) -> None:
        if n > MAX_BATCH:
            raise InvalidArgument(field, f"{n} items; at most {MAX_BATCH} per call")

    # ---------------------------------------------------------------- messages
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
        if self._topology.moving() is not None:
            await self._until_unheld([m.key for m in request.messages], context)

        def run() -> Any:
            ms = request.messages
            self._batch_size(len(ms), "messages")
            keys = [m.key for m in ms]
            m = self._topology.map
            check_keys(m, self._shard, keys, self._topology.moving())
            # columns straight from the protobuf: an unset oneof member reads 0, which
            # is also the batch's "not given" (a oneof never has two set)
            out = self._engine.schedule_batch(
                ScheduleBatch(
                    topic=[m.topic for m in ms],
                    bodies=[m.body for m in ms],
                    deliver_at_ms=[m.deliver_at_ms for m in ms],
                    delay_ms=[m.delay_ms for m in ms],
                    delay_level=[m.delay_level for m in ms],
                    keys=keys,
                    headers=[m.headers for m in ms],
                )
            )
            resp = pb.ScheduleResponse(topology_epoch=m.topology_epoch)
            add = resp.results.add  # built in place, not copied from a list
            errors = out.errors
            for i, (mid, due) in enumerate(zip(out.ids, out.deliver_at_ms, strict=True)):
                if i not in errors:
                    add(id=mid, deliver_at_ms=due)
                    continue
                err = item_error(errors[i])
                if err.field and not err.field.startswith("messages["):
                    err.field = f"messages[{i}].{err.field}"
                add(error=err)
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

    # ---------------------------------------------------------------- consumers
    def _receive_batch(self, request: Any) -> Any:
        """One engine receive of what is ready as a ReceiveResponse (shared by Receive
        and Subscribe), built in place from the receive's columns: only non-empty
        fields are set."""
        max_messages, invisible_ms = _receive_limits(request)
        got = self._engine.receive_batch(
            request.topic,
            request.group,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            auto_ack=request.auto_ack,
        )
        resp = pb.ReceiveResponse(topology_epoch=self._topology.map.topology_epoch)
        add = resp.messages.add  # half the cost of building a list of messages
        topic = got.topic
        for mid, body, due, delivered, attempt in zip(
            got.ids, got.bodies, got.deliver_at_ms, got.delivered_ms, got.attempts, strict=True
        ):
            add(
                id=mid,
                topic=topic,
                body=body,
                deliver_at_ms=due,
                delivered_at_ms=delivered,
                attempt=attempt,
            )
        _fill(resp.messages, got.receipts, _set_receipt)
        _fill(resp.messages, got.keys, _set_key)
        _fill(resp.messages, got.headers, _set_headers)
        return resp

    async def _looks(
        self, request: Any, context: grpc.aio.ServicerContext, wait_ms: int, *, stream: bool
    ) -> AsyncGenerator[Any, None]:
        """Look for what is ready again and again, yielding each look's response: at once
        after a look that filled its batch (more may be ready), else after the engine's
        signal, or ``RECEIVE_LOOK_AGAIN_S`` (redeliveries are not signalled). A single
        receive (not ``stream``) stops once ``wait_ms`` has passed; a stream never
        does, and ``wait_ms`` only bounds each wait. Bad arguments fail first. The take
        runs on the loop unless an auto-ack must wait for an fsync.

        The caller is counted in ``waiting`` for the whole run and takes each look's
        generation before the look (see ``ReadySignal``): a release between a look and
        the next wait ends that generation, so a stream waits right after a short
        look instead of looking again first (half its looks were empty)."""
        max_messages, invisible_ms = _receive_limits(request)
        await self._call(
            context, lambda: check_receive(max_messages, invisible_ms, wait_ms), inline=True
        )
        inline = self._inline_writes or not request.auto_ack
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        take = functools.partial(self._receive_batch, request)
        self._ready.waiting += 1
        try:
            while True:
                fired = self._ready.generation()  # before the look: see ReadySignal
                resp = await self._call(context, take, inline=inline)
                yield resp
                left = wait_ms / 1000 if stream else deadline - loop.time()
                if left <= 0:
                    return
                if len(resp.messages) < max_messages:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(left, RECEIVE_LOOK_AGAIN_S)):
                            await fired.wait()
        finally:
            self._ready.waiting -= 1

    async def Receive(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """What is ready, else the first batch within ``wait_ms`` (empty if none)."""
        resp = None
        async with contextlib.aclosing(
            self._looks(request, context, request.wait_ms, stream=False)
        ) as looks:
            async for resp in looks:
                if resp.messages:
                    break
        return resp

    async def Subscribe(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        looks = self._looks(request, context, request.wait_ms or 1000, stream=True)
        async with contextlib.aclosing(looks):
            async for resp in looks:
                if resp.messages:
                    yield resp

    def _settled(self, receipts: Any, out: list[AckOutcome | DelayqError]) -> list[Any]:
        """One result per receipt, in request order; the receipt is echoed only with an
        error (echoing every one doubled the cost of an ack)."""
        ok = {o: pb.AckResult(outcome=v) for o, v in _ACK.items()}  # shared, immutable use
        return [
            pb.AckResult(receipt=r, error=item_error(o)) if isinstance(o, DelayqError) else ok[o]
            for r, o in zip(receipts, out, strict=True)
        ]

    async def Ack(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        def run() -> list[Any]:
            receipts = list(request.receipts)
            self._batch_size(len(receipts), "receipts")
            check_receipts(self._topology.map, self._shard, receipts)
            out = self._engine.ack(request.topic, request.group, receipts)
            return self._settled(request.receipts, out)

        results = await self._call(context, run, inline=self._inline_writes)
        return pb.AckResponse(results=results, topology_epoch=self._topology.map.topology_epoch)

    async def ChangeInvisibility(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        def run() -> list[Any]:
            receipts = list(request.receipts)
            self._batch_size(len(receipts), "receipts")
            check_receipts(self._topology.map, self._shard, receipts)
            out = self._engine.change_invisibility(
                request.topic, request.group, receipts, request.invisible_ms
            )
            return self._settled(request.receipts, out)

        return pb.ChangeInvisibilityResponse(
            results=await self._call(context, run, inline=self._inline_writes)
        )

    # ---------------------------------------------------------------- cluster
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
