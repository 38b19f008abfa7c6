"""A message's headers block (pure): the ``H`` bytes a SCHEDULE/ROLL record
carries after its key (see ``message``). No magic, no version of its own (the
record's frame carries them).

Repeated for each header, in insertion order, little-endian:

| offset | size | type | meaning                 |
|-------:|-----:|------|-------------------------|
| 0      | 2    | u16  | key length KL           |
| 2      | KL   |      | key (utf-8)             |
| 2+KL   | 4    | u32  | value length VL         |
| 6+KL   | VL   |      | value (utf-8)           |

An empty dict is an empty block.
"""

from __future__ import annotations

import struct

from ..errors import CorruptData

__all__ = ["decode_headers", "encode_headers"]

_HKEY = struct.Struct("<H")
_HVAL = struct.Struct("<I")


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
