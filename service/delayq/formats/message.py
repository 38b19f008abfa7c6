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
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from ..errors import CorruptData
from ..pieces import FEW, high, low, rows_at, spans, strided
from .frame import (
    FRAME,
    FRAME_FIELDS,
    VERSION,
    Buffer,
    RecordType,
    frame,
    open_frame,
    span_crcs,
    stride_crcs,
)

__all__ = [
    "MESSAGE_DTYPE",
    "MESSAGE_FIXED",
    "Message",
    "MessageColumns",
    "decode_messages",
    "encode_messages",
]

_MSG = struct.Struct("<QqqIIHHIQq")
MESSAGE_FIXED = FRAME + _MSG.size
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
_SCHEDULE, _ROLL = RecordType.SCHEDULE, RecordType.ROLL
_UNIFORM_BYTES = 4 << 20  # the most one gather of whole records may copy
_MESSAGE_FIELDS = (  # of MESSAGE_DTYPE, in the order ``records`` unpacks them
    "length",
    "type",
    "seq",
    "deliver_at_ms",
    "accepted_ms",
    "epoch",
    "topic_id",
    "roll_count",
    "replaces_seq",
    "origin_pos",
)
_EMPTY = ("", b"", b"")


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
    if keys is None and headers is None and low(lengths) == high(lengths):
        # one size (the usual batch): the records are the rows of one 2-D array
        size = int(lengths[0])
        rows = np.empty((n, size), dtype=np.uint8)
        rows[:, :MESSAGE_FIXED] = fixed.view(np.uint8).reshape(n, MESSAGE_FIXED)
        rows[:, MESSAGE_FIXED:] = np.frombuffer(b"".join(bodies), np.uint8).reshape(n, -1)
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
    recs = [
        frame(rtype, b"".join((_MSG.pack(s, d, a, e, t, r, len(k), len(h), rs, o), k, h, b)))
        for s, d, a, e, t, r, k, h, b, rs, o in rows
    ]
    lengths = np.fromiter(map(len, recs), dtype=np.int64, count=n)
    return b"".join(recs), np.cumsum(lengths) - lengths, lengths


# -- decoding ---------------------------------------------------------------------


class _Columns(NamedTuple):
    heads: np.ndarray
    ok: np.ndarray
    keys: list[str]
    headers: list[bytes]
    bodies: list[bytes]


