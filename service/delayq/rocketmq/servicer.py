"""The ``apache.rocketmq.v2.MessagingService`` handlers (grpc.aio) over one shard.

Each RocketMQ call becomes the engine's, through the server's parts
(``EngineCalls._run``: the pool, the map's re-read on a wrong shard;
``Consuming._looks``: the long poll); the answer carries a RocketMQ
``Status`` (``status``) inside a gRPC-OK response, one per entry of a batch.

- ``SendMessage`` schedules keyless messages (any active shard takes them) at
  ``delivery_timestamp`` (none: now), properties as headers (``properties``);
  FIFO (a message group) and transaction messages are NOT_IMPLEMENTED.
- ``RecallMessage`` cancels by the handle's delayq id (``handles``), here or at
  the shard that owns it (``forwarding``), durably, at any time before delivery.
- ``ReceiveMessage`` long-polls (the client's ``long_polling_timeout``, at most
  its deadline less ``DEADLINE_MARGIN_S``; none given, as by the Go client: its
  deadline less the ``request_timeout`` of its Settings, which is the client's
  await duration), answers a status frame, the
  messages, then a delivery timestamp frame; an empty poll ends with OK.
  Messages the group's tag filter does not match are acknowledged at once. One
  without an invisible duration (a PushConsumer's) is renewed while its client's
  session lives (``renewals``).
- ``AckMessage`` acks delayq receipts (a receipt handle is delayq's receipt);
  ``ChangeInvisibleDuration`` re-times one under a new receipt (``retime``: the
  old one is refused from then on); ``ForwardMessageToDeadLetterQueue`` sends
  one to its group's dead-letter topic (``dead_letter``; ``%DLQ%<group>`` is
  delayq's ``dlq.<group>``, ``names``).
- Pull, offsets, transactions and lite subscriptions answer NOT_IMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc

from ..argchecks import MAX_INVISIBLE_MS, MAX_RECEIVE_MESSAGES, MAX_WAIT_MS, check_topic
from ..engine import AckOutcome, CancelOutcome, ScheduleBatch
from ..errors import DelayqError, Forwarded, InvalidArgument
from ..ids import MessageId
from ..server.consuming import Consuming
from ..server.forwarding import PassedOn
from ..server.ownership import check_keys, check_receipts
from ..v1 import delayq_pb2 as pb
from . import properties as props
from .filters import TagFilter
from .handles import recall_handle, recalled
from .names import delayq_topic
from .renewals import RENEW_EVERY_MS, RENEWED_INVISIBLE_MS, Renewals
from .routes import assignments, queues, shard_of
from .sessions import CLIENT_ID, RECEIVE_BATCH, Sessions, answer
from .status import not_implemented, ok, status, status_of
from .v2 import definition_pb2 as rmq
from .v2 import service_pb2 as svc
from .v2 import service_pb2_grpc as svc_grpc

__all__ = ["DEADLINE_MARGIN_S", "MIN_INVISIBLE_MS", "MessagingServicer"]

log = logging.getLogger("delayq.rocketmq")

MIN_INVISIBLE_MS = 10_000
"""The shortest invisible duration a receive may ask for (RocketMQ's)."""
DEADLINE_MARGIN_S = 0.5
"""A long poll ends this long before the call's deadline, so the answer arrives in time."""

_ACK_CODES = {
    AckOutcome.ACKED: (rmq.OK, "OK"),
    AckOutcome.ALREADY_ACKED: (rmq.OK, "already acknowledged"),
    AckOutcome.STALE: (
        rmq.INVALID_RECEIPT_HANDLE,
        "stale receipt handle: the message was delivered again or given a new handle since",
    ),
    AckOutcome.NOT_FOUND: (rmq.INVALID_RECEIPT_HANDLE, "no message holds this receipt handle"),
    AckOutcome.INVALID_RECEIPT: (
        rmq.INVALID_RECEIPT_HANDLE,
        "not a receipt handle of this topic and group",
    ),
}
_RECALL_CODES = {
    CancelOutcome.CANCELLED: (rmq.OK, "OK"),
    CancelOutcome.ALREADY_CANCELLED: (rmq.OK, "already recalled"),
    CancelOutcome.NOT_FOUND: (rmq.MESSAGE_NOT_FOUND, "no such message"),
    CancelOutcome.ALREADY_DELIVERED: (
        rmq.PRECONDITION_FAILED,
        "already delivered: a message can be recalled only before it is due",
    ),
}
_FROM_WIRE = {  # a cancel passed on to another shard answers in delayq's protocol
    pb.CANCEL_OUTCOME_CANCELLED: CancelOutcome.CANCELLED,
    pb.CANCEL_OUTCOME_ALREADY_CANCELLED: CancelOutcome.ALREADY_CANCELLED,
    pb.CANCEL_OUTCOME_NOT_FOUND: CancelOutcome.NOT_FOUND,
    pb.CANCEL_OUTCOME_ALREADY_DELIVERED: CancelOutcome.ALREADY_DELIVERED,
}
_SEND_FIELDS = {  # delayq's field of a message -> the RocketMQ one, in error messages
    "deliver_at_ms": "system_properties.delivery_timestamp",
    "headers": "user_properties",
    "topic": "topic.name",
}


Settling = str | AckOutcome | DelayqError
"""What a settling call answers for one receipt (a new receipt where it hands one)."""


def _client_id(context: grpc.aio.ServicerContext) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID:
            return str(value)
    return ""


def _overall(statuses: list[rmq.Status]) -> rmq.Status:
    """A batch's status: OK, the one error of its entries, or MULTIPLE_RESULTS."""
    bad = {(s.code, s.message) for s in statuses if s.code != rmq.OK}
    if not bad:
        return ok()
    if len(bad) == 1:
        code, message = bad.pop()
        return status(code, message)
    return status(rmq.MULTIPLE_RESULTS, "entries ended differently: see each entry's status")


def _send_error(exc: DelayqError, i: int) -> rmq.Status:
    """An entry's error, its field named as the RocketMQ message has it."""
    if isinstance(exc, InvalidArgument):
        last = exc.field.rsplit(".", 1)[-1]
        exc = InvalidArgument(f"messages[{i}].{_SEND_FIELDS.get(last, last)}", exc.message)
    return status_of(exc)


class MessagingServicer(Consuming, svc_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(self, *args: Any, endpoints: rmq.Endpoints, **kwargs: Any) -> None:
        """``endpoints``: where this port is reached, for a route asked without any."""
        super().__init__(*args, **kwargs)
        self._endpoints = endpoints
        self.sessions = Sessions()
        self.renewals = Renewals()
        self._renewer = asyncio.get_running_loop().create_task(self._renew_forever())

    def shutdown(self) -> None:
        self._renewer.cancel()
        super().shutdown()

    async def _renew_forever(self) -> None:
        """Every ``RENEW_EVERY_MS``, keep the messages of live sessions' auto-renewed
        receives invisible (``renewals``); what cannot be renewed is let go."""
        while True:
            await asyncio.sleep(RENEW_EVERY_MS / 1000)
            now = self._engine.clock.now_ms()
            for r in self.renewals.due(now, set(self.sessions.clients())):
                try:
                    out = await self._run(
                        functools.partial(
                            self._engine.change_invisibility,
                            r.topic,
                            r.group,
                            r.receipts,
                            RENEWED_INVISIBLE_MS,
                        ),
                        inline=self._inline_writes,
                    )
                except DelayqError as exc:  # a replica now, say: the client will see
                    log.info("cannot renew %d receipts: %s", len(r.receipts), exc)
                    self.renewals.settle(r.receipts)
                    continue
                gone = [
                    x for x, o in zip(r.receipts, out, strict=True) if o is not AckOutcome.ACKED
                ]
                self.renewals.settle(gone)

    # -- sessions and routes
    def _routes(self, request: Any) -> list[rmq.MessageQueue]:
        """The queues of a route (``routes.queues``) for a request naming a topic
        and the endpoints it asked at; raises InvalidArgument."""
        check_topic(delayq_topic(request.topic.name), "topic.name")
        asked = request.endpoints if request.endpoints.addresses else self._endpoints
        return queues(request.topic, self._topology.map, asked)

    async def QueryRoute(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            routes = self._routes(request)
        except DelayqError as exc:
            return svc.QueryRouteResponse(status=status_of(exc))
        return svc.QueryRouteResponse(status=ok(), message_queues=routes)

    async def QueryAssignment(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            routes = self._routes(request)
        except DelayqError as exc:
            return svc.QueryAssignmentResponse(status=status_of(exc))
        return svc.QueryAssignmentResponse(status=ok(), assignments=assignments(routes))

    async def Heartbeat(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return svc.HeartbeatResponse(status=ok())

    async def NotifyClientTermination(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.sessions.close(_client_id(context))
        return svc.NotifyClientTerminationResponse(status=ok())

    async def Telemetry(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Answer every Settings the client writes (``sessions.answer``); the stream
        stays open until the client ends it."""
        client = _client_id(context)
        max_body = self._engine.settings.max_body_bytes
        attempts = self._engine.settings.delivery_attempts
        try:
            async for command in request_iterator:
                if command.WhichOneof("command") != "settings":
                    continue  # a thread dump or a verification result: nothing to do
                settings, st = answer(command.settings, max_body, attempts)
                if st.code == rmq.OK:
                    self.sessions.open(client, settings)
                yield svc.TelemetryCommand(status=st, settings=settings)
        finally:
            self.sessions.close(client)

    # -- producing
    async def SendMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        ms = list(request.messages)
        entries = [svc.SendResultEntry() for _ in ms]
        rows: list[int] = []
        topics: list[str] = []
        bodies: list[bytes] = []
        dues: list[int] = []
        headers: list[dict[str, str]] = []
        for i, m in enumerate(ms):
            sp = m.system_properties
            entries[i].message_id = sp.message_id
            if sp.message_type == rmq.TRANSACTION:
                entries[i].status.CopyFrom(not_implemented("a transaction message"))
                continue
            if sp.HasField("message_group") or sp.message_type == rmq.FIFO:
                entries[i].status.CopyFrom(not_implemented("a FIFO message (message_group)"))
                continue
            try:
                delayed = sp.HasField("delivery_timestamp")
                headers.append(
                    props.headers_of(
                        tag=sp.tag,
                        keys=list(sp.keys),
                        message_id=sp.message_id,
                        kind="DELAY" if delayed else "NORMAL",
                        born_ms=sp.born_timestamp.ToMilliseconds()
                        if sp.HasField("born_timestamp")
                        else 0,
                        born_host=sp.born_host,
                        user=m.user_properties,
                        field=f"messages[{i}]",
                    )
                )
            except DelayqError as exc:
                entries[i].status.CopyFrom(status_of(exc))
                continue
            rows.append(i)
            topics.append(delayq_topic(m.topic.name))
            bodies.append(m.body)
            dues.append(sp.delivery_timestamp.ToMilliseconds() if delayed else 0)

        def run() -> Any:
            self._batch_size(len(ms), "messages")
            check_keys(self._topology.map, self._shard, [""] * len(rows), self._topology.moving())
            return self._engine.schedule_batch(
                ScheduleBatch(topic=topics, bodies=bodies, deliver_at_ms=dues, headers=headers)
            )

        if rows:
            try:
                out = await self._run(run, inline=self._inline_writes)
            except DelayqError as exc:
                whole = status_of(exc)
                for i in rows:
                    entries[i].status.CopyFrom(whole)
            else:
                for k, i in enumerate(rows):
                    mid = out.ids[k]
                    if mid is None:
                        entries[i].status.CopyFrom(_send_error(out.errors[k], i))
                        continue
                    entries[i].status.CopyFrom(ok())
                    entries[i].recall_handle = recall_handle(
                        topics[k], mid, ms[i].system_properties.message_id
                    )
        return svc.SendMessageResponse(
            status=_overall([e.status for e in entries]), entries=entries
        )

    async def RecallMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        topic = delayq_topic(request.topic.name)
        try:
            mid, client_id = recalled(request.recall_handle, topic)
            owner = MessageId.parse(mid, "recall_handle").shard
        except DelayqError as exc:
            return svc.RecallMessageResponse(status=status_of(exc))
        try:
            outcome = await self._recall(mid, owner, context.time_remaining())
        except DelayqError as exc:
            return svc.RecallMessageResponse(status=status_of(exc))
        except PassedOn as exc:
            return svc.RecallMessageResponse(
                status=status(rmq.HA_NOT_AVAILABLE, f"the shard of the message: {exc}")
            )
        code, message = _RECALL_CODES[outcome]
        return svc.RecallMessageResponse(status=status(code, message), message_id=client_id or mid)

    async def _recall(self, mid: str, owner: int, timeout_s: float | None) -> CancelOutcome:
        """Cancel ``mid`` here or where it is."""
        m = self._topology.map
        target: int | None = owner
        if m.standalone or owner == self._shard:

            def cancel() -> CancelOutcome | DelayqError:
                return self._engine.cancel([mid])[0]

            got = await self._run(cancel, inline=self._inline_writes)
            if not isinstance(got, DelayqError):
                return got
            if not isinstance(got, Forwarded):
                raise got
            target = got.target  # a rebalance moved it: ask where it went
        resp = await self._forwarder.call(target, "Cancel", pb.CancelRequest(ids=[mid]), timeout_s)
        result = resp.results[0]
        if result.HasField("error"):
            raise PassedOn(grpc.StatusCode(result.error.code), result.error.message)
        return _FROM_WIRE[result.outcome]

    # -- consuming
    def _queue_problem(self, queue: Any) -> rmq.Status | None:
        """Why this node cannot serve a receive from ``queue`` (None: it can)."""
        m = self._topology.map
        shard = shard_of(queue)
        if shard is None:
            return status(
                rmq.BAD_REQUEST, f"message_queue.broker.name: {queue.broker.name!r} is no shard"
            )
        if not m.standalone and shard != self._shard:
            return status(
                rmq.HA_NOT_AVAILABLE,
                f"message_queue: shard {shard}'s messages are received at its master "
                f"(the shard map's rocketmq address), not at shard {self._shard}; query the "
                "route again",
            )
        return None

    def _receive_request(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The delayq receive a RocketMQ one asks for; raises InvalidArgument."""
        topic = delayq_topic(request.message_queue.topic.name)
        check_topic(topic, "message_queue.topic.name")
        invisible_ms = RENEWED_INVISIBLE_MS  # none given: renewed (``renewals``)
        if request.HasField("invisible_duration"):
            invisible_ms = request.invisible_duration.ToMilliseconds()
            if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
                raise InvalidArgument(
                    "invisible_duration",
                    f"{invisible_ms} ms; give {MIN_INVISIBLE_MS} ms to {MAX_INVISIBLE_MS} ms",
                )
        left = context.time_remaining()
        limit_ms = MAX_WAIT_MS if left is None else int((left - DEADLINE_MARGIN_S) * 1000)
        wait_ms = limit_ms
        if request.HasField("long_polling_timeout"):
            wait_ms = min(limit_ms, request.long_polling_timeout.ToMilliseconds())
        elif left is not None:
            # the Go SimpleConsumer: a deadline of its await duration plus its request
            # timeout; polling past the await would race its own timer, and a message
            # handed out as it fires is lost until its invisibility lapses
            reserve_ms = self.sessions.request_timeout_ms(_client_id(context))
            if reserve_ms is not None:
                wait_ms = min(limit_ms, int(left * 1000) - reserve_ms)
        return pb.ReceiveRequest(
            topic=topic,
            group=request.group.name,
            max_messages=min(request.batch_size or RECEIVE_BATCH, MAX_RECEIVE_MESSAGES),
            wait_ms=max(0, min(wait_ms, MAX_WAIT_MS)),
            invisible_ms=invisible_ms,
        )

    async def ReceiveMessage(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        problem = self._queue_problem(request.message_queue)
        if problem is not None:
            yield svc.ReceiveMessageResponse(status=problem)
            return
        try:
            expression = request.filter_expression
            wanted = TagFilter.parse(rmq.FilterType.Name(expression.type), expression.expression)
            dq = self._receive_request(request, context)
        except DelayqError as exc:
            yield svc.ReceiveMessageResponse(status=status_of(exc))
            return
        got: list[Any] = []
        try:
            looks = self._looks(dq, context, dq.wait_ms, stream=False, run=self._run)
            async with contextlib.aclosing(looks):
                async for resp in looks:
                    got = await self._filtered(dq, resp.messages, wanted)
                    if got:
                        break
        except DelayqError as exc:
            yield svc.ReceiveMessageResponse(status=status_of(exc))
            return
        client = _client_id(context)
        if got and client and not request.HasField("invisible_duration"):
            now = self._engine.clock.now_ms()
            self.renewals.hold(client, dq.topic, dq.group, [m.receipt for m in got], now)
        yield svc.ReceiveMessageResponse(status=ok())
        for m in got:
            message = _message(m, request.message_queue.topic.name, dq.invisible_ms)
            yield svc.ReceiveMessageResponse(message=message)
        last = svc.ReceiveMessageResponse()
        last.delivery_timestamp.FromMilliseconds(self._engine.clock.now_ms())
        yield last

    async def _filtered(self, dq: Any, messages: Any, wanted: TagFilter) -> list[Any]:
        """The messages the group's filter matches; the others are acknowledged."""
        if wanted.tags is None:
            return list(messages)
        keep: list[Any] = []
        skip: list[Any] = []
        for m in messages:
            (keep if wanted.matches(m.headers.get(props.TAG, "")) else skip).append(m)
        if skip:
            receipts = [m.receipt for m in skip]
            await self._run(
                lambda: self._engine.ack(dq.topic, dq.group, receipts),
                inline=self._inline_writes,
            )
        return keep

    async def AckMessage(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        receipts = [e.receipt_handle for e in request.entries]
        self.renewals.settle(receipts)
        results = [_settled(o) for o in await self._settle(request, receipts, self._engine.ack)]
        entries = [
            svc.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle, status=s
            )
            for e, s in zip(request.entries, results, strict=True)
        ]
        return svc.AckMessageResponse(status=_overall(results), entries=entries)

    async def ChangeInvisibleDuration(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        ms = request.invisible_duration.ToMilliseconds()
        receipt = request.receipt_handle
        self.renewals.settle([receipt])
        if not 0 <= ms <= MAX_INVISIBLE_MS:
            st = status(
                rmq.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration: {ms} ms; give 0 ms to {MAX_INVISIBLE_MS} ms",
            )
            return svc.ChangeInvisibleDurationResponse(status=st, receipt_handle=receipt)
        (out,) = await self._settle(
            request, [receipt], lambda t, g, r: self._engine.retime(t, g, r, ms)
        )
        return svc.ChangeInvisibleDurationResponse(
            status=_settled(out), receipt_handle=out if isinstance(out, str) else receipt
        )

    async def ForwardMessageToDeadLetterQueue(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> Any:
        """The message goes to its group's dead-letter topic now (delayq's own
        ``dead_letter``; the client calls this after its last attempt)."""
        receipt = request.receipt_handle
        self.renewals.settle([receipt])
        (out,) = await self._settle(request, [receipt], self._engine.dead_letter)
        return svc.ForwardMessageToDeadLetterQueueResponse(status=_settled(out))

    async def _settle(
        self,
        request: Any,
        receipts: list[str],
        fn: Callable[[str, str, list[str]], Sequence[Settling]],
    ) -> list[Settling]:
        """One outcome per receipt of ``fn(topic, group, receipts)`` (an ack, an
        invisibility change, a dead letter); an error of the whole call for each."""
        topic = delayq_topic(request.topic.name)

        def run() -> Sequence[Settling]:
            self._batch_size(len(receipts), "entries")
            check_topic(topic, "topic.name")
            check_receipts(self._topology.map, self._shard, receipts)
            return fn(topic, request.group.name, receipts)

        try:
            return list(await self._run(run, inline=self._inline_writes))
        except DelayqError as exc:
            return [exc] * len(receipts)

    # -- not supported
    async def PullMessage(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        yield svc.PullMessageResponse(
            status=not_implemented("PullMessage (use a SimpleConsumer or PushConsumer)")
        )

    async def UpdateOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return svc.UpdateOffsetResponse(status=not_implemented("UpdateOffset"))

    async def GetOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return svc.GetOffsetResponse(status=not_implemented("GetOffset"))

    async def QueryOffset(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return svc.QueryOffsetResponse(status=not_implemented("QueryOffset"))

    async def EndTransaction(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return svc.EndTransactionResponse(status=not_implemented("a transaction message"))

    async def SyncLiteSubscription(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return svc.SyncLiteSubscriptionResponse(status=not_implemented("a lite subscription"))


def _settled(o: Settling) -> rmq.Status:
    """The status of one receipt's outcome (a new receipt: OK)."""
    if isinstance(o, DelayqError):
        return status_of(o)
    return ok() if isinstance(o, str) else status(*_ACK_CODES[o])


def _message(m: Any, topic: str, invisible_ms: int) -> rmq.Message:
    """A received delayq message as RocketMQ's."""
    headers = dict(m.headers)
    c = props.carried(headers)
    out = rmq.Message(body=m.body, user_properties=props.user_properties(headers))
    out.topic.name = topic
    sp = out.system_properties
    if c.tag:
        sp.tag = c.tag
    sp.keys.extend(c.keys)
    sp.message_id = c.message_id or m.id
    sp.body_digest.type = rmq.MD5
    sp.body_digest.checksum = hashlib.md5(m.body).hexdigest().upper()
    sp.body_encoding = rmq.IDENTITY
    sp.message_type = rmq.DELAY if c.kind == "DELAY" else rmq.NORMAL
    sp.born_timestamp.FromMilliseconds(c.born_ms or m.deliver_at_ms)
    sp.born_host = c.born_host
    sp.delivery_timestamp.FromMilliseconds(m.deliver_at_ms)
    sp.receipt_handle = m.receipt
    sp.queue_id = 0
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.delivery_attempt = m.attempt
    return out
