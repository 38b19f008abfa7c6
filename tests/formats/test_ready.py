"""Ready-queue entries: golden bytes, the documented check, batches."""

from __future__ import annotations

import struct

import numpy as np

from delayq.formats import ready
from delayq.formats.ready import ENTRY_SIZE, ReadyEntry

T = 1_700_000_000_000

GOLDEN_READY = (
    "49594452edb39b560700000000000000d2040000000000005a00000000000000d26ce5cf8b010000d36ce5"
    "cf8b010000"
)


def test_ready_entry_golden_bytes_and_round_trip() -> None:
    entry = ReadyEntry(7, 1234, 90, T + 1234, T + 1235)
    assert entry.encode().hex() == GOLDEN_READY
    raw = bytes.fromhex(GOLDEN_READY)
    assert ENTRY_SIZE == len(raw) == 48
    assert ready.CODEC.check_many(raw, 1) == 1
    row = np.frombuffer(raw, dtype=ready.ENTRY_DTYPE)[list(ReadyEntry._fields)]
    assert ReadyEntry(*row.tolist()[0]) == entry
    assert ready.CODEC.decode(raw) == (7, 1234, 90, T + 1234, T + 1235)
    words = struct.unpack(f"<{len(raw) // 4}I", raw)  # the check: the documented weighted sum
    weighted = sum(w * ((2 * i + 1) * 0x9E3779B1) for i, w in enumerate(words[2:]))
    assert words[1] == (0x5F3759DF + weighted) % 2**32
    assert words[0] == 0x52445949


def test_ready_batch_encoding_is_byte_identical_to_one_by_one() -> None:
    rows = [ReadyEntry(i, i * 100, 90, T + i, T + i + 1) for i in range(20)]
    recs = np.zeros(len(rows), dtype=ready.ENTRY_DTYPE)
    for name in ReadyEntry._fields:
        recs[name] = [getattr(r, name) for r in rows]
    encoded = ready.CODEC.encode_many(recs)
    assert encoded == b"".join(r.encode() for r in rows)
    bad = bytearray(encoded)
    bad[5 * ENTRY_SIZE + 20] ^= 4
    assert ready.CODEC.check_many(bytes(bad), len(rows)) == 5
