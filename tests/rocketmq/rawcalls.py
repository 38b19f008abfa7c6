"""Raw RocketMQ 5 calls for the protocol tests (stubs of the vendored protos):
a fresh name, a message, a send, and one ReceiveMessage read to its end."""

from __future__ import annotations

import time
import uuid
from typing import Any

from delayq.rocketmq.v2 import definition_pb2 as rmq
from delayq.rocketmq.v2 import service_pb2 as svc

__all__ = ["message", "name", "receive", "received", "send"]


def name() -> str:
    return "t" + uuid.uuid4().hex[:10]


def message(topic: str, body: bytes = b"hello", *, due_ms: int | None = None,
             tag: str = "", **system: Any) -> rmq.Message:  # fmt: skip
    m = rmq.Message(body=body)
    m.topic.name = topic
    sp = m.system_properties
    sp.message_id = "01" + uuid.uuid4().hex.upper()
    sp.message_type = rmq.DELAY if due_ms is not None else rmq.NORMAL
    if due_ms is not None:
        sp.delivery_timestamp.FromMilliseconds(due_ms)
    if tag:
        sp.tag = tag
    for k, v in system.items():
        if isinstance(v, list):
            getattr(sp, k).extend(v)
        else:
            setattr(sp, k, v)
    return m


def send(stub: Any, *messages: rmq.Message) -> Any:
    return stub.SendMessage(svc.SendMessageRequest(messages=messages), timeout=10)


def receive(stub: Any, topic: str, group: str, *, wait_s: float = 2, batch: int = 32,
             invisible_s: float | None = 10, expression: str = "*", kind: int = rmq.TAG,
             shard: int = 0) -> tuple[rmq.Status, list[rmq.Message], float]:  # fmt: skip
    """(status, messages, seconds taken) of one ReceiveMessage."""
    req = svc.ReceiveMessageRequest(batch_size=batch)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.broker.name = f"shard-{shard}"
    req.filter_expression.type = kind  # type: ignore[assignment]
    req.filter_expression.expression = expression
    req.long_polling_timeout.FromMilliseconds(int(wait_s * 1000))
    if invisible_s is not None:
        req.invisible_duration.FromMilliseconds(int(invisible_s * 1000))
    began = time.monotonic()
    frames = list(stub.ReceiveMessage(req, timeout=wait_s + 5))
    took = time.monotonic() - began
    statuses = [f.status for f in frames if f.WhichOneof("content") == "status"]
    assert len(statuses) == 1, frames
    return statuses[0], [f.message for f in frames if f.WhichOneof("content") == "message"], took


def received(stub: Any, topic: str, group: str, **kw: Any) -> list[rmq.Message]:
    """The messages of one ReceiveMessage that must end OK."""
    st, messages, _ = receive(stub, topic, group, **kw)
    assert st.code == rmq.OK, st
    return messages
