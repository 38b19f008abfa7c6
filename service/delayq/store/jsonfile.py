"""Small JSON files written atomically and checked by a CRC (the checkpoint, the
epoch history).

One file holds one object::

    {"body": {...}, "crc32c": <CRC32C of the body's compact sorted text>,
     "format": "<name>", "version": <n>}

``save`` replaces the file atomically (``delayq.atomicfile``): a crash leaves
the old file or the new, never a mix.
``load`` refuses (``CorruptData``) a file of another format or version, or one
whose body does not match its CRC.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import crc32c

from ..atomicfile import write_atomic
from ..errors import CorruptData

__all__ = ["load", "save"]


def _text(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def save(path: Path, fmt: str, version: int, body: dict[str, Any]) -> None:
    raw = _text(body)
    crc = crc32c.crc32c(raw.encode())  # of the body's text, which goes in as it is
    text = f'{{"body":{raw},"crc32c":{crc},"format":{json.dumps(fmt)},"version":{version}}}'
    write_atomic(path, text)


def load(path: Path, fmt: str, version: int, what: str) -> dict[str, Any] | None:
    """The body saved at ``path``, or None when there is no file yet."""
    if not path.exists():
        return None
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise CorruptData(f"{what} unreadable: {exc}") from exc
    if doc.get("format") != fmt or doc.get("version") != version:
        raise CorruptData(f"{what}: unknown format or version")
    body: dict[str, Any] = doc["body"]
    if crc32c.crc32c(_text(body).encode()) != doc.get("crc32c"):
        raise CorruptData(f"{what}: CRC mismatch")
    return body
