"""HANDOUT records: golden bytes, round trips, malformed ones refused."""

from __future__ import annotations

import crc32c
import pytest

from delayq.errors import CorruptData
from delayq.formats.commitlog import decode
from delayq.formats.handout import Handout, decode_handout, encode_handout

GOLDEN = (
    "490000004af231e80c010000030000000100000002000000670100000000000000020000000000"
    "000001000000000000000200000001000000e803000000000000d007000000000000"
)
GOLDEN_EMPTY = "180000000e5b5eb40c010000010000000000010000000000"  # topic 1, group "", waiting


def test_handout_golden_bytes_and_round_trip() -> None:
    want = Handout(3, "g", False, (1, 2), (1, (1 << 32) + 2), (1000, 2000))
    assert encode_handout(3, "g", [1, 2], [1, (1 << 32) + 2], [1000, 2000]).hex() == GOLDEN
    assert decode(bytes.fromhex(GOLDEN))[0] == want
    assert decode_handout(bytes.fromhex(GOLDEN)) == (want, len(GOLDEN) // 2)
    assert encode_handout(1, "", [], [], [], waiting=True).hex() == GOLDEN_EMPTY
    assert decode_handout(bytes.fromhex(GOLDEN_EMPTY))[0] == Handout(1, "", True, (), (), ())


def test_a_handout_whose_count_does_not_fill_it_is_malformed() -> None:
    bad = bytearray.fromhex(GOLDEN)
    bad[20] = 3  # three entries claimed, two written
    bad[4:8] = crc32c.crc32c(bytes(bad[8:])).to_bytes(4, "little")
    with pytest.raises(CorruptData, match="malformed HANDOUT"):
        decode(bytes(bad))