class MessageColumns:
    """Message records as columns: the fixed parts (``heads``, of ``MESSAGE_DTYPE``),
    a mask of the valid ones (``ok``), and keys / raw headers / bodies (rows not
    valid hold empties; the three lists are empty when the payload was not asked
    for). ``record(i)`` is row ``i`` as a ``Message`` and its length.

    A few records decoded one by one keep their rows and build the columns on
    first use, so a batch of one costs little more than its record."""

    __slots__ = ("_cols", "_payload", "_rows")

    def __init__(self, cols: _Columns | None, rows: list[_Row] | None, payload: bool) -> None:
        """Either ``cols`` or the ``rows`` of a few records decoded one by one."""
        self._cols, self._rows, self._payload = cols, rows, payload

    @classmethod
    def junk(cls, n: int, *, payload: bool) -> MessageColumns:
        """``n`` rows, none valid (to be filled in)."""
        e: list[Any] = [b""] * n if payload else []
        keys: list[str] = [""] * n if payload else []
        heads, ok = np.zeros(n, MESSAGE_DTYPE), np.zeros(n, dtype=bool)
        return cls(_Columns(heads, ok, keys, e, list(e)), None, payload)

    def _columns(self) -> _Columns:
        if self._cols is not None:
            return self._cols
        rows = self._rows
        assert rows is not None
        raw = bytearray().join(
            bytes(MESSAGE_FIXED) if isinstance(r, CorruptData) else r[1] for r in rows
        )
        heads = np.frombuffer(raw, dtype=MESSAGE_DTYPE) if raw else np.zeros(0, MESSAGE_DTYPE)
        ok = np.array([not isinstance(r, CorruptData) for r in rows], dtype=bool)
        keys: list[str] = []
        headers: list[bytes] = []
        bodies: list[bytes] = []
        if self._payload:
            msgs = [None if isinstance(r, CorruptData) else r[0] for r in rows]
            keys = [m.key if m else "" for m in msgs]
            headers = [m.headers if m else b"" for m in msgs]
            bodies = [m.body if m else b"" for m in msgs]
        self._cols = _Columns(heads, ok, keys, headers, bodies)
        return self._cols

    @property
    def payload(self) -> bool:
        """Whether keys, headers and bodies were decoded."""
        return self._payload

    @property
    def heads(self) -> np.ndarray:
        return self._columns().heads

    @property
    def ok(self) -> np.ndarray:
        return self._columns().ok

    @property
    def keys(self) -> list[str]:
        return self._columns().keys

    @property
    def headers(self) -> list[bytes]:
        return self._columns().headers

    @property
    def bodies(self) -> list[bytes]:
        return self._columns().bodies

    def records(self) -> Iterator[tuple[Message, int] | None]:
        """Every row as ``record`` gives it, None for a row that is not valid: the
        batch form of ``record``, the fixed fields converted a column at a time.
        A generator: each message is made as it is taken (made all at once, the
        tuples of a large batch would keep the garbage collector busy)."""
        if self._rows is not None:
            for r in self._rows:
                yield None if isinstance(r, CorruptData) else (r[0], r[2])
            return
        cols = self._columns()
        h = cols.heads
        fields = zip(*(h[name].tolist() for name in _MESSAGE_FIELDS), strict=True)
        payloads = (
            zip(cols.keys, cols.headers, cols.bodies, strict=True)
            if self._payload
            else repeat(_EMPTY)
        )
        for ok, head, (key, hdrs, body) in zip(cols.ok.tolist(), fields, payloads, strict=False):
            if not ok:
                yield None
                continue
            length, t, seq, due, acc, epoch, tid, rolls, replaces, origin = head
            kind = _SCHEDULE if t == 1 else _ROLL
            yield (
                Message(kind, seq, due, acc, epoch, tid, rolls, replaces, origin, key, hdrs, body),
                length,
            )

    def record(self, i: int) -> tuple[Message, int]:
        """Row ``i`` as a ``Message``, and its record's length; ``CorruptData`` (why,
        when known) if it is not a valid message record."""
        if self._rows is not None:
            row = self._rows[i]
            if isinstance(row, CorruptData):
                raise row
            return row[0], row[2]
        cols = self._columns()
        if not cols.ok[i]:
            raise CorruptData("not a valid message record")
        h = cols.heads[i : i + 1].tolist()[0]
        payload = (
            (cols.keys[i], cols.headers[i], cols.bodies[i]) if self._payload else ("", b"", b"")
        )
        length, _, t, _, _, seq, due, acc, epoch, tid, rolls, _, _, replaces, origin = h
        msg = Message(RecordType(t), seq, due, acc, epoch, tid, rolls, replaces, origin, *payload)
        return msg, length


def decode_messages(
    data: Buffer, offsets: np.ndarray | Sequence[int], *, payload: bool = True
) -> MessageColumns:
    """The SCHEDULE/ROLL records at ``offsets`` in ``data`` (a batch; one record is
    a batch of one) as columns; ``payload`` False: heads and mask only (the CRC is
    still checked). A row that is not a valid message record is junk (``ok``
    False), never an error."""
    n = len(offsets)
    if n < FEW:  # a few: one by one, as Python values
        offs = offsets.tolist() if type(offsets) is np.ndarray else offsets
        rows = [_one(data, offs[0], payload)] if n == 1 else [_one(data, o, payload) for o in offs]
        return MessageColumns(None, rows, payload)
    offsets = np.asarray(offsets, dtype=np.int64)
    heads, ok = _uniform_heads(data, offsets) or _heads(data, offsets)
    cols = _Columns(heads, ok, *_payloads(data, offsets, heads, ok) if payload else ([], [], []))
    return MessageColumns(cols, None, payload)


_Row = tuple[Message, bytes, int] | CorruptData
"""A record decoded alone: the message, its fixed part as stored and its length,
or why it is not a valid message record."""


