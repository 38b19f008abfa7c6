"""The shard's receipt key on disk: ``<data>/receipt.key`` (format:
``formats.receiptkey``). ``load_or_create`` makes it at the first start
(``os.urandom``); ``save`` replaces it (a replica taking its master's). Either
writes the whole file under ``receipt.key.new``, fsyncs it, renames it into
place and fsyncs the directory (``newfile``), so a crash leaves the old key or
the new, never a part. The file is readable by its owner only.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..formats import receiptkey
from ..receipts import KEY_SIZE
from .datadir import RECEIPT_KEY
from .newfile import create_file

__all__ = ["RECEIPT_KEY_FILE", "load_or_create", "save"]

RECEIPT_KEY_FILE = RECEIPT_KEY


def load_or_create(path: Path, now_ms: int) -> bytes:
    """The key saved at ``path``; a new random one saved there if there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        key = os.urandom(KEY_SIZE)
        save(path, key, now_ms)
        return key
    return receiptkey.decode(data, f"receipt key {path}")


def save(path: Path, key: bytes, now_ms: int) -> None:
    """Put ``key`` at ``path`` (replacing any), durably."""
    os.close(create_file(path, receiptkey.encode(key, now_ms), mode=0o600))
