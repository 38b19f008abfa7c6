"""The packed wire form of ``delayq.v1`` (pure): a batch as columns instead of a
protobuf message per item, for Schedule (``PackedSchedule`` / ``PackedScheduled``),
Receive and Subscribe (``PackedReceived``) and Ack (``packed_receipts`` /
``outcomes``). Written and read here for the server and the client alike.

Byte layout (all little-endian; ``proto/delayq/v1/delayq.proto`` has the fields):

| column                          | bytes per item | type  | empty means            |
|---------------------------------|---------------:|-------|------------------------|
| ``Blobs.ends``                  | 4              | u32   | (required: the count)  |
| ``topic_index``                 | 2              | u16   | every item topics[0]   |
| ``deliver_at_ms``, ``delay_ms`` | 8              | i64   | not given for any      |
| received ``*_at_ms``            | 8              | i64   | (required)             |
| ``delay_level``                 | 4              | i32   | not given for any      |
| ``attempts``                    | 4              | u32   | (required)             |
| ``outcomes``                    | 1              | u8    | (required)             |
| ``if_exists``                   | 1              | u8    | all 0 (no check)       |
| ``dedup_window_ms``             | 8              | i64   | all 0 (no window)      |
| ``key_outcomes``                | 1              | u8    | all 0 (NEW)            |

``Blobs``: item i is ``data[ends[i-1]:ends[i]]`` (``ends[-1]`` read as 0), ends
never decreasing, the last equal to ``len(data)``. Text columns are UTF-8 (ids and
receipts ASCII). Invariant: whatever bytes a reader is given, it returns columns
of the batch's length or raises ``InvalidArgument`` naming the field
(``bodies.ends``, ``topic_index``, ...: the field as the table above names it), never
anything else. Blobs, written or read, need no numpy; the fixed-width columns
(``fixed``, ``pack_fixed``) import it when first called, so a client that sends one
message at a time never loads it.
"""

from __future__ import annotations

import array
import sys
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import InvalidArgument

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ReceivedColumns",
    "ScheduleColumns",
    "blob_bytes",
    "blob_texts",
    "fixed",
    "indexed_headers",
    "pack_blobs",
    "pack_fixed",
    "pack_headers",
    "pack_texts",
    "read_received",
    "read_schedule",
    "write_received",
]

_ENDS = "I"  # array's code of a u32 (native order: swapped below on a big-endian host)
assert array.array(_ENDS).itemsize == 4
_LIMIT = 2**32  # a blob's ends are u32


# ---------------------------------------------------------------- writing


def _put(into: Any, data: bytes, items: Sequence[bytes] | Sequence[str]) -> None:
    """``data`` (the items joined, each ``len`` bytes) into the ``Blobs`` ``into``."""
    if len(data) >= _LIMIT:  # past the reach of u32 ends (gRPC's message limit comes first)
        raise InvalidArgument("packed", f"{len(data)} bytes in one column; at most {_LIMIT - 1}")
    into.data = data
    ends = array.array(_ENDS, accumulate(map(len, items)))
    if sys.byteorder == "big":
        ends.byteswap()
    into.ends = ends.tobytes()


def pack_blobs(items: Sequence[bytes], into: Any) -> None:
    """``items`` into the ``Blobs`` message ``into``."""
    _put(into, b"".join(items), items)


def pack_texts(items: Sequence[str], into: Any) -> None:
    """``items`` as UTF-8 into the ``Blobs`` message ``into`` (one join and one
    encode when all are ASCII, as ids and receipts are)."""
    text = "".join(items)
    if text.isascii():  # (a flag of the string: no pass over it)
        _put(into, text.encode("ascii"), items)
    else:  # some are not ASCII: ends count bytes
        pack_blobs([t.encode() for t in items], into)


def pack_fixed(values: Sequence[int] | np.ndarray, dtype: str) -> bytes:
    """A fixed-width column (``dtype`` a numpy little-endian type, e.g. ``"<i8"``)."""
    import numpy as np

    return np.asarray(values, dtype=np.dtype(dtype)).tobytes()


