"""DELIVER records: golden bytes, both encoder branches, round trips."""

from __future__ import annotations

import numpy as np
import pytest

from delayq.errors import CorruptData
from delayq.formats import deliver
from delayq.formats.commitlog import decode
from delayq.formats.deliver import DELIVER_DTYPE, Deliver, decode_deliver, encode_delivers
from delayq.timers.memory.releasebuffer import DUE_DTYPE

T = 1_700_000_000_000

GOLDEN_DELIVER = (
    "340000006507572f040100000700000000000000030000005a000000d204000000000000d26ce5cf8b0100"
    "00d36ce5cf8b010000"
)


def _due(rows: list[Deliver]) -> np.ndarray:
    """The rows as the release stage hands them over."""
    due = np.zeros(len(rows), dtype=DUE_DTYPE)
    for column, field in [("cl_size", "body_size"), ("cl_pos", "body_pos")] + [
        (f, f) for f in ("seq", "topic_id", "deliver_at_ms")
    ]:
        due[column] = [getattr(r, field) for r in rows]
    return due


@pytest.mark.parametrize("few", [1 << 30, 0])  # one by one; vectorised
def test_deliver_golden_bytes_and_round_trip(few: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deliver, "FEW", few)
    rec = Deliver(7, 3, 90, 1234, T + 1234, T + 1235)
    assert encode_delivers(_due([rec]), T + 1235).hex() == GOLDEN_DELIVER
    golden = bytes.fromhex(GOLDEN_DELIVER)
    assert DELIVER_DTYPE.itemsize == len(golden) == 52
    assert decode(golden)[0] == rec
    assert decode_deliver(golden) == (rec, 52)
    with pytest.raises(CorruptData, match="not DELIVER"):
        decode_deliver(bytes.fromhex("1000000061e64e570601000000000000"))  # a TOPIC record


def test_deliver_batch_encoding_is_the_same_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Release rows encode to the same bytes one by one and vectorised, and each
    record decodes back."""
    rows = [Deliver(7 + i, 3, 90 + i, 1234 * i, T + i, T + 500) for i in range(20)]
    due = _due(rows)
    encoded = {}
    for few in (1 << 30, 0):  # every batch one by one; every batch vectorised
        monkeypatch.setattr(deliver, "FEW", few)
        encoded[few] = encode_delivers(due, T + 500)
    assert encoded[0] == encoded[1 << 30]
    size = len(encoded[0]) // len(rows)
    got = [decode(encoded[0], i * size)[0] for i in range(len(rows))]
    assert got == rows
    assert [decode_deliver(encoded[0], i * size)[0] for i in range(len(rows))] == rows
