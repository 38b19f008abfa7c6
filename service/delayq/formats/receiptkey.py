"""The receipt key file (pure; no file I/O): ``<data>/receipt.key``, the shard's
secret for receipt MACs (see ``delayq.receipts``). Made with ``os.urandom`` at
the first start on a directory; a replica replaces it with its master's (it
comes with the replication stream), so every node of a shard checks the
receipts any of them handed out.

| offset | size | type  | meaning                                                     |
|-------:|-----:|-------|-------------------------------------------------------------|
| 0      | 32   |       | ``FileHeader``: magic b"DQRK", version 1, base 0,           |
|        |      |       | created_ms, param = key size (32)                           |
| 32     | 32   | bytes | the key                                                     |
| 64     | 4    | u32   | CRC32C of bytes [0, 64), little-endian                      |
"""

from __future__ import annotations

import struct

import crc32c

from ..errors import CorruptData
from ..receipts import KEY_SIZE
from .fileheader import HEADER_SIZE, FileHeader

__all__ = ["FILE_SIZE", "MAGIC", "decode", "encode"]

MAGIC = b"DQRK"
_CRC = struct.Struct("<I")
FILE_SIZE = HEADER_SIZE + KEY_SIZE + _CRC.size


def encode(key: bytes, created_ms: int) -> bytes:
    """The whole file holding ``key``."""
    if len(key) != KEY_SIZE:
        raise ValueError(f"a receipt key is {KEY_SIZE} bytes, not {len(key)}")
    body = FileHeader(MAGIC, 0, created_ms, KEY_SIZE).encode() + key
    return body + _CRC.pack(crc32c.crc32c(body))


def decode(data: bytes, what: str) -> bytes:
    """The key a file holds; ``CorruptData`` naming ``what`` if it is damaged."""
    header = FileHeader.decode(data, MAGIC, what)
    if header.param != KEY_SIZE or len(data) != FILE_SIZE:
        raise CorruptData(f"{what}: {len(data)} bytes, a {header.param}-byte key")
    (crc,) = _CRC.unpack_from(data, HEADER_SIZE + KEY_SIZE)
    if crc != crc32c.crc32c(data[: HEADER_SIZE + KEY_SIZE]):
        raise CorruptData(f"{what}: CRC mismatch")
    return data[HEADER_SIZE : HEADER_SIZE + KEY_SIZE]
