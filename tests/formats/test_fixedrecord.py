"""FixedCodec: a declared codec's golden bytes, the layout it derives, its checks."""

from __future__ import annotations

import numpy as np
import pytest

from delayq.errors import CorruptData
from delayq.formats.fixedrecord import CHECK_SEED, FixedCodec, checksums

GOLDEN_FIXED = "04030201c64899dcfeffffffffffffff07000000ffff0900"
CODEC = FixedCodec(0x01020304, [("a", "q"), ("b", "I"), ("c", "H"), ("d", "B"), ("p", "x")], "t")


def test_a_declared_codec_golden_bytes_and_round_trip() -> None:
    assert CODEC.size == 24 and CODEC.names == ["a", "b", "c", "d"]
    assert CODEC.encode(-2, 7, 65535, 9).hex() == GOLDEN_FIXED
    raw = bytes.fromhex(GOLDEN_FIXED)
    assert CODEC.decode(raw) == (-2, 7, 65535, 9)
    assert CHECK_SEED == 0x5F3759DF
    assert int(checksums(raw, CODEC.size)[0]) == int.from_bytes(raw[4:8], "little")
    recs = np.zeros(3, dtype=CODEC.dtype)
    recs["a"], recs["b"], recs["c"], recs["d"] = -2, 7, 65535, 9
    assert CODEC.encode_many(recs) == raw * 3
    assert CODEC.valid(raw * 3, 3).tolist() == [True] * 3


def test_a_wrong_magic_or_check_is_refused() -> None:
    raw = bytearray.fromhex(GOLDEN_FIXED)
    raw[0] ^= 1
    with pytest.raises(CorruptData, match="t: bad magic"):
        CODEC.decode(bytes(raw))
    raw[0] ^= 1
    raw[22] ^= 1  # the padding byte is checked too
    with pytest.raises(CorruptData, match="t: checksum"):
        CODEC.decode(bytes(raw))
    assert CODEC.check_many(bytes.fromhex(GOLDEN_FIXED) + bytes(raw), 2) == 1
