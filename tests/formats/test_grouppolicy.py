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


PUSHED = POLICY._replace(push=b'{"url":"http://h/"}')
PUSHED_GOLDEN = (
    "5c000000f8ef29800b010000030000000100010205000000640000000000000000000000000000"
    "408813000000000000000000000000044003000000070000000101000067"
    "130000007b2275726c223a22687474703a2f2f682f227d"
)


def test_a_push_groups_target_follows_the_name_under_flag_bit_0() -> None:
    assert encode_policy(PUSHED).hex() == PUSHED_GOLDEN
    assert decode(bytes.fromhex(PUSHED_GOLDEN))[0] == PUSHED
    # the head and the name are the pull group's but for the flags: a decoder older
    # than the tail reads the name by its length and this record as the pull group
    pushed, plain = bytes.fromhex(PUSHED_GOLDEN), bytes.fromhex(GOLDEN)
    assert (pushed[65], plain[65]) == (1, 0)
    assert pushed[12:65] + pushed[66:69] == plain[12:65] + plain[66:69]
    assert pushed[69:] == len(PUSHED.push).to_bytes(4, "little") + PUSHED.push


def test_a_push_tail_running_past_the_record_is_malformed() -> None:
    bad = bytearray.fromhex(PUSHED_GOLDEN)
    bad[70] = 0x40  # the push length, past the end
    with pytest.raises(CorruptData, match="malformed POLICY"):
        decode(_recrc(bad))
