"""The typed client's keys against a cluster of two shards (real processes): a
schedule once per key in each mode (``reject`` raises ``AlreadyExists`` naming the
message that stands; in a batch it is that item's error), and lookup, cancel and
reschedule by key, each routed to the key's shard; a by-key call that reaches the
other shard is refused WRONG SHARD naming the owner; a key without pending messages
is NOT_FOUND."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import grpc
import pytest

import delayq
from delayq.errors import WrongShard
from delayq.shardmap import key_shards
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.cluster import LocalCluster

HOUR = timedelta(hours=1)
KEYS = [f"order-{i}" for i in range(16)]
OWNERS = key_shards(KEYS, 2).tolist()


def key_of(shard: int, n: int = 0) -> str:
    """The ``n``-th of ``KEYS`` shard ``shard`` owns."""
    return [k for k, o in zip(KEYS, OWNERS, strict=True) if o == shard][n]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("keys") / "c", shards=2) as c:
        c.wait_serving()
        yield c


@pytest.mark.parametrize("shard", [0, 1])
def test_once_per_key_in_each_mode(cluster: LocalCluster, shard: int) -> None:
    key = key_of(shard)
    topic = f"modes-{shard}"
    with delayq.Client(cluster.address(0)) as c:
        first = c.schedule(topic, b"1", key=key, delay=HOUR, if_exists="reject")
        assert first.key_outcome is delayq.KeyOutcome.NEW and first.id
        with pytest.raises(delayq.AlreadyExists) as caught:
            c.schedule(topic, b"2", key=key, delay=HOUR, if_exists=delayq.IfExists.REJECT)
        assert (caught.value.id, caught.value.deliver_at_ms) == (first.id, first.deliver_at_ms)
        assert caught.value.field == "messages[0].key"
        assert isinstance(caught.value, delayq.ClientError)

        kept = c.schedule(topic, b"3", key=key, delay=HOUR, if_exists="keep")
        assert (kept.id, kept.key_outcome, kept.error) == (first.id, "kept", None)

        new = c.schedule(topic, b"4", key=key, delay=2 * HOUR, if_exists="replace")
        assert new.key_outcome is delayq.KeyOutcome.REPLACED and new.id != first.id
        [now] = c.lookup_key(topic, key)
        assert (now.id, now.body, now.state) == (new.id, b"4", delayq.MessageState.PENDING)
        assert c.lookup(first.id).state is not delayq.MessageState.PENDING


def test_a_batch_answers_each_item_its_own_outcome(cluster: LocalCluster) -> None:
    k0, k1 = key_of(0, 1), key_of(1, 1)
    topic = "batch"
    with delayq.Client(cluster.address(1)) as c:
        out = c.schedule_many(
            [
                delayq.Outgoing(topic=topic, body=b"a", key=k0, delay=HOUR, if_exists="reject"),
                delayq.Outgoing(topic=topic, body=b"b", key=k1, delay=HOUR, if_exists="reject"),
                delayq.Outgoing(topic=topic, body=b"c", key=k0, delay=HOUR, if_exists="reject"),
                delayq.Outgoing(topic=topic, body=b"d", key=k1, delay=HOUR, if_exists="keep"),
            ]
        )
    assert [s.key_outcome for s in out] == ["new", "new", "exists", "kept"]
    assert out[2].id == out[0].id and out[3].id == out[1].id
    assert out[2].error is not None and out[2].error.status is grpc.StatusCode.ALREADY_EXISTS
    assert out[3].error is None


def test_calls_by_key_go_to_the_keys_shard(cluster: LocalCluster) -> None:
    topic = "bykey"
    k0, k1 = key_of(0, 2), key_of(1, 2)
    with delayq.Client(cluster.address(0)) as c:
        a = [c.schedule(topic, b"a", key=k0, delay=HOUR).id for _ in range(2)]
        b = c.schedule(topic, b"b", key=k1, delay=HOUR).id
        assert [m.id for m in c.lookup_key(topic, k0)] == a
        assert [m.id for m in c.lookup_key(topic, k1)] == [b]

        moved = c.reschedule_key(topic, k0, delay=2 * HOUR)
        assert len(moved) == 2 and {m.id for m in moved}.isdisjoint(a)
        assert [m.id for m in c.lookup_key(topic, k0)] == [m.id for m in moved]

        assert c.cancel_keys(topic, [k1, k0, "order-none"]) == [1, 2, 0]
        with pytest.raises(delayq.NotFound):
            c.cancel_key(topic, k0)
        with pytest.raises(delayq.NotFound):
            c.lookup_key(topic, k0)
        with pytest.raises(delayq.NotFound):
            c.reschedule_key(topic, k1, delay=HOUR)
        c.schedule(topic, b"again", key=k1, delay=HOUR)
        assert c.cancel_key(topic, k1) == 1
        with pytest.raises(delayq.InvalidArgument, match="key"):
            c.lookup_key(topic, "bad\x00key")


def test_lookup_key_answers_the_oldest_1000_with_the_total_and_every_body(
    cluster: LocalCluster,
) -> None:
    """One Lookup brings what fits 3 MiB; the client looks up by id only the
    messages whose bodies did not come."""
    topic = "lookupmany"
    k = key_of(1, 4)
    with delayq.Client(cluster.address(0)) as c:
        ids = [
            s.id
            for s in c.schedule_many(
                [
                    delayq.Outgoing(topic=topic, body=b"%d" % i, key=k, delay=HOUR)
                    for i in range(1005)
                ]
            )
        ]
        found = c.lookup_key(topic, k)
        assert isinstance(found, delayq.KeyLookups) and found.total == 1005
        assert [(m.id, m.body) for m in found] == [(ids[i], b"%d" % i) for i in range(1000)]
        big = b"b" * 250_000
        ids = [
            s.id
            for s in c.schedule_many(
                [
                    delayq.Outgoing(topic=topic, body=big, key="big-" + k, delay=HOUR)
                    for _ in range(20)
                ]
            )
        ]
        found = c.lookup_key(topic, "big-" + k)
        assert found.total == 20 and [m.id for m in found] == ids
        assert all(m.body == big for m in found)


def test_a_malformed_key_among_a_cancels_keys_is_that_keys_item_error(
    cluster: LocalCluster,
) -> None:
    topic = "badkey"
    k0, k1 = key_of(0, 3), key_of(1, 3)
    with delayq.Client(cluster.address(0)) as c:
        for k in (k0, k1):
            c.schedule(topic, b"x", key=k, delay=HOUR)
        got = c.cancel_keys(topic, [k0, "bad\x00key", k1, ""])
        assert (got[0], got[2]) == (1, 1)
        for bad in (got[1], got[3]):
            assert isinstance(bad, delayq.ItemError), got
            assert bad.status is grpc.StatusCode.INVALID_ARGUMENT and bad.field.startswith("keys[")


def test_a_by_key_call_at_the_other_shard_is_refused_naming_the_owner(
    cluster: LocalCluster,
) -> None:
    k1 = key_of(1, 3)
    calls = (
        ("Lookup", pb.LookupRequest(topic="t", key=k1), "key"),
        ("Reschedule", pb.RescheduleRequest(topic="t", key=k1, delay_ms=1), "key"),
        ("Cancel", pb.CancelRequest(topic="t", keys=[key_of(0, 3), k1]), "keys[1]"),
    )
    with grpc.insecure_channel(cluster.address(0)) as channel:
        stub = pb_grpc.DelayQueueStub(channel)
        for method, req, field in calls:
            with pytest.raises(grpc.RpcError) as caught:
                getattr(stub, method)(req, timeout=10)
            err = caught.value
            assert err.code() is grpc.StatusCode.FAILED_PRECONDITION, method
            assert (err.details() or "").startswith(field), err.details()
            assert (WrongShard.OWNER_KEY, "1") in tuple(err.trailing_metadata() or ())


def test_the_async_client_by_key(cluster: LocalCluster) -> None:
    k = key_of(1, 4)

    async def run() -> None:
        async with delayq.AsyncClient(cluster.address(0)) as c:
            s = await c.schedule("async", b"x", key=k, delay=HOUR, if_exists="keep")
            again = await c.schedule(
                "async", b"y", key=k, delay=HOUR, if_exists="keep", dedup_window=60
            )
            assert again.id == s.id and again.key_outcome is delayq.KeyOutcome.KEPT
            assert [m.id for m in await c.lookup_key("async", k)] == [s.id]
            assert await c.cancel_key("async", k) == 1

    asyncio.run(run())


def test_a_producers_rejected_send_raises_naming_the_message_that_stands(
    cluster: LocalCluster,
) -> None:
    k = key_of(0, 5)
    with delayq.Client(cluster.address(1)) as c, c.producer() as p:
        first = p.send("producer", b"1", key=k, delay=HOUR, if_exists="reject").result(10)
        second = p.send("producer", b"2", key=k, delay=HOUR, if_exists="reject")
        with pytest.raises(delayq.AlreadyExists) as caught:
            second.result(10)
        assert caught.value.id == first.id
