"""TimerWheel slot entries: golden bytes, and the array view agrees with them."""

from __future__ import annotations

import numpy as np

from delayq.formats.wheel import (
    DATA_OFFSET,
    EMPTY,
    SLOT,
    SLOT_DTYPE,
    SLOT_MAGIC,
    SLOT_NUM,
    SlotEntry,
)

GOLDEN_SLOT = "03000000000000006400000000000000c80000000000000002000000544f4c53"
GOLDEN_EMPTY = "ffffffffffffffffffffffffffffffffffffffffffffffff0000000000000000"


def test_slot_golden_bytes_and_round_trip() -> None:
    assert SLOT.pack(3, 100, 200, 2, SLOT_MAGIC).hex() == GOLDEN_SLOT
    assert EMPTY.hex() == GOLDEN_EMPTY
    raw = bytes.fromhex(GOLDEN_SLOT)
    assert SLOT.unpack(raw) == (3, 100, 200, 2, 0x534C4F54)
    assert SLOT_NUM.unpack_from(raw) == (3, 2)
    row = np.frombuffer(raw + EMPTY, dtype=SLOT_DTYPE)
    assert row[["slot", "first", "last", "num"]].tolist() == [(3, 100, 200, 2), (-1, -1, -1, 0)]
    assert SlotEntry(*SLOT.unpack(raw)[1:4]) == (100, 200, 2)
    assert DATA_OFFSET == 64 and SLOT_DTYPE.itemsize == 32
