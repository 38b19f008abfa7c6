"""The frame of every CommitLog record: golden bytes, and what its check refuses."""

from __future__ import annotations

import crc32c
import pytest

from delayq.errors import CorruptData
from delayq.formats.frame import (
    FRAME,
    VERSION,
    RecordType,
    frame,
    frame_length,
    open_frame,
    open_record,
)

GOLDEN_FRAMED = "1000000061e64e570601000000000000"  # a TOPIC record: id 0, name ""


def test_frame_golden_bytes_and_check() -> None:
    rec = frame(RecordType.TOPIC, bytes(4))
    assert rec.hex() == GOLDEN_FRAMED
    assert (FRAME, VERSION) == (12, 1)
    assert int.from_bytes(rec[4:8], "little") == crc32c.crc32c(rec[8:])
    assert open_frame(rec, 0) == (RecordType.TOPIC, 16)
    assert open_frame(b"xx" + rec, 2) == (RecordType.TOPIC, 16)
    assert open_record(rec, 0, RecordType.TOPIC) == 16
    with pytest.raises(CorruptData, match="is not ACK"):
        open_record(rec, 0, RecordType.ACK)
    assert frame_length(rec) == 16 and frame_length(rec, 14) == 0 and frame_length(b"") == 0


def _recrc(rec: bytearray) -> bytes:
    rec[4:8] = crc32c.crc32c(bytes(rec[8:])).to_bytes(4, "little")
    return bytes(rec)


def test_the_frame_check_refuses_short_torn_corrupt_and_foreign_records() -> None:
    rec = bytes.fromhex(GOLDEN_FRAMED)
    with pytest.raises(CorruptData, match="truncated"):
        open_frame(rec[:11], 0)
    with pytest.raises(CorruptData, match="truncated"):
        open_frame(rec, -1)
    with pytest.raises(CorruptData, match="out of range"):
        open_frame(rec[:15], 0)  # torn: the length says more than there is
    short = bytearray(rec)
    short[0:4] = (11).to_bytes(4, "little")
    with pytest.raises(CorruptData, match="out of range"):
        open_frame(bytes(short), 0)
    flipped = bytearray(rec)
    flipped[13] ^= 1
    with pytest.raises(CorruptData, match="CRC"):
        open_frame(bytes(flipped), 0)
    newer = bytearray(rec)
    newer[9] = 2
    with pytest.raises(CorruptData, match="version 2"):
        open_frame(_recrc(newer), 0)