def pack_headers(headers: Sequence[Mapping[str, str]] | None, into: Any) -> None:
    """The non-empty header maps of a column, by index, into a repeated
    ``IndexedHeaders`` field."""
    if headers is None:
        return
    add = into.add
    for i, h in enumerate(headers):
        if h:
            add(index=i).headers.update(h)


# ---------------------------------------------------------------- reading


def _ends(blobs: Any, field: str, count: int | None) -> list[int]:
    """A ``Blobs``' ends as ints, checked (no numpy: a batch of a hundred is read in
    a fraction of the set-up numpy's calls cost)."""
    raw = blobs.ends
    if len(raw) % 4:
        raise InvalidArgument(f"{field}.ends", f"{len(raw)} bytes: not whole uint32 values")
    column = array.array(_ENDS, raw)
    if sys.byteorder == "big":
        column.byteswap()
    ends = column.tolist()
    if count is not None and len(ends) != count:
        raise InvalidArgument(f"{field}.ends", f"{len(ends)} items for a batch of {count}")
    size = len(blobs.data)
    if ends and (ends[-1] != size or ends != sorted(ends)):  # sorted: one C pass when in order
        raise InvalidArgument(
            f"{field}.ends", f"must rise to the data's {size} bytes, never falling"
        )
    if not ends and size:
        raise InvalidArgument(f"{field}.ends", f"no items for {size} bytes of data")
    return ends


def _starts(ends: list[int]) -> list[int]:
    return [0, *ends[:-1]] if ends else []


def blob_bytes(blobs: Any, field: str, count: int | None = None) -> list[bytes]:
    """The items of a ``Blobs`` column (``count`` of them when given)."""
    ends = _ends(blobs, field, count)
    data = blobs.data
    return [data[s:e] for s, e in zip(_starts(ends), ends, strict=True)]


def blob_texts(blobs: Any, field: str, count: int | None = None) -> list[str]:
    """The items of a text ``Blobs`` column, decoded as UTF-8 (sliced from one
    decoded string when all ASCII)."""
    ends = _ends(blobs, field, count)
    data = blobs.data
    starts = _starts(ends)
    if data.isascii():
        text = data.decode("ascii")
        return [text[s:e] for s, e in zip(starts, ends, strict=True)]
    out = []
    for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
        try:
            out.append(data[s:e].decode())
        except UnicodeDecodeError:
            raise InvalidArgument(f"{field}[{i}]", "not valid UTF-8") from None
    return out


def fixed(raw: bytes, dtype: str, count: int, field: str) -> np.ndarray | None:
    """A fixed-width column of ``count`` values (as native int64); None when empty."""
    if not raw:
        return None
    import numpy as np

    t = np.dtype(dtype)
    if len(raw) != t.itemsize * count:
        raise InvalidArgument(
            field, f"{len(raw)} bytes for {count} values of {t.itemsize} bytes each"
        )
    return np.frombuffer(raw, t).astype(np.int64)


def indexed_headers(entries: Any, count: int, field: str) -> list[Mapping[str, str]] | None:
    """The headers column of a batch of ``count`` from its ``IndexedHeaders`` (None:
    no message has any)."""
    if not entries:
        return None
    out: list[Mapping[str, str]] = [{}] * count
    for k, e in enumerate(entries):
        i = e.index
        if i >= count:
            raise InvalidArgument(f"{field}[{k}].index", f"{i} is past the batch of {count}")
        if out[i]:
            raise InvalidArgument(f"{field}[{k}].index", f"message {i} given headers twice")
        out[i] = e.headers
    return out


class ScheduleColumns(NamedTuple):
    """A ``PackedSchedule`` read: the columns of ``ScheduleBatch`` (``topic`` one
    name or one per message; None: not given for any message)."""

    topic: str | list[str]
    bodies: list[bytes]
    keys: list[str] | None
    headers: list[Mapping[str, str]] | None
    deliver_at_ms: np.ndarray | None
    delay_ms: np.ndarray | None
    delay_level: np.ndarray | None
    if_exists: np.ndarray | None
    dedup_window_ms: np.ndarray | None


