"""Whole files replaced atomically, the one way the project does it (leaf: stdlib
only): the checkpoint and epoch history (``store.jsonfile``), every data file's
creation (``store.newfile``), the key indexes' file (``store.keyfile``), the
local cluster's ``shards.json`` and ``cluster.json``.

Invariant: after a crash at any moment a reader of ``path`` sees the old content
or the new, never a mix or nothing: the new bytes are written to a temp file in
the same directory and fsynced, renamed over ``path``, and the directory is
fsynced so the rename itself is durable. A temp file left by a kill is never
read (``.<name>.<pid>.tmp``) and is replaced by the next write.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["publish", "read_text", "sync_dir", "write_atomic", "write_atomic_with"]


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8)."""
    raw = data.encode() if isinstance(data, str) else data
    write_atomic_with(path, lambda f: f.write(raw))


def write_atomic_with(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Replace ``path`` with what ``write`` writes to the open file (streamed: a big
    file needs no copy in memory). It goes to a temp name beside it
    (``.<name>.<pid>.tmp``, never read), is fsynced and renamed into place: a kill
    leaves the old file or the new one, and maybe a stray temp file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        publish(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def publish(built: Path, path: Path) -> None:
    """Rename the fsynced file ``built`` to ``path`` (replacing any file there) and
    make the new name durable."""
    os.replace(built, path)
    sync_dir(path.parent)


def sync_dir(directory: Path) -> None:
    """Make the entries of ``directory`` (names made, renamed, removed) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
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
