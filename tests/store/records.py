"""Records for the store's tests: the time they are written at (``T``) and a
message record (``message``)."""

from __future__ import annotations

from delayq import formats

T = 1_700_000_000_000


def message(seq: int, body_len: int) -> bytes:
    """The SCHEDULE record of message ``seq`` (due at ``T + seq``) with a body of
    ``body_len`` bytes; every third one without a key, every other one with headers."""
    buf, _, _ = formats.encode_messages(
        formats.RecordType.SCHEDULE,
        [seq],
        [T + seq],
        T,
        1,
        1,
        0,
        [f"k{seq}".encode() if seq % 3 else b""],
        [formats.encode_headers({"h": str(seq)}) if seq % 2 else b""],
        [bytes([seq % 251]) * body_len],
    )
    return bytes(buf)
