"""Block files: golden bytes, where each entry's record lies, cut files refused."""

from __future__ import annotations

import pytest

from delayq.errors import CorruptData
from delayq.formats.blockfile import decode_entries, decode_header, encode_entry, encode_header
from delayq.formats.fileheader import HEADER_SIZE, FileHeader
from tests.formats.test_block import GOLDEN_BLOCK

T = 1_700_000_000_000

GOLDEN_FILE = (  # block T, made at T+9: the BLOCK record of test_block at CommitLog 4096
    "4451424b010000000068e5cf8b0100000968e5cf8b0100000000000000000000"
    "0010000000000000" + GOLDEN_BLOCK
)


def test_block_file_golden_bytes_and_entries() -> None:
    record = bytes.fromhex(GOLDEN_BLOCK)
    data = encode_header(T, T + 9) + encode_entry(4096, record)
    assert data.hex() == GOLDEN_FILE
    assert decode_header(data, "f") == FileHeader(b"DQBK", T, T + 9, 0)
    got = decode_entries(data + encode_entry(9000, record), HEADER_SIZE, "f")
    assert got.positions.tolist() == [4096, 9000]
    assert got.offsets.tolist() == [HEADER_SIZE + 8, HEADER_SIZE + 16 + len(record)]
    assert got.lengths.tolist() == [len(record)] * 2
    assert data[got.offsets[0] : got.offsets[0] + got.lengths[0]] == record


@pytest.mark.parametrize("cut", [1, 10, 100])
def test_a_cut_entry_is_corrupt(cut: int) -> None:
    data = bytes.fromhex(GOLDEN_FILE)
    with pytest.raises(CorruptData, match="f: entry cut short"):
        decode_entries(data[:-cut], HEADER_SIZE, "f")
    with pytest.raises(CorruptData, match="bad magic"):
        decode_header(b"DQKR" + data[4:], "f")
