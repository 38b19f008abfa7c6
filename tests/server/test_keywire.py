"""Keys on the wire, both ends (pure): what the server writes of a schedule's key
outcomes, in either form, is what the client reads (an EXISTS row carries the
existing message's id *and* its ALREADY_EXISTS error); the if_exists and dedup
columns come in as the engine's columns, through the gathering of concurrent
callers and back out; a call names its messages by id or by topic and key, never
both; a key's calls belong to the key's shard; AlreadyExists crosses as
ALREADY_EXISTS naming the message that holds the key."""

from __future__ import annotations

import grpc
import pytest

import delayq
from delayq.client import errors as client_errors
from delayq.client import outgoing
from delayq.engine import BatchOutcome, ScheduleBatch
from delayq.errors import AlreadyExists, InvalidArgument, WrongShard
from delayq.server import convert
from delayq.server.gathering import merged, split, whole
from delayq.server.keywire import by_key, cancel_key_results, rescheduled_keys
from delayq.server.ownership import Held, Moving, check_key_owner
from delayq.server.statuscodes import EXISTING_ID_KEY, status_of
from delayq.shardmap import ShardEntry, ShardMap, key_shards
from delayq.types import IfExists, KeyOutcome, ScheduleOutcome
from delayq.v1 import delayq_pb2 as pb

OUT = BatchOutcome(
    ids=["new-0", "old-1", "old-2", "new-3", None],
    deliver_at_ms=[10, 20, 30, 40, 0],
    errors={1: AlreadyExists("key", "old-1", 20), 4: InvalidArgument("key", "control character")},
    key_outcomes={1: KeyOutcome.EXISTS, 2: KeyOutcome.KEPT, 3: KeyOutcome.REPLACED},
)
MESSAGES = [outgoing.Outgoing(topic="t", body=b"x", key=f"k{i}") for i in range(5)]


@pytest.mark.parametrize("packed", [False, True])
def test_what_the_server_answers_of_each_key_outcome_the_client_reads(packed: bool) -> None:
    resp = pb.ScheduleResponse()
    if packed:
        convert.packed_results(resp.packed, OUT)
    else:
        convert.message_results(resp.results, OUT)
    got = outgoing.schedule(MESSAGES, 1.0, packed).parse(
        pb.ScheduleResponse.FromString(resp.SerializeToString())
    )
    assert [(s.id, s.deliver_at_ms, s.key_outcome) for s in got] == [
        ("new-0", 10, delayq.KeyOutcome.NEW),
        ("old-1", 20, delayq.KeyOutcome.EXISTS),
        ("old-2", 30, delayq.KeyOutcome.KEPT),
        ("new-3", 40, delayq.KeyOutcome.REPLACED),
        (None, 0, delayq.KeyOutcome.NEW),
    ]
    exists = got[1].error
    assert exists is not None and exists.status is grpc.StatusCode.ALREADY_EXISTS
    assert exists.field == "messages[1].key" and "old-1" in exists.message
    assert got[4].error is not None and got[4].error.field == "messages[4].key"
    assert [s.error is None for s in got] == [True, False, True, True, False]
    raised = client_errors.from_item(exists, got[1].id, got[1].deliver_at_ms)
    assert isinstance(raised, delayq.AlreadyExists) and isinstance(raised, AlreadyExists)
    assert (raised.id, raised.deliver_at_ms, raised.field) == ("old-1", 20, "messages[1].key")


def test_all_new_rows_send_no_outcome_column() -> None:
    resp = pb.ScheduleResponse()
    convert.packed_results(resp.packed, BatchOutcome(["a", "b"], [1, 2], {}))
    assert resp.packed.key_outcomes == b""
    got = outgoing.schedule(MESSAGES[:2], 1.0, True).parse(resp)
    assert [s.key_outcome for s in got] == ["new", "new"]


def test_a_key_outcome_this_client_does_not_know_is_the_servers_error() -> None:
    resp = pb.ScheduleResponse()
    resp.results.add(id="a", deliver_at_ms=1, key_outcome=9)  # type: ignore[arg-type]
    with pytest.raises(delayq.ServerError):
        outgoing.schedule(MESSAGES[:1], 1.0, False).parse(resp)
    packed = pb.ScheduleResponse()
    convert.packed_results(packed.packed, BatchOutcome(["a", "b"], [1, 2], {}))
    packed.packed.key_outcomes = b"\x00\x09"
    with pytest.raises(delayq.ServerError, match="key_outcomes"):
        outgoing.schedule(MESSAGES[:2], 1.0, True).parse(packed)


