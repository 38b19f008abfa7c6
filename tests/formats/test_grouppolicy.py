"""POLICY records: golden bytes, round trips, malformed ones refused."""

from __future__ import annotations

import crc32c
import pytest

from delayq.errors import CorruptData
from delayq.formats.commitlog import decode
from delayq.formats.grouppolicy import PolicyDef, decode_policy, encode_policy

POLICY = PolicyDef(3, "g", 5, 1, 100, 2.0, 5000, 2, 2.5, 3, 7, True)
GOLDEN = (
    "45000000d54aa7a30b010000030000000100010205000000640000000000000000000000000000"
    "408813000000000000000000000000044003000000070000000100000067"
)


def test_policy_golden_bytes_and_round_trip() -> None:
    assert encode_policy(POLICY).hex() == GOLDEN
    assert decode(bytes.fromhex(GOLDEN))[0] == POLICY
    assert decode_policy(bytes.fromhex(GOLDEN)) == (POLICY, len(GOLDEN) // 2)
    plain = PolicyDef(1, "", 0, 0, 0, 2.0, 0, 0, 0.0, 0, 0, False)
    assert decode_policy(encode_policy(plain))[0] == plain


def _recrc(raw: bytearray) -> bytes:
    raw[4:8] = crc32c.crc32c(bytes(raw[8:])).to_bytes(4, "little")
    return bytes(raw)


def test_a_policy_whose_group_is_not_utf8_or_runs_past_the_record_is_malformed() -> None:
    bad = bytearray.fromhex(GOLDEN)
    bad[-1] = 0xFF  # the group name
    with pytest.raises(CorruptData, match="malformed POLICY"):
        decode(_recrc(bad))
    long = bytearray.fromhex(GOLDEN)
    long[16] = 9  # a group length past the record's end
    with pytest.raises(CorruptData, match="malformed POLICY"):
        decode(_recrc(long))
