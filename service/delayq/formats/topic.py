"""TOPIC (6) records: a topic name's id, written once, before the first record
that names the id (pure; no file I/O). One encoder, ``encode_topic``, one
decoder, ``decode_topic``. Format version 1 (the frame's, see ``frame``); no
magic of its own. Little-endian, after the 12-byte frame:

| offset | size | type | meaning                        |
|-------:|-----:|------|--------------------------------|
| 12     | 4    | u32  | topic_id                       |
| 16     | rest |      | topic name (utf-8)             |
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import CorruptData
from .frame import FRAME, Buffer, RecordType, frame, open_record

__all__ = ["TopicDef", "decode_topic", "encode_topic"]

_TOPIC = struct.Struct("<I")


class TopicDef(NamedTuple):
    topic_id: int
    name: str


def encode_topic(topic_id: int, name: str) -> bytes:
    return frame(RecordType.TOPIC, _TOPIC.pack(topic_id) + name.encode())


def decode_topic(data: Buffer, offset: int = 0) -> tuple[TopicDef, int]:
    """The TOPIC record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.TOPIC)
    p = offset + FRAME
    try:
        (tid,) = _TOPIC.unpack_from(data, p)
        name = bytes(data[p + _TOPIC.size : offset + length]).decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptData(f"malformed TOPIC record: {exc}") from exc
    return TopicDef(tid, name), length
