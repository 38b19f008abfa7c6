"""Which string field of a protobuf message's bytes is not UTF-8 (pure).

protobuf refuses a proto3 message with invalid UTF-8 in a ``string`` field but
its error does not say which field. ``bad_utf8_field`` walks the wire format
itself, guided by the message's descriptor, and names the first such field by
its path in the request, as the servicers name fields: ``topic``,
``messages[2].key``, ``messages[0].headers`` (a map: the map's name), ``ids[3]``.

Only used on the refusal path (the bytes already failed to decode), so it is
written for clarity, not speed; but it runs on the server's event loop, so it
looks at no more than ``MAX_FIELDS`` fields (a hostile 64 MiB of tiny fields
would take half a minute). It gives up (None) past them, and on anything else
that is wrong with the bytes: a truncated field, an unknown wire type, nesting
deeper than ``MAX_DEPTH``.

Wire format: each field is a varint key (field number << 3 | wire type)
followed by a varint (type 0), 8 bytes (1), a varint length and that many
bytes (2: strings, bytes, sub-messages, map entries, packed numbers) or 4 bytes
(5); types 3 and 4 (groups) are not used by proto3.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_DEPTH", "MAX_FIELDS", "bad_utf8_field"]

MAX_DEPTH = 16
"""Sub-messages followed at most (delayq's requests nest two deep)."""
MAX_FIELDS = 10_000
"""Fields looked at, at most: some 30 ms (a Schedule of 1,000 messages with a key
and a header each)."""

_TYPE_STRING = 9  # FieldDescriptor.TYPE_STRING
_TYPE_MESSAGE = 11  # FieldDescriptor.TYPE_MESSAGE


class _GiveUp(Exception):
    """The bytes are broken in some other way than UTF-8, or too many to look at."""


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at ``i`` and the position after it."""
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise _GiveUp
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def _walk(descriptor: Any, data: bytes, prefix: str, depth: int, left: list[int]) -> str | None:
    """``left``: how many more fields may be looked at (shared by every level)."""
    seen: dict[int, int] = {}  # occurrences of each repeated field so far
    i = 0
    while i < len(data):
        left[0] -= 1
        if left[0] < 0:
            raise _GiveUp
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(data, i)
            continue
        if wire in (1, 5):
            i += 8 if wire == 1 else 4
            continue
        if wire != 2:
            raise _GiveUp
        size, i = _varint(data, i)
        if i + size > len(data):
            raise _GiveUp
        value, i = data[i : i + size], i + size
        field = descriptor.fields_by_number.get(number)
        if field is None or field.type not in (_TYPE_STRING, _TYPE_MESSAGE):
            continue
        is_map = field.type == _TYPE_MESSAGE and field.message_type.GetOptions().map_entry
        name = prefix + field.name
        if field.is_repeated and not is_map:
            n = seen[number] = seen.get(number, -1) + 1
            name = f"{name}[{n}]"
        if field.type == _TYPE_STRING:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return str(name)
        elif depth < MAX_DEPTH:
            inner = _walk(field.message_type, value, "" if is_map else f"{name}.", depth + 1, left)
            if inner is not None:
                return str(name) if is_map else inner
    return None


def bad_utf8_field(descriptor: Any, data: bytes) -> str | None:
    """The path of the first ``string`` field in ``data`` (a message of
    ``descriptor``, a protobuf ``Descriptor``) whose bytes are not UTF-8; None when
    there is none or the bytes are malformed otherwise."""
    try:
        return _walk(descriptor, data, "", 0, [MAX_FIELDS])
    except _GiveUp:
        return None
