"""CommitLog record formats (pure: bytes in, bytes out). One encoder and one
decoder per record type; nothing else in delayq parses these bytes.

Every record starts with a 12-byte frame (little-endian):

| offset | size | type | meaning                                      |
|-------:|-----:|------|----------------------------------------------|
| 0      | 4    | u32  | length of the whole record, frame included   |
| 4      | 4    | u32  | CRC32C of bytes [8, length)                  |
| 8      | 1    | u8   | record type (RecordType)                     |
| 9      | 1    | u8   | record format version (1)                    |
| 10     | 2    | u16  | reserved, 0                                  |

SCHEDULE (1) and ROLL (3, a re-parked copy of a far-future message) payload:

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
| 60     | 8    | i64  | origin_pos: position of the original SCHEDULE (ROLL), -1 |
| 68     | K    |      | key (utf-8)                                           |
| 68+K   | H    |      | headers: repeated (u16 klen, key, u32 vlen, value)    |
| 68+K+H | rest |      | body                                                  |

CANCEL (2): seq u64 @12, target_pos i64 @20, topic_id u32 @28, cancelled_ms i64 @32.
DELIVER (4): seq u64 @12, topic_id u32 @20, body_size u32 @24, body_pos i64 @28,
deliver_at_ms i64 @36, delivered_ms i64 @44 (refers to the body record; no copy).
ACK (5): topic_id u32 @12, group length G u16 @16, reserved u16, count N u32 @20,
group @24, then N u64 ready-queue offsets.
TOPIC (6): topic_id u32 @12, then the topic name (utf-8).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from ..errors import CorruptData

__all__ = [
    "FRAME",
    "Ack",
    "Cancel",
    "Deliver",
    "Message",
    "Record",
    "RecordType",
    "TopicDef",
    "decode",
    "decode_headers",
    "encode_ack",
    "encode_cancel",
    "encode_deliver",
    "encode_headers",
    "encode_message",
    "encode_topic",
    "frame_length",
]

VERSION = 1
_FRAME = struct.Struct("<IIBBH")
FRAME = _FRAME.size
_MSG = struct.Struct("<QqqIIHHIQq")
_CANCEL = struct.Struct("<QqIq")
_DELIVER = struct.Struct("<QIIqqq")
_ACK = struct.Struct("<IHHI")
_TOPIC = struct.Struct("<I")
_HKEY = struct.Struct("<H")
_HVAL = struct.Struct("<I")
MESSAGE_FIXED = FRAME + _MSG.size


class RecordType(enum.IntEnum):
    SCHEDULE = 1
    CANCEL = 2
    ROLL = 3
    DELIVER = 4
    ACK = 5
    TOPIC = 6


@dataclass(frozen=True, slots=True)
class Message:
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


@dataclass(frozen=True, slots=True)
class Cancel:
    seq: int
    target_pos: int
    topic_id: int
    cancelled_ms: int


@dataclass(frozen=True, slots=True)
class Deliver:
    seq: int
    topic_id: int
    body_size: int
    body_pos: int
    deliver_at_ms: int
    delivered_ms: int


@dataclass(frozen=True, slots=True)
class Ack:
    topic_id: int
    group: str
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicDef:
    topic_id: int
    name: str


Record = Message | Cancel | Deliver | Ack | TopicDef


def _frame(rtype: RecordType, payload: bytes) -> bytes:
    tail = bytes((rtype, VERSION, 0, 0))
    crc = crc32c.crc32c(payload, crc32c.crc32c(tail))
    return struct.pack("<II", FRAME + len(payload), crc) + tail + payload


def encode_headers(headers: dict[str, str]) -> bytes:
    parts: list[bytes] = []
    for k, v in headers.items():
        kb, vb = k.encode(), v.encode()
        parts += (_HKEY.pack(len(kb)), kb, _HVAL.pack(len(vb)), vb)
    return b"".join(parts)


def decode_headers(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    try:
        while i < len(data):
            (kl,) = _HKEY.unpack_from(data, i)
            i += 2
            k = data[i : i + kl].decode()
            i += kl
            (vl,) = _HVAL.unpack_from(data, i)
            i += 4
            out[k] = data[i : i + vl].decode()
            i += vl
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptData(f"bad headers block: {exc}") from exc
    if i != len(data):
        raise CorruptData("bad headers block: trailing bytes")
    return out


def encode_message(
    rtype: RecordType,
    *,
    seq: int,
    deliver_at_ms: int,
    accepted_ms: int,
    epoch: int,
    topic_id: int,
    roll_count: int,
    key: bytes,
    headers: bytes,
    body: bytes,
    replaces_seq: int = 0,
    origin_pos: int = -1,
) -> bytes:
    fixed = _MSG.pack(
        seq,
        deliver_at_ms,
        accepted_ms,
        epoch,
        topic_id,
        roll_count,
        len(key),
        len(headers),
        replaces_seq,
        origin_pos,
    )
    return _frame(rtype, fixed + key + headers + body)


def encode_cancel(seq: int, target_pos: int, topic_id: int, cancelled_ms: int) -> bytes:
    return _frame(RecordType.CANCEL, _CANCEL.pack(seq, target_pos, topic_id, cancelled_ms))


def encode_deliver(d: Deliver) -> bytes:
    return _frame(
        RecordType.DELIVER,
        _DELIVER.pack(d.seq, d.topic_id, d.body_size, d.body_pos, d.deliver_at_ms, d.delivered_ms),
    )


def encode_ack(topic_id: int, group: str, offsets: list[int]) -> bytes:
    g = group.encode()
    payload = _ACK.pack(topic_id, len(g), 0, len(offsets)) + g
    return _frame(RecordType.ACK, payload + struct.pack(f"<{len(offsets)}Q", *offsets))


def encode_topic(topic_id: int, name: str) -> bytes:
    return _frame(RecordType.TOPIC, _TOPIC.pack(topic_id) + name.encode())


def frame_length(data: bytes | memoryview, offset: int = 0) -> int:
    """The record length stored at ``offset`` (0 if fewer than 4 bytes remain)."""
    if len(data) - offset < 4:
        return 0
    return int.from_bytes(data[offset : offset + 4], "little")


def decode(data: bytes | memoryview, offset: int = 0) -> tuple[Record, int]:
    """Decode the record at ``offset``; return it and its length.

    Raises ``CorruptData`` for a short, torn or corrupt record.
    """
    if len(data) - offset < FRAME:
        raise CorruptData("truncated record frame")
    length, crc, rtype, version, _ = _FRAME.unpack_from(data, offset)
    if length < FRAME or length > len(data) - offset:
        raise CorruptData(f"record length {length} out of range")
    if crc32c.crc32c(data[offset + 8 : offset + length]) != crc:
        raise CorruptData("record CRC mismatch")
    if version != VERSION:
        raise CorruptData(f"record version {version} unsupported")
    p = offset + FRAME
    end = offset + length
    try:
        kind = RecordType(rtype)
    except ValueError as exc:
        raise CorruptData(f"unknown record type {rtype}") from exc
    try:
        rec: Record
        if kind in (RecordType.SCHEDULE, RecordType.ROLL):
            seq, due, acc, epoch, tid, rolls, kl, hl, repl, origin = _MSG.unpack_from(data, p)
            k0 = p + _MSG.size
            h0 = k0 + kl
            b0 = h0 + hl
            if b0 > end:
                raise CorruptData("message lengths exceed record")
            rec = Message(
                kind,
                seq,
                due,
                acc,
                epoch,
                tid,
                rolls,
                repl,
                origin,
                bytes(data[k0:h0]).decode(),
                bytes(data[h0:b0]),
                bytes(data[b0:end]),
            )
        elif kind is RecordType.CANCEL:
            rec = Cancel(*_CANCEL.unpack_from(data, p))
        elif kind is RecordType.DELIVER:
            rec = Deliver(*_DELIVER.unpack_from(data, p))
        elif kind is RecordType.ACK:
            tid, gl, _, n = _ACK.unpack_from(data, p)
            g0 = p + _ACK.size
            group = bytes(data[g0 : g0 + gl]).decode()
            offsets = struct.unpack_from(f"<{n}Q", data, g0 + gl)
            rec = Ack(tid, group, tuple(offsets))
        else:
            (tid,) = _TOPIC.unpack_from(data, p)
            rec = TopicDef(tid, bytes(data[p + _TOPIC.size : end]).decode())
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptData(f"malformed {kind.name} record: {exc}") from exc
    return rec, length
