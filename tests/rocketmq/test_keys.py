"""Keys and dedup at the RocketMQ port, over raw gRPC stubs against real ``delayq
serve`` processes: a message's first ``keys`` value is its delayq key (delayq's
own client finds it by that key), a key delayq refuses is the entry's
ILLEGAL_MESSAGE_KEY naming the field (a message id: ILLEGAL_MESSAGE_ID), a
resent message id within the port's dedup window is stored once and answered
with the first message's recall handle, and after the window it is stored
again; on a 2-shard ``cluster up`` a keyed message sent at the other shard's
node lands on its key's shard, deduplicated there, whichever node it was sent
to; the window is bounded by the server's ``--max-dedup-window``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import delayq
from delayq.ids import MessageId
from delayq.rocketmq.handles import recalled
from delayq.rocketmq.v2 import definition_pb2 as rmq
from delayq.rocketmq.v2 import service_pb2_grpc as svc_grpc
from delayq.server.config import ROCKETMQ_DEDUP_WINDOW_MS, load
from delayq.shardmap import shard_of_key
from tests.rocketmq.rawcalls import message, name, received, send
from tests.support.cluster import LocalCluster
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(120)

SHORT_WINDOW_MS = 1000
"""The dedup window of the server whose window's end is tested."""
LATER_MS = 3_600_000
"""Messages due this far ahead stay pending while a test counts them."""


