"""``decode`` of a record of any type: routing, and the errors it raises."""

from __future__ import annotations

import crc32c
import numpy as np
import pytest

from delayq.errors import CorruptData
from delayq.formats.ack import encode_ack
from delayq.formats.cancel import encode_cancels
from delayq.formats.commitlog import decode, record_starts, unchecked_schedules
from delayq.formats.frame import RecordType
from delayq.formats.topic import encode_topic


def test_records_of_every_type_end_to_end_decode_in_turn(schedule: bytes) -> None:
    one = np.ones(1, dtype=np.int64)
    recs = [
        schedule,
        encode_topic(3, "t"),
        encode_ack(3, "g", [5]),
        encode_cancels(one, one, one, 9, one),
    ]
    data = b"".join(recs)
    at = 0
    kinds = []
    for rec in recs:
        got, size = decode(data, at)
        assert size == len(rec)
        kinds.append(type(got).__name__)
        at += size
    assert kinds == ["Message", "TopicDef", "Ack", "Cancels"]


def test_an_unknown_type_is_refused_after_the_frame_check() -> None:
    rec = bytearray(encode_topic(3, "t"))
    rec[8] = 42
    with pytest.raises(CorruptData, match="CRC"):
        decode(bytes(rec))  # the frame's check first
    rec[4:8] = crc32c.crc32c(bytes(rec[8:])).to_bytes(4, "little")
    with pytest.raises(CorruptData, match="unknown record type 42"):
        decode(bytes(rec))
    with pytest.raises(CorruptData, match="truncated"):
        decode(bytes(rec)[:5])
    with pytest.raises(CorruptData, match="truncated"):
        decode(b"")
    assert RecordType(1) is RecordType.SCHEDULE


def test_record_starts_chain_frames_and_unchecked_schedules_pick_schedules(
    schedule: bytes,
) -> None:
    topic = encode_topic(3, "t")
    recs = [topic] + [schedule] * 5 + [topic, schedule]
    data = b"".join(recs) + b"\0" * 7  # zeros past the last record (a warm tail)
    starts = [sum(map(len, recs[:i])) for i in range(len(recs))]
    assert record_starts(data, 0).tolist() == starts
    assert record_starts(data, starts[3]).tolist() == starts[3:]
    assert record_starts(data[:-8], 0).tolist() == starts[:-1], "a torn last record"
    flipped = bytearray(data)
    flipped[starts[2] + 80] ^= 1  # a body byte: found all the same (no CRC here)
    offsets, heads = unchecked_schedules(bytes(flipped), 0)
    assert offsets.tolist() == starts[1:6] + starts[7:]
    assert heads["seq"].tolist() == [7] * 6
    assert heads.tobytes() == schedule[:68] * 6


def test_record_starts_over_mixed_lengths_and_long_runs() -> None:
    rng = np.random.default_rng(7)
    recs = []
    for _ in range(300):  # stretches of one length (a batch) between mixed ones
        if rng.random() < 0.3:
            recs += [encode_topic(3, "r" * int(rng.integers(1, 9)))] * int(rng.integers(2, 200))
        else:
            recs.append(encode_topic(3, "m" * int(rng.integers(1, 40))))
    data = b"".join(recs) + b"\0" * 5
    starts = np.cumsum([0] + [len(r) for r in recs[:-1]]).tolist()
    assert record_starts(data, 0).tolist() == starts
    assert record_starts(data, starts[100]).tolist() == starts[100:]
