"""TimerLog records: golden bytes, the documented check, flipped bits, batches."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from delayq.errors import CorruptData
from delayq.formats import timer
from delayq.formats.timer import TIMER_RECORD_SIZE, TimerRecord, decode_timer

T = 1_700_000_000_000

GOLDEN_TIMER = (
    "51524c5457b95a68ffffffffffffffff01f1536500000000d2040000000000005a00000003000000d26ce5"
    "cf8b01000007000000000000000000000000000000"
)


def test_timer_golden_bytes_and_round_trip() -> None:
    rec = TimerRecord(-1, 1_700_000_001, 1234, 90, 3, T + 1234, 7, 0, 0, 0)
    assert rec.encode().hex() == GOLDEN_TIMER
    assert decode_timer(bytes.fromhex(GOLDEN_TIMER)) == rec
    assert decode_timer(b"x" + bytes.fromhex(GOLDEN_TIMER), 1) == rec
    assert TIMER_RECORD_SIZE == len(GOLDEN_TIMER) // 2 == 64
    raw = bytes.fromhex(GOLDEN_TIMER)  # the check is the documented weighted sum
    words = struct.unpack(f"<{len(raw) // 4}I", raw)
    weighted = sum(w * ((2 * i + 1) * 0x9E3779B1) for i, w in enumerate(words[2:]))
    assert words[1] == (0x5F3759DF + weighted) % 2**32
    assert words[0] == 0x544C5251
    with pytest.raises(CorruptData, match="truncated"):
        decode_timer(raw[:63])


@pytest.mark.parametrize("index", range(4, 64, 3))
def test_a_flipped_bit_anywhere_in_a_timer_record_is_detected(index: int) -> None:
    bad = bytearray(bytes.fromhex(GOLDEN_TIMER))
    bad[index] ^= 1 << (index % 8)
    with pytest.raises(CorruptData, match=r"checksum|magic"):
        decode_timer(bytes(bad))
    assert timer.CODEC.check_many(bytes.fromhex(GOLDEN_TIMER) + bytes(bad), 2) == 1


def test_the_timer_check_misses_top_bit_flips_in_two_words_as_documented() -> None:
    """The blind spot ``fixedrecord`` documents: 2**31 times two odd weights is 0 mod 2**32."""
    bad = bytearray(bytes.fromhex(GOLDEN_TIMER))
    bad[8 + 3] ^= 0x80  # the top bit of the first checked word (little-endian) ...
    bad[16 + 3] ^= 0x80  # ... and of the third
    assert timer.CODEC.check_many(bytes(bad), 1) == 1
    bad[16 + 3] ^= 0x80  # one of them alone is seen
    assert timer.CODEC.check_many(bytes(bad), 1) == 0


def test_timer_batch_encoding_is_byte_identical_to_one_by_one() -> None:
    rows = [
        TimerRecord(i - 1, 17 + i % 3, 1234 * i, 90, 3, T + i, 7 + i, i, i % 2, i % 2)
        for i in range(50)
    ]
    recs = np.zeros(len(rows), dtype=timer.RECORD_DTYPE)
    for name in TimerRecord._fields:
        recs[name] = [getattr(r, name) for r in rows]
    encoded = timer.encode_many(recs)
    assert encoded == b"".join(r.encode() for r in rows)
    assert timer.CODEC.valid(encoded, len(rows)).all()
    back = np.frombuffer(encoded, dtype=timer.RECORD_DTYPE)[list(TimerRecord._fields)]
    assert [TimerRecord(*r) for r in back.tolist()] == rows
