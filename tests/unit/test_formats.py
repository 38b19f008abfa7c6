"""Every on-disk format: golden bytes, round trips, torn tails and flipped bytes."""

from __future__ import annotations

import contextlib
import mmap
import os
import random
import struct
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.errors import CorruptData
from delayq.store import commitlog as cl_module
from delayq.store import readyindex, records, statemap, timerlog
from delayq.store.checkpoint import Checkpoint, GroupCheckpoint
from delayq.store.commitlog import CommitLog
from delayq.store.fileheader import FileHeader
from delayq.store.keptrecords import KeptRecords
from delayq.store.readyindex import ReadyEntry, ReadyIndex
from delayq.store.segments import warm_pages
from delayq.store.statemap import MessageState, StateMap
from delayq.store.timerlog import TimerLog, TimerRecord, decode_timer
from delayq.store.wheel import TimerWheel
from delayq.timers.releasebuffer import DUE_DTYPE

T = 1_700_000_000_000

GOLDEN_SCHEDULE = (
    "5200000023c42832010100000700000000000000d26ce5cf8b0100000068e5cf8b010000020000000300"
    "000000000100080000000000000000000000ffffffffffffffff6b010061010000006268656c6c6f"
)
GOLDEN_CANCEL = (
    "30000000568655e7020100000700000000000000d20400000000000003000000f469e5cf8b010000d26ce5"
    "cf8b010000"
)
GOLDEN_CANCELS = (
    "5c000000b51f8d7d07010000f469e5cf8b01000002000000000000000700000000000000d2040000000000"
    "000300000000000000d26ce5cf8b01000008000000000000002e160000000000000400000000000000d36c"
    "e5cf8b010000"
)
GOLDEN_DELIVER = (
    "340000006507572f040100000700000000000000030000005a000000d204000000000000d26ce5cf8b0100"
    "00d36ce5cf8b010000"
)
GOLDEN_ACK = "29000000296ef621050100000300000001000000020000006701000000000000000200000000000000"
GOLDEN_TOPIC = "16000000efc0ddbd06010000030000006f7264657273"
GOLDEN_TIMER = (
    "51524c5457b95a68ffffffffffffffff01f1536500000000d2040000000000005a00000003000000d26ce5"
    "cf8b01000007000000000000000000000000000000"
)
GOLDEN_READY = (
    "49594452edb39b560700000000000000d2040000000000005a00000000000000d26ce5cf8b010000d36ce5"
    "cf8b010000"
)
GOLDEN_HEADER = "4451434c0100000020000000000000000068e5cf8b0100000000000000000000"


def _schedule() -> bytes:
    return records.encode_message(
        records.RecordType.SCHEDULE,
        seq=7,
        deliver_at_ms=T + 1234,
        accepted_ms=T,
        epoch=2,
        topic_id=3,
        roll_count=0,
        key=b"k",
        headers=records.encode_headers({"a": "b"}),
        body=b"hello",
    )


def test_commitlog_records_golden_bytes_and_round_trip() -> None:
    assert _schedule().hex() == GOLDEN_SCHEDULE
    cancel = records.Cancel(7, 1234, 3, T + 500, T + 1234)  # no longer written: still read
    cancels = records.encode_cancels(
        np.array([7, 8], dtype=np.uint64),
        np.array([1234, 5678]),
        np.array([3, 4]),
        T + 500,
        np.array([T + 1234, T + 1235]),
    )
    assert cancels.hex() == GOLDEN_CANCELS
    assert records.decode(cancels)[0] == records.Cancels(
        T + 500, (7, 8), (1234, 5678), (3, 4), (T + 1234, T + 1235)
    )
    deliver = records.Deliver(7, 3, 90, 1234, T + 1234, T + 1235)
    assert records.encode_deliver(deliver).hex() == GOLDEN_DELIVER
    assert records.encode_ack(3, "g", [1, 2]).hex() == GOLDEN_ACK
    assert records.encode_topic(3, "orders").hex() == GOLDEN_TOPIC

    msg, n = records.decode(bytes.fromhex(GOLDEN_SCHEDULE))
    assert n == len(GOLDEN_SCHEDULE) // 2
    assert isinstance(msg, records.Message)
    assert (msg.seq, msg.deliver_at_ms, msg.epoch, msg.topic_id, msg.key, msg.body) == (
        7,
        T + 1234,
        2,
        3,
        "k",
        b"hello",
    )
    assert records.decode_headers(msg.headers) == {"a": "b"}
    assert records.decode(bytes.fromhex(GOLDEN_DELIVER))[0] == deliver
    assert records.decode(bytes.fromhex(GOLDEN_ACK))[0] == records.Ack(3, "g", (1, 2))
    assert records.decode(bytes.fromhex(GOLDEN_TOPIC))[0] == records.TopicDef(3, "orders")
    assert records.decode(bytes.fromhex(GOLDEN_CANCEL))[0] == cancel


