"""State-map bytes: the byte of each state, and the chunk layout's offset."""

from __future__ import annotations

import numpy as np

from delayq.formats.state import DATA_OFFSET, MessageState

GOLDEN_STATES = "00010203"  # PENDING, CANCELLED, DELIVERED, RESCHEDULED


def test_state_bytes_golden_and_round_trip() -> None:
    states = list(MessageState)
    assert bytes(states).hex() == GOLDEN_STATES
    assert [MessageState(b) for b in bytes.fromhex(GOLDEN_STATES)] == states
    assert np.zeros(3, dtype=np.uint8).tolist() == [MessageState.PENDING] * 3
    assert DATA_OFFSET == 64
