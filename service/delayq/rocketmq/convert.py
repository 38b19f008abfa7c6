"""RocketMQ's messages to the engine's values and back (pure): every conversion
between ``apache.rocketmq.v2`` and the calls of the node (``server.calls``), in
one place.

A message to send becomes a row of one ``ScheduleBatch`` (its delivery
timestamp the due time, none: now; its first ``keys`` value its delayq key,
none: keyless; its properties headers, ``properties``; the client's message id
its dedup id, for the port's dedup window); an unsupported or malformed one
gets its entry's status instead and no row. A sent row's entry carries the
client's message id and a recall handle (``handles``); a row the engine
answered KEPT (a resend of a message id the first message still holds)
carries the first message's. A receive's arguments come from the request, its deadline and
the client's Settings; a received message (a row of the engine's
``ReceivedBatch``) becomes a RocketMQ ``Message`` in one step, with an MD5 body
digest, its attempt and its receipt handle (delayq's receipt).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import grpc

from ..argchecks import MAX_RECEIVE_MESSAGES, MAX_WAIT_MS
from ..engine import BatchOutcome, ReceivedBatch, ScheduleBatch
from ..errors import DelayqError
from . import properties as props
from .checks import millis, receive_invisible_ms, topic_of, unsupported
from .handles import recall_handle
from .names import delayq_topic
from .sessions import CLIENT_ID, RECEIVE_BATCH
from .status import ok, send_error, status_of
from .v2 import definition_pb2 as rmq
from .v2 import service_pb2 as svc

__all__ = [
    "DEADLINE_MARGIN_S",
    "ReceiveArgs",
    "Sendable",
    "client_id",
    "delayq_key",
    "message_of",
    "receive_args",
    "sendable",
]

DEADLINE_MARGIN_S = 0.5
"""A long poll ends this long before the call's deadline, so the answer arrives in time."""


def client_id(context: grpc.aio.ServicerContext) -> str:
    """The client's id (its ``x-mq-client-id`` header; "" without one)."""
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID:
            return str(value)
    return ""


def delayq_key(keys: Sequence[str]) -> str:
    """A RocketMQ message's delayq key: its first ``keys`` value ("": keyless)."""
    return keys[0] if keys else ""


_ROW_FIELDS = ("rows", "topics", "bodies", "dues", "headers", "keys", "dedup_ids", "windows")
"""``Sendable``'s lists of a value a row to schedule, in ``Sendable.add``'s order."""


@dataclass(slots=True)
class Sendable:
    """A SendMessage request as one batch: an entry per message, the rows of those
    to schedule (``rows[k]``: the entry of the batch's message k) and their
    columns; ``windows[k]``: how long the row's dedup id (the client's message
    id, ``dedup_ids[k]``) holds (0: not deduplicated)."""

    entries: list[Any]
    rows: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    dues: list[int] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    dedup_ids: list[str] = field(default_factory=list)
    windows: list[int] = field(default_factory=list)

    def batch(self) -> ScheduleBatch:
        deduplicated = any(self.windows)
        return ScheduleBatch(
            topic=self.topics,
            bodies=self.bodies,
            deliver_at_ms=self.dues,
            headers=self.headers,
            keys=self.keys if any(self.keys) else None,
            dedup_ids=self.dedup_ids if deduplicated else None,
            dedup_window_ms=self.windows if deduplicated else None,
        )

    def add(
        self,
        row: int,
        topic: str,
        body: bytes,
        due: int,
        headers: dict[str, str],
        key: str,
        dedup_id: str,
        window: int,
    ) -> None:
        """Append a row to schedule: its entry's number and its columns' values."""
        values = (row, topic, body, due, headers, key, dedup_id, window)
        for name, value in zip(_ROW_FIELDS, values, strict=True):
            getattr(self, name).append(value)

    def only(self, keep: Sequence[int]) -> Sendable:
        """The same request with only rows ``keep`` (by row number) to schedule; the
        entries are shared, so that the rows' outcomes land in this one's."""
        out = Sendable(entries=self.entries)
        for k in keep:
            out.add(*(getattr(self, name)[k] for name in _ROW_FIELDS))
        return out

    def sent(self, out: BatchOutcome | DelayqError) -> None:
        """The rows' entries from the batch's outcome (an error of the whole call:
        each row's)."""
        if isinstance(out, DelayqError):
            whole = status_of(out)
            for i in self.rows:
                self.entries[i].status.CopyFrom(whole)
            return
        for k, i in enumerate(self.rows):
            mid = out.ids[k]
            if mid is None:
                self.entries[i].status.CopyFrom(send_error(out.errors[k], i))
                continue
            self.entries[i].status.CopyFrom(ok())
            entry = self.entries[i]  # its message_id: the client's
            entry.recall_handle = recall_handle(self.topics[k], mid, entry.message_id)