def read_schedule(p: Any, field: str = "packed") -> ScheduleColumns:
    """The columns of a ``PackedSchedule`` (``InvalidArgument`` naming the field of
    a malformed one). Values are not checked here (the engine checks them)."""
    bodies = blob_bytes(p.bodies, f"{field}.bodies")
    n = len(bodies)
    topics = list(p.topics)
    topic: str | list[str]
    if not p.topic_index:
        if n and len(topics) != 1:
            raise InvalidArgument(
                f"{field}.topics", f"{len(topics)} topics without topic_index: give one"
            )
        topic = topics[0] if topics else ""
    else:
        index = fixed(p.topic_index, "<u2", n, f"{field}.topic_index")
        assert index is not None
        if n and int(index.max()) >= len(topics):
            raise InvalidArgument(
                f"{field}.topic_index", f"{int(index.max())} is past the {len(topics)} topics"
            )
        topic = [topics[i] for i in index.tolist()]
    keys = blob_texts(p.keys, f"{field}.keys", n) if p.HasField("keys") else None
    return ScheduleColumns(
        topic,
        bodies,
        keys,
        indexed_headers(p.headers, n, f"{field}.headers"),
        fixed(p.deliver_at_ms, "<i8", n, f"{field}.deliver_at_ms"),
        fixed(p.delay_ms, "<i8", n, f"{field}.delay_ms"),
        fixed(p.delay_level, "<i4", n, f"{field}.delay_level"),
        fixed(p.if_exists, "<u1", n, f"{field}.if_exists"),
        fixed(p.dedup_window_ms, "<i8", n, f"{field}.dedup_window_ms"),
    )


class ReceivedColumns(NamedTuple):
    """A ``PackedReceived`` read: message i is ``ids[i]``, ``bodies[i]``, ...
    (``keys``/``headers`` None: none has any; ``receipts`` None: auto-acked)."""

    topic: str
    ids: list[str]
    bodies: list[bytes]
    keys: list[str] | None
    headers: list[Mapping[str, str]] | None
    deliver_at_ms: list[int]
    delivered_at_ms: list[int]
    receipts: list[str] | None
    attempts: list[int]


def write_received(
    into: Any,
    topic: str,
    ids: Sequence[str],
    bodies: Sequence[bytes],
    keys: Sequence[str],
    headers: Sequence[Mapping[str, str]],
    deliver_at_ms: Sequence[int],
    delivered_at_ms: Sequence[int],
    receipts: Sequence[str],
    attempts: Sequence[int],
) -> None:
    """One receive's columns into the ``PackedReceived`` ``into`` (keys, headers and
    receipts only when some are set)."""
    into.topic = topic
    pack_texts(ids, into.ids)
    pack_blobs(bodies, into.bodies)
    if any(keys):
        pack_texts(keys, into.keys)
    if any(headers):
        pack_headers(headers, into.headers)
    into.deliver_at_ms = pack_fixed(deliver_at_ms, "<i8")
    into.delivered_at_ms = pack_fixed(delivered_at_ms, "<i8")
    if any(receipts):
        pack_texts(receipts, into.receipts)
    into.attempts = pack_fixed(attempts, "<u4")


def read_received(p: Any, field: str = "packed") -> ReceivedColumns:
    """The columns of a ``PackedReceived`` (``InvalidArgument`` naming the field of
    a malformed one)."""
    ids = blob_texts(p.ids, f"{field}.ids")
    n = len(ids)

    def required(raw: bytes, dtype: str, name: str) -> list[int]:
        values = fixed(raw, dtype, n, f"{field}.{name}")
        if values is None:
            if n:
                raise InvalidArgument(f"{field}.{name}", f"empty for {n} messages")
            return []
        out: list[int] = values.tolist()
        return out

    return ReceivedColumns(
        p.topic,
        ids,
        blob_bytes(p.bodies, f"{field}.bodies", n),
        blob_texts(p.keys, f"{field}.keys", n) if p.HasField("keys") else None,
        indexed_headers(p.headers, n, f"{field}.headers"),
        required(p.deliver_at_ms, "<i8", "deliver_at_ms"),
        required(p.delivered_at_ms, "<i8", "delivered_at_ms"),
        blob_texts(p.receipts, f"{field}.receipts", n) if p.HasField("receipts") else None,
        required(p.attempts, "<u4", "attempts"),
    )
