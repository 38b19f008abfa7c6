"""SCHEDULE (1) and ROLL (3, a re-parked copy of a far-future message) records
(pure: bytes in, bytes out; no file I/O). One encoder, ``encode_messages``, and
one decoder, ``decode_messages``, both for a batch: a single record is a batch
of one. Format version 1 (the frame's, see ``frame``); no magic of its own.

Layout, little-endian, after the 12-byte frame (``frame``):

| offset | size | type | meaning                                               |
|-------:|-----:|------|-------------------------------------------------------|
| 12     | 8    | u64  | seq: the message's sequence number (state map index)  |
| 20     | 8    | i64  | deliver_at_ms                                         |
| 28     | 8    | i64  | accepted_ms                                           |
| 36     | 4    | u32  | epoch the message was accepted under                  |
| 40     | 4    | u32  | topic_id (see TOPIC)                                  |
| 44     | 2    | u16  | roll_count                                            |
| 46     | 2    | u16  | key length K                                          |
| 48     | 4    | u32  | headers length H                                      |
| 52     | 8    | u64  | replaces_seq: seq this message reschedules (0: none)  |
| 60     | 8    | i64  | origin_pos: ROLL: position of the original SCHEDULE;   |
|        |      |      | SCHEDULE: position of the message it replaces, or -1  |
| 68     | K    |      | key (utf-8)                                           |
| 68+K   | H    |      | headers (see ``headers``)                             |
| 68+K+H | rest |      | body                                                  |

A record is valid when its frame is (``frame.open_frame``), its type is 1 or 3
and 68 + K + H <= length (and, with the payload, its key is UTF-8). Both codecs
take a few records (``FEW``) one at a time with ``struct`` (numpy's fixed cost
per call, ~1 µs, times the few dozen calls of a batch is more than a record
costs alone) and more in one vectorised pass; the two branches give the same
bytes and the same columns.

Here: the layout (``MESSAGE_STRUCT``, ``MESSAGE_DTYPE``: the fixed part, one
definition of it), a record as a value (``Message``) and the encoder. The
decoder and the columns it gives are in ``messagecolumns``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ..batchops import FEW, high, low, strided
from .frame import FRAME, FRAME_FIELDS, VERSION, RecordType, frame, span_crcs, stride_crcs

__all__ = ["MESSAGE_DTYPE", "MESSAGE_FIXED", "MESSAGE_STRUCT", "Message", "encode_messages"]

MESSAGE_STRUCT = struct.Struct("<QqqIIHHIQq")
"""The fixed fields after the frame, in the table's order (a record packed alone)."""
MESSAGE_FIXED = FRAME + MESSAGE_STRUCT.size
MESSAGE_DTYPE = np.dtype(
    [
        *FRAME_FIELDS,
        ("seq", "<u8"),
        ("deliver_at_ms", "<i8"),
        ("accepted_ms", "<i8"),
        ("epoch", "<u4"),
        ("topic_id", "<u4"),
        ("roll_count", "<u2"),
        ("key_len", "<u2"),
        ("headers_len", "<u4"),
        ("replaces_seq", "<u8"),
        ("origin_pos", "<i8"),
    ]
)
assert MESSAGE_DTYPE.itemsize == MESSAGE_FIXED


class Message(NamedTuple):
    """A SCHEDULE or ROLL record."""

    type: RecordType
    seq: int
    deliver_at_ms: int
    accepted_ms: int
    epoch: int
    topic_id: int
    roll_count: int
    replaces_seq: int
    origin_pos: int
    key: str
    headers: bytes
    body: bytes


# -- encoding ---------------------------------------------------------------------

Column = Sequence[int] | np.ndarray | int
"""A field for every record of a batch: one value per record, or one for all."""


