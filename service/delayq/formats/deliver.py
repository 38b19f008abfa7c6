"""DELIVER (4) records: a message moved into its topic's ready queue (pure; no
file I/O). The record refers to the body record; it holds no copy. One encoder,
``encode_delivers`` (a batch; one record is a batch of one), one decoder,
``decode_deliver``. Format version 1 (the frame's, see ``frame``); no magic of
its own. Fixed size, 52 bytes; little-endian, after the 12-byte frame:

| offset | size | type | meaning                                         |
|-------:|-----:|------|-------------------------------------------------|
| 12     | 8    | u64  | seq                                             |
| 20     | 4    | u32  | topic_id                                        |
| 24     | 4    | u32  | body_size: length of the record with the body   |
| 28     | 8    | i64  | body_pos: its CommitLog position                |
| 36     | 8    | i64  | deliver_at_ms                                   |
| 44     | 8    | i64  | delivered_ms                                    |
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from ..batchops import FEW
from ..errors import CorruptData
from .frame import FRAME, FRAME_FIELDS, Buffer, RecordType, frame, open_record, stamp_fixed

__all__ = ["DELIVER_DTYPE", "Deliver", "decode_deliver", "encode_delivers"]

_DELIVER = struct.Struct("<QIIqqq")
DELIVER_DTYPE = np.dtype(
    [
        *FRAME_FIELDS,
        ("seq", "<u8"),
        ("topic_id", "<u4"),
        ("body_size", "<u4"),
        ("body_pos", "<i8"),
        ("deliver_at_ms", "<i8"),
        ("delivered_ms", "<i8"),
    ]
)
assert DELIVER_DTYPE.itemsize == FRAME + _DELIVER.size


class Deliver(NamedTuple):
    seq: int
    topic_id: int
    body_size: int
    body_pos: int
    deliver_at_ms: int
    delivered_ms: int


def encode_delivers(due: np.ndarray, delivered_ms: int) -> bytes:
    """DELIVER records, end to end, for rows with fields seq, topic_id, cl_size
    (the body's record length), cl_pos (its position) and deliver_at_ms: a few
    packed one by one, more as one array; the same bytes either way."""
    if len(due) < FEW:
        names = ("seq", "topic_id", "cl_size", "cl_pos", "deliver_at_ms")
        rows = zip(*(due[c].tolist() for c in names), strict=True)
        return b"".join(
            frame(RecordType.DELIVER, _DELIVER.pack(s, tid, size, pos, at, delivered_ms))
            for s, tid, size, pos, at in rows
        )
    recs = np.zeros(len(due), dtype=DELIVER_DTYPE)
    recs["seq"], recs["topic_id"] = due["seq"], due["topic_id"]
    recs["body_size"], recs["body_pos"] = due["cl_size"], due["cl_pos"]
    recs["deliver_at_ms"], recs["delivered_ms"] = due["deliver_at_ms"], delivered_ms
    return stamp_fixed(recs, RecordType.DELIVER)


def decode_deliver(data: Buffer, offset: int = 0) -> tuple[Deliver, int]:
    """The DELIVER record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.DELIVER)
    try:
        return Deliver(*_DELIVER.unpack_from(data, offset + FRAME)), length
    except struct.error as exc:
        raise CorruptData(f"malformed DELIVER record: {exc}") from exc
