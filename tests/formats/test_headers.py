"""The headers block: golden bytes, round trip, malformed blocks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delayq.errors import CorruptData
from delayq.formats.headers import decode_headers, encode_headers

GOLDEN_HEADERS = "01007802000000797a01006b00000000"  # {"x": "yz", "k": ""}


def test_headers_golden_bytes_and_round_trip() -> None:
    assert encode_headers({"x": "yz", "k": ""}).hex() == GOLDEN_HEADERS
    assert decode_headers(bytes.fromhex(GOLDEN_HEADERS)) == {"x": "yz", "k": ""}
    assert encode_headers({}) == b"" and decode_headers(b"") == {}


@pytest.mark.parametrize("cut", [1, 3, 8, 15])
def test_a_cut_or_padded_headers_block_is_corrupt(cut: int) -> None:
    data = bytes.fromhex(GOLDEN_HEADERS)
    with pytest.raises(CorruptData, match="bad headers block"):
        decode_headers(data[:cut])
    with pytest.raises(CorruptData, match="bad headers block"):
        decode_headers(data + b"\0")


@given(st.dictionaries(st.text(max_size=5), st.text(max_size=8), max_size=5))
def test_any_headers_round_trip(headers: dict[str, str]) -> None:
    assert decode_headers(encode_headers(headers)) == headers
