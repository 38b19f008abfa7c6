"""ACK records: golden bytes and round trips."""

from __future__ import annotations

import crc32c
import pytest

from delayq.errors import CorruptData
from delayq.formats.ack import Ack, decode_ack, encode_ack
from delayq.formats.commitlog import decode

GOLDEN_ACK = "29000000296ef621050100000300000001000000020000006701000000000000000200000000000000"
GOLDEN_ACK_EMPTY = "18000000ce12872005010000010000000000000000000000"  # topic 1, group "", none


def test_ack_golden_bytes_and_round_trip() -> None:
    assert encode_ack(3, "g", [1, 2]).hex() == GOLDEN_ACK
    assert decode(bytes.fromhex(GOLDEN_ACK))[0] == Ack(3, "g", (1, 2))
    assert decode_ack(bytes.fromhex(GOLDEN_ACK)) == (Ack(3, "g", (1, 2)), len(GOLDEN_ACK) // 2)
    assert encode_ack(1, "", []).hex() == GOLDEN_ACK_EMPTY
    assert decode_ack(bytes.fromhex(GOLDEN_ACK_EMPTY))[0] == Ack(1, "", ())


def test_an_ack_whose_group_is_not_utf8_is_malformed() -> None:
    bad = bytearray.fromhex(GOLDEN_ACK)
    bad[24] = 0xFF  # the group name
    bad[4:8] = crc32c.crc32c(bytes(bad[8:])).to_bytes(4, "little")
    with pytest.raises(CorruptData, match="malformed ACK"):
        decode(bytes(bad))