def _one(data: Buffer, offset: int, payload: bool) -> _Row:
    """The record at ``offset`` (see ``_Row``)."""
    try:
        rtype, length = open_frame(data, offset)
        if rtype != 1 and rtype != 3:
            return CorruptData(f"record type {rtype} is not a message")
        p, end = offset + FRAME, offset + length
        try:
            seq, due, acc, epoch, tid, rolls, kl, hl, repl, origin = _MSG.unpack_from(data, p)
        except struct.error as exc:
            return CorruptData(f"malformed message record: {exc}")
        k0 = p + _MSG.size
        b0 = k0 + kl + hl
        if b0 > end:
            return CorruptData("message lengths exceed record")
        kind = _SCHEDULE if rtype == 1 else _ROLL
        head = data[offset:k0]
        if type(head) is not bytes:  # a memoryview's slice: copied (it may be released)
            head = bytes(head)
        if not payload:
            msg = Message(kind, seq, due, acc, epoch, tid, rolls, repl, origin, "", b"", b"")
            return msg, head, length
        try:
            key = bytes(data[k0 : k0 + kl]).decode() if kl else ""
        except UnicodeDecodeError as exc:
            return CorruptData(f"malformed message key: {exc}")
        hdrs = bytes(data[k0 + kl : b0]) if hl else b""
        body = bytes(data[b0:end])
        msg = Message(kind, seq, due, acc, epoch, tid, rolls, repl, origin, key, hdrs, body)
        return msg, head, length
    except CorruptData as exc:
        return exc


def _sound(heads: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    """The checks of the fixed part of records ``length`` bytes long that need no
    look at the buffer: a message type of this version whose key and headers fit."""
    inner = MESSAGE_FIXED + heads["key_len"] + heads["headers_len"].astype(np.int64)
    ok: np.ndarray = inner <= length
    ok &= (heads["type"] | 2) == 3  # SCHEDULE (1) or ROLL (3)
    ok &= heads["version"] == VERSION
    return ok


def _heads(data: Buffer, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fixed parts of the records at ``offsets`` and the mask of valid ones,
    whatever the records (the general branch)."""
    fits = (offsets >= 0) & (offsets + MESSAGE_FIXED <= len(data))
    if fits.all():
        heads = rows_at(data, offsets, MESSAGE_DTYPE)
    else:
        heads = np.zeros(len(offsets), dtype=MESSAGE_DTYPE)
        heads[fits] = rows_at(data, offsets[fits], MESSAGE_DTYPE)
    length = heads["length"].astype(np.int64)
    ok = _sound(heads, length) & (offsets + length <= len(data)) & fits
    rows = np.flatnonzero(ok)
    if len(rows):
        start, size = offsets[rows], length[rows]
        one = int(size[0])
        if low(size) == high(size):  # one length (the usual batch): copied packed, cut regularly
            packed = rows_at(data, start, np.dtype((np.void, one))).view(np.uint8)
            crcs = stride_crcs(packed.data, len(rows), one)
        else:
            crcs = span_crcs(data, start, start + size)
        ok[rows] = crcs == heads["crc"][rows]
    return heads, ok


def _uniform_heads(data: Buffer, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``_heads`` for the usual batch, whose records are all as long as the first
    (one size of body): the whole records are gathered once, and the heads cut
    from that copy. None unless every row is whole and passes ``_sound`` (the
    general branch then judges each row); only CRCs may fail here."""
    n = len(offsets)
    first = int(offsets[0]) if n else -1
    if not 0 <= first <= len(data) - FRAME:
        return None
    one = int.from_bytes(data[first : first + 4], "little")
    if not MESSAGE_FIXED <= one <= _UNIFORM_BYTES // n or int(low(offsets)) < 0:
        return None
    if int(high(offsets)) > len(data) - one:
        return None
    packed = rows_at(data, offsets, np.dtype((np.void, one))).view(np.uint8)  # end to end
    heads = packed.reshape(n, one)[:, :MESSAGE_FIXED].copy().view(MESSAGE_DTYPE).reshape(n)
    if not ((heads["length"] == one) & _sound(heads, one)).all():
        return None
    good: np.ndarray = stride_crcs(packed.data, n, one) == heads["crc"]
    return heads, good


def _payloads(
    data: Buffer, offsets: np.ndarray, heads: np.ndarray, ok: np.ndarray
) -> tuple[list[str], list[bytes], list[bytes]]:
    """Keys, raw headers and bodies of the valid records at ``offsets`` (``heads``,
    ``ok`` from ``_heads``), cut with one C call per column. A key that is not
    UTF-8 clears its row in ``ok``."""
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
                keys[i] = bytes(data[k0[i] : k0[i] + klen[i]]).decode()
            except UnicodeDecodeError:
                ok[i] = False
    if ok.any() and hlen[ok].any():
        for i in np.flatnonzero(ok & (hlen > 0)).tolist():
            headers[i] = bytes(data[k0[i] + klen[i] : b0[i]])
    return keys, headers, bodies