@pytest.mark.parametrize("packed", [False, True])
def test_if_exists_and_the_window_reach_the_engines_columns(packed: bool) -> None:
    ms = [
        outgoing.Outgoing(topic="t", body=b"a", key="k", if_exists="reject", dedup_window=1.5),
        outgoing.Outgoing(topic="t", body=b"b", key="k"),
        outgoing.Outgoing(topic="t", body=b"c", key="k", if_exists=delayq.IfExists.REPLACE),
    ]
    req = outgoing.schedule(ms, 1.0, packed).request
    req = pb.ScheduleRequest.FromString(req.SerializeToString())
    batch = convert.packed_batch(req.packed) if packed else convert.message_batch(req.messages)
    assert batch.if_exists is not None and batch.dedup_window_ms is not None
    assert list(batch.if_exists) == [IfExists.REJECT, IfExists.NONE, IfExists.REPLACE]
    assert list(batch.dedup_window_ms) == [1500, 0, 0]


@pytest.mark.parametrize("packed", [False, True])
def test_a_batch_without_keys_modes_leaves_the_columns_out(packed: bool) -> None:
    req = outgoing.schedule(MESSAGES, 1.0, packed).request
    batch = convert.packed_batch(req.packed) if packed else convert.message_batch(req.messages)
    assert batch.if_exists is None and batch.dedup_window_ms is None


def test_the_client_refuses_an_unknown_if_exists_before_any_call() -> None:
    with pytest.raises(delayq.InvalidArgument, match="if_exists"):
        outgoing.Outgoing(topic="t", body=b"", key="k", if_exists="upsert")
    with pytest.raises(delayq.InvalidArgument, match="dedup_window"):
        m = outgoing.Outgoing(topic="t", body=b"", key="k", if_exists="keep")
        m.dedup_window = float("inf")
        outgoing.schedule([m], 1.0, False)


@pytest.mark.parametrize(
    ("column", "raw"), [("if_exists", b"\x01"), ("dedup_window_ms", b"\x00" * 9)]
)
def test_a_packed_key_column_of_the_wrong_length_is_refused_naming_it(
    column: str, raw: bytes
) -> None:
    req = outgoing.schedule(MESSAGES[:2], 1.0, True).request
    setattr(req.packed, column, raw)
    with pytest.raises(InvalidArgument) as caught:
        convert.packed_batch(req.packed)
    assert caught.value.field == f"packed.{column}"


def test_gathered_callers_keep_their_key_columns_and_outcomes() -> None:
    plain = ScheduleBatch(topic="t", bodies=[b"a", b"b"], keys=["x", "y"])
    keyed = ScheduleBatch(
        topic="t", bodies=[b"c"], keys=["x"], if_exists=[3], dedup_window_ms=[60_000]
    )
    rmq = ScheduleBatch(topic="t", bodies=[b"d"], dedup_ids=["m-1"])
    assert all(map(whole, (plain, keyed, rmq)))
    assert not whole(ScheduleBatch(topic="t", bodies=[b"a"], if_exists=[1, 1]))
    m = merged([plain, keyed, rmq])
    assert m.keys == ["x", "y", "x", ""]
    assert m.if_exists is not None and m.dedup_window_ms is not None
    assert list(m.if_exists) == [0, 0, 3, 0]
    assert list(m.dedup_window_ms) == [0, 0, 60_000, 0]
    assert m.dedup_ids == ["", "", "", "m-1"]
    assert merged([plain, plain]).if_exists is None
    out = BatchOutcome(
        ["1", "2", "3", "4"], [1, 2, 3, 4], {}, {2: KeyOutcome.REPLACED, 3: KeyOutcome.KEPT}
    )
    parts = split(out, [2, 1, 1])
    assert [dict(p.key_outcomes) for p in parts] == [
        {},
        {0: KeyOutcome.REPLACED},
        {0: KeyOutcome.KEPT},
    ]


