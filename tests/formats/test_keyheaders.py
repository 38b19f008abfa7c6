"""The reserved dedup headers (``formats.keyheaders``): their bytes (golden), a
copy's split of them, and the holds and dedup ids read back from records'
header blocks."""

from __future__ import annotations

import numpy as np

from delayq.formats.headers import decode_headers, encode_headers
from delayq.formats.keyheaders import DEDUP_ID, DEDUP_WINDOW, dedup_headers, holds_of, split_dedup

GOLDEN = (
    b"\x13\x00delayq-dedup-window\x05\x00\x00\x0060000\x0f\x00delayq-dedup-id\x03\x00\x00\x00m-1"
)


def test_golden_bytes() -> None:
    assert dedup_headers(60_000, "m-1") == GOLDEN
    assert decode_headers(GOLDEN) == {DEDUP_WINDOW: "60000", DEDUP_ID: "m-1"}
    assert dedup_headers(0, "") == b""
    assert dedup_headers(0, "x") == encode_headers({DEDUP_ID: "x"})


def test_a_copy_splits_off_the_reserved_ones() -> None:
    others, dedup = split_dedup({"h": "v", DEDUP_WINDOW: "5", DEDUP_ID: "d"})
    assert others == {"h": "v"} and dedup == dedup_headers(5, "d")
    assert split_dedup({"h": "v"}) == ({"h": "v"}, b"")


def test_holds_and_dedup_ids_of_header_blocks() -> None:
    blocks = [b"", encode_headers({"h": "v"}), GOLDEN, dedup_headers(0, "only")]
    holds, ids = holds_of(np.array([10, 20, 30, 40]), blocks, 4)
    assert holds.tolist() == [0, 0, 60_030, 0]
    assert ids == [b"", b"", b"m-1", b"only"]
    holds, ids = holds_of(7, None, 2)
    assert holds.tolist() == [0, 0] and ids == [b"", b""]
