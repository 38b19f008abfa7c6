"""SCHEDULE/ROLL records: golden bytes, the one encoder and the one decoder on
both branches (a few records one by one, more vectorised), torn and flipped bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.errors import CorruptData
from delayq.formats import message, messagecolumns
from delayq.formats.commitlog import decode
from delayq.formats.frame import RecordType
from delayq.formats.headers import decode_headers, encode_headers
from delayq.formats.message import MESSAGE_DTYPE, MESSAGE_FIXED, Message, encode_messages
from delayq.formats.messagecolumns import MessageColumns, decode_messages

T = 1_700_000_000_000
ONE_BY_ONE, VECTORISED = 1 << 30, 0  # values of ``FEW`` that force a branch
OneMessage = Callable[..., bytes]  # the ``one_message`` fixture


def branch(mp: pytest.MonkeyPatch, few: int) -> None:
    """Force one branch of the encoder and the decoder (their modules' ``FEW``)."""
    for module in (message, messagecolumns):
        mp.setattr(module, "FEW", few)


GOLDEN_SCHEDULE = (
    "5200000023c42832010100000700000000000000d26ce5cf8b0100000068e5cf8b010000020000000300"
    "000000000100080000000000000000000000ffffffffffffffff6b010061010000006268656c6c6f"
)
GOLDEN_ROLL = (  # key "key", headers {"x": "yz", "k": ""}, replaces 7, origin 4096
    "5c000000aa0ab0c203010000090000000000000000c40bd58b0100000068e5cf8b0100000500000004"
    "0000000200030010000000070000000000000000100000000000006b657901007802000000797a0100"
    "6b00000000626f647921"
)


def test_schedule_golden_bytes_and_round_trip(schedule: bytes) -> None:
    assert schedule.hex() == GOLDEN_SCHEDULE
    assert MESSAGE_FIXED == MESSAGE_DTYPE.itemsize == 68
    msg, n = decode(bytes.fromhex(GOLDEN_SCHEDULE))
    assert n == len(GOLDEN_SCHEDULE) // 2
    assert isinstance(msg, Message)
    assert (msg.seq, msg.deliver_at_ms, msg.epoch, msg.topic_id, msg.key, msg.body) == (
        7,
        T + 1234,
        2,
        3,
        "k",
        b"hello",
    )
    assert decode_headers(msg.headers) == {"a": "b"}
    assert msg == Message(
        RecordType.SCHEDULE, 7, T + 1234, T, 2, 3, 0, 0, -1, "k", msg.headers, b"hello"
    )


@pytest.mark.parametrize("few", [ONE_BY_ONE, VECTORISED])
def test_roll_golden_bytes_and_round_trip_on_both_branches(
    few: int, monkeypatch: pytest.MonkeyPatch, one_message: OneMessage
) -> None:
    branch(monkeypatch, few)
    hdrs = encode_headers({"x": "yz", "k": ""})
    rec = one_message(
        RecordType.ROLL, 9, T + 86_400_000, T, 5, 4, 2, b"key", hdrs, b"body!", 7, 4096
    )
    assert rec.hex() == GOLDEN_ROLL
    want = Message(RecordType.ROLL, 9, T + 86_400_000, T, 5, 4, 2, 7, 4096, "key", hdrs, b"body!")
    golden = bytes.fromhex(GOLDEN_ROLL)
    assert decode(golden) == (want, len(golden))
    cols = decode_messages(golden, np.array([0]))
    assert cols.ok.tolist() == [True] and cols.record(0) == (want, len(golden))
    assert (cols.keys, cols.headers, cols.bodies) == (["key"], [hdrs], [b"body!"])
    assert cols.heads.tobytes() == golden[:MESSAGE_FIXED]
    heads_only = decode_messages(golden, [0], payload=False)
    assert heads_only.record(0) == (want._replace(key="", headers=b"", body=b""), len(golden))
    assert heads_only.heads.tobytes() == golden[:MESSAGE_FIXED]


@pytest.mark.parametrize(
    "sizes",
    [
        [200, 100, 300],  # lengths average to the first one's: not one size
        [5, 5, 5, 5, 5, 5, 5, 5, 5, 5],  # one size
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        [300, 100, 200, 200, 200, 200, 200, 200, 200, 200],
    ],
)
@pytest.mark.parametrize("keyed", ["none", "one length", "mixed lengths"])
def test_every_record_of_a_batch_decodes_whatever_its_body_sizes(
    sizes: list[int], keyed: str
) -> None:
    """Each record of an encoded batch decodes alone, CRC checked: the batch encoder
    cuts records for their CRCs by their real lengths, whatever their mix (keys of
    one length, with bodies of one, take the one-size branch too)."""
    n = len(sizes)
    bodies = [bytes([i]) * size for i, size in enumerate(sizes)]
    keys = {
        "none": None,
        "one length": [b"key-%02d" % i for i in range(n)],
        "mixed lengths": [b"k" * (i + 1) for i in range(n)],
    }[keyed]
    buf, offsets, lengths = encode_messages(
        RecordType.SCHEDULE,
        list(range(1, n + 1)),
        [T + i for i in range(n)],
        T,
        2,
        3,
        0,
        keys,
        None,
        bodies,
    )
    assert len(buf) == int(lengths.sum())
    for i, off in enumerate(offsets.tolist()):
        msg, size = decode(bytes(buf), off)
        assert isinstance(msg, Message)
        assert (msg.seq, msg.body, size) == (i + 1, bodies[i], int(lengths[i]))
        assert msg.key == ("" if keys is None else keys[i].decode())
    alone = [  # each record packed by itself (the few-records branch): the same bytes
        bytes(
            encode_messages(
                RecordType.SCHEDULE,
                [i + 1],
                [T + i],
                T,
                2,
                3,
                0,
                None if keys is None else [keys[i]],
                None,
                [bodies[i]],
            )[0]
        )
        for i in range(n)
    ]
    assert bytes(buf) == b"".join(alone)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(min_size=1, max_size=40), st.text(max_size=3), st.booleans()),
        min_size=1,
        max_size=12,
    )
)
def test_any_batch_of_messages_decodes_record_by_record(rows: list[Any]) -> None:
    """Any mix of bodies, keys and headers: each record of the batch decodes alone,
    and the batch decoder's columns agree with it on both branches."""
    bodies = [b for b, _, _ in rows]
    keys = [k.encode() for _, k, _ in rows]
    headers = [encode_headers({"h": "v"} if h else {}) for _, _, h in rows]
    n = len(rows)
    plain = not any(keys) and not any(headers)
    buf, offsets, lengths = encode_messages(
        RecordType.SCHEDULE,
        list(range(1, n + 1)),
        [T + i for i in range(n)],
        T,
        2,
        3,
        0,
        None if plain else keys,
        None if plain else headers,
        bodies,
    )
    data = bytes(buf)
    branches = []
    for few in (ONE_BY_ONE, VECTORISED):
        with pytest.MonkeyPatch.context() as mp:
            branch(mp, few)
            cols = decode_messages(data, offsets)
            branches.append(cols)
            heads_only = decode_messages(data, offsets, payload=False)
        assert cols.ok.all() and heads_only.ok.all()
        assert heads_only.heads.tobytes() == cols.heads.tobytes()
        for i, off in enumerate(offsets.tolist()):
            msg, size = decode(data, off)
            assert isinstance(msg, Message)
            assert (msg.seq, msg.body, msg.key, size) == (i + 1, bodies[i], rows[i][1], lengths[i])
            assert msg.headers == headers[i] and int(cols.heads["seq"][i]) == i + 1
            assert cols.record(i) == (msg, size)
            assert (cols.keys[i], cols.headers[i], cols.bodies[i]) == (
                msg.key,
                msg.headers,
                msg.body,
            )
    assert branches[0].heads.tobytes() == branches[1].heads.tobytes()


