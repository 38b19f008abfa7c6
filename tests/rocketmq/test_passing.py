"""``rocketmq.passing.Passing`` against a real gRPC owner over a socket (a
stand-in RocketMQ port that answers as told): a client's deadline already
passed sends nothing and answers each row PROXY_TIMEOUT (it is not extended to
``PASS_ON_TIMEOUT_S``), and an owner's answer with fewer entries than it was
sent, or entries of other messages, answers the rows without one
INTERNAL_SERVER_ERROR while the others keep the owner's entries."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc

from delayq.rocketmq.convert import sendable
from delayq.rocketmq.passing import Passing
from delayq.rocketmq.v2 import definition_pb2 as rmq
from delayq.rocketmq.v2 import service_pb2 as svc
from delayq.rocketmq.v2 import service_pb2_grpc as svc_grpc
from delayq.shardmap import ShardEntry, ShardMap
from tests.rocketmq.rawcalls import message


class _Owner(svc_grpc.MessagingServiceServicer):  # type: ignore[misc]
    """Answers a send with an OK entry for each message it is told to answer
    (``answer(messages)``: the messages whose entries it gives), counting calls."""

    def __init__(self, answer: Any) -> None:
        self.calls = 0
        self._answer = answer

    async def SendMessage(self, request: Any, context: Any) -> Any:
        self.calls += 1
        entries = [
            svc.SendResultEntry(
                status=rmq.Status(code=rmq.OK), message_id=m.system_properties.message_id
            )
            for m in self._answer(list(request.messages))
        ]
        return svc.SendMessageResponse(status=rmq.Status(code=rmq.OK), entries=entries)


@dataclass
class _Node:
    """The node ``Passing`` passes on from: shard 0 of a map whose shard 1's
    RocketMQ port is ``address``."""

    address: str
    shard: int = 0
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    @property
    def map(self) -> ShardMap:
        return ShardMap(
            topology_epoch=1,
            shards=(
                ShardEntry(index=0, master="127.0.0.1:1"),
                ShardEntry(index=1, master="127.0.0.1:2", rocketmq=self.address),
            ),
        )

    def channel_to(self, address: str) -> grpc.aio.Channel:
        self.channels.append(grpc.aio.insecure_channel(address))
        return self.channels[-1]


async def _pass_on(answer: Any, timeout_s: float | None) -> tuple[list[Any], int]:
    """Three messages passed on to an owner that answers as ``answer`` says: the
    entries and how many calls the owner saw."""
    owner = _Owner(answer)
    server = grpc.aio.server()
    svc_grpc.add_MessagingServiceServicer_to_server(owner, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    node = _Node(f"127.0.0.1:{port}")
    try:
        request = svc.SendMessageRequest(messages=[message("t", b"%d" % i) for i in range(3)])
        s = sendable(request.messages)
        await Passing(node).send(request, s, 1, timeout_s)
        return list(s.entries), owner.calls
    finally:
        for ch in node.channels:
            await ch.close()
        await server.stop(None)


def test_a_deadline_already_passed_sends_nothing_and_is_a_timeout() -> None:
    for left in (0.0, -1.0):
        entries, calls = asyncio.run(_pass_on(lambda ms: ms, left))
        assert calls == 0
        assert [e.status.code for e in entries] == [rmq.PROXY_TIMEOUT] * 3
    entries, calls = asyncio.run(_pass_on(lambda ms: ms, None))  # no deadline: passed on
    assert calls == 1 and [e.status.code for e in entries] == [rmq.OK] * 3


def test_rows_an_owners_answer_has_no_entry_of_are_errors_the_others_keep_theirs() -> None:
    entries, _ = asyncio.run(_pass_on(lambda ms: ms[:2], 5.0))  # one entry short
    assert [e.status.code for e in entries] == [rmq.OK, rmq.OK, rmq.INTERNAL_SERVER_ERROR]
    assert "answered 2 entries for 3 messages" in entries[2].status.message
    entries, _ = asyncio.run(_pass_on(lambda ms: [ms[0], ms[2]], 5.0))  # the second's missing
    assert [e.status.code for e in entries] == [rmq.OK] + [rmq.INTERNAL_SERVER_ERROR] * 2
    entries, _ = asyncio.run(_pass_on(lambda ms: ms + ms[:1], 5.0))  # one too many
    assert [e.status.code for e in entries] == [rmq.OK] * 3