@pytest.mark.parametrize(
    ("has_id", "topic", "has_key", "keyed", "field"),
    [
        (True, "", False, False, None),
        (False, "t", True, True, None),
        (False, "", False, False, None),  # neither: by id, whose own check names it
        (True, "t", True, None, "key"),
        (True, "t", False, None, "topic"),
        (True, "", True, None, "key"),
        (False, "", True, None, "topic"),
        (False, "t", False, None, "key"),
    ],
)
def test_a_call_names_its_messages_by_id_or_by_topic_and_key(
    has_id: bool, topic: str, has_key: bool, keyed: bool | None, field: str | None
) -> None:
    if field is None:
        assert by_key(has_id, topic, has_key, "id", "key") is keyed
        return
    with pytest.raises(InvalidArgument) as caught:
        by_key(has_id, topic, has_key, "id", "key")
    assert caught.value.field == field


def test_answers_by_key() -> None:
    resp = pb.CancelResponse()
    cancel_key_results(resp.results, ["a", "b", ""], [2, 0, InvalidArgument("keys[2]", "empty")])
    assert [(r.key, r.outcome, r.cancelled) for r in resp.results[:2]] == [
        ("a", pb.CANCEL_OUTCOME_CANCELLED, 2),
        ("b", pb.CANCEL_OUTCOME_NOT_FOUND, 0),
    ]
    assert resp.results[2].error.field == "keys[2]"
    new = rescheduled_keys([ScheduleOutcome("n1", 50), ScheduleOutcome("n2", 50)])
    assert (new.id, new.deliver_at_ms, list(new.ids)) == ("n1", 50, ["n1", "n2"])


def _map(shards: int) -> ShardMap:
    return ShardMap(
        topology_epoch=3,
        shards=tuple(ShardEntry(index=i, master=f"127.0.0.1:{7500 + i}") for i in range(shards)),
    )


def test_a_keys_calls_belong_to_the_keys_shard() -> None:
    m = _map(2)
    keys = [f"order-{i}" for i in range(20)]
    owners = key_shards(keys, 2).tolist()
    mine = [k for k, o in zip(keys, owners, strict=True) if o == 0]
    theirs = [k for k, o in zip(keys, owners, strict=True) if o == 1]
    assert mine and theirs
    check_key_owner(m, 0, mine, "keys")
    with pytest.raises(WrongShard) as caught:
        check_key_owner(m, 0, theirs[:1], "key")
    assert (caught.value.field, caught.value.owner) == ("key", 1)
    with pytest.raises(WrongShard) as caught:
        check_key_owner(m, 0, [*mine, theirs[0]], "keys")
    assert caught.value.field == f"keys[{len(mine)}]"


def test_already_exists_crosses_as_already_exists_naming_the_message() -> None:
    code, message, trailers = status_of(AlreadyExists("messages[0].key", "m-1", 5))
    assert code is grpc.StatusCode.ALREADY_EXISTS and "m-1" in message
    assert trailers == ((EXISTING_ID_KEY, "m-1"),)

    class Failed(grpc.RpcError):  # type: ignore[misc]
        def code(self) -> grpc.StatusCode:
            return code

        def details(self) -> str:
            return message

        def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
            return trailers

    raised = client_errors.from_rpc(Failed())
    assert isinstance(raised, delayq.AlreadyExists) and raised.id == "m-1"


def test_a_keys_calls_wait_while_a_finishing_rebalance_moves_the_key() -> None:
    """On the old map the key is still this shard's, but a rebalance to 3 released
    its messages to their new shard: the call is held (UNAVAILABLE, retried) until
    the map switches, never answered from here (NOT_FOUND, or 0 cancelled)."""
    m = _map(2)
    keys = [f"order-{i}" for i in range(40)]
    now, after = key_shards(keys, 2).tolist(), key_shards(keys, 3).tolist()
    stays = [k for k, a, b in zip(keys, now, after, strict=True) if a == b == 0]
    goes = [k for k, a, b in zip(keys, now, after, strict=True) if a == 0 and b == 2]
    assert stays and goes
    moving = Moving(3, "job-1")
    check_key_owner(m, 0, stays, "keys", moving)
    with pytest.raises(Held) as caught:
        check_key_owner(m, 0, goes[:1], "key", moving)
    assert str(caught.value).startswith("key: moves to shard 2 (rebalance job-1)")
    with pytest.raises(Held) as caught:
        check_key_owner(m, 0, [*stays, goes[0]], "keys", moving)
    assert str(caught.value).startswith(f"keys[{len(stays)}]: moves to shard 2")
    with pytest.raises(Held, match="shard 1 is leaving"):
        check_key_owner(m, 1, [], "keys", Moving(1, "job-2"))