def sendable(messages: Any, dedup_window_ms: int = 0) -> Sendable:
    """A SendMessage request's messages as one batch to schedule; a message with a
    client message id is deduplicated by it for ``dedup_window_ms`` (0: not)."""
    out = Sendable(entries=[svc.SendResultEntry() for _ in messages])
    for i, m in enumerate(messages):
        sp = m.system_properties
        entry = out.entries[i]
        entry.message_id = sp.message_id
        problem = unsupported(sp)
        if problem is not None:
            entry.status.CopyFrom(problem)
            continue
        delayed = sp.HasField("delivery_timestamp")
        at = f"messages[{i}].system_properties"
        try:
            due = millis(sp.delivery_timestamp, f"{at}.delivery_timestamp") if delayed else 0
            born = sp.HasField("born_timestamp")
            headers = props.headers_of(
                tag=sp.tag,
                keys=list(sp.keys),
                message_id=sp.message_id,
                kind="DELAY" if delayed else "NORMAL",
                born_ms=millis(sp.born_timestamp, f"{at}.born_timestamp") if born else 0,
                born_host=sp.born_host,
                user=m.user_properties,
                field=f"messages[{i}]",
            )
        except DelayqError as exc:
            entry.status.CopyFrom(status_of(exc))
            continue
        window = dedup_window_ms if sp.message_id else 0
        key = delayq_key(sp.keys)
        out.add(i, delayq_topic(m.topic.name), m.body, due, headers, key, sp.message_id, window)
    return out


class ReceiveArgs(NamedTuple):
    """A RocketMQ receive as the node's: what to take and how long to wait."""

    topic: str
    group: str
    max_messages: int
    wait_ms: int
    invisible_ms: int


def receive_args(request: Any, left_s: float | None, reserve_ms: int | None) -> ReceiveArgs:
    """The receive a RocketMQ one asks for; raises InvalidArgument. ``left_s``: the
    call's time left; ``reserve_ms``: the request timeout the client's Settings
    declare (None: none)."""
    topic = topic_of(request.message_queue.topic, "message_queue.topic.name")
    invisible_ms = receive_invisible_ms(request)
    limit_ms = MAX_WAIT_MS if left_s is None else int((left_s - DEADLINE_MARGIN_S) * 1000)
    wait_ms = limit_ms
    if request.HasField("long_polling_timeout"):
        wait_ms = min(limit_ms, millis(request.long_polling_timeout, "long_polling_timeout"))
    elif left_s is not None and reserve_ms is not None:
        # the Go SimpleConsumer: a deadline of its await duration plus its request
        # timeout; polling past the await would race its own timer, and a message
        # handed out as it fires is lost until its invisibility lapses
        wait_ms = min(limit_ms, int(left_s * 1000) - reserve_ms)
    return ReceiveArgs(
        topic=topic,
        group=request.group.name,
        max_messages=min(request.batch_size or RECEIVE_BATCH, MAX_RECEIVE_MESSAGES),
        wait_ms=max(0, min(wait_ms, MAX_WAIT_MS)),
        invisible_ms=invisible_ms,
    )


def message_of(got: ReceivedBatch, i: int, topic: str, invisible_ms: int) -> rmq.Message:
    """Message ``i`` of a receive as RocketMQ's (``topic``: the RocketMQ name asked)."""
    headers = got.headers[i]
    body = got.bodies[i]
    due = got.deliver_at_ms[i]
    c = props.carried(headers)
    out = rmq.Message(body=body, user_properties=props.user_properties(headers))
    out.topic.name = topic
    sp = out.system_properties
    if c.tag:
        sp.tag = c.tag
    sp.keys.extend(c.keys)
    sp.message_id = c.message_id or got.ids[i]
    sp.body_digest.type = rmq.MD5
    sp.body_digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = rmq.IDENTITY
    sp.message_type = rmq.DELAY if c.kind == "DELAY" else rmq.NORMAL
    sp.born_timestamp.FromMilliseconds(c.born_ms or due)
    sp.born_host = c.born_host
    sp.delivery_timestamp.FromMilliseconds(due)
    sp.receipt_handle = got.receipts[i]
    sp.queue_id = 0
    sp.invisible_duration.FromMilliseconds(invisible_ms)
    sp.delivery_attempt = got.attempts[i]
    return out