@pytest.mark.parametrize("n", [1, 2, 7, 9])
def test_message_batches_are_the_same_bytes_on_both_paths(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A few records are packed one by one, more as one array: the same bytes,
    offsets and lengths, with scalar or per-row fields, with or without keys, and
    bodies of one size (the array is a template row plus two columns)."""
    mixed = [bytes([i]) * (5 + i % 3) for i in range(n)]
    same = [bytes([i]) * 6 for i in range(n)]
    keys = [f"k{i}".encode() if i % 2 else b"" for i in range(n)]
    headers = [encode_headers({"h": str(i)}) if i % 3 else b"" for i in range(n)]
    cases = [
        (mixed, np.arange(1, n + 1, dtype=np.uint64), np.arange(n) + T, T, 2, 3, 0, None, None),
        (same, np.arange(1, n + 1, dtype=np.uint64), np.arange(n) + T, T, 2, 3, 0, None, None),
        (same, list(range(1, n + 1)), [T + i for i in range(n)], np.int64(T), 2, 3, 1, None, None),
        (
            mixed,
            list(range(1, n + 1)),
            [T + i for i in range(n)],
            [T] * n,
            2,
            list(range(n)),
            [1] * n,
            keys,
            headers,
        ),
    ]
    for bodies, seq, due, accepted, epoch, tid, rolls, k, h in cases:
        got = []
        for few in (ONE_BY_ONE, VECTORISED):
            branch(monkeypatch, few)
            buf, offsets, lengths = encode_messages(
                RecordType.SCHEDULE,
                seq,
                due,
                accepted,
                epoch,
                tid,
                rolls,
                k,
                h,
                bodies,
                7,
                99,
            )
            got.append((bytes(buf), offsets.tolist(), lengths.tolist()))
        assert got[0] == got[1]
        first, size = decode(got[0][0])
        assert isinstance(first, Message)
        assert (first.replaces_seq, first.origin_pos, size) == (7, 99, got[0][2][0])


@pytest.mark.parametrize("few", [ONE_BY_ONE, VECTORISED])
def test_columns_match_decode_and_flag_junk(
    few: int, monkeypatch: pytest.MonkeyPatch, schedule: bytes
) -> None:
    branch(monkeypatch, few)
    one = schedule
    data = one + b"\0" * 80 + one
    cols = decode_messages(data, np.array([0, len(one), len(one) + 80, 5]), payload=False)
    assert cols.ok.tolist() == [True, False, True, False]
    msg, _ = decode(one)
    assert isinstance(msg, Message)
    heads = cols.heads
    assert (int(heads["seq"][2]), int(heads["deliver_at_ms"][2])) == (msg.seq, msg.deliver_at_ms)
    full = decode_messages(data, np.array([0, 5]))
    assert (full.keys[0], full.headers[0], full.bodies[0]) == (msg.key, msg.headers, msg.body)
    assert (full.keys[1], full.headers[1], full.bodies[1]) == ("", b"", b"")
    with pytest.raises(CorruptData):
        full.record(1)
    assert decode_messages(data, np.array([], dtype=np.int64)).ok.tolist() == []


def test_junk_columns_are_rows_to_fill() -> None:
    cols = MessageColumns.junk(3, payload=True)
    assert cols.ok.tolist() == [False] * 3 and cols.heads.tobytes() == bytes(3 * MESSAGE_FIXED)
    assert (cols.keys, cols.headers, cols.bodies) == ([""] * 3, [b""] * 3, [b""] * 3)
    assert MessageColumns.junk(2, payload=False).keys == []


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 12),
    body=st.integers(0, 40),
    picks=st.lists(st.integers(0, 11), min_size=1, max_size=12),
    junk=st.lists(st.integers(0, 2000), max_size=3),
    flip=st.one_of(st.none(), st.tuples(st.integers(0, 11), st.integers(0, 200))),
    other=st.one_of(st.none(), st.integers(0, 11)),
)
def test_heads_of_a_uniform_batch_match_the_row_by_row_checks(
    n: int,
    body: int,
    picks: list[int],
    junk: list[int],
    flip: tuple[int, int] | None,
    other: int | None,
) -> None:
    """Records of one length are read by one gather (the usual batch); any row
    that is not such a record (junk offsets, a flipped byte, a record of another
    type or length) must be judged exactly as the general branch and the one by
    one branch judge it."""
    bodies = [bytes([i]) * body for i in range(n)]
    buf, offsets, lengths = encode_messages(
        RecordType.SCHEDULE, list(range(1, n + 1)), [T] * n, T, 2, 3, 0, None, None, bodies
    )
    data = bytearray(buf)
    size = int(lengths[0])
    if other is not None and other < n:  # a CANCELS record of the same length, valid CRC
        start = other * size
        data[start + 8] = RecordType.CANCELS
        data[start + 4 : start + 8] = crc32c.crc32c(bytes(data[start + 8 : start + size])).to_bytes(
            4, "little"
        )
    if flip is not None and flip[0] < n:
        data[flip[0] * size + flip[1] % size] ^= 0x20
    data += bytes.fromhex(GOLDEN_SCHEDULE)  # a record of another length at the end
    at = [int(offsets[i % n]) for i in picks] + [j % len(data) for j in junk]
    if len(picks) % 3 == 0:
        at.append(n * size)  # the record of another length
    where = np.array(at, dtype=np.int64)
    with pytest.MonkeyPatch.context() as mp:
        branch(mp, VECTORISED)
        fast = decode_messages(bytes(data), where, payload=False)
        mp.setattr(messagecolumns, "_uniform_heads", lambda *_: None)
        general = decode_messages(bytes(data), where, payload=False)
        branch(mp, ONE_BY_ONE)
        alone = decode_messages(bytes(data), where, payload=False)
    assert fast.ok.tolist() == general.ok.tolist() == alone.ok.tolist()
    assert fast.heads[fast.ok].tobytes() == general.heads[general.ok].tobytes()
    assert fast.heads[fast.ok].tobytes() == alone.heads[alone.ok].tobytes()
    for i, off in enumerate(at):  # and both agree with decoding the record alone
        try:
            rec = decode(bytes(data), off, payload=False)[0]
        except CorruptData:
            rec = None
        assert bool(fast.ok[i]) == isinstance(rec, Message)


@pytest.mark.parametrize("few", [ONE_BY_ONE, VECTORISED])
def test_inner_lengths_beyond_the_record_are_refused_on_every_branch(
    few: int, monkeypatch: pytest.MonkeyPatch, schedule: bytes
) -> None:
    branch(monkeypatch, few)
    bad = bytearray(schedule)
    bad[46:48] = (200).to_bytes(2, "little")  # key_len (@46): past the record's end
    bad[4:8] = crc32c.crc32c(bytes(bad[8:])).to_bytes(4, "little")  # a consistent CRC
    # alone, the record says why (vectorised, only that it is not valid)
    with pytest.raises(CorruptData, match="lengths exceed" if few == ONE_BY_ONE else "not a valid"):
        decode(bytes(bad))
    assert not decode_messages(bytes(bad), np.array([0]), payload=False).ok[0]


@pytest.mark.parametrize("few", [ONE_BY_ONE, VECTORISED])
def test_a_key_that_is_not_utf8_is_junk_in_columns_and_an_error_alone(
    few: int, monkeypatch: pytest.MonkeyPatch, one_message: OneMessage
) -> None:
    branch(monkeypatch, few)
    rec = one_message(RecordType.SCHEDULE, 1, T, T, 1, 1, 0, b"\xff\xfe", b"", b"body")
    with pytest.raises(CorruptData, match="key" if few == ONE_BY_ONE else "not a valid"):
        decode(rec)
    assert decode(rec, payload=False)[0].seq == 1  # type: ignore[union-attr]
    assert decode_messages(rec, np.array([0])).ok.tolist() == [False]
    assert decode_messages(rec, np.array([0]), payload=False).ok.tolist() == [True]


@pytest.mark.parametrize("index", range(0, 82, 7))
def test_a_flipped_byte_anywhere_in_a_record_is_detected(index: int, schedule: bytes) -> None:
    data = bytearray(schedule)
    data[index] ^= 0x40
    with pytest.raises(CorruptData):
        decode(bytes(data))
    assert not decode_messages(bytes(data), [0]).ok[0]


@pytest.mark.parametrize("few", [ONE_BY_ONE, VECTORISED])
@pytest.mark.parametrize("payload", [True, False])
def test_records_are_the_rows_as_record_gives_them(
    few: int, payload: bool, monkeypatch: pytest.MonkeyPatch, schedule: bytes
) -> None:
    branch(monkeypatch, few)
    data = schedule + b"\0" * 10 + bytes.fromhex(GOLDEN_ROLL)
    at = np.array([0, 3, len(schedule) + 10, len(schedule)])
    cols = decode_messages(data, at, payload=payload)
    got = list(cols.records())
    assert [g is not None for g in got] == cols.ok.tolist() == [True, False, True, False]
    for i, g in enumerate(got):
        if g is not None:
            assert g == cols.record(i) == decode(data, int(at[i]), payload=payload)
