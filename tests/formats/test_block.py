"""BLOCK and LOADED records: golden bytes, round trips, damaged records refused."""

from __future__ import annotations

import pytest

from delayq.errors import CorruptData
from delayq.formats.block import decode_block, decode_loaded, encode_block, encode_loaded
from delayq.formats.commitlog import decode
from delayq.formats.frame import RecordType, frame
from delayq.formats.messagecolumns import decode_messages
from tests.formats.conftest import OneMessage

T = 1_700_000_000_000

GOLDEN_BLOCK = (  # job "j", block [T, T+1000), one ROLL copy of seq 7 (SCHEDULE at 4200)
    "74000000a33a8ff7090100000068e5cf8b010000e86be5cf8b0100000568e5cf8b0100000100000001000000"
    "6a47000000d9b643ef030100000700000000000000d26ce5cf8b0100000068e5cf8b01000002000000030000"
    "000400010000000000000000000000000068100000000000006b6869"
)
GOLDEN_LOADED = "1c000000396b94b00a0100000068e5cf8b0100000568e5cf8b010000"


def roll_copy(one_message: OneMessage) -> bytes:
    return one_message(RecordType.ROLL, 7, T + 1234, T, 2, 3, 4, b"k", b"", b"hi", 0, 4200)


def test_block_golden_bytes_and_round_trip(one_message: OneMessage) -> None:
    copy = roll_copy(one_message)
    rec = encode_block(T, T + 1000, T + 5, "j", copy, 1)
    assert rec.hex() == GOLDEN_BLOCK
    block, length = decode_block(bytes.fromhex(GOLDEN_BLOCK))
    assert length == len(rec)
    assert (block.start_ms, block.end_ms, block.written_ms, block.job) == (T, T + 1000, T + 5, "j")
    assert block.copies == copy and block.offsets.tolist() == [0]
    assert block.heads["seq"].tolist() == [7] and block.heads["origin_pos"].tolist() == [4200]
    msg, _ = decode_messages(block.copies, block.offsets).record(0)
    assert (msg.type, msg.body, msg.key, msg.roll_count) == (RecordType.ROLL, b"hi", "k", 4)
    again, _ = decode(rec)
    assert isinstance(again, type(block)) and again.copies == copy


def test_a_block_of_several_copies_and_an_empty_one(one_message: OneMessage) -> None:
    copies = roll_copy(one_message) + one_message(
        RecordType.ROLL, 9, T + 9, T, 2, 3, 1, b"", b"", b"x" * 300, 0, 99
    )
    block, _ = decode_block(encode_block(T, T + 10, T, "job", copies, 2))
    assert block.heads["seq"].tolist() == [7, 9]
    assert block.offsets.tolist() == [0, len(roll_copy(one_message))]
    empty, _ = decode_block(encode_block(T, T + 10, T, "job", b"", 0))
    assert len(empty.offsets) == 0


def test_damaged_blocks_are_refused(one_message: OneMessage) -> None:
    copy = roll_copy(one_message)
    data = bytearray(bytes.fromhex(GOLDEN_BLOCK))
    data[-1] ^= 1
    with pytest.raises(CorruptData, match="CRC"):
        decode_block(bytes(data))
    with pytest.raises(CorruptData, match="2 copies announced"):
        decode_block(encode_block(T, T + 1, T, "j", copy, 2))
    with pytest.raises(CorruptData, match="not a ROLL"):
        sched = one_message(RecordType.SCHEDULE, 7, T, T, 1, 1, 0, b"", b"", b"x")
        decode_block(encode_block(T, T + 1, T, "j", sched, 1))
    with pytest.raises(CorruptData, match="not BLOCK"):
        decode_block(frame(RecordType.LOADED, b"\0" * 16))


def test_loaded_golden_bytes_and_round_trip() -> None:
    assert encode_loaded(T, T + 5).hex() == GOLDEN_LOADED
    loaded, length = decode_loaded(bytes.fromhex(GOLDEN_LOADED))
    assert (loaded.start_ms, loaded.written_ms, length) == (T, T + 5, 28)
    assert decode(bytes.fromhex(GOLDEN_LOADED))[0] == loaded
    with pytest.raises(CorruptData, match="LOADED record of"):
        decode_loaded(frame(RecordType.LOADED, b"\0" * 8))
