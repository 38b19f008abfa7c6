"""ACK (5) records: a consumer group's acks of ready-queue offsets of one topic
(pure; no file I/O). One encoder, ``encode_ack`` (any number of offsets), one
decoder, ``decode_ack``. Format version 1 (the frame's, see ``frame``); no
magic of its own. Little-endian, after the 12-byte frame:

| offset   | size | type | meaning                          |
|---------:|-----:|------|----------------------------------|
| 12       | 4    | u32  | topic_id                         |
| 16       | 2    | u16  | group length G                   |
| 18       | 2    | u16  | reserved, 0                      |
| 20       | 4    | u32  | count N                          |
| 24       | G    |      | group name (utf-8)               |
| 24+G+8*i | 8    | u64  | ready-queue offset i             |
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import CorruptData
from .frame import FRAME, Buffer, RecordType, frame, open_record

__all__ = ["Ack", "decode_ack", "encode_ack"]

_ACK = struct.Struct("<IHHI")


class Ack(NamedTuple):
    topic_id: int
    group: str
    offsets: tuple[int, ...]


def encode_ack(topic_id: int, group: str, offsets: Sequence[int]) -> bytes:
    g = group.encode()
    payload = _ACK.pack(topic_id, len(g), 0, len(offsets)) + g
    return frame(RecordType.ACK, payload + struct.pack(f"<{len(offsets)}Q", *offsets))


def decode_ack(data: Buffer, offset: int = 0) -> tuple[Ack, int]:
    """The ACK record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.ACK)
    p = offset + FRAME
    try:
        tid, gl, _, n = _ACK.unpack_from(data, p)
        g0 = p + _ACK.size
        group = bytes(data[g0 : g0 + gl]).decode()
        offsets = struct.unpack_from(f"<{n}Q", data, g0 + gl)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptData(f"malformed ACK record: {exc}") from exc
    return Ack(tid, group, tuple(offsets)), length
