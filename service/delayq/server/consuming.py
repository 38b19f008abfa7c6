"""The consumer's side of the ``delayq.v1.DelayQueue`` servicer (``Consuming``, a
handler group of ``servicer.DelayQueueServicer``): Receive, Subscribe, Ack and
ChangeInvisibility, converted from protobuf to engine calls and back.

Invariants: receivers wait on the event loop (``ReadySignal``, woken by the
engine), never inside the engine; a look that filled its batch is followed by
another at once, any other by a wait for the engine's signal or
``RECEIVE_LOOK_AGAIN_S`` (redeliveries are not signalled). Bad receive
arguments fail before the first look. Receipts must be this shard's
(``ownership``); an ack's results come one per receipt in request order, the
receipt echoed only with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, TypeVar

import grpc

from ..argchecks import RECEIVE_INVISIBLE_MS, RECEIVE_MAX_MESSAGES
from ..engine import RECEIVE_LOOK_AGAIN_S, AckOutcome, ReceivedBatch, check_receive
from ..errors import DelayqError
from ..packed import blob_texts, write_received
from ..v1 import delayq_pb2 as pb
from .enginecalls import EngineCalls, Runner
from .ownership import check_receipts
from .statuscodes import item_error

__all__ = ["Consuming", "received_messages", "received_packed"]

T = TypeVar("T")

_ACK = {
    AckOutcome.ACKED: pb.ACK_OUTCOME_ACKED,
    AckOutcome.ALREADY_ACKED: pb.ACK_OUTCOME_ALREADY_ACKED,
    AckOutcome.STALE: pb.ACK_OUTCOME_STALE,
    AckOutcome.NOT_FOUND: pb.ACK_OUTCOME_NOT_FOUND,
    AckOutcome.INVALID_RECEIPT: pb.ACK_OUTCOME_INVALID_RECEIPT,
}


def _fill(messages: Any, column: list[T], set_: Callable[[Any, T], None]) -> None:
    """Set one optional field where its column has a value (most columns are empty)."""
    if any(column):
        for msg, value in zip(messages, column, strict=True):
            if value:
                set_(msg, value)


def _receive_limits(request: Any) -> tuple[int, int]:
    """A Receive/Subscribe request's max_messages and invisible_ms (0: the default)."""
    return (
        request.max_messages or RECEIVE_MAX_MESSAGES,
        request.invisible_ms or RECEIVE_INVISIBLE_MS,
    )


def _set_receipt(msg: Any, value: str) -> None:
    msg.receipt = value


def _set_key(msg: Any, value: str) -> None:
    msg.key = value


def _set_headers(msg: Any, value: dict[str, str]) -> None:
    msg.headers.update(value)


def received_messages(messages: Any, got: ReceivedBatch) -> None:
    """A receive's columns as ReceivedMessages added in place to the repeated field
    ``messages`` (half the cost of building a list): only non-empty fields set."""
    add = messages.add
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
    _fill(messages, got.receipts, _set_receipt)
    _fill(messages, got.keys, _set_key)
    _fill(messages, got.headers, _set_headers)


def received_packed(into: Any, got: ReceivedBatch) -> None:
    """A receive's columns into the ``PackedReceived`` ``into``."""
    write_received(
        into,
        got.topic,
        got.ids,
        got.bodies,
        got.keys,
        got.headers,
        got.deliver_at_ms,
        got.delivered_ms,
        got.receipts,
        got.attempts,
    )


def _count(resp: Any) -> int:
    """Messages in a ReceiveResponse, in either form."""
    return len(resp.messages) or len(resp.packed.ids.ends) // 4


def _packed_outcomes(errors: Any, out: list[AckOutcome | DelayqError]) -> bytes:
    """An ack's outcomes as one byte each (0 where an error, which goes to ``errors``)."""
    codes = bytearray(len(out))
    for i, o in enumerate(out):
        if isinstance(o, DelayqError):
            errors.add(index=i).error.CopyFrom(item_error(o))
        else:
            codes[i] = _ACK[o]
    return bytes(codes)


class Consuming(EngineCalls):
    def _receive_batch(self, request: Any) -> Any:
        """One engine receive of what is ready as a ReceiveResponse (shared by Receive
        and Subscribe), in the form the request asked for."""
        max_messages, invisible_ms = _receive_limits(request)
        got = self._engine.receive_batch(
            request.topic,
            request.group,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            auto_ack=request.auto_ack,
        )
        resp = pb.ReceiveResponse(topology_epoch=self._topology.map.topology_epoch)
        if request.packed:
            received_packed(resp.packed, got)
        else:
            received_messages(resp.messages, got)
        return resp

    async def _looks(
        self,
        request: Any,
        context: grpc.aio.ServicerContext,
        wait_ms: int,
        *,
        stream: bool,
        run: Runner | None = None,
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
        look instead of looking again first (half its looks were empty).

        ``run`` runs each engine call (default: ``_call``, errors ending the call
        with their gRPC status; a front-end passes ``_run`` and answers them)."""
        if run is None:
            run = functools.partial(self._call, context)
        max_messages, invisible_ms = _receive_limits(request)
        await run(lambda: check_receive(max_messages, invisible_ms, wait_ms), inline=True)
        inline = self._inline_writes  # a receive writes too: acks, dead letters
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        take = functools.partial(self._receive_batch, request)
        self._ready.waiting += 1
        try:
            while True:
                fired = self._ready.generation()  # before the look: see ReadySignal
                resp = await run(take, inline=inline)
                yield resp
                left = wait_ms / 1000 if stream else deadline - loop.time()
                if left <= 0:
                    return
                if _count(resp) < max_messages:
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
                if _count(resp):
                    break
        return resp

    async def Subscribe(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        looks = self._looks(request, context, request.wait_ms or 1000, stream=True)
        async with contextlib.aclosing(looks):
            async for resp in looks:
                if _count(resp):
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
        packed = request.HasField("packed_receipts")

        def run() -> tuple[Any, list[AckOutcome | DelayqError]]:
            if packed:
                receipts = blob_texts(request.packed_receipts, "packed_receipts")
            else:
                receipts = list(request.receipts)
            self._batch_size(len(receipts), "packed_receipts" if packed else "receipts")
            check_receipts(self._topology.map, self._shard, receipts)
            return receipts, self._engine.ack(request.topic, request.group, receipts)

        receipts, out = await self._call(context, run, inline=self._inline_writes)
        resp = pb.AckResponse(topology_epoch=self._topology.map.topology_epoch)
        if packed:
            resp.outcomes = _packed_outcomes(resp.errors, out)
        else:
            resp.results.extend(self._settled(receipts, out))
        return resp

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
