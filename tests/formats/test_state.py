"""State-map bytes: the byte of each state, the state value of a forward to any
shard the map allows (byte 128 + T below 128, byte 5 and a u16 side entry from
128 on), and the chunk layout's offset."""

from __future__ import annotations

import numpy as np
import pytest

from delayq.formats.messagestate import (
    BLOCKED,
    DATA_OFFSET,
    FORWARD_BASE,
    FORWARDED_FAR,
    MAX_FORWARD_SHARD,
    NEAR_SHARDS,
    SIDE_ENTRY,
    MessageState,
    forward_state,
    forwarded_to,
    is_known,
    is_live,
    state_of,
)
from delayq.shardmap import MAX_SHARDS

GOLDEN_STATES = "0001020380"  # PENDING, CANCELLED, DELIVERED, RESCHEDULED, FORWARDED (to 0)


def test_state_bytes_golden_and_round_trip() -> None:
    states = list(MessageState)
    assert bytes(states).hex() == GOLDEN_STATES
    assert [MessageState(b) for b in bytes.fromhex(GOLDEN_STATES)] == states
    assert np.zeros(3, dtype=np.uint8).tolist() == [MessageState.PENDING] * 3
    assert DATA_OFFSET == 64


def test_a_forward_names_any_shard_the_map_allows() -> None:
    assert MAX_FORWARD_SHARD == MAX_SHARDS - 1 == 1023
    shards = (0, 5, 127, 128, 700, 1023)
    # below 128 the value is the byte on disk, as it always was; from 128 on it is not
    assert [forward_state(s) for s in shards] == [0x80, 0x85, 0xFF, 0x100, 0x33C, 0x47F]
    assert [forwarded_to(forward_state(s)) for s in shards] == list(shards)
    assert [forwarded_to(b) for b in (0x00, 0x03, BLOCKED)] == [None, None, None]
    assert {state_of(forward_state(s)) for s in shards} == {MessageState.FORWARDED}
    assert state_of(0x02) is MessageState.DELIVERED
    for bad in (-1, 1024):
        with pytest.raises(ValueError, match=r"0\.\.1023"):
            forward_state(bad)


def test_far_forward_byte_and_side_entry_golden() -> None:
    assert (FORWARD_BASE, NEAR_SHARDS, FORWARDED_FAR) == (0x80, 128, 0x05)
    assert SIDE_ENTRY.str == "<u2"
    assert np.array([700, 1023], dtype=SIDE_ENTRY).tobytes().hex() == "bc02ff03"
    values = np.array([0, 1, 2, 3, 4, 5, 6, 127, 0x80, 0xFF, 0x100, 0x47F, 0x480], np.uint16)
    assert is_known(values).tolist() == [True] * 5 + [False] * 3 + [True] * 4 + [False]


def test_a_blocked_message_reads_pending_and_is_live() -> None:
    assert BLOCKED == 0x04
    assert state_of(BLOCKED) is MessageState.PENDING
    raw = np.array([0x00, 0x01, 0x02, 0x03, 0x04, 0x80], dtype=np.uint8)
    assert is_live(raw).tolist() == [True, False, False, False, True, False]
