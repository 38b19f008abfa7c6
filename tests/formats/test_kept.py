"""Kept-records files: golden bytes, the index the decoder makes, torn files."""

from __future__ import annotations

import pytest

from delayq.errors import CorruptData
from delayq.formats.fileheader import FileHeader
from delayq.formats.kept import decode_kept, encode_kept, kept_record

T = 1_700_000_000_000

GOLDEN_KEPT = (  # segment 4096: the SCHEDULE record of test_message at position 4200
    "44514b520100000000100000000000000068e5cf8b010000010000000000000068100000000000005200"
    "000023c42832010100000700000000000000d26ce5cf8b0100000068e5cf8b0100000200000003000000"
    "00000100080000000000000000000000ffffffffffffffff6b010061010000006268656c6c6f"
)


def test_kept_golden_bytes_and_round_trip(schedule: bytes) -> None:
    header, body = encode_kept(4096, T, [4200], [schedule])
    assert (header + body).hex() == GOLDEN_KEPT
    data = bytes.fromhex(GOLDEN_KEPT)
    index = decode_kept(data, "kept")
    assert index.header == FileHeader(b"DQKR", 4096, T, 1)
    assert (index.positions.tolist(), index.offsets.tolist(), index.seqs.tolist()) == (
        [4200],
        [40],
        [7],
    )
    assert kept_record(data, 40) == schedule


def test_several_records_index_in_order(schedule: bytes) -> None:
    header, body = encode_kept(0, T, [10, 500], [schedule, schedule])
    index = decode_kept(header + body, "kept")
    assert index.positions.tolist() == [10, 500]
    assert index.offsets.tolist() == [40, 40 + len(schedule) + 8]
    assert decode_kept(b"".join(encode_kept(0, T, [], [])), "kept").positions.tolist() == []


@pytest.mark.parametrize("cut", [1, 5, 60, 90])
def test_a_cut_file_is_corrupt(cut: int) -> None:
    data = bytes.fromhex(GOLDEN_KEPT)
    with pytest.raises(CorruptData, match="f: truncated"):
        decode_kept(data[:-cut], "f")
    with pytest.raises(CorruptData, match="bad magic"):
        decode_kept(b"DQKX" + data[4:], "f")