def _serve(tmp: pytest.TempPathFactory, *args: str) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp.mktemp("rmq") / "data", ["--rocketmq-listen", "127.0.0.1:0", *args])
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The default dedup window (10 min)."""
    yield from _serve(tmp_path_factory)


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from _serve(tmp_path_factory, "--rocketmq-dedup-window", f"{SHORT_WINDOW_MS}ms")


def _stub(address: str) -> Any:
    return svc_grpc.MessagingServiceStub(grpc.insecure_channel(address))


def _later(topic: str, body: bytes = b"hello", **system: Any) -> rmq.Message:
    return message(topic, body, due_ms=int(time.time() * 1000) + LATER_MS, **system)


def _pending(address: str, topic: str) -> int:
    with delayq.Client(address) as client:
        t = client.stats(topic).topic(topic)
    return 0 if t is None else t.pending


def _sent_ok(answer: Any) -> list[str]:
    """The recall handles of a send every entry of which is OK."""
    assert answer.status.code == rmq.OK, answer
    return [e.recall_handle for e in answer.entries]


def test_the_first_keys_value_is_the_delayq_key(server: ServerProcess) -> None:
    topic = name()
    stub = _stub(server.rocketmq_address)
    (handle,) = _sent_ok(send(stub, _later(topic, keys=["order-42", "other"])))
    _sent_ok(send(stub, _later(topic)))  # keyless
    with delayq.Client(server.address) as client:
        (found,) = client.lookup_key(topic, "order-42")
        assert found.id == recalled(handle, topic).id
        with pytest.raises(delayq.NotFound):  # only the first value is the key
            client.lookup_key(topic, "other")


@pytest.mark.parametrize(
    "key", ["bad\x01key", "k" * 1025, "\x7f"], ids=["control", "too long", "DEL"]
)
def test_a_key_delayq_refuses_is_illegal_message_key_naming_the_field(
    server: ServerProcess, key: str
) -> None:
    topic = name()
    answer = send(_stub(server.rocketmq_address), _later(topic), _later(topic, keys=[key]))
    ok, bad = answer.entries
    assert ok.status.code == rmq.OK
    assert bad.status.code == rmq.ILLEGAL_MESSAGE_KEY, bad
    assert bad.status.message.startswith("messages[1].system_properties.keys"), bad
    assert _pending(server.address, topic) == 1


def test_a_message_id_delayq_cannot_hold_is_illegal_message_id(server: ServerProcess) -> None:
    topic = name()
    (bad,) = send(_stub(server.rocketmq_address), _later(topic, message_id="01\x01AB")).entries
    assert bad.status.code == rmq.ILLEGAL_MESSAGE_ID, bad
    assert bad.status.message.startswith("messages[0].system_properties.message_id"), bad


def test_a_resent_message_id_is_stored_once_and_answered_with_the_first_handle(
    server: ServerProcess,
) -> None:
    topic = name()
    stub = _stub(server.rocketmq_address)
    first = _later(topic, b"first")
    again = _later(topic, b"again", message_id=first.system_properties.message_id)
    (handle,) = _sent_ok(send(stub, first))
    assert _sent_ok(send(stub, again)) == [handle]  # a client's retry
    other = _later(topic)
    # in one request too: the second of one id is the first's
    h2, h3 = _sent_ok(send(stub, other, again_of(other)))
    assert h2 == h3 != handle
    assert _pending(server.address, topic) == 2


def again_of(m: rmq.Message) -> rmq.Message:
    """A resend of ``m``: another body, the same message id and keys."""
    sp = m.system_properties
    return _later(m.topic.name, b"resent", message_id=sp.message_id, keys=list(sp.keys))


def test_a_message_id_is_free_again_after_the_dedup_window(short: ServerProcess) -> None:
    topic = name()
    stub = _stub(short.rocketmq_address)
    first = message(topic, b"first")  # due now
    (handle,) = _sent_ok(send(stub, first))
    # a pending message holds its id: the window counts once it was delivered
    assert [m.body for m in received(stub, topic, "g", wait_s=5)] == [b"first"]
    time.sleep(SHORT_WINDOW_MS / 1000 + 0.5)
    (later,) = _sent_ok(send(stub, again_of(first)))
    assert later != handle
    assert _pending(short.address, topic) == 1  # the one sent after the window


def test_without_a_window_a_resend_is_stored_again(tmp_path: Path) -> None:
    s = ServerProcess(tmp_path / "data", ["--rocketmq-listen", "127.0.0.1:0",
                                          "--rocketmq-dedup-window", "0"]).start()  # fmt: skip
    try:
        topic = name()
        stub = _stub(s.rocketmq_address)
        first = _later(topic)
        (h1,) = _sent_ok(send(stub, first))
        (h2,) = _sent_ok(send(stub, again_of(first)))
        assert h1 != h2
        assert _pending(s.address, topic) == 2
    finally:
        s.stop()


def _key_of(shard: int, count: int) -> str:
    """A key of ``shard`` among ``count`` active shards."""
    return next(k for k in (f"key-{i}" for i in range(1000)) if shard_of_key(k, count) == shard)


def test_a_keyed_send_lands_on_its_keys_shard_whichever_node_it_reaches(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", shards=2) as c:
        at = [s.rocketmq for s in c.current_map().shards]
        stubs = [_stub(a) for a in at]
        topic = name()
        mine, theirs = _key_of(0, 2), _key_of(1, 2)
        passed = _later(topic, b"theirs", keys=[theirs])
        bad = _later(topic, b"too late", keys=[theirs])
        century = int(time.time() * 1000) + 100 * 365 * 86_400_000  # beyond --max-delay
        bad.system_properties.delivery_timestamp.FromMilliseconds(century)
        answer = send(stubs[0], _later(topic, keys=[mine]), passed, message(topic), bad)
        here, there, keyless, refused = answer.entries
        assert (here.status.code, there.status.code, keyless.status.code) == (rmq.OK,) * 3
        assert refused.status.code == rmq.ILLEGAL_DELIVERY_TIME, refused
        # the owner's status, renumbered as the message of this request
        assert refused.status.message.startswith("messages[3]."), refused
        assert there.message_id == passed.system_properties.message_id

        def shard(entry: Any) -> int:
            return MessageId.parse(recalled(entry.recall_handle, topic).id).shard

        assert (shard(here), shard(there), shard(keyless)) == (0, 1, 0)
        # a retry of the passed-on message, at either node: the first one's handle
        for stub in stubs:
            (h,) = _sent_ok(send(stub, again_of(passed)))
            assert h == there.recall_handle
        assert _pending(c.current_map().shards[0].master, topic) == 2  # mine, theirs


def test_the_dedup_window_is_bounded_by_the_servers_max_dedup_window() -> None:
    def window(**flags: str) -> int:
        return load(flags, {}).rocketmq_dedup_window_ms

    assert window() == ROCKETMQ_DEDUP_WINDOW_MS
    assert window(rocketmq_dedup_window="0") == 0
    assert window(rocketmq_dedup_window="1h") == 3_600_000
    assert window(max_dedup_window="1m") == 60_000  # the default, cut to the maximum
    with pytest.raises(ValueError, match=r"rocketmq_dedup_window: .* max_dedup_window"):
        window(rocketmq_dedup_window="1h", max_dedup_window="1m")
