"""The receipt key file: golden bytes, round trip, damage refused."""

from __future__ import annotations

import pytest

from delayq.errors import CorruptData
from delayq.formats import receiptkey

GOLDEN = (
    "4451524b0100000000000000000000003930000000000000200000000000000000010203040506070809"
    "0a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
)


def test_receipt_key_file_golden_bytes_and_round_trip() -> None:
    key = bytes(range(32))
    data = receiptkey.encode(key, 12345)
    assert len(data) == receiptkey.FILE_SIZE == 68
    assert data[:-4].hex() == GOLDEN
    assert data[-4:].hex() == "1e21bc0d"
    assert receiptkey.decode(data, "k") == key


def test_a_damaged_receipt_key_file_is_refused() -> None:
    data = receiptkey.encode(bytes(32), 1)
    for bad, why in [
        (data[:-1], "bytes"),
        (data[:40], "bytes"),
        (data[:32] + b"\x01" + data[33:], "CRC"),
        (b"DQXX" + data[4:], "magic"),
    ]:
        with pytest.raises(CorruptData, match=why):
            receiptkey.decode(bad, "k")
    with pytest.raises(ValueError):
        receiptkey.encode(b"short", 1)
