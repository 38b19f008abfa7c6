"""State-map bytes: the byte of each state, and the chunk layout's offset."""

from __future__ import annotations

import numpy as np
import pytest

from delayq.formats.state import (
    BLOCKED,
    DATA_OFFSET,
    MessageState,
    forward_state,
    forwarded_to,
    is_live,
    state_of,
)

GOLDEN_STATES = "0001020380"  # PENDING, CANCELLED, DELIVERED, RESCHEDULED, FORWARDED (to 0)


def test_state_bytes_golden_and_round_trip() -> None:
    states = list(MessageState)
    assert bytes(states).hex() == GOLDEN_STATES
    assert [MessageState(b) for b in bytes.fromhex(GOLDEN_STATES)] == states
    assert np.zeros(3, dtype=np.uint8).tolist() == [MessageState.PENDING] * 3
    assert DATA_OFFSET == 64


def test_a_forwarded_byte_names_its_shard() -> None:
    assert [forward_state(s) for s in (0, 5, 127)] == [0x80, 0x85, 0xFF]
    assert [forwarded_to(b) for b in (0x00, 0x03, 0x80, 0x85, 0xFF)] == [None, None, 0, 5, 127]
    assert [state_of(b) for b in (0x02, 0x85)] == [MessageState.DELIVERED, MessageState.FORWARDED]
    with pytest.raises(ValueError, match=r"0\.\.127"):
        forward_state(128)


def test_a_blocked_message_reads_pending_and_is_live() -> None:
    assert BLOCKED == 0x04
    assert state_of(BLOCKED) is MessageState.PENDING
    raw = np.array([0x00, 0x01, 0x02, 0x03, 0x04, 0x80], dtype=np.uint8)
    assert is_live(raw).tolist() == [True, False, False, False, True, False]
