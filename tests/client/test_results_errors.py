"""What the client answers and raises, without a server: typed results parsed
from the wire, read by attribute, and the exception tree that gRPC errors are
translated into (at the client's boundary, ``from`` the gRPC error)."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import grpc
import pytest

from delayq import DelayqError
from delayq.client import (
    AckOutcome,
    AsyncClient,
    CancelOutcome,
    Client,
    ClientError,
    Congested,
    DeadlineExceeded,
    InvalidArgument,
    ItemError,
    Lookup,
    MessageState,
    NotFound,
    Outgoing,
    RetryPolicy,
    RouteError,
    ServerError,
    TooLarge,
    Unavailable,
    WrongShard,
    core,
    outgoing,
    routing,
)
from delayq.client.errors import from_item, from_rpc, translated
from delayq.errors import WrongShard as WireWrongShard
from delayq.shardmap import ShardMapError
from delayq.v1 import delayq_pb2 as pb
from tests.client.test_routing import FakeError


class DetailedError(FakeError):
    def details(self) -> str:
        return "the server's words"


def test_every_wire_outcome_and_state_has_a_member_valued_its_lower_case_name() -> None:
    for wire, enum_type, prefix in (
        (pb.CancelOutcome, CancelOutcome, "CANCEL_OUTCOME_"),
        (pb.AckOutcome, AckOutcome, "ACK_OUTCOME_"),
        (pb.MessageState, MessageState, "MESSAGE_STATE_"),
    ):
        assert len(enum_type) == len(wire.DESCRIPTOR.values)
        for v in wire.DESCRIPTOR.values:
            name = v.name.removeprefix(prefix)
            assert enum_type[name].value == name.lower()


def test_cancel_and_ack_answers_are_outcomes_or_item_errors_in_order() -> None:
    resp = pb.CancelResponse(
        results=[
            pb.CancelResult(outcome=pb.CANCEL_OUTCOME_ALREADY_DELIVERED),
            pb.CancelResult(error=pb.ItemError(code=3, field="ids[1]", message="bad id")),
            pb.CancelResult(outcome=pb.CANCEL_OUTCOME_CANCELLED),
        ]
    )
    got = core.cancel(["a", "b", "c"], 1).parse(resp)
    assert got == [
        CancelOutcome.ALREADY_DELIVERED,
        ItemError(3, "bad id", "ids[1]"),
        CancelOutcome.CANCELLED,
    ]
    assert got[0] == "already_delivered" and str(got[1]) == "error: bad id"
    assert isinstance(got[1], ItemError) and got[1].status is grpc.StatusCode.INVALID_ARGUMENT
    acks = core.ack("t", "g", ["r"] * 2, 1).parse(
        pb.AckResponse(results=[pb.AckResult(outcome=o) for o in (pb.ACK_OUTCOME_STALE, 1)])
    )
    assert acks == [AckOutcome.STALE, AckOutcome.ACKED]


def test_a_shard_failing_mid_batch_is_an_item_error_naming_its_status() -> None:
    err = core.item_error(DetailedError(grpc.StatusCode.UNAVAILABLE))
    assert err.status is grpc.StatusCode.UNAVAILABLE
    assert err.message == "UNAVAILABLE: the server's words"
    assert str(err) == "error: UNAVAILABLE: the server's words"  # as the CLI prints it
    assert outgoing.refused(DetailedError(grpc.StatusCode.UNAVAILABLE)).error == err


def _lookup() -> Lookup:
    wire = pb.LookupResponse(
        id="m1", state=pb.MESSAGE_STATE_PENDING, topic="t", deliver_at_ms=5, key="k", body=b"x"
    )
    wire.headers["h"] = "v"
    return core.lookup("m1", 1).parse(wire)


def test_lookup_is_a_frozen_record_read_by_attribute() -> None:
    got = _lookup()
    assert (got.id, got.state, got.headers, got.body) == (
        "m1",
        MessageState.PENDING,
        {"h": "v"},
        b"x",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.state = MessageState.DELIVERED  # type: ignore[misc]
    with pytest.raises(TypeError):
        got["state"]  # type: ignore[index]
    assert not hasattr(got, "to_dict") and not hasattr(got, "keys")


def test_stats_sums_shards_and_asdict_of_it_is_plain_json() -> None:
    def shard(n: int) -> pb.StatsResponse:
        r = pb.StatsResponse(lateness_ms_p50=n, lateness_ms_p99=n * 2)
        t = r.topics.add(topic="t", pending=n)
        t.group_backlog["g"] = n
        t.group_dead_lettered["g"] = n
        t.due.add(within_ms=1000, count=n)
        g = t.groups.add(group="g", in_flight=n, in_flight_limit=5, next_retry_at_ms=7)
        g.policy.backoff.kind = pb.BACKOFF_KIND_EXPONENTIAL
        g.attempts.add(attempt=4, count=n)
        r.node.shard, r.node.role = n, "master"
        return r

    stats = routing.merge_stats([core.stats("", 1).parse(shard(n)) for n in (1, 2)])
    assert stats.topic("t") is not None and stats.topic("t").pending == 3  # type: ignore[union-attr]
    assert stats.topic("nope") is None
    doc = json.loads(json.dumps(dataclasses.asdict(stats)))
    assert doc["topics"] == [
        {
            "topic": "t",
            "pending": 3,
            "delivered": 0,
            "cancelled": 0,
            "group_backlog": {"g": 3},
            "due": [{"within_ms": 1000, "count": 3}],
            "group_dead_lettered": {"g": 3},
            "groups": [],  # each shard's own: under shards
        }
    ]
    [group] = doc["shards"][1]["topics"][0]["groups"]
    assert (group["group"], group["in_flight"], group["attempts"]) == ("g", 2, {"4": 2})
    assert group["policy"]["backoff"]["kind"] == "exponential" and group["next_retry_at_ms"] == 7
    assert doc["lateness_ms_p99"] == 4 and [s["node"]["shard"] for s in doc["shards"]] == [1, 2]
    state = json.loads(json.dumps(dataclasses.asdict(_lookup()) | {"body": ""}))["state"]
    assert state == "pending"


@pytest.mark.parametrize(
    ("code", "trailers", "kind"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, (), InvalidArgument),
        (grpc.StatusCode.NOT_FOUND, (), NotFound),
        (grpc.StatusCode.UNAVAILABLE, (), Unavailable),
        (grpc.StatusCode.DEADLINE_EXCEEDED, (), DeadlineExceeded),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, (("retry-after-ms", "250"),), Congested),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, (), TooLarge),
        (grpc.StatusCode.FAILED_PRECONDITION, ((WireWrongShard.OWNER_KEY, "-1"),), WrongShard),
        (grpc.StatusCode.INTERNAL, (), ServerError),
    ],
)
def test_grpc_errors_become_the_clients_own(
    code: grpc.StatusCode, trailers: tuple[tuple[str, str], ...], kind: type[ClientError]
) -> None:
    raw = DetailedError(code, trailers)
    with pytest.raises(kind) as caught, translated():
        raise raw
    exc = caught.value
    assert type(exc) is kind and exc.__cause__ is raw
    assert (exc.status, exc.message, exc.trailers) == (code, "the server's words", trailers)
    assert str(exc) == f"{code.name}: the server's words"
    assert isinstance(exc, DelayqError) and not isinstance(exc, grpc.RpcError)
    if kind is Congested:
        assert exc.retry_after_ms == 250
    if kind is WrongShard:
        assert isinstance(exc, WrongShard) and exc.owner == -1


def test_an_error_is_read_by_its_attributes_not_grpcs_call_shape() -> None:
    exc = from_rpc(DetailedError(grpc.StatusCode.NOT_FOUND, (("k", "v"),)))
    assert from_rpc(exc) is exc
    assert (exc.status, exc.message, exc.trailers) == (
        grpc.StatusCode.NOT_FOUND,
        "the server's words",
        (("k", "v"),),
    )
    for call in ("code", "details", "trailing_metadata"):
        assert not hasattr(exc, call), call


def test_an_unusable_map_is_a_route_error() -> None:
    with pytest.raises(RouteError, match="no shards") as caught, translated():
        raise ShardMapError("no shards")
    assert isinstance(caught.value.__cause__, ShardMapError)


def test_bad_input_is_refused_before_any_call_with_its_own_words() -> None:
    with pytest.raises(InvalidArgument, match=r"^give only one of at, delay and level$"):
        Outgoing(topic="t", body=b"", delay=1, level=2)
    with pytest.raises(ValueError, match=r"^level: must be"):  # still a ValueError
        Outgoing(topic="t", body=b"", level=0)
    with Client("127.0.0.1:1") as c, pytest.raises(InvalidArgument, match="exactly one"):
        c.reschedule("id", at=1, delay=1)


def test_a_node_that_cannot_be_reached_raises_the_clients_error_from_grpcs() -> None:
    quick = RetryPolicy(attempts=2, base_s=0.01, max_s=0.01)
    with Client("127.0.0.1:1", timeout_s=2, retry=quick) as c, pytest.raises(ClientError) as caught:
        c.lookup("x")
    assert isinstance(caught.value, Unavailable | DeadlineExceeded)
    assert isinstance(caught.value.__cause__, grpc.RpcError)
    assert not isinstance(caught.value.__cause__, ClientError)

    async def main() -> None:
        async with AsyncClient("127.0.0.1:1", timeout_s=2, retry=quick) as c:
            with pytest.raises((Unavailable, DeadlineExceeded)):
                await c.stats()

    asyncio.run(main())


def test_an_item_error_is_a_value_not_a_string() -> None:
    err = ItemError(3, "ids[0]: malformed", "ids[0]")
    assert (err.code, err.status, err.field, err.message) == (
        3,
        grpc.StatusCode.INVALID_ARGUMENT,
        "ids[0]",
        "ids[0]: malformed",
    )
    assert err == ItemError(3, "ids[0]: malformed", "ids[0]") and err != ItemError(5, "x")
    assert len({err, ItemError(3, "ids[0]: malformed", "ids[0]")}) == 1
    assert err != str(err) and str(err) == "error: ids[0]: malformed"
    with pytest.raises(AttributeError):
        err.startswith  # type: ignore[attr-defined]  # noqa: B018


def test_a_one_message_calls_item_error_is_raised_as_its_kind_of_the_one_tree() -> None:
    import delayq

    def raised(code: grpc.StatusCode, **kw: object) -> ClientError:
        return from_item(ItemError(code.value[0], "delay_ms: must be >= 0", **kw))  # type: ignore[arg-type]

    bad = raised(grpc.StatusCode.INVALID_ARGUMENT, field="messages[0].delay_ms")
    assert isinstance(bad, InvalidArgument) and isinstance(bad, delayq.InvalidArgument)
    assert bad.field == "messages[0].delay_ms" and bad.status is grpc.StatusCode.INVALID_ARGUMENT
    full = raised(grpc.StatusCode.RESOURCE_EXHAUSTED, retry_after_ms=25)
    assert isinstance(full, delayq.Congested) and full.retry_after_ms == 25
    assert isinstance(raised(grpc.StatusCode.RESOURCE_EXHAUSTED), TooLarge)
    assert isinstance(raised(grpc.StatusCode.NOT_FOUND), delayq.NotFound)
    assert isinstance(raised(grpc.StatusCode.INTERNAL), ServerError)
    # a kind whose text starts with its field names it; others do not guess
    assert InvalidArgument("level: must be 1..N").field == "level"
    assert Unavailable("shard 0: no node").field == ""
