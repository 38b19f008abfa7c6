"""The packed wire form (``delayq.packed``) against the message form: any batch the
client packs reads on the server as the same engine columns as its messages, any
receive the server packs reads on the client as the same ``Received`` list, and the
schedule and ack results read the same in both forms (hypothesis: empty bodies,
bodies up to the limit, unicode topics, keys and headers). A malformed packed
request is refused with ``InvalidArgument`` naming its field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delayq import Outgoing
from delayq.client import core
from delayq.client.outgoing import schedule
from delayq.client.received import ReceivedBatch, received
from delayq.delivery.types import ReceivedBatch as EngineReceived
from delayq.engine import BatchOutcome
from delayq.errors import Congested, DelayqError, InvalidArgument
from delayq.packed import (
    blob_bytes,
    blob_texts,
    pack_blobs,
    pack_texts,
    read_schedule,
)
from delayq.server.convert import (
    message_batch,
    message_results,
    packed_batch,
    packed_results,
    received_messages,
    received_packed,
)
from delayq.settings import EngineSettings
from delayq.v1 import delayq_pb2 as pb

LIMIT = EngineSettings(data_dir=Path(".")).max_body_bytes  # the default limit

texts = st.text(max_size=12)
bodies = st.one_of(
    st.binary(max_size=40),
    st.just(b""),
    st.sampled_from([LIMIT, LIMIT + 1]).map(lambda n: b"b" * n),
)
whens = st.one_of(
    st.just({}),
    st.builds(lambda ms: {"at": ms}, st.integers(0, 2**62)),
    st.builds(lambda s: {"at": datetime.fromtimestamp(s, UTC)}, st.integers(0, 4_000_000_000)),
    st.builds(lambda d: {"delay": d}, st.floats(0, 1e9, allow_nan=False)),
    st.builds(lambda d: {"delay": d}, st.integers(0, 10**9)),
    st.builds(lambda d: {"delay": timedelta(milliseconds=d)}, st.integers(0, 10**9)),
    st.builds(lambda lv: {"level": lv}, st.integers(1, 18)),
)


@st.composite
def outgoing(draw: st.DrawFn) -> Outgoing:
    return Outgoing(
        topic=draw(st.one_of(st.sampled_from(["t", "u", "ü-topic"]), texts)),
        body=draw(bodies),
        key=draw(st.one_of(st.just(""), texts)),
        headers=draw(st.one_of(st.just({}), st.dictionaries(texts, texts, max_size=3))),
        **draw(whens),
    )


def wire(msg: Any) -> Any:
    """``msg`` through its bytes, as the other end reads it."""
    return type(msg).FromString(msg.SerializeToString())


def columns(batch: Any) -> dict[str, list[Any]]:
    """An engine ScheduleBatch as plain per-message lists (None columns filled)."""
    n = len(batch.bodies)

    def ints(col: Any) -> list[int]:
        return [0] * n if col is None else [int(v) for v in col]

    return {
        "topic": [batch.topic] * n if isinstance(batch.topic, str) else list(batch.topic),
        "bodies": list(batch.bodies),
        "keys": [""] * n if batch.keys is None else list(batch.keys),
        "headers": [{}] * n if batch.headers is None else [dict(h) for h in batch.headers],
        "deliver_at_ms": ints(batch.deliver_at_ms),
        "delay_ms": ints(batch.delay_ms),
        "delay_level": ints(batch.delay_level),
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(outgoing(), max_size=30))
def test_a_packed_schedule_reads_as_its_messages(messages: list[Outgoing]) -> None:
    as_messages = wire(schedule(messages, 1, packed=False).request)
    as_columns = wire(schedule(messages, 1, packed=True).request)
    assert not as_messages.HasField("packed") and not as_columns.messages
    assert columns(packed_batch(as_columns.packed)) == columns(message_batch(as_messages.messages))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.text(alphabet="ABCabc019-_", min_size=1, max_size=20)),
            st.integers(0, 2**62),
        ),
        max_size=30,
    )
)
def test_schedule_results_read_the_same_in_both_forms(rows: list[tuple[str | None, int]]) -> None:
    ids = [i for i, _ in rows]
    errors: dict[int, DelayqError] = {
        k: (InvalidArgument("body", "must not be empty") if k % 2 else Congested("full", 25))
        for k, (i, _) in enumerate(rows)
        if i is None
    }
    out = BatchOutcome(ids, [0 if i is None else due for i, due in rows], errors)
    old, new = pb.ScheduleResponse(), pb.ScheduleResponse()
    message_results(old.results, out)
    packed_results(new.packed, out)
    n = len(rows)
    got = schedule([Outgoing(topic="t", body=b"x")] * n, 1, packed=True).parse(wire(new))
    assert got == schedule([], 1, packed=False).parse(wire(old))
    for k, e in errors.items():
        err = got[k].error
        assert got[k].id is None and err is not None
        if isinstance(e, Congested):
            assert err.retry_after_ms == 25
        else:
            assert err.field == f"messages[{k}].body", "named from the batch in both forms"
    assert all(g.ok for k, g in enumerate(got) if k not in errors)


@st.composite
def engine_batches(draw: st.DrawFn) -> EngineReceived:
    n = draw(st.integers(0, 20))
    auto = draw(st.booleans())

    def col(strategy: st.SearchStrategy[Any]) -> list[Any]:
        return draw(st.lists(strategy, min_size=n, max_size=n))

    return EngineReceived(
        topic=draw(st.sampled_from(["t", "dlq.g", "ü"])),
        ids=col(st.text(alphabet="ABCDEFabcdef0123456789", min_size=8, max_size=16)),
        keys=col(st.one_of(st.just(""), texts)),
        headers=col(st.one_of(st.just({}), st.dictionaries(texts, texts, max_size=2))),
        bodies=col(bodies),
        deliver_at_ms=col(st.integers(0, 2**62)),
        delivered_ms=col(st.integers(0, 2**62)),
        receipts=[""] * n if auto else col(st.text(alphabet="RSTabc012", min_size=10, max_size=24)),
        attempts=col(st.integers(1, 2**31 - 1)),  # int32 in the message form
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_batches())
def test_a_packed_receive_reads_as_its_messages(got: EngineReceived) -> None:
    old, new = pb.ReceiveResponse(), pb.ReceiveResponse()
    received_messages(old.messages, got)
    received_packed(new.packed, got)
    want = received(wire(old))
    view = received(wire(new))
    assert isinstance(view, ReceivedBatch) and isinstance(want, list)
    assert view == want and list(view) == want and len(view) == len(want)
    assert [view[i] for i in range(len(view))] == want
    assert view[1:3] == want[1:3] and (not want or view[-1] == want[-1])
    assert list(view.receipts) == [m.receipt for m in want]
    assert list(view.ids) == [m.id for m in want]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=40))
def test_texts_and_bytes_columns_round_trip(items: list[str]) -> None:
    blob = pb.Blobs()
    pack_texts(items, blob)
    assert blob_texts(wire(blob), "x", len(items)) == items
    raw = [t.encode() for t in items]
    pack_blobs(raw, blob)
    assert blob_bytes(wire(blob), "x", len(items)) == raw


def test_an_ack_of_a_whole_batch_sends_its_receipts_blob_back_as_it_came() -> None:
    got = EngineReceived("t", ["a1", "b2"], ["", ""], [{}, {}], [b"x", b"y"], [1, 2], [3, 4],
                         ["R1", "R22"], [1, 1])  # fmt: skip
    resp = pb.ReceiveResponse()
    received_packed(resp.packed, got)
    view = received(wire(resp))
    assert isinstance(view, ReceivedBatch)
    req = core.ack("t", "g", view.receipts, 1).request
    assert req.packed_receipts == resp.packed.receipts and not req.receipts
    req = core.ack("t", "g", ["R1", "R22"], 1).request  # packed from strings: the same bytes
    assert req.packed_receipts == resp.packed.receipts
    old = core.ack("t", "g", ["R1", "R22"], 1, packed=False).request
    assert list(old.receipts) == ["R1", "R22"] and not old.HasField("packed_receipts")


@pytest.mark.parametrize("delay", [float("nan"), float("inf"), 1e30, -1e30])
def test_a_delay_no_int64_holds_fails_in_the_client_in_both_forms(delay: float) -> None:
    for packed in (False, True):
        with pytest.raises(ValueError):  # the client's InvalidArgument is one too
            schedule([Outgoing(topic="t", body=b"x", delay=delay)], 1, packed=packed)


def test_a_server_without_the_packed_form_is_told_apart() -> None:
    """An older server reads no items of a packed call and answers none: the client
    resends in the message form (``NotPacked``); an empty batch is no sign."""
    call = schedule([Outgoing(topic="t", body=b"x")], 1)
    with pytest.raises(core.NotPacked):
        call.parse(pb.ScheduleResponse(topology_epoch=1))
    assert schedule([], 1).parse(pb.ScheduleResponse()) == []
    with pytest.raises(core.NotPacked):
        core.ack("t", "g", ["R1"], 1).parse(pb.AckResponse(topology_epoch=1))


def packed_schedule(**fields: Any) -> Any:
    p = pb.PackedSchedule(topics=["t"])
    pack_blobs([b"a", b"bc", b""], p.bodies)
    for name, value in fields.items():
        if isinstance(value, pb.Blobs):
            getattr(p, name).CopyFrom(value)
        elif name == "headers":
            p.headers.extend(value)
        elif name == "topics":
            del p.topics[:]
            p.topics.extend(value)
        else:
            setattr(p, name, value)
    return p


def u32(*values: int) -> bytes:
    return np.array(values, dtype="<u4").tobytes()


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"bodies": pb.Blobs(data=b"abc", ends=u32(1, 5))}, "packed.bodies.ends", "rise to"),
        ({"bodies": pb.Blobs(data=b"abc", ends=u32(2, 1, 3))}, "packed.bodies.ends", "never"),
        ({"bodies": pb.Blobs(data=b"abc", ends=b"\x01\x00")}, "packed.bodies.ends", "uint32"),
        ({"bodies": pb.Blobs(data=b"abc")}, "packed.bodies.ends", "no items"),
        ({"keys": pb.Blobs(data=b"ab", ends=u32(1, 2))}, "packed.keys.ends", "2 items"),
        ({"keys": pb.Blobs(data=b"\xff\xfe", ends=u32(1, 2, 2))}, "packed.keys[0]", "UTF-8"),
        ({"delay_ms": b"\x00" * 16}, "packed.delay_ms", "3 values"),
        ({"delay_level": b"\x00" * 5}, "packed.delay_level", "3 values"),
        ({"topic_index": b"\x00\x00"}, "packed.topic_index", "3 values"),
        ({"topic_index": b"\x00\x00\x01\x00\x05\x00"}, "packed.topic_index", "past the 1"),
        ({"topics": []}, "packed.topics", "0 topics"),
        ({"topics": ["a", "b"]}, "packed.topics", "give one"),
        ({"headers": [pb.IndexedHeaders(index=3)]}, "packed.headers[0].index", "past"),
        (
            {"headers": [pb.IndexedHeaders(index=1, headers={"a": "b"})] * 2},
            "packed.headers[1].index",
            "twice",
        ),
    ],
)
def test_a_malformed_packed_schedule_is_refused_naming_its_field(
    fields: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        read_schedule(wire(packed_schedule(**fields)))
    assert err.value.field == field and says in str(err.value), str(err.value)
