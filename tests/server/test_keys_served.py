"""Keys through a real server's wire (a ``delayq serve`` process, raw stubs over a
socket), in both forms of Schedule (a message each, and packed columns): each
``if_exists`` mode answers the id that stands with its key outcome (REJECT: also
ALREADY_EXISTS naming ``messages[i].key``); Lookup, Cancel and Reschedule by topic
and key act on every pending message of the key and say how many; hostile input
(an enum value out of range, a negative or huge window, a window without a mode,
a key with a control character, both an id and a key, a key without its topic) is
INVALID_ARGUMENT naming the field, per message where it is one message's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.servers import ServerProcess

HOUR_MS = 3_600_000
WEEK_MS = 7 * 24 * HOUR_MS


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pb_grpc.DelayQueueStub]:
    srv = ServerProcess(Path(tmp_path_factory.mktemp("keys")) / "d").start()
    try:
        with grpc.insecure_channel(srv.address) as channel:
            yield pb_grpc.DelayQueueStub(channel)
    finally:
        srv.stop()


def schedule(
    stub: pb_grpc.DelayQueueStub,
    packed: bool,
    topic: str,
    keys: list[str],
    if_exists: list[int],
    windows: list[int] | None = None,
) -> list[tuple[str, int, int, int, str]]:
    """(id, deliver_at_ms, key outcome, error code, error field) per message."""
    n = len(keys)
    windows = windows or [0] * n
    req = pb.ScheduleRequest()
    if packed:
        p = req.packed
        p.topics.append(topic)
        p.bodies.data = b"x" * n
        p.bodies.ends = b"".join((i + 1).to_bytes(4, "little") for i in range(n))
        data = "".join(keys).encode()
        p.keys.data = data
        ends, at = [], 0
        for k in keys:
            at += len(k.encode())
            ends.append(at.to_bytes(4, "little"))
        p.keys.ends = b"".join(ends)
        p.delay_ms = b"".join(HOUR_MS.to_bytes(8, "little") for _ in keys)
        p.if_exists = bytes(if_exists)
        p.dedup_window_ms = b"".join(w.to_bytes(8, "little", signed=True) for w in windows)
        resp = stub.Schedule(req, timeout=10)
        q = resp.packed
        assert len(q.ids.ends) == 4 * n
        ends_ = [int.from_bytes(q.ids.ends[i : i + 4], "little") for i in range(0, 4 * n, 4)]
        starts = [0, *ends_[:-1]]
        ids = [q.ids.data[s:e].decode() for s, e in zip(starts, ends_, strict=True)]
        dues = [int.from_bytes(q.deliver_at_ms[i : i + 8], "little") for i in range(0, 8 * n, 8)]
        outcomes = list(q.key_outcomes) or [0] * n
        errors = {e.index: e.error for e in q.errors}
        return [
            (
                ids[i],
                dues[i],
                outcomes[i],
                errors[i].code if i in errors else 0,
                errors[i].field if i in errors else "",
            )
            for i in range(n)
        ]
    for k, mode, w in zip(keys, if_exists, windows, strict=True):
        req.messages.add(
            topic=topic, body=b"x", key=k, delay_ms=HOUR_MS, if_exists=mode, dedup_window_ms=w
        )  # type: ignore[arg-type]
    resp = stub.Schedule(req, timeout=10)
    return [
        (r.id, r.deliver_at_ms, r.key_outcome, r.error.code, r.error.field) for r in resp.results
    ]


def pending(stub: pb_grpc.DelayQueueStub, topic: str, key: str) -> list[str]:
    try:
        resp = stub.Lookup(pb.LookupRequest(topic=topic, key=key), timeout=10)
    except grpc.RpcError as exc:
        assert exc.code() is grpc.StatusCode.NOT_FOUND, exc
        return []
    assert resp.key_matches == len(resp.key_ids) and resp.key_ids[0] == resp.id
    assert [m.id for m in resp.key_messages] == resp.key_ids[1:]
    assert resp.state == pb.MESSAGE_STATE_PENDING and resp.key == key
    return list(resp.key_ids)


ALREADY_EXISTS = grpc.StatusCode.ALREADY_EXISTS.value[0]
INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]


@pytest.mark.parametrize("packed", [False, True], ids=["messages", "packed"])
def test_each_mode_answers_the_id_that_stands(stub: pb_grpc.DelayQueueStub, packed: bool) -> None:
    topic = f"modes-{packed}"
    [(first, due, outcome, code, _)] = schedule(stub, packed, topic, ["k"], [pb.IF_EXISTS_REJECT])
    assert (outcome, code) == (pb.KEY_OUTCOME_NEW, 0) and first

    [again] = schedule(stub, packed, topic, ["k"], [pb.IF_EXISTS_REJECT])
    assert again == (first, due, pb.KEY_OUTCOME_EXISTS, ALREADY_EXISTS, "messages[0].key")
    [kept] = schedule(stub, packed, topic, ["k"], [pb.IF_EXISTS_KEEP])
    assert kept == (first, due, pb.KEY_OUTCOME_KEPT, 0, "")
    assert pending(stub, topic, "k") == [first]

    [(new, _, outcome, code, _)] = schedule(stub, packed, topic, ["k"], [pb.IF_EXISTS_REPLACE])
    assert (outcome, code) == (pb.KEY_OUTCOME_REPLACED, 0) and new != first
    assert pending(stub, topic, "k") == [new]
    old = stub.Lookup(pb.LookupRequest(id=first), timeout=10)
    assert old.state in (pb.MESSAGE_STATE_CANCELLED, pb.MESSAGE_STATE_RESCHEDULED), "ended"

    # no mode: the key only routes, and any number share it
    rows = schedule(stub, packed, topic, ["k", "k"], [0, 0])
    assert [r[2:4] for r in rows] == [(pb.KEY_OUTCOME_NEW, 0)] * 2
    assert pending(stub, topic, "k") == [new, rows[0][0], rows[1][0]]
    # REPLACE ends every one of them; within one batch rows are decided in order
    rows = schedule(stub, packed, topic, ["k", "k", "k"], [3, 1, 2])
    assert [r[2] for r in rows] == [
        pb.KEY_OUTCOME_REPLACED,
        pb.KEY_OUTCOME_EXISTS,
        pb.KEY_OUTCOME_KEPT,
    ]
    assert rows[1][0] == rows[2][0] == rows[0][0]
    assert pending(stub, topic, "k") == [rows[0][0]]


@pytest.mark.parametrize("packed", [False, True], ids=["messages", "packed"])
def test_a_dedup_window_keeps_the_key_after_the_message_ended(
    stub: pb_grpc.DelayQueueStub, packed: bool
) -> None:
    topic = f"window-{packed}"
    [(first, *_)] = schedule(stub, packed, topic, ["w"], [pb.IF_EXISTS_KEEP], [HOUR_MS])
    resp = stub.Cancel(pb.CancelRequest(topic=topic, keys=["w"]), timeout=10)
    assert [(r.key, r.cancelled) for r in resp.results] == [("w", 1)]
    assert pending(stub, topic, "w") == []
    [(again, _, outcome, *_)] = schedule(stub, packed, topic, ["w"], [pb.IF_EXISTS_KEEP])
    assert (again, outcome) == (first, pb.KEY_OUTCOME_KEPT), "taken for the window"
    # without a window, the key is free again once its message ended
    [(m, *_)] = schedule(stub, packed, topic, ["free"], [pb.IF_EXISTS_REJECT])
    stub.Cancel(pb.CancelRequest(ids=[m]), timeout=10)
    [(n, _, outcome, code, _)] = schedule(stub, packed, topic, ["free"], [pb.IF_EXISTS_REJECT])
    assert (outcome, code) == (pb.KEY_OUTCOME_NEW, 0) and n != m


def test_calls_by_key(stub: pb_grpc.DelayQueueStub) -> None:
    topic = "bykey"
    ids = [r[0] for r in schedule(stub, False, topic, ["a", "a", "b"], [0, 0, 0])]
    got = stub.Lookup(pb.LookupRequest(topic=topic, key="a"), timeout=10)
    assert (got.id, got.key_matches, list(got.key_ids)) == (ids[0], 2, ids[:2])

    moved = stub.Reschedule(
        pb.RescheduleRequest(topic=topic, key="a", delay_ms=2 * HOUR_MS), timeout=10
    )
    assert len(moved.ids) == 2 and moved.id == moved.ids[0] and not set(moved.ids) & set(ids)
    assert pending(stub, topic, "a") == list(moved.ids)
    assert {stub.Lookup(pb.LookupRequest(id=i), timeout=10).state for i in ids[:2]} == {
        pb.MESSAGE_STATE_RESCHEDULED
    }

    resp = stub.Cancel(pb.CancelRequest(topic=topic, keys=["a", "none", "b"]), timeout=10)
    assert [(r.key, r.outcome, r.cancelled) for r in resp.results] == [
        ("a", pb.CANCEL_OUTCOME_CANCELLED, 2),
        ("none", pb.CANCEL_OUTCOME_NOT_FOUND, 0),
        ("b", pb.CANCEL_OUTCOME_CANCELLED, 1),
    ]
    for call, req in (
        (stub.Lookup, pb.LookupRequest(topic=topic, key="a")),
        (stub.Reschedule, pb.RescheduleRequest(topic=topic, key="a", delay_ms=1)),
        (stub.Lookup, pb.LookupRequest(topic="no-such-topic", key="b")),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            call(req, timeout=10)
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND


def test_a_lookup_by_key_lists_at_most_1000_ids_and_the_messages_that_fit_3_mib(
    stub: pb_grpc.DelayQueueStub,
) -> None:
    """1005 messages of a key: the count is exact, the ids the oldest 1000, and the
    fields after the oldest's come whole; of 20 bodies of 250 KB, those that keep
    the answer within 3 MiB, in order."""
    topic = "manykeyed"
    req = pb.ScheduleRequest()
    for i in range(1005):
        req.messages.add(topic=topic, body=b"%d" % i, key="many", delay_ms=HOUR_MS)
    ids = [r.id for r in stub.Schedule(req, timeout=30).results]
    got = stub.Lookup(pb.LookupRequest(topic=topic, key="many"), timeout=30)
    assert (got.id, got.body, got.key_matches) == (ids[0], b"0", 1005)
    assert list(got.key_ids) == ids[:1000]
    assert [(m.id, m.body) for m in got.key_messages] == [
        (ids[i], b"%d" % i) for i in range(1, 1000)
    ]
    big = b"b" * 250_000
    req = pb.ScheduleRequest()
    for _ in range(20):
        req.messages.add(topic=topic, body=big, key="big", delay_ms=HOUR_MS)
    ids = [r.id for r in stub.Schedule(req, timeout=30).results]
    got = stub.Lookup(pb.LookupRequest(topic=topic, key="big"), timeout=30)
    assert (got.key_matches, list(got.key_ids)) == (20, ids)
    fit = len(got.key_messages)  # 3 MiB: the oldest and 11 more
    assert [m.id for m in got.key_messages] == ids[1 : 1 + fit] and fit == 11
    assert all(m.body == big for m in got.key_messages)
    assert got.ByteSize() <= 3 << 20


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (dict(key="k", if_exists=7), "messages[0].if_exists"),
        (dict(key="k", if_exists=-1), "messages[0].if_exists"),
        (dict(if_exists=pb.IF_EXISTS_REJECT), "messages[0].if_exists"),  # no key
        (dict(key="k", if_exists=1, dedup_window_ms=-1), "messages[0].dedup_window_ms"),
        (dict(key="k", if_exists=1, dedup_window_ms=WEEK_MS + 1), "messages[0].dedup_window_ms"),
        (dict(key="k", if_exists=1, dedup_window_ms=2**63 - 1), "messages[0].dedup_window_ms"),
        (dict(key="k", dedup_window_ms=1000), "messages[0].dedup_window_ms"),  # no mode
        (dict(key="a\x00b", if_exists=1), "messages[0].key"),
        (dict(key="a\x85b"), "messages[0].key"),
        (dict(key="k" * 1025, if_exists=2), "messages[0].key"),
    ],
)
def test_hostile_schedules_are_refused_naming_the_field(
    stub: pb_grpc.DelayQueueStub, message: dict[str, object], field: str
) -> None:
    req = pb.ScheduleRequest()
    req.messages.add(topic="hostile", body=b"x", **message)  # type: ignore[arg-type]
    req.messages.add(topic="hostile", body=b"fine", key="ok")
    [bad, good] = stub.Schedule(req, timeout=10).results
    assert (bad.error.code, bad.error.field) == (INVALID, field), bad
    assert bad.key_outcome == pb.KEY_OUTCOME_NEW
    assert good.id and not good.HasField("error"), "one bad message does not fail its batch"


@pytest.mark.parametrize(
    ("call", "request_", "field"),
    [
        ("Lookup", pb.LookupRequest(), "id"),  # neither
        ("Reschedule", pb.RescheduleRequest(delay_ms=1), "id"),
        ("Lookup", pb.LookupRequest(id="x", topic="t", key="k"), "key"),
        ("Lookup", pb.LookupRequest(key="k"), "topic"),
        ("Lookup", pb.LookupRequest(topic="t"), "key"),
        ("Lookup", pb.LookupRequest(topic="t", key="bad\x01"), "key"),
        ("Reschedule", pb.RescheduleRequest(id="x", topic="t", key="k", delay_ms=1), "key"),
        ("Reschedule", pb.RescheduleRequest(key="k", delay_ms=1), "topic"),
        ("Cancel", pb.CancelRequest(ids=["x"], topic="t", keys=["k"]), "keys"),
        ("Cancel", pb.CancelRequest(keys=["k"]), "topic"),
        ("Cancel", pb.CancelRequest(topic="t"), "keys"),
        ("Cancel", pb.CancelRequest(topic="bad topic!", keys=["k"]), "topic"),
    ],
)
def test_both_an_id_and_a_key_or_half_a_key_is_refused_naming_the_field(
    stub: pb_grpc.DelayQueueStub, call: str, request_: object, field: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        getattr(stub, call)(request_, timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(field), caught.value.details()


def test_a_malformed_key_among_a_cancels_keys_is_its_results_error(
    stub: pb_grpc.DelayQueueStub,
) -> None:
    """A malformed key is INVALID_ARGUMENT in its result, naming it; the call's
    other keys are cancelled all the same."""
    topic = "malformed"
    for keys, bad in ((["fine", ""], 1), (["x\x7f", "fine"], 0)):
        stub.Schedule(
            pb.ScheduleRequest(
                messages=[pb.NewMessage(topic=topic, body=b"x", delay_ms=HOUR_MS, key="fine")]
            ),
            timeout=10,
        )
        resp = stub.Cancel(pb.CancelRequest(topic=topic, keys=keys), timeout=10)
        error = resp.results[bad].error
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert error.field == f"keys[{bad}]" and resp.results[bad].key == keys[bad]
        good = resp.results[1 - bad]
        assert (good.key, good.cancelled, good.outcome) == ("fine", 1, pb.CANCEL_OUTCOME_CANCELLED)
        assert not good.HasField("error")


@pytest.mark.parametrize(("column", "raw"), [("if_exists", b"\x01\x01"), ("dedup_window_ms", b"1")])
def test_a_packed_key_column_of_the_wrong_length_fails_the_call_naming_it(
    stub: pb_grpc.DelayQueueStub, column: str, raw: bytes
) -> None:
    req = pb.ScheduleRequest()
    req.packed.topics.append("t")
    req.packed.bodies.data = b"x"
    req.packed.bodies.ends = (1).to_bytes(4, "little")
    setattr(req.packed, column, raw)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Schedule(req, timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(f"packed.{column}")


def test_hostile_packed_key_columns_are_the_items_errors(stub: pb_grpc.DelayQueueStub) -> None:
    rows = schedule(stub, True, "hostile", ["k", "ok", "w"], [7, 0, 1], [0, 0, -5])
    assert [(r[3], r[4]) for r in rows] == [
        (INVALID, "messages[0].if_exists"),
        (0, ""),
        (INVALID, "messages[2].dedup_window_ms"),
    ]
    assert rows[1][0], "one bad message does not fail its batch"
