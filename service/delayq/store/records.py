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
| 60     | 8    | i64  | origin_pos: ROLL: position of the original SCHEDULE;   |
|        |      |      | SCHEDULE: position of the message it replaces, or -1  |
| 68     | K    |      | key (utf-8)                                           |
| 68+K   | H    |      | headers: repeated (u16 klen, key, u32 vlen, value)    |
| 68+K+H | rest |      | body                                                  |

CANCELS (7): the cancels of one call in one record (one CRC for all): cancelled_ms
i64 @12, count N u32 @20, reserved u32 @24, then N entries of 32 bytes from @28:
seq u64, target_pos i64, topic_id u32, reserved u32, deliver_at_ms i64 (of the
cancelled message).
CANCEL (2): one cancel per record, as delayq wrote them before CANCELS (read, no
longer written): seq u64 @12, target_pos i64 @20, topic_id u32 @28, cancelled_ms
i64 @32, deliver_at_ms i64 @40.
DELIVER (4): seq u64 @12, topic_id u32 @20, body_size u32 @24, body_pos i64 @28,
deliver_at_ms i64 @36, delivered_ms i64 @44 (refers to the body record; no copy).
ACK (5): topic_id u32 @12, group length G u16 @16, reserved u16, count N u32 @20,
group @24, then N u64 ready-queue offsets.
TOPIC (6): topic_id u32 @12, then the topic name (utf-8).
"""

from __future__ import annotations

import array
import contextlib
import enum
import mmap
import struct
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import crc32c
import numpy as np

from ..errors import CorruptData
from ..pieces import FEW, high, low, rows_at, spans, strided

Buffer = bytes | memoryview | mmap.mmap
"""What records are decoded from: a read chunk or a segment's memory map."""

__all__ = [
    "FRAME",
    "MESSAGE_DTYPE",
    "Ack",
    "Cancel",
    "Cancels",
    "Deliver",
    "Message",
    "MessageColumns",
    "Record",
    "RecordType",
    "TopicDef",
    "decode",
    "decode_headers",
    "encode_ack",
    "encode_cancels",
    "encode_deliver",
    "encode_delivers",
    "encode_headers",
    "encode_message",
    "encode_messages",
    "encode_topic",
    "frame_length",
    "message_columns",
    "message_heads",
    "message_payloads",
]

VERSION = 1
_FRAME = struct.Struct("<IIBBH")
FRAME = _FRAME.size
_MSG = struct.Struct("<QqqIIHHIQq")
_CANCEL = struct.Struct("<QqIqq")
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
    CANCELS = 7


_SCHEDULE, _ROLL = RecordType.SCHEDULE, RecordType.ROLL


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


class Cancel(NamedTuple):
    seq: int
    target_pos: int
    topic_id: int
    cancelled_ms: int
    deliver_at_ms: int


class Cancels(NamedTuple):
    """A CANCELS record: entry i cancels message ``seq[i]`` at ``target_pos[i]``."""

    cancelled_ms: int
    seq: tuple[int, ...]
    target_pos: tuple[int, ...]
    topic_id: tuple[int, ...]
    deliver_at_ms: tuple[int, ...]


class Deliver(NamedTuple):
    seq: int
    topic_id: int
    body_size: int
    body_pos: int
    deliver_at_ms: int
    delivered_ms: int


class Ack(NamedTuple):
    topic_id: int
    group: str
    offsets: tuple[int, ...]


class TopicDef(NamedTuple):
    topic_id: int
    name: str


Record = Message | Cancel | Cancels | Deliver | Ack | TopicDef


_TAILS = {t: bytes((t, VERSION, 0, 0)) for t in RecordType}
_TAIL_CRCS = {t: crc32c.crc32c(tail) for t, tail in _TAILS.items()}  # constant per type
_LEN_CRC = struct.Struct("<II")
_U32 = struct.Struct("<I")
assert array.array("I").itemsize == 4  # the C unsigned int of _u32s


