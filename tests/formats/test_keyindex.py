"""The key index file (``formats.keyindex``): golden bytes, round trip, damage refused."""

from __future__ import annotations

import numpy as np
import pytest

from delayq.errors import CorruptData
from delayq.formats import keyindex as fmt


def _table(n: int, base: int) -> fmt.Columns:
    at = np.arange(n)
    return (
        (at + base).astype(np.uint32),
        (at + 10 * base).astype(np.uint64),
        (at * 100 + base).astype(np.int64),
        np.full(n, base * 1000, dtype=np.int64),
    )


GOLDEN = (
    # FileHeader: magic DQKY, version 1, reserved, base (log end) 4096, created_ms 7, T 2
    "44514b5901000000"
    "0010000000000000"
    "0700000000000000"
    "0200000000000000"
    "0100000000000000"  # hash kind 1, reserved
    "0200000000000000"
    "0000000000000000"  # n_0 = 2, n_1 = 0
    "0300000004000000"  # hashes 3, 4
    "1e00000000000000"
    "1f00000000000000"  # seqs 30, 31
    "0300000000000000"
    "6700000000000000"  # positions 3, 103
    "b80b000000000000"
    "b80b000000000000"  # holds 3000, 3000
)


def test_key_index_file_golden_bytes_and_round_trip() -> None:
    tables = [_table(2, 3), _table(0, 5)]
    data = fmt.encode_keys(4096, 7, 1, tables)
    assert data[:-4].hex() == GOLDEN
    assert len(data) == fmt.file_size(fmt.KeysHead(4096, 7, 1, (2, 0))) == 40 + 16 + 56 + 4
    head, got = fmt.decode_keys(data, "k")
    assert head == fmt.KeysHead(4096, 7, 1, (2, 0))
    for want, have in zip(tables, got, strict=True):
        for a, b in zip(want, have, strict=True):
            assert a.tolist() == b.tolist()
    assert fmt.announced_head_size(data[:32], "k") == 56


def test_a_damaged_key_index_file_is_refused() -> None:
    data = fmt.encode_keys(1, 2, 1, [_table(3, 1)])
    for bad, why in [
        (data[:-1], "bytes"),
        (data[:20], "shorter than its header"),
        (data[:60] + b"\x01" + data[61:], "CRC"),
        (b"DQXX" + data[4:], "magic"),
        (data[:24] + (99).to_bytes(8, "little") + data[32:], "99 tables"),
        (data[:40] + (-1).to_bytes(8, "little", signed=True) + data[48:], "negative"),
    ]:
        with pytest.raises(CorruptData, match=why):
            fmt.decode_keys(bad, "k")
