"""Kept-records files (pure; no file I/O): the SCHEDULE records of a CommitLog
segment's still-pending messages, copied as they were (frame and CRC) before
retention deletes the segment (``store.keptrecords`` writes and reads them).

File: a ``FileHeader`` (magic b"DQKR", format version 1, base = the segment's
base, created_ms, param = the record count N), then N entries, little-endian:

| offset | size | type | meaning                                          |
|-------:|-----:|------|--------------------------------------------------|
| 0      | 8    | u64  | position of the record in the CommitLog          |
| 8      | L    |      | the record, as written (L: its frame's length)   |

One encoder, ``encode_kept``, one decoder, ``decode_kept`` (an index of the
file: each record's position, offset in the file and seq); ``kept_record`` cuts
one record out at its offset.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..errors import CorruptData
from .fileheader import HEADER_SIZE, FileHeader
from .frame import FRAME, Buffer, frame_length
from .message import MESSAGE_FIXED

__all__ = ["MAGIC", "KeptIndex", "decode_kept", "encode_kept", "kept_record"]

MAGIC = b"DQKR"
_POS = struct.Struct("<Q")
_SEQ_AT = FRAME  # a SCHEDULE record's seq follows its frame


class KeptIndex(NamedTuple):
    header: FileHeader
    positions: np.ndarray  # ascending
    offsets: np.ndarray  # of each record in the file
    seqs: np.ndarray


def encode_kept(
    base: int, created_ms: int, positions: Sequence[int], recs: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """The file of these records (ascending positions): its header and the rest."""
    header = FileHeader(MAGIC, base, created_ms, len(recs)).encode()
    body = b"".join(
        part for p, r in zip(positions, recs, strict=True) for part in (_POS.pack(p), r)
    )
    return header, body


def decode_kept(data: Buffer, what: str) -> KeptIndex:
    """The index of a whole kept-records file; ``CorruptData`` (naming ``what``) if
    its header is not one or a record is cut short."""
    header = FileHeader.decode(bytes(data[:HEADER_SIZE]), MAGIC, what)
    positions, offsets, seqs = [], [], []
    at = HEADER_SIZE
    for _ in range(header.param):
        if at + _POS.size > len(data):
            raise CorruptData(f"{what}: truncated at byte {at}")
        (pos,) = _POS.unpack_from(data, at)
        length = frame_length(data, at + _POS.size)
        if length < MESSAGE_FIXED or at + _POS.size + length > len(data):
            raise CorruptData(f"{what}: truncated at byte {at}")
        positions.append(pos)
        offsets.append(at + _POS.size)
        seqs.append(_POS.unpack_from(data, at + _POS.size + _SEQ_AT)[0])
        at += _POS.size + length
    return KeptIndex(
        header,
        np.array(positions, dtype=np.int64),
        np.array(offsets, dtype=np.int64),
        np.array(seqs, dtype=np.uint64),
    )


def kept_record(data: Buffer, offset: int) -> bytes:
    """The record at ``offset`` of a kept-records file (or of any buffer)."""
    return bytes(data[offset : offset + frame_length(data, offset)])