def encode_messages(
    rtype: RecordType,
    seq: Sequence[int] | np.ndarray,
    deliver_at_ms: Sequence[int] | np.ndarray,
    accepted_ms: Column,
    epoch: Column,
    topic_id: Column,
    roll_count: Column,
    keys: Sequence[bytes] | None,
    headers: Sequence[bytes] | None,
    bodies: Sequence[bytes],
    replaces_seq: Column = 0,
    origin_pos: Column = -1,
    body_sizes: np.ndarray | None = None,
) -> tuple[bytes | bytearray | memoryview, np.ndarray, np.ndarray]:
    """Encode SCHEDULE/ROLL records (a batch; one record is a batch of one) into one
    buffer. ``keys``/``headers`` None: all empty; ``body_sizes``: the bodies'
    lengths if known. Returns the buffer, each record's offset in it and each
    record's length."""
    n = len(bodies)
    if n < FEW:  # a few (a single schedule): struct packing, no numpy set-up
        columns = (seq, deliver_at_ms, accepted_ms, epoch, topic_id, roll_count)
        return _pack_few(rtype, n, (*columns, replaces_seq, origin_pos), keys, headers, bodies)
    fixed = np.zeros(n, dtype=MESSAGE_DTYPE)
    if body_sizes is None:
        body_sizes = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
    lengths = body_sizes + MESSAGE_FIXED
    if keys is not None:
        fixed["key_len"] = klen = np.fromiter(map(len, keys), dtype=np.int64, count=n)
        lengths += klen
    if headers is not None:
        fixed["headers_len"] = hlen = np.fromiter(map(len, headers), dtype=np.int64, count=n)
        lengths += hlen
    fixed["length"] = lengths
    fixed["type"] = rtype
    fixed["version"] = VERSION
    fixed["seq"] = seq
    fixed["deliver_at_ms"] = deliver_at_ms
    fixed["accepted_ms"] = accepted_ms
    fixed["epoch"] = epoch
    fixed["topic_id"] = topic_id
    fixed["roll_count"] = roll_count
    fixed["replaces_seq"] = replaces_seq
    fixed["origin_pos"] = origin_pos
    if (
        headers is None
        and low(lengths) == high(lengths)
        and (keys is None or low(klen) == high(klen))
    ):
        # one size (the usual batch, keyed or not, its keys of one length): the
        # records are the rows of one 2-D array
        size = int(lengths[0])
        rows = np.empty((n, size), dtype=np.uint8)
        rows[:, :MESSAGE_FIXED] = fixed.view(np.uint8).reshape(n, MESSAGE_FIXED)
        at = MESSAGE_FIXED
        if keys is not None:
            at += int(klen[0])
            rows[:, MESSAGE_FIXED:at] = np.frombuffer(b"".join(keys), np.uint8).reshape(n, -1)
        rows[:, at:] = np.frombuffer(b"".join(bodies), np.uint8).reshape(n, -1)
        view = rows.data.cast("B")
        rows[:, 4:8] = stride_crcs(view, n, size).view(np.uint8).reshape(n, 4)
        return view, np.arange(0, n * size, size, dtype=np.int64), lengths
    heads = strided(fixed.tobytes(), n, MESSAGE_FIXED)
    if keys is None and headers is None:
        parts: list[bytes] = [b""] * (2 * n)
        parts[0::2] = heads
        parts[1::2] = bodies
    else:
        parts = [b""] * (4 * n)
        parts[0::4] = heads
        parts[1::4] = keys if keys is not None else parts[1::4]
        parts[2::4] = headers if headers is not None else parts[2::4]
        parts[3::4] = bodies
    buf = bytearray().join(parts)
    offsets = np.cumsum(lengths) - lengths
    crcs = span_crcs(buf, offsets, offsets + lengths)  # each cut by its own length
    raw = np.frombuffer(buf, dtype=np.uint8)
    raw[(offsets + 4)[:, None] + np.arange(4)] = crcs.view(np.uint8).reshape(n, 4)
    del raw
    return buf, offsets, lengths


def _pack_few(
    rtype: RecordType, n: int, columns: Sequence[Any], keys: Any, headers: Any, bodies: Any
) -> tuple[bytes, np.ndarray, np.ndarray]:
    """``encode_messages`` one record at a time, packed as structs (for a few)."""
    cols = [
        c.tolist() if isinstance(c, np.ndarray) else list(c) if isinstance(c, Sequence) else [c] * n
        for c in columns
    ]
    seq, due, acc, epoch, tid, rolls, replaces, origin = cols
    empty = [b""] * n
    rows = zip(
        seq,
        due,
        acc,
        epoch,
        tid,
        rolls,
        keys if keys is not None else empty,
        headers if headers is not None else empty,
        bodies,
        replaces,
        origin,
        strict=True,
    )
    pack = MESSAGE_STRUCT.pack
    recs = [
        frame(rtype, b"".join((pack(s, d, a, e, t, r, len(k), len(h), rs, o), k, h, b)))
        for s, d, a, e, t, r, k, h, b, rs, o in rows
    ]
    lengths = np.fromiter(map(len, recs), dtype=np.int64, count=n)
    return b"".join(recs), np.cumsum(lengths) - lengths, lengths
