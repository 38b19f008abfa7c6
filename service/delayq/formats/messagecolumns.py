"""The decoder of SCHEDULE and ROLL records (``message`` holds their layout and
the encoder): ``decode_messages`` reads a batch of them at given offsets into
``MessageColumns`` (pure: bytes in, columns out; no file I/O).

Invariants: a row that is not a valid message record (torn, flipped, of another
type or version, lengths past its end, a key not UTF-8) is junk (``ok`` False),
never an error; the CRC is checked whether or not the payload is asked for. A
few records (``FEW``) are decoded one by one with ``struct`` and keep their rows
(the columns are built on first use); more go through one vectorised pass, with
a faster branch for the usual batch whose records all have one length. Every
branch gives the same columns and the same rows.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from ..batchops import FEW, high, low, rows_at, spans
from ..errors import CorruptData
from .frame import FRAME, VERSION, Buffer, RecordType, open_frame, span_crcs, stride_crcs
from .message import MESSAGE_DTYPE, MESSAGE_FIXED, MESSAGE_STRUCT, Message

__all__ = ["MessageColumns", "decode_messages"]

_SCHEDULE, _ROLL = RecordType.SCHEDULE, RecordType.ROLL
_UNIFORM_BYTES = 4 << 20  # the most one gather of whole records may copy
_unpack_fixed = MESSAGE_STRUCT.unpack_from
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
            seq, due, acc, epoch, tid, rolls, kl, hl, repl, origin = _unpack_fixed(data, p)
        except struct.error as exc:
            return CorruptData(f"malformed message record: {exc}")
        k0 = p + MESSAGE_STRUCT.size
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
