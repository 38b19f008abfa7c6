"""``<data>/imports.idx`` on disk (format: ``formats.imports``): read whole, and
replaced whole and atomically (``newfile``) when a checkpoint saves the index."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..formats.imports import ENTRY_DTYPE, decode_imports, encode_imports
from .datadir import IMPORTS
from .newfile import create_file

__all__ = ["FILE", "load_imports", "save_imports"]

FILE = IMPORTS


def load_imports(data_dir: Path) -> np.ndarray:
    """The saved entries (none when there is no file)."""
    path = data_dir / FILE
    if not path.exists():
        return np.zeros(0, dtype=ENTRY_DTYPE)
    return decode_imports(path.read_bytes())


def save_imports(data_dir: Path, entries: np.ndarray, now_ms: int) -> None:
    data = encode_imports(entries, now_ms)
    os.close(create_file(data_dir / FILE, data[:32], fill=data[32:]))
