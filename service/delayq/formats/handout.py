"""HANDOUT (12) records: messages of one topic a consumer group holds in flight,
each with the ticket its receipt names (attempt and turn, see
``delivery.groups``) and until when (pure; no file I/O). Written for each
receive's hand-outs (one record per call), each re-timing (change of
invisibility, new receipts) and each negative acknowledgement, so a message's
attempt count and receipt survive a restart and a failover. One encoder,
``encode_handout``, one decoder, ``decode_handout``. Format version 1 (the
frame's, see ``frame``); no magic of its own. Little-endian, after the 12-byte
frame:

| offset      | size | type | meaning                                       |
|------------:|-----:|------|-----------------------------------------------|
| 12          | 4    | u32  | topic_id                                      |
| 16          | 2    | u16  | group length G                                |
| 18          | 1    | u8   | 0: handed out (invisible until), 1: waiting   |
|             |      |      | for its next attempt (due at until)           |
| 19          | 1    | u8   | reserved, 0                                   |
| 20          | 4    | u32  | count N                                       |
| 24          | G    |      | group name (utf-8)                            |
| 24+G+8*i    | 8    | u64  | ready-queue offset i                          |
| 24+G+8N+8*i | 8    | u64  | ticket i                                      |
| 24+G+16N+8*i| 8    | i64  | until_ms i (epoch ms)                         |
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import CorruptData
from .frame import FRAME, Buffer, RecordType, frame, open_record

__all__ = ["Handout", "decode_handout", "encode_handout"]

_HEAD = struct.Struct("<IHBxI")


class Handout(NamedTuple):
    topic_id: int
    group: str
    waiting: bool
    offsets: tuple[int, ...]
    tickets: tuple[int, ...]
    until_ms: tuple[int, ...]


def encode_handout(
    topic_id: int,
    group: str,
    offsets: Sequence[int],
    tickets: Sequence[int],
    until_ms: Sequence[int],
    *,
    waiting: bool = False,
) -> bytes:
    g = group.encode()
    n = len(offsets)
    head = _HEAD.pack(topic_id, len(g), int(waiting), n) + g
    return frame(
        RecordType.HANDOUT, head + struct.pack(f"<{n}Q{n}Q{n}q", *offsets, *tickets, *until_ms)
    )


def decode_handout(data: Buffer, offset: int = 0) -> tuple[Handout, int]:
    """The HANDOUT record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.HANDOUT)
    p = offset + FRAME
    try:
        tid, gl, waiting, n = _HEAD.unpack_from(data, p)
        g0 = p + _HEAD.size
        if g0 + gl + 24 * n != offset + length:
            raise struct.error(f"{n} entries do not fill the record")
        group = bytes(data[g0 : g0 + gl]).decode()
        cols = struct.unpack_from(f"<{n}Q{n}Q{n}q", data, g0 + gl)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptData(f"malformed HANDOUT record: {exc}") from exc
    rec = Handout(tid, group, bool(waiting), cols[:n], cols[n : 2 * n], cols[2 * n :])
    return rec, length
