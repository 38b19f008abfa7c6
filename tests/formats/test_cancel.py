"""CANCELS and (old) CANCEL records: golden bytes, both encoder branches, round trips."""

from __future__ import annotations

import crc32c
import numpy as np
import pytest

from delayq.errors import CorruptData
from delayq.formats import cancel
from delayq.formats.cancel import Cancel, Cancels, decode_cancel, decode_cancels, encode_cancels
from delayq.formats.commitlog import decode

T = 1_700_000_000_000

GOLDEN_CANCEL = (
    "30000000568655e7020100000700000000000000d20400000000000003000000f469e5cf8b010000d26ce5"
    "cf8b010000"
)
GOLDEN_CANCELS = (
    "5c000000b51f8d7d07010000f469e5cf8b01000002000000000000000700000000000000d2040000000000"
    "000300000000000000d26ce5cf8b01000008000000000000002e160000000000000400000000000000d36c"
    "e5cf8b010000"
)


@pytest.mark.parametrize("few", [1 << 30, 0])  # entries packed one by one; as one array
def test_cancels_golden_bytes_and_round_trip(few: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cancel, "FEW", few)
    cancels = encode_cancels(
        np.array([7, 8], dtype=np.uint64),
        np.array([1234, 5678]),
        np.array([3, 4]),
        T + 500,
        np.array([T + 1234, T + 1235]),
    )
    assert cancels.hex() == GOLDEN_CANCELS
    want = Cancels(T + 500, (7, 8), (1234, 5678), (3, 4), (T + 1234, T + 1235))
    assert decode(cancels)[0] == want
    assert decode_cancels(bytes.fromhex(GOLDEN_CANCELS)) == (want, len(cancels))


def test_an_old_cancel_record_is_still_read() -> None:
    cancel_rec = Cancel(7, 1234, 3, T + 500, T + 1234)  # no longer written: still read
    golden = bytes.fromhex(GOLDEN_CANCEL)
    assert decode(golden)[0] == cancel_rec
    assert decode_cancel(golden) == (cancel_rec, len(golden))
    with pytest.raises(CorruptData, match="not CANCELS"):
        decode_cancels(golden)


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
        monkeypatch.setattr(cancel, "FEW", few)
        encoded[few] = encode_cancels(cols[0], cols[1], cols[2], T + 500, cols[3])
    assert encoded[0] == encoded[1 << 30]
    got, size = decode(encoded[0] + b"junk after")
    assert size == len(encoded[0]) == 12 + 16 + 32 * n
    assert got == Cancels(T + 500, *(tuple(c.tolist()) for c in cols))
    bad = bytearray(encoded[0])
    bad[20:24] = (n + 1).to_bytes(4, "little")  # a count the length does not hold
    bad[4:8] = crc32c.crc32c(bytes(bad[8:])).to_bytes(4, "little")
    with pytest.raises(CorruptData, match="entries"):
        decode(bytes(bad))
