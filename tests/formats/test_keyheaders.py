"""The reserved dedup headers (``formats.keyheaders``): their bytes (golden), a
copy's split of them (the hold's end unchanged), and the holds and dedup ids
read back from records' header blocks."""

from __future__ import annotations

from delayq.formats.headers import decode_headers, encode_headers
from delayq.formats.keyheaders import (
    DEDUP_ID,
    DEDUP_UNTIL,
    dedup_headers,
    holds_of,
    split_dedup,
)

GOLDEN = (
    b"\x12\x00delayq-dedup-until\r\x00\x00\x001800000060000"
    b"\x0f\x00delayq-dedup-id\x03\x00\x00\x00m-1"
)


def test_golden_bytes() -> None:
    assert dedup_headers(1_800_000_060_000, "m-1") == GOLDEN
    assert decode_headers(GOLDEN) == {DEDUP_UNTIL: "1800000060000", DEDUP_ID: "m-1"}
    assert dedup_headers(0, "") == b""
    assert dedup_headers(0, "x") == encode_headers({DEDUP_ID: "x"})


def test_a_copy_splits_off_the_reserved_ones_its_end_unchanged() -> None:
    others, dedup = split_dedup({"h": "v", DEDUP_UNTIL: "5000", DEDUP_ID: "d"})
    assert others == {"h": "v"} and dedup == dedup_headers(5000, "d")
    assert split_dedup({"h": "v"}) == ({"h": "v"}, b"")


def test_holds_and_dedup_ids_of_header_blocks() -> None:
    blocks = [b"", encode_headers({"h": "v"}), GOLDEN, dedup_headers(0, "only")]
    holds, ids = holds_of(blocks, 4)
    assert holds.tolist() == [0, 0, 1_800_000_060_000, 0]
    assert ids == [b"", b"", b"m-1", b"only"]
    holds, ids = holds_of(None, 2)
    assert holds.tolist() == [0, 0] and ids == [b"", b""]
