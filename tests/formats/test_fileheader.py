"""The data file header: golden bytes and what its decoder refuses."""

from __future__ import annotations

import pytest

from delayq.errors import CorruptData
from delayq.formats.fileheader import FORMAT_VERSION, HEADER_SIZE, FileHeader

T = 1_700_000_000_000

GOLDEN_HEADER = "4451434c0100000020000000000000000068e5cf8b0100000000000000000000"


def test_file_header_golden_bytes_and_round_trip() -> None:
    assert FileHeader(b"DQCL", 32, T).encode().hex() == GOLDEN_HEADER
    raw = bytes.fromhex(GOLDEN_HEADER)
    assert (len(raw), 1) == (HEADER_SIZE, FORMAT_VERSION)
    assert FileHeader.decode(raw, b"DQCL", "cl") == FileHeader(b"DQCL", 32, T, 0)
    with_param = FileHeader(b"DQRI", 3, T, 48)
    assert FileHeader.decode(with_param.encode() + b"rest", b"DQRI", "ri") == with_param


def test_a_short_foreign_or_newer_header_is_refused() -> None:
    raw = bytes.fromhex(GOLDEN_HEADER)
    with pytest.raises(CorruptData, match="x: file shorter"):
        FileHeader.decode(raw[:31], b"DQCL", "x")
    with pytest.raises(CorruptData, match="bad magic"):
        FileHeader.decode(raw, b"DQTL", "x")
    with pytest.raises(CorruptData, match="version 2"):
        FileHeader.decode(raw[:4] + b"\x02" + raw[5:], b"DQCL", "x")