def _frame(rtype: RecordType, payload: bytes) -> bytes:
    crc = crc32c.crc32c(payload, _TAIL_CRCS[rtype])
    return _LEN_CRC.pack(FRAME + len(payload), crc) + _TAILS[rtype] + payload


def _stride_crcs(data: Any, count: int, size: int) -> np.ndarray:
    """The CRC32C each of ``count`` records of ``size`` bytes, laid end to end from
    the start of ``data``, carries: of its bytes [8, size). One call per record,
    over slices cut by a cached getter."""
    covered = strided(data, count, size, size - 8, 8)
    return _u32s(map(crc32c.crc32c, covered))


def _span_crcs(data: Any, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The CRC32C of each record [start, end) of ``data`` covers: its bytes
    [start + 8, end). One call per record; the slices (exports of ``data``) are
    released on return, so a bytearray may be resized afterwards."""
    covered = spans(memoryview(data), (starts + 8).tolist(), ends.tolist())
    return _u32s(map(crc32c.crc32c, covered))


def _u32s(values: Iterator[int]) -> np.ndarray:
    """Python ints (CRCs) as a uint32 array, through the C-level ``array`` (faster
    than ``np.fromiter`` by ~1.5 µs per hundred)."""
    got: np.ndarray = np.frombuffer(array.array("I", values), dtype=np.uint32)
    return got.astype("<u4", copy=False)  # the frame's byte order (no copy on x86, ARM)


def encode_headers(headers: dict[str, str]) -> bytes:
    parts: list[bytes] = []
    for k, v in headers.items():
        kb, vb = k.encode(), v.encode()
        parts += (_HKEY.pack(len(kb)), kb, _HVAL.pack(len(vb)), vb)
    return b"".join(parts)


def decode_headers(data: bytes) -> dict[str, str]:
    if not data:
        return {}
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


_FRAME_FIELDS = [
    ("length", "<u4"),
    ("crc", "<u4"),
    ("type", "u1"),
    ("version", "u1"),
    ("reserved", "<u2"),
]
_MSG_DTYPE = np.dtype(
    [
        *_FRAME_FIELDS,
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
assert _MSG_DTYPE.itemsize == MESSAGE_FIXED
MESSAGE_DTYPE = _MSG_DTYPE


def encode_messages(
    rtype: RecordType,
    seq: Sequence[int] | np.ndarray,
    deliver_at_ms: Sequence[int] | np.ndarray,
    accepted_ms: Sequence[int] | np.ndarray | int,
    epoch: Sequence[int] | np.ndarray | int,
    topic_id: Sequence[int] | np.ndarray | int,
    roll_count: Sequence[int] | np.ndarray | int,
    keys: Sequence[bytes] | None,
    headers: Sequence[bytes] | None,
    bodies: Sequence[bytes],
    replaces_seq: Sequence[int] | np.ndarray | int = 0,
    origin_pos: Sequence[int] | np.ndarray | int = -1,
    body_sizes: np.ndarray | None = None,
) -> tuple[bytes | bytearray | memoryview, np.ndarray, np.ndarray]:
    """Encode many SCHEDULE/ROLL records into one buffer (the only encoder of the type).
    ``keys``/``headers`` None: all empty; ``body_sizes``: the bodies' lengths if known.

    Returns the buffer, each record's offset in it and each record's length."""
    n = len(bodies)
    if n < FEW:  # a few (a single schedule): struct packing, no numpy set-up
        columns = (seq, deliver_at_ms, accepted_ms, epoch, topic_id, roll_count)
        return _few_messages(rtype, n, (*columns, replaces_seq, origin_pos), keys, headers, bodies)
    fixed = np.zeros(n, dtype=_MSG_DTYPE)
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
    if keys is None and headers is None and low(lengths) == high(lengths):
        # one size (the usual batch): the records are the rows of one 2-D array
        size = int(lengths[0])
        rows = np.empty((n, size), dtype=np.uint8)
        rows[:, :MESSAGE_FIXED] = fixed.view(np.uint8).reshape(n, MESSAGE_FIXED)
        rows[:, MESSAGE_FIXED:] = np.frombuffer(b"".join(bodies), np.uint8).reshape(n, -1)
        view = rows.data.cast("B")
        rows[:, 4:8] = _stride_crcs(view, n, size).view(np.uint8).reshape(n, 4)
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
    crcs = _span_crcs(buf, offsets, offsets + lengths)  # each cut by its own length
    raw = np.frombuffer(buf, dtype=np.uint8)
    raw[(offsets + 4)[:, None] + np.arange(4)] = crcs.view(np.uint8).reshape(n, 4)
    del raw
    return buf, offsets, lengths


def encode_message(
    rtype: RecordType,
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
    """One SCHEDULE/ROLL record: the same bytes as a batch of one of
    ``encode_messages``, packed as a struct (a batch of a few records uses this)."""
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
    return _frame(rtype, b"".join((fixed, key, headers, body)))


def _few_messages(
    rtype: RecordType, n: int, columns: Sequence[Any], keys: Any, headers: Any, bodies: Any
) -> tuple[bytes, np.ndarray, np.ndarray]:
    """``encode_messages`` one record at a time (for a few records)."""
    cols = [
        c.tolist() if isinstance(c, np.ndarray) else list(c) if isinstance(c, Sequence) else [c] * n
        for c in columns
    ]
    empty = [b""] * n
    fixed, ends = cols[:6], cols[6:]  # seq .. roll_count; replaces_seq, origin_pos
    rows = zip(
        *fixed,
        keys if keys is not None else empty,
        headers if headers is not None else empty,
        bodies,
        *ends,
        strict=True,
    )
    recs = [encode_message(rtype, *row) for row in rows]
    lengths = np.fromiter(map(len, recs), dtype=np.int64, count=n)
    return b"".join(recs), np.cumsum(lengths) - lengths, lengths


_CANCELS_HEAD = struct.Struct("<qII")  # cancelled_ms, count, reserved
_CANCELS_ENTRY = struct.Struct("<QqIIq")
_CANCELS_DTYPE = np.dtype(
    [
        ("seq", "<u8"),
        ("target_pos", "<i8"),
        ("topic_id", "<u4"),
        ("reserved", "<u4"),
        ("deliver_at_ms", "<i8"),
    ]
)
assert _CANCELS_DTYPE.itemsize == _CANCELS_ENTRY.size


def encode_cancels(
    seq: np.ndarray,
    target_pos: np.ndarray,
    topic_id: np.ndarray,
    cancelled_ms: int,
    deliver_at_ms: np.ndarray,
) -> bytes:
    """One CANCELS record for many cancels (the only encoder of the type): a few
    entries packed one by one, more as one array; the same bytes either way."""
    n = len(seq)
    if n < FEW:
        cols = (seq, target_pos, topic_id, deliver_at_ms)
        rows = zip(*(c.tolist() for c in cols), strict=True)
        entries = b"".join(_CANCELS_ENTRY.pack(s, pos, t, 0, due) for s, pos, t, due in rows)
    else:
        table = np.zeros(n, dtype=_CANCELS_DTYPE)
        table["seq"], table["target_pos"] = seq, target_pos
        table["topic_id"], table["deliver_at_ms"] = topic_id, deliver_at_ms
        entries = table.tobytes()
    return _frame(RecordType.CANCELS, _CANCELS_HEAD.pack(cancelled_ms, n, 0) + entries)


def _decode_cancels(data: Buffer, p: int, end: int) -> Cancels:
    cancelled_ms, n, _ = _CANCELS_HEAD.unpack_from(data, p)
    first = p + _CANCELS_HEAD.size
    if end - first != n * _CANCELS_ENTRY.size:
        raise CorruptData(f"CANCELS record of {n} entries has {end - first} bytes for them")
    table = np.frombuffer(data, dtype=_CANCELS_DTYPE, count=n, offset=first)
    return Cancels(
        cancelled_ms,
        *(tuple(table[c].tolist()) for c in ("seq", "target_pos", "topic_id", "deliver_at_ms")),
    )


def _encode_fixed(dtype: np.dtype, rtype: RecordType, n: int, **fields: Any) -> bytes:
    """``n`` framed records of one fixed-size type, CRCs stamped."""
    recs = np.zeros(n, dtype=dtype)
    recs["length"] = dtype.itemsize
    recs["type"] = rtype
    recs["version"] = VERSION
    for name, value in fields.items():
        recs[name] = value
    recs["crc"] = _stride_crcs(memoryview(recs.tobytes()), n, dtype.itemsize)
    return recs.tobytes()


class MessageColumns(NamedTuple):
    """Message records as columns: the fixed parts (``MESSAGE_DTYPE``), a mask of
    the valid ones, and keys / raw headers / bodies (rows not valid hold empties;
    the three lists are empty when the payload was not asked for)."""

    heads: np.ndarray
    ok: np.ndarray
    keys: list[str]
    headers: list[bytes]
    bodies: list[bytes]


def message_payloads(
    data: bytes | mmap.mmap, offsets: np.ndarray, heads: np.ndarray, ok: np.ndarray
) -> tuple[list[str], list[bytes], list[bytes]]:
    """Keys, raw headers and bodies of the valid message records at ``offsets``
    (``heads``/``ok`` from ``message_heads``), cut with one C call per column.
    A key that is not UTF-8 clears its row in ``ok``."""
    n = len(offsets)
    klen = heads["key_len"].astype(np.int64)
    hlen = heads["headers_len"].astype(np.int64)
    k0 = offsets + MESSAGE_FIXED
    b0 = k0 + klen + hlen
    end = np.where(ok, offsets + heads["length"].astype(np.int64), b0)  # junk rows: empty
    bodies = list(spans(data, b0.tolist(), end.tolist())) if n else []
    keys = [""] * n
    headers = [b""] * n
    if ok.any() and klen[ok].any():
        for i in np.flatnonzero(ok & (klen > 0)).tolist():
            try:
                keys[i] = data[k0[i] : k0[i] + klen[i]].decode()
            except UnicodeDecodeError:
                ok[i] = False
    if ok.any() and hlen[ok].any():
        for i in np.flatnonzero(ok & (hlen > 0)).tolist():
            headers[i] = data[k0[i] + klen[i] : b0[i]]
    return keys, headers, bodies


def message_columns(
    data: bytes | mmap.mmap, offsets: np.ndarray, *, payload: bool
) -> MessageColumns:
    """The SCHEDULE/ROLL records at ``offsets`` in ``data`` as columns (``payload``
    False: heads and mask only), checked as ``decode`` checks them. A few records
    are decoded one by one (numpy's fixed cost per call is ~1 µs, a few dozen
    calls for a batch: more than a record costs alone); more in one vectorised
    pass (``message_heads``, ``message_payloads``). Both give the same columns."""
    if len(offsets) < FEW:
        return _few_columns(data, offsets.tolist(), payload)
    heads, ok = message_heads(data, offsets)
    if not payload:
        return MessageColumns(heads, ok, [], [], [])
    return MessageColumns(heads, ok, *message_payloads(data, offsets, heads, ok))


def _few_columns(data: bytes | mmap.mmap, offsets: list[int], payload: bool) -> MessageColumns:
    """``message_columns`` one record at a time (for a few records), by ``decode``."""
    raw = bytearray()
    ok: list[bool] = []
    keys: list[str] = []
    headers: list[bytes] = []
    bodies: list[bytes] = []
    for off in offsets:
        rec: Record | None = None
        if off >= 0:
            with contextlib.suppress(CorruptData):
                rec = decode(data, off, payload=payload)[0]
        if isinstance(rec, Message):
            raw += data[off : off + MESSAGE_FIXED]
            ok.append(True)
            if payload:
                keys.append(rec.key)
                headers.append(rec.headers)
                bodies.append(rec.body)
        else:  # junk row: zeros and empties
            raw += bytes(MESSAGE_FIXED)
            ok.append(False)
            if payload:
                keys.append("")
                headers.append(b"")
                bodies.append(b"")
    heads = np.frombuffer(raw, dtype=_MSG_DTYPE) if raw else np.zeros(0, dtype=_MSG_DTYPE)
    return MessageColumns(heads, np.array(ok, dtype=bool), keys, headers, bodies)


def message_heads(data: Buffer, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fixed part of the SCHEDULE/ROLL records at ``offsets`` in ``data``, as an
    array (``seq``, ``deliver_at_ms``, ``epoch``, ``topic_id``, ``type``, ...), and a
    mask of the ones that are whole, of a message type and pass their CRC (the
    batch form of ``decode(..., payload=False)``). Rows not in the mask are junk."""
    uniform = _uniform_heads(data, offsets)
    if uniform is not None:
        return uniform
    fits = offsets + MESSAGE_FIXED <= len(data)
    if fits.all():
        heads = rows_at(data, offsets, _MSG_DTYPE)
    else:
        heads = np.zeros(len(offsets), dtype=_MSG_DTYPE)
        heads[fits] = rows_at(data, offsets[fits], _MSG_DTYPE)
    length = heads["length"].astype(np.int64)
    inner = MESSAGE_FIXED + heads["key_len"].astype(np.int64) + heads["headers_len"]
    ok = (length >= inner) & (offsets + length <= len(data)) & fits  # as ``decode`` checks
    ok &= (heads["type"] | 2) == 3  # SCHEDULE (1) or ROLL (3)
    ok &= heads["version"] == VERSION
    rows = np.flatnonzero(ok)
    if len(rows):
        start, size = offsets[rows], length[rows]
        one = int(size[0])
        if low(size) == high(size):  # one length (the usual batch): copied packed, cut regularly
            packed = rows_at(data, start, np.dtype((np.void, one))).view(np.uint8)
            crcs = _stride_crcs(packed.data, len(rows), one)
        else:
            crcs = _span_crcs(data, start, start + size)
        ok[rows] = crcs == heads["crc"][rows]
    return heads, ok


_UNIFORM_BYTES = 4 << 20  # the most one gather of whole records may copy


def _uniform_heads(data: Buffer, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``message_heads`` for the usual batch, whose records are all as long as the
    first (one size of body): the whole records are gathered once, and the heads
    cut from that copy. None unless every row is whole and passes the structural
    checks (the general path then judges each row); only CRCs may fail here."""
    n = len(offsets)
    first = int(offsets[0]) if n else -1
    if not 0 <= first <= len(data) - FRAME:
        return None
    one = _U32.unpack_from(data, first)[0]
    if not MESSAGE_FIXED <= one <= _UNIFORM_BYTES // n or int(low(offsets)) < 0:
        return None
    if int(high(offsets)) > len(data) - one:
        return None
    packed = rows_at(data, offsets, np.dtype((np.void, one))).view(np.uint8)  # end to end
    heads = packed.reshape(n, one)[:, :MESSAGE_FIXED].copy().view(_MSG_DTYPE).reshape(n)
    ok = heads["length"] == one  # as ``decode`` checks, below
    ok &= MESSAGE_FIXED + heads["key_len"] + heads["headers_len"].astype(np.int64) <= one
    ok &= (heads["type"] | 2) == 3  # SCHEDULE (1) or ROLL (3)
    ok &= heads["version"] == VERSION
    if not ok.all():
        return None
    good: np.ndarray = _stride_crcs(packed.data, n, one) == heads["crc"]
    return heads, good


_DELIVER_DTYPE = np.dtype(
    [
        *_FRAME_FIELDS,
        ("seq", "<u8"),
        ("topic_id", "<u4"),
        ("body_size", "<u4"),
        ("body_pos", "<i8"),
        ("deliver_at_ms", "<i8"),
        ("delivered_ms", "<i8"),
    ]
)


def encode_delivers(due: np.ndarray, delivered_ms: int) -> bytes:
    """DELIVER records for rows with seq, topic_id, cl_size, cl_pos, deliver_at_ms
    (the batch form; byte-identical to ``encode_deliver`` per row)."""
    if len(due) < FEW:
        names = ("seq", "topic_id", "cl_size", "cl_pos", "deliver_at_ms")
        rows = zip(*(due[c].tolist() for c in names), strict=True)
        return b"".join(
            encode_deliver(Deliver(s, tid, size, pos, at, delivered_ms))
            for s, tid, size, pos, at in rows
        )
    return _encode_fixed(
        _DELIVER_DTYPE,
        RecordType.DELIVER,
        len(due),
        seq=due["seq"],
        topic_id=due["topic_id"],
        body_size=due["cl_size"],
        body_pos=due["cl_pos"],
        deliver_at_ms=due["deliver_at_ms"],
        delivered_ms=delivered_ms,
    )


def encode_deliver(d: Deliver) -> bytes:
    """One DELIVER record (byte-identical to a row of ``encode_delivers``)."""
    return _frame(RecordType.DELIVER, _DELIVER.pack(*d))


def encode_ack(topic_id: int, group: str, offsets: Sequence[int]) -> bytes:
    g = group.encode()
    payload = _ACK.pack(topic_id, len(g), 0, len(offsets)) + g
    return _frame(RecordType.ACK, payload + struct.pack(f"<{len(offsets)}Q", *offsets))


def encode_topic(topic_id: int, name: str) -> bytes:
    return _frame(RecordType.TOPIC, _TOPIC.pack(topic_id) + name.encode())


def frame_length(data: Buffer, offset: int = 0) -> int:
    """The record length stored at ``offset`` (0 if fewer than 4 bytes remain)."""
    if len(data) - offset < 4:
        return 0
    return int.from_bytes(data[offset : offset + 4], "little")


def _decode_message(data: Buffer, rtype: int, p: int, end: int, payload: bool) -> Message:
    """The SCHEDULE/ROLL payload at ``p`` (frame and CRC already checked)."""
    try:
        seq, due, acc, epoch, tid, rolls, kl, hl, repl, origin = _MSG.unpack_from(data, p)
    except struct.error as exc:
        raise CorruptData(f"malformed message record: {exc}") from exc
    k0 = p + _MSG.size
    b0 = k0 + kl + hl
    if b0 > end:
        raise CorruptData("message lengths exceed record")
    kind = _SCHEDULE if rtype == 1 else _ROLL
    if not payload:
        return Message(kind, seq, due, acc, epoch, tid, rolls, repl, origin, "", b"", b"")
    try:
        key = bytes(data[k0 : k0 + kl]).decode() if kl else ""
    except UnicodeDecodeError as exc:
        raise CorruptData(f"malformed message key: {exc}") from exc
    hdrs = bytes(data[k0 + kl : b0]) if hl else b""
    return Message(
        kind, seq, due, acc, epoch, tid, rolls, repl, origin, key, hdrs, bytes(data[b0:end])
    )


def decode(data: Buffer, offset: int = 0, *, payload: bool = True) -> tuple[Record, int]:
    """Decode the record at ``offset``; return it and its length.

    ``payload=False`` leaves a message's key, headers and body empty (the CRC is
    still checked): for cancels and lookups of state, which need no body copy.
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
    if rtype == 1 or rtype == 3:  # SCHEDULE/ROLL: the hot path, ahead of the enum
        return _decode_message(data, rtype, p, end, payload), length
    try:
        kind = RecordType(rtype)
    except ValueError as exc:
        raise CorruptData(f"unknown record type {rtype}") from exc
    try:
        rec: Record
        if kind is RecordType.CANCELS:
            rec = _decode_cancels(data, p, end)
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