@pytest.mark.parametrize("n", [1, 3, 20])
def test_a_cancels_record_is_the_same_on_both_paths_and_decodes(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cols = (
        np.arange(7, 7 + n, dtype=np.uint64),
        np.arange(n) * 1234,
        np.full(n, 3) + np.arange(n) % 2,
        np.arange(n) + T,
    )
    encoded = {}
    for few in (1 << 30, 0):  # entries packed one by one; as one array
        monkeypatch.setattr(records, "FEW", few)
        encoded[few] = records.encode_cancels(cols[0], cols[1], cols[2], T + 500, cols[3])
    assert encoded[0] == encoded[1 << 30]
    got, size = records.decode(encoded[0] + b"junk after")
    assert size == len(encoded[0]) == 12 + 16 + 32 * n
    assert got == records.Cancels(T + 500, *(tuple(c.tolist()) for c in cols))
    bad = bytearray(encoded[0])
    bad[20:24] = (n + 1).to_bytes(4, "little")  # a count the length does not hold
    bad[4:8] = crc32c.crc32c(bytes(bad[8:])).to_bytes(4, "little")
    with pytest.raises(CorruptData, match="entries"):
        records.decode(bytes(bad))


def test_deliver_batch_encoding_is_the_same_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Release rows encode to the same bytes one by one and vectorised, and each
    record decodes back (``encode_deliver`` is pinned by golden bytes above)."""
    rows = [records.Deliver(7 + i, 3, 90 + i, 1234 * i, T + i, T + 500) for i in range(20)]
    due = np.zeros(len(rows), dtype=DUE_DTYPE)  # what the release stage hands over
    for column, field in [("cl_size", "body_size"), ("cl_pos", "body_pos")] + [
        (f, f) for f in ("seq", "topic_id", "deliver_at_ms")
    ]:
        due[column] = [getattr(r, field) for r in rows]
    encoded = {}
    for few in (1 << 30, 0):  # every batch one by one; every batch vectorised
        monkeypatch.setattr(records, "FEW", few)
        encoded[few] = records.encode_delivers(due, T + 500)
    assert encoded[0] == encoded[1 << 30]
    size = len(encoded[0]) // len(rows)
    got = [records.decode(encoded[0], i * size)[0] for i in range(len(rows))]
    assert got == rows


@pytest.mark.parametrize(
    "sizes",
    [
        [200, 100, 300],  # lengths average to the first one's: not one size
        [5, 5, 5, 5, 5, 5, 5, 5, 5, 5],  # one size
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        [300, 100, 200, 200, 200, 200, 200, 200, 200, 200],
    ],
)
def test_every_record_of_a_batch_decodes_whatever_its_body_sizes(sizes: list[int]) -> None:
    """Each record of an encoded batch decodes alone, CRC checked: the batch encoder
    cuts records for their CRCs by their real lengths, whatever their mix."""
    n = len(sizes)
    bodies = [bytes([i]) * size for i, size in enumerate(sizes)]
    buf, offsets, lengths = records.encode_messages(
        records.RecordType.SCHEDULE,
        list(range(1, n + 1)),
        [T + i for i in range(n)],
        T,
        2,
        3,
        0,
        None,
        None,
        bodies,
    )
    assert len(buf) == int(lengths.sum())
    for i, off in enumerate(offsets.tolist()):
        msg, size = records.decode(bytes(buf), off)
        assert isinstance(msg, records.Message)
        assert (msg.seq, msg.body, size) == (i + 1, bodies[i], int(lengths[i]))


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
    and the vectorised heads agree with it."""
    bodies = [b for b, _, _ in rows]
    keys = [k.encode() for _, k, _ in rows]
    headers = [records.encode_headers({"h": "v"} if h else {}) for _, _, h in rows]
    n = len(rows)
    plain = not any(keys) and not any(headers)
    buf, offsets, lengths = records.encode_messages(
        records.RecordType.SCHEDULE,
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
    heads, ok = records.message_heads(data, offsets)
    assert ok.all()
    for i, off in enumerate(offsets.tolist()):
        msg, size = records.decode(data, off)
        assert isinstance(msg, records.Message)
        assert (msg.seq, msg.body, msg.key, size) == (i + 1, bodies[i], rows[i][1], lengths[i])
        assert msg.headers == headers[i] and int(heads["seq"][i]) == i + 1


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
    headers = [records.encode_headers({"h": str(i)}) if i % 3 else b"" for i in range(n)]
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
        for few in (1 << 30, 0):  # one by one; as one array
            monkeypatch.setattr(records, "FEW", few)
            buf, offsets, lengths = records.encode_messages(
                records.RecordType.SCHEDULE,
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
        first, size = records.decode(got[0][0])
        assert isinstance(first, records.Message)
        assert (first.replaces_seq, first.origin_pos, size) == (7, 99, got[0][2][0])


def test_message_heads_match_decode_and_flag_junk() -> None:
    one = _schedule()
    data = one + b"\0" * 80 + one
    heads, ok = records.message_heads(data, np.array([0, len(one), len(one) + 80, 5]))
    assert ok.tolist() == [True, False, True, False]
    msg, _ = records.decode(one)
    assert isinstance(msg, records.Message)
    assert (int(heads["seq"][2]), int(heads["deliver_at_ms"][2])) == (msg.seq, msg.deliver_at_ms)
    keys, headers, bodies = records.message_payloads(
        data, np.array([0, 5]), *records.message_heads(data, np.array([0, 5]))
    )
    assert (keys[0], headers[0], bodies[0]) == (msg.key, msg.headers, msg.body)
    assert bodies[1] == b""


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
    type or length) must be judged exactly as the general path judges it."""
    bodies = [bytes([i]) * body for i in range(n)]
    buf, offsets, lengths = records.encode_messages(
        records.RecordType.SCHEDULE, list(range(1, n + 1)), [T] * n, T, 2, 3, 0, None, None, bodies
    )
    data = bytearray(buf)
    size = int(lengths[0])
    if other is not None and other < n:  # a CANCELS record of the same length, valid CRC
        start = other * size
        data[start + 8] = records.RecordType.CANCELS
        data[start + 4 : start + 8] = crc32c.crc32c(bytes(data[start + 8 : start + size])).to_bytes(
            4, "little"
        )
    if flip is not None and flip[0] < n:
        data[flip[0] * size + flip[1] % size] ^= 0x20
    data += _schedule()  # a record of another length at the end
    at = [int(offsets[i % n]) for i in picks] + [j % len(data) for j in junk]
    if len(picks) % 3 == 0:
        at.append(n * size)  # the record of another length
    where = np.array(at, dtype=np.int64)
    fast = records.message_heads(bytes(data), where)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(records, "_uniform_heads", lambda *_: None)
        general = records.message_heads(bytes(data), where)
    assert fast[1].tolist() == general[1].tolist()
    assert fast[0][fast[1]].tobytes() == general[0][general[1]].tobytes()
    for i, off in enumerate(at):  # and both agree with decoding the record alone
        try:
            rec = records.decode(bytes(data), off, payload=False)[0]
        except CorruptData:
            rec = None
        assert bool(fast[1][i]) == isinstance(rec, records.Message)


def test_message_heads_refuse_inner_lengths_beyond_the_record_as_decode_does() -> None:
    bad = bytearray(_schedule())
    bad[46:48] = (200).to_bytes(2, "little")  # key_len (@46): past the record's end
    bad[4:8] = crc32c.crc32c(bytes(bad[8:])).to_bytes(4, "little")  # a consistent CRC
    with pytest.raises(CorruptData, match="lengths exceed"):
        records.decode(bytes(bad))
    _, ok = records.message_heads(bytes(bad), np.array([0]))
    assert not ok[0]


@pytest.mark.parametrize("index", range(0, 82, 7))
def test_a_flipped_byte_anywhere_in_a_record_is_detected(index: int) -> None:
    data = bytearray(_schedule())
    data[index] ^= 0x40
    with pytest.raises(CorruptData):
        records.decode(bytes(data))


def test_fixed_formats_golden_bytes() -> None:
    rec = TimerRecord(-1, 1_700_000_001, 1234, 90, 3, T + 1234, 7, 0, 0, 0)
    assert rec.encode().hex() == GOLDEN_TIMER
    assert decode_timer(bytes.fromhex(GOLDEN_TIMER)) == rec
    assert ReadyEntry(7, 1234, 90, T + 1234, T + 1235).encode().hex() == GOLDEN_READY
    assert FileHeader(b"DQCL", 32, T).encode().hex() == GOLDEN_HEADER
    for golden in (GOLDEN_TIMER, GOLDEN_READY):  # the check is the documented weighted sum
        raw = bytes.fromhex(golden)
        words = struct.unpack(f"<{len(raw) // 4}I", raw)
        weighted = sum(w * ((2 * i + 1) * 0x9E3779B1) for i, w in enumerate(words[2:]))
        assert words[1] == (0x5F3759DF + weighted) % 2**32


@pytest.mark.parametrize("index", range(4, 64, 3))
def test_a_flipped_bit_anywhere_in_a_timer_record_is_detected(index: int) -> None:
    bad = bytearray(bytes.fromhex(GOLDEN_TIMER))
    bad[index] ^= 1 << (index % 8)
    with pytest.raises(CorruptData, match=r"checksum|magic"):
        decode_timer(bytes(bad))
    assert timerlog.CODEC.check_many(bytes.fromhex(GOLDEN_TIMER) + bytes(bad), 2) == 1


def test_the_timer_check_misses_top_bit_flips_in_two_words_as_documented() -> None:
    """The blind spot ``fixedrecord`` documents: 2**31 times two odd weights is 0 mod 2**32."""
    bad = bytearray(bytes.fromhex(GOLDEN_TIMER))
    bad[8 + 3] ^= 0x80  # the top bit of the first checked word (little-endian) ...
    bad[16 + 3] ^= 0x80  # ... and of the third
    assert timerlog.CODEC.check_many(bytes(bad), 1) == 1
    bad[16 + 3] ^= 0x80  # one of them alone is seen
    assert timerlog.CODEC.check_many(bytes(bad), 1) == 0


def test_timer_batch_encoding_is_byte_identical_to_one_by_one() -> None:
    rows = [
        TimerRecord(i - 1, 17 + i % 3, 1234 * i, 90, 3, T + i, 7 + i, i, i % 2, i % 2)
        for i in range(50)
    ]
    recs = np.zeros(len(rows), dtype=timerlog.RECORD_DTYPE)
    for name in TimerRecord._fields:
        recs[name] = [getattr(r, name) for r in rows]
    assert timerlog.encode_many(recs) == b"".join(r.encode() for r in rows)


def _fill_commitlog(path: Path, n: int) -> tuple[CommitLog, list[int]]:
    cl = CommitLog(path, segment_bytes=4096)
    positions = [cl.append(records.encode_topic(i, f"topic-{i}" * 20), T) for i in range(n)]
    return cl, positions


def _message(seq: int, body_len: int) -> bytes:
    return records.encode_message(
        records.RecordType.SCHEDULE,
        seq=seq,
        deliver_at_ms=T + seq,
        accepted_ms=T,
        epoch=1,
        topic_id=1,
        roll_count=0,
        key=f"k{seq}".encode() if seq % 3 else b"",
        headers=records.encode_headers({"h": str(seq)}) if seq % 2 else b"",
        body=bytes([seq % 251]) * body_len,
    )


def _check_batch_read(cl: CommitLog, positions: list[int]) -> None:
    """The batch reads agree with ``read`` one by one, row for row."""
    cols = cl.read_messages(np.asarray(positions, dtype=np.int64))
    many = cl.read_many(positions)
    for i, pos in enumerate(positions):
        try:
            want: Any = cl.read(pos)[0]
        except CorruptData:
            want = None
        assert bool(cols.ok[i]) == isinstance(want, records.Message), pos
        assert isinstance(many[i], CorruptData) == (want is None), pos
        if want is not None:
            assert many[i] == want
            assert int(cols.heads["seq"][i]) == want.seq
            assert (cols.keys[i], cols.bodies[i]) == (want.key, want.body)
            assert cols.headers[i] == want.headers


def _bad_key_message(seq: int) -> bytes:
    """A message record whose key is not UTF-8, under a consistent CRC."""
    rec = bytearray(
        records.encode_message(
            records.RecordType.SCHEDULE, seq, T, T, 1, 1, 0, b"\xff\xfe", b"", b"body"
        )
    )
    rec[4:8] = crc32c.crc32c(bytes(rec[8:])).to_bytes(4, "little")
    return bytes(rec)


def test_commitlog_batch_reads_span_segments_growth_and_truncation(
    tmp_path: Path, batch_path: str
) -> None:
    cl = CommitLog(tmp_path / "cl", segment_bytes=4096)
    good = [cl.append(_message(i, 40 + 97 * (i % 7)), T) for i in range(40)]
    assert len(cl.log.segments) > 3, "records should span several segments"
    bases = [seg.base for seg in cl.log.segments]
    bad_key = cl.append(_bad_key_message(99), T)
    flipped = bytearray(_message(98, 50))
    flipped[-1] ^= 1  # a body byte: the CRC no longer matches
    bad_crc = cl.append(bytes(flipped), T)
    bogus = [0, bases[1] + 5, good[3] + 1, cl.end, cl.end + 4096, 1 << 62, bad_key, bad_crc]
    mixed = good[::-1] + bogus + good[::3]
    _check_batch_read(cl, mixed)
    few = [good[5], bogus[1], good[30], bad_key, bad_crc]  # a few, in three segments
    _check_batch_read(cl, few)
    _check_batch_read(cl, good[-3:])  # one segment: the single-group path
    cl.log.drop_views()  # the flush stage lets the maps go; reads make them again
    _check_batch_read(cl, good[::2])
    cl.close()
    # records appended to a segment after it was mapped are read too
    cl = CommitLog(tmp_path / "one", segment_bytes=1 << 20)
    first = [cl.append(_message(i, 100), T) for i in range(3)]
    _check_batch_read(cl, first)
    later = [cl.append(_message(100 + i, 10), T) for i in range(3)]
    assert len(cl.log.segments) == 1
    _check_batch_read(cl, later + first)
    # after a truncate the cut records are gone; what is written there next is read
    cl.truncate(later[1])
    cols = cl.read_messages(np.asarray(later, dtype=np.int64))
    assert cols.ok.tolist() == [True, False, False]
    assert cl.append(_message(200, 20), T) == later[1]
    _check_batch_read(cl, later)
    assert cl.read_messages(np.empty(0, dtype=np.int64)).ok.tolist() == []
    cl.close()


def test_kept_records_of_a_segment_are_its_pending_schedules_as_they_were(
    tmp_path: Path,
) -> None:
    cl = CommitLog(tmp_path / "cl", segment_bytes=1 << 16)
    # runs of one length (batches) broken by records of other lengths and types
    sizes = [50] * 30 + [51, 52] + [50] * 3 + [7] * 40 + [300]
    schedules = {cl.append(_message(seq, size), T): seq for seq, size in enumerate(sizes, 1)}
    one = np.ones(1, dtype=np.int64)
    cl.append(records.encode_cancels(one, one, one, T, one), T)
    cl.append(records.encode_topic(3, "t"), T)
    schedules[cl.append(_message(999, 60), T)] = 999
    walked = [pos for pos, _, _ in cl.scan(0)]
    seg = cl.log.segments[0]
    with mmap.mmap(seg.fd, seg.size, prot=mmap.PROT_READ) as view:
        starts = cl_module._record_starts(view, cl.log.first_record_pos(seg.base) - seg.base)
    assert (starts + seg.base).tolist() == walked
    cl.append(_message(1000, 60_000), T)  # seals the first segment
    base = cl.log.segments[0].base
    wanted = {pos for pos, seq in schedules.items() if seq % 3 == 0}
    cl.kept.install(cl.keep_pending(base, T, lambda seqs: seqs % 3 == 0)[0])
    assert cl.kept.count == len(wanted)
    (path,) = (tmp_path / "cl" / "kept").glob("*.kept")
    data = path.read_bytes()
    assert FileHeader.decode(data, b"DQKR", "kept") == FileHeader(b"DQKR", base, T, len(wanted))
    first = min(wanted)
    assert data[32:40] == struct.pack("<Q", first)
    assert data[40 : 40 + len(_message(3, 50))] == _message(3, 50), "copied as it was"
    cl.log.delete_segment(base)
    again = KeptRecords(tmp_path / "cl" / "kept")  # as an open finds it
    assert again.count == len(wanted)
    for pos, seq in schedules.items():
        rec = again.read(pos)
        assert (records.decode(rec)[0].seq if rec else None) == (seq if pos in wanted else None)
    assert cl.read(first)[0].seq == 3  # type: ignore[union-attr]
    with pytest.raises(CorruptData):
        cl.read(first + 1)
    path.write_bytes(data[:-5])
    with pytest.raises(CorruptData, match="truncated"):
        KeptRecords(tmp_path / "cl" / "kept")
    cl.close()


def test_commitlog_torn_tail_is_cut_on_reopen(tmp_path: Path) -> None:
    cl, positions = _fill_commitlog(tmp_path / "cl", 60)
    assert len(cl.log.segments) > 1, "records should span several segments"
    end = cl.end
    last_seg = cl.log.segments[-1]
    cl.close()
    # a torn write: half of a record at the tail
    with open(tmp_path / "cl" / f"{last_seg.base:020d}.seg", "ab") as fh:
        fh.write(records.encode_topic(99, "torn" * 30)[:50])
    cl = CommitLog(tmp_path / "cl", segment_bytes=4096)
    assert cl.end == end + 50
    seen = [pos for pos, _, _ in cl.scan(0)]
    assert seen == positions
    assert cl.valid_end == end
    cl.truncate(cl.valid_end)
    assert cl.end == end
    assert cl.append(records.encode_topic(100, "after"), T) == end


def _file_sizes(path: Path) -> list[int]:
    return [f.stat().st_size for f in sorted(path.glob("*.seg"))]


def test_warm_tails_are_zeros_past_the_end_that_sealing_close_and_recovery_cut(
    tmp_path: Path,
) -> None:
    """A log with a warm tail: only the newest file is longer than what was written;
    every range handed out for warming lies in it; a kill leaves zeros that the
    reopened log's scan stops at, and ``warm_tail`` tells them from data."""
    path = tmp_path / "cl"
    woken: list[int] = []
    cl = CommitLog(path, 4096, warm_bytes=1024, on_cold=lambda: woken.append(1))
    positions = [cl.append(records.encode_topic(i, f"topic-{i}" * 20), T) for i in range(60)]
    segs = cl.log.segments
    assert len(segs) > 2 and woken
    sizes = _file_sizes(path)
    assert sizes[:-1] == [s.size for s in segs[:-1]], "sealed files are exact"
    assert sizes[-1] > segs[-1].size, "the newest file has a warm tail"
    for fd, start, end in cl.log.take_cold():
        assert 0 < start < end
        warm_pages(fd, start, end)
    assert cl.log.take_cold() == []
    end, written = cl.end, segs[-1].size
    cl.close(cut_tail=False)  # as a kill leaves it

    cl = CommitLog(path, 4096, warm_bytes=1024)
    assert cl.end > end
    assert [pos for pos, _, _ in cl.scan(0)] == positions
    assert cl.valid_end == end
    assert cl.log.warm_tail(end) == cl.end - end
    assert cl.log.warm_tail(positions[-1]) == cl.end - end, "a record is data"
    cl.truncate(cl.valid_end)
    assert cl.end == end and _file_sizes(path)[-1] == written
    assert cl.append(records.encode_topic(100, "after"), T) == end
    cl.close()
    assert _file_sizes(path)[-1] == written + len(records.encode_topic(100, "after"))
    warm_pages(10_000, 0, 100)  # a closed descriptor: nothing to read, no error
    warm_pages(10_000, 100, 100)  # an empty range


def test_a_kill_leaves_a_warm_tail_that_recovery_keeps_and_a_torn_record_that_it_cuts(
    tmp_path: Path,
) -> None:
    """Only zeros past the last record: they stay as the warm tail (no write, no
    fsync). A torn record in front of them: it is data, and the cut takes both."""
    path = tmp_path / "cl"
    cl = CommitLog(path, 1 << 20, warm_bytes=8192)
    positions = [cl.append(records.encode_topic(i, "t" * 50), T) for i in range(20)]
    end, length = cl.end, _file_sizes(path)[-1]
    cl.close(cut_tail=False)

    cl = CommitLog(path, 1 << 20, warm_bytes=8192)
    assert [p for p, _, _ in cl.scan(0)] == positions
    zeros = cl.log.warm_tail(cl.valid_end)
    assert zeros == cl.end - end > 0
    cl.truncate(cl.valid_end, zeros=zeros)
    assert cl.end == end and _file_sizes(path)[-1] == length, "the tail is kept"
    assert cl.append(records.encode_topic(99, "next"), T) == end
    end = cl.end
    cl.close(cut_tail=False)
    torn = records.encode_topic(100, "torn" * 10)[:30]
    (only,) = path.glob("*.seg")  # one file, base 0: a position is its offset
    with open(only, "r+b") as fh:
        fh.seek(end)
        fh.write(torn)

    cl = CommitLog(path, 1 << 20, warm_bytes=8192)
    list(cl.scan(0))
    assert cl.valid_end == end
    zeros = cl.log.warm_tail(cl.valid_end)
    assert zeros == cl.end - end - len(torn.rstrip(b"\0"))
    cl.truncate(cl.valid_end, zeros=zeros)
    assert cl.end == end and _file_sizes(path)[-1] == end, "torn bytes and tail cut"


def test_commitlog_flipped_byte_stops_the_scan_there(tmp_path: Path) -> None:
    cl, positions = _fill_commitlog(tmp_path / "cl", 10)
    seg = cl.log.segments[0]
    cl.close()
    victim = positions[4]
    with open(tmp_path / "cl" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(victim - seg.base + 20)
        b = fh.read(1)
        fh.seek(victim - seg.base + 20)
        fh.write(bytes([b[0] ^ 0xFF]))
    cl = CommitLog(tmp_path / "cl", segment_bytes=4096)
    assert [p for p, _, _ in cl.scan(0)] == positions[:4]
    assert cl.valid_end == victim
    with pytest.raises(CorruptData):
        cl.read(victim)
    assert isinstance(cl.read(positions[3])[0], records.TopicDef)


def test_timerlog_torn_tail_and_flipped_byte(tmp_path: Path) -> None:
    tl = TimerLog(tmp_path / "tl", segment_bytes=1 << 20)
    recs = [TimerRecord(-1, i, i * 10, 90, 1, T + i, i, 0, 0, 0) for i in range(10)]
    first = tl.append(b"".join(r.encode() for r in recs), T)
    seg = tl.log.segments[0]
    tl.close()
    with open(tmp_path / "tl" / f"{seg.base:020d}.seg", "ab") as fh:
        fh.write(recs[0].encode()[:40])  # torn
    tl = TimerLog(tmp_path / "tl", segment_bytes=1 << 20)
    assert [r for _, r in tl.scan(0)] == recs
    assert tl.valid_end == first + 640
    with open(tmp_path / "tl" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(first - seg.base + 64 * 6 + 17)
        fh.write(b"\x99")
    assert len(list(tl.scan(0))) == 6
    with pytest.raises(CorruptData):
        tl.read(first + 64 * 6)


def test_segments_reject_a_foreign_file(tmp_path: Path) -> None:
    d = tmp_path / "cl"
    d.mkdir()
    (d / f"{0:020d}.seg").write_bytes(b"NOPE" + bytes(60))
    with pytest.raises(CorruptData, match="bad magic"):
        CommitLog(d, segment_bytes=4096)


def test_deleting_a_segment_leaves_a_readers_snapshot_of_the_old_ones_whole(
    tmp_path: Path,
) -> None:
    """A receive reads bodies without the engine lock while retention deletes the
    oldest segment: the lists a read already took must not shift under it."""
    cl = CommitLog(tmp_path / "cl", segment_bytes=4096)
    positions = [cl.append(_message(i, 300), T) for i in range(40)]
    log = cl.log
    taken = log._live  # what a read in progress holds
    segs, bases = list(taken[0]), list(taken[1])
    log.delete_segment(bases[0])
    assert (taken[0], taken[1]) == (segs, bases), "the old lists are left as they were"
    assert log._live[1] == bases[1:] and log.start == bases[1] + 32
    live = np.asarray([p for p in positions if p >= log.start], dtype=np.int64)
    _check_batch_read(cl, live.tolist())
    assert not cl.read_messages(np.asarray(positions[:2], dtype=np.int64)).ok.any()
    cl.close()


def test_wheel_slots_laps_and_precision_guard(tmp_path: Path) -> None:
    w = TimerWheel(tmp_path / "wheel", slots=8, precision_ms=100, now_ms=T)
    assert w.get(3) is None
    w.put(3, 100, 200, 2)
    assert w.get(3) == (100, 200, 2)
    assert w.get(11) is None, "same index, other lap: reads as empty"
    w.put(11, 300, 300, 1)
    assert w.get(3) is None
    assert [s for s, _ in w.occupied()] == [11]
    w.flush()
    w.close()
    w = TimerWheel(tmp_path / "wheel", slots=8, precision_ms=100, now_ms=T)
    assert w.get(11) == (300, 300, 1)
    w.close()
    with pytest.raises(CorruptData, match="precision"):
        TimerWheel(tmp_path / "wheel", slots=8, precision_ms=1000, now_ms=T)


def test_state_map_batch_reads_and_writes_match_one_by_one(tmp_path: Path, batch_path: str) -> None:
    sm = StateMap(tmp_path / "state", T)
    seqs = np.array([3, statemap.CHUNK + 9, 3, 70, 2 * statemap.CHUNK], dtype=np.uint64)
    sm.set_many(seqs[:2], MessageState.CANCELLED)
    sm.set_many(seqs[3:], MessageState.DELIVERED)
    assert sm.raw_many(seqs).tolist() == [sm.raw(int(s)) for s in seqs.tolist()]
    assert [MessageState(v) for v in sm.raw_many(seqs).tolist()] == [
        MessageState.CANCELLED,
        MessageState.CANCELLED,
        MessageState.CANCELLED,
        MessageState.DELIVERED,
        MessageState.DELIVERED,
    ]
    assert sm.raw_many(np.zeros(0, dtype=np.uint64)).tolist() == []
    sm.close()


def test_state_map_is_sparse_and_persistent(tmp_path: Path) -> None:
    sm = StateMap(tmp_path / "state", T)
    assert sm.get(12345) is MessageState.PENDING
    sm.set(12345, MessageState.CANCELLED)
    sm.set(5_000_000, MessageState.DELIVERED)  # second chunk
    sm.flush()
    sm.close()
    sm = StateMap(tmp_path / "state", T)
    assert sm.get(12345) is MessageState.CANCELLED
    assert sm.get(5_000_000) is MessageState.DELIVERED
    assert sm.get(12346) is MessageState.PENDING
    assert len(os.listdir(tmp_path / "state")) == 2
    sm.close()


def _entries(arr: Any) -> list[ReadyEntry]:
    fields = ("seq", "body_pos", "body_size", "deliver_at_ms", "delivered_ms")
    return [ReadyEntry(*row) for row in arr[list(fields)].tolist()]


def test_ready_index_holds_appends_in_memory_until_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "1.idx"
    idx = ReadyIndex(path, 1, T)
    entries = [ReadyEntry(i, i * 100, 90, T + i, T + i + 1) for i in range(12)]
    idx.append(entries[:5])
    idx.write_tail()  # written to the file, as a checkpoint does
    idx.append(entries[5:8])  # only in memory
    assert _entries(idx.read_many(3, 4)) == entries[3:7], "a read spanning file and tail"
    assert _entries(idx.read_many(6, 10)) == entries[6:8]
    # a crash now loses the tail (recovery re-appends it from the DELIVER records)
    assert ReadyIndex(path, 1, T).length == 5
    idx.truncate(7)
    assert idx.length == 7 and _entries(idx.read_many(0, 10)) == entries[:7]
    monkeypatch.setattr(readyindex, "_TAIL_MAX", 3)
    idx.append(entries[7:9])  # 4 waiting: written without a sync
    assert ReadyIndex(path, 1, T).length == 9
    idx.truncate(4)  # into the written part
    idx.close()
    idx = ReadyIndex(path, 1, T)
    assert _entries(idx.read_many(0, 10)) == entries[:4]
    idx.close()


def test_ready_index_reads_the_block_written_last_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every range reads the same whether it lies in the file, in the block written
    last (kept in memory), in the tail or across them, through several writes
    (the two buffers take turns) and a truncate into the written part."""
    monkeypatch.setattr(readyindex, "_TAIL_MAX", 4)
    idx = ReadyIndex(tmp_path / "1.idx", 1, T)
    entries = [ReadyEntry(i, i * 100, 90, T + i, T + i + 1) for i in range(30)]
    reads = 0

    def check_every_range() -> None:
        nonlocal reads
        for start in range(idx.length):
            for count in (1, 3, 7, 30):
                want = entries[start : min(start + count, idx.length)]
                assert _entries(idx.read_many(start, count)) == want, (start, count)
                reads += 1

    for chunk in ([0, 1, 2], [3, 4], [5, 6, 7, 8, 9], [10], [11, 12, 13, 14, 15, 16]):
        idx.append([entries[i] for i in chunk])
        check_every_range()
    assert idx.length == 17 and reads > 100
    memory = len(idx._recent) + idx.length - idx._written
    assert memory >= 6, "the last written block and the tail are both in memory"
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: pytest.fail("read the file"))
    start = idx._written - len(idx._recent)
    assert start < idx._written == 17
    assert _entries(idx.read_many(start, 30)) == entries[start:17]
    monkeypatch.setattr(os, "pread", pread)
    idx.truncate(8)  # into the written part: the block kept in memory is no longer the file's
    assert _entries(idx.read_many(0, 30)) == entries[:8]
    idx.append(entries[8:12])
    check_every_range()
    idx.close()


@pytest.mark.parametrize("seed", range(12))
def test_ready_index_matches_a_list_through_appends_reads_truncates_and_reopens(
    tmp_path: Path, seed: int
) -> None:
    """Random appends (some past the tail's write-out size), tail writes, reads of
    any range, truncates and reopens (after a clean close, or as a kill leaves it:
    the unwritten tail gone) agree with a plain list."""
    rng = random.Random(seed)
    path = tmp_path / "1.idx"
    idx = ReadyIndex(path, 1, T)
    model: list[int] = []
    for _ in range(300):
        r = rng.random()
        if r < 0.5:
            n = rng.choice([1, 3, 50, 500, 3000, 9000])
            entries = np.zeros(n, dtype=readyindex.ENTRY_DTYPE)
            entries["seq"] = np.arange(len(model), len(model) + n) + 10 * seed
            assert idx.append_many(entries) == len(model)
            model.extend(entries["seq"].tolist())
        elif r < 0.6:
            idx.write_tail()
        elif r < 0.65 and model:
            keep = rng.randrange(len(model) + 1)
            idx.truncate(keep)
            del model[keep:]
        elif r < 0.7:
            idx.close(write_tail=rng.random() < 0.5)
            idx = ReadyIndex(path, 1, T)
            assert idx.length <= len(model)
            del model[idx.length :]  # a kill loses the tail not yet written
        elif model:
            at, count = rng.randrange(len(model)), rng.randint(1, 5000)
            assert idx.read_many(at, count)["seq"].tolist() == model[at : at + count]
        assert idx.length == len(model)
    idx.close()


def test_ready_index_append_read_truncate(tmp_path: Path) -> None:
    idx = ReadyIndex(tmp_path / "1.idx", 1, T)
    entries = [ReadyEntry(i, i * 100, 90, T + i, T + i + 1) for i in range(5)]
    assert idx.append(entries[:3]) == 0
    assert idx.append(entries[3:]) == 3
    assert _entries(idx.read_many(1, 3)) == entries[1:4]
    idx.truncate(2)
    idx.close()
    idx = ReadyIndex(tmp_path / "1.idx", 1, T)
    assert idx.length == 2
    assert _entries(idx.read_many(0, 10)) == entries[:2]
    idx.close()


def test_checkpoint_is_atomic_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    assert Checkpoint.load(path) is None
    ck = Checkpoint(shard=0, epoch=3, replay_from=99, groups={"1": {"g": GroupCheckpoint(5, [7])}})
    ck.save(path)
    assert Checkpoint.load(path) == ck
    assert not path.with_suffix(".tmp").exists()
    path.write_text(path.read_text().replace('"replay_from":99', '"replay_from":98'))
    with pytest.raises(CorruptData, match="CRC"):
        Checkpoint.load(path)


class _Crash(Exception):
    """Stands for the process dying at one system call."""


class _CrashAt:
    """Make the ``n``-th file system call from now raise ``_Crash`` (a kill there:
    what was done before it stays on disk, nothing after it happens). Descriptors
    opened meanwhile are closed when the block ends, as the kernel does on exit."""

    CALLS = ("open", "write", "pwrite", "ftruncate", "fsync", "rename", "replace")

    def __init__(self, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
        self.monkeypatch, self.left, self.crashed = monkeypatch, n, False
        self.opened: list[int] = []

    def __enter__(self) -> _CrashAt:
        for name in self.CALLS:
            self.monkeypatch.setattr(os, name, self._wrap(getattr(os, name), name == "open"))
        return self

    def _wrap(self, real: Any, is_open: bool) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.left -= 1
            if self.left == 0:
                self.crashed = True
                raise _Crash
            out = real(*args, **kwargs)
            if is_open:
                self.opened.append(out)
            return out

        return call

    def __exit__(self, *exc: object) -> bool:
        self.monkeypatch.undo()
        for fd in self.opened:
            with contextlib.suppress(OSError):  # the code under test may have closed it
                os.close(fd)
        return exc[0] is _Crash


@pytest.mark.parametrize("kind", ["segment", "wheel", "state", "ready"])
def test_a_kill_at_any_step_of_creating_a_data_file_leaves_it_whole_or_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Regression: a new segment cut short before its header was written made every
    later start fail ("file shorter than its header")."""
    for n in range(1, 50):
        d = tmp_path / str(n)
        d.mkdir()
        if kind == "segment":  # a roll: the first segment exists, the second is made
            cl = CommitLog(d / "cl", segment_bytes=4096)
            cl.append(_message(1, 4000), T)
            with _CrashAt(monkeypatch, n) as crash:
                cl.append(_message(2, 100), T)
            with contextlib.suppress(OSError):  # its descriptors, as the exit closes them
                cl.close()
            cl = CommitLog(d / "cl", segment_bytes=4096)  # what a restart opens
            kinds = [type(f) for _, f, _ in cl.scan(0)]
            assert kinds in ([records.Message], [records.Message] * 2)
            assert cl.append(_message(3, 100), T) > 0
            cl.close()
        elif kind == "wheel":
            with _CrashAt(monkeypatch, n) as crash:
                TimerWheel(d / "wheel", slots=8, precision_ms=100, now_ms=T).close()
            w = TimerWheel(d / "wheel", slots=8, precision_ms=100, now_ms=T)
            assert list(w.occupied()) == [] and w.get(3) is None
            w.close()
        elif kind == "state":
            with _CrashAt(monkeypatch, n) as crash:
                sm = StateMap(d / "state", T)
                sm.set(7, MessageState.CANCELLED)  # makes the first chunk
                sm.close()
            sm = StateMap(d / "state", T)
            assert sm.get(7) in (MessageState.PENDING, MessageState.CANCELLED)
            sm.close()
        else:
            with _CrashAt(monkeypatch, n) as crash:
                ReadyIndex(d / "1.idx", 1, T).close()
            assert ReadyIndex(d / "1.idx", 1, T).length == 0
        if not crash.crashed:
            assert n > 2, "creating a file takes several calls"
            return
    raise AssertionError("creation never finished")
