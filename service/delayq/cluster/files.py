"""The cluster's small files on disk: whole-file reads and atomic replacement.

Invariant: a reader of a file written by ``write_atomic`` sees the old content or
the new, never a mix or nothing (temp file in the same directory, fsync, rename,
fsync of the directory), so a node re-reading ``shards.json`` never takes a torn map.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["read_text", "write_atomic"]


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_text(path: Path) -> str | None:
    """The file's text, or None when there is no such file."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
