"""Compaction block files (``blocks/*.blk``, see ``timers.compaction.loading``) and the
messages the state map says are in a block.

Each file's header must carry the block its name says, and every entry up to
the length the checkpoint recorded must be a whole BLOCK record (CRC checked).
Bytes past that length are a note (``block-tail``: a start cuts them and appends
the records again from the log). Damage, never repaired (a block file is the
only copy of its messages once retention deleted their BLOCK records):

- ``block-short``: a file holds less than the checkpoint recorded;
- ``block-corrupt``: an entry the checkpoint covers is cut short or fails its CRC;
- ``block-orphan``: a message reads BLOCKED but no block file, nor a BLOCK
  record the next start replays, holds it (it would never be delivered).
"""

from __future__ import annotations

import numpy as np

from .. import formats
from ..errors import CorruptData
from ..formats.blockfile import MAGIC, decode_entries
from ..formats.fileheader import HEADER_SIZE
from ..formats.messagestate import BLOCKED
from ..store.datadir import BLOCKS
from .checker import Checker

__all__ = ["check"]


def check(c: Checker) -> None:
    folder = c.root / BLOCKS
    lengths = {} if c.ckpt is None else {int(k): v for k, v in c.ckpt.blocks.items()}
    held: list[np.ndarray] = [np.asarray(c.blocked_in_log, dtype=np.uint64)]
    for path in sorted(folder.glob("*.blk")) if folder.is_dir() else []:
        head = c.named_header(path, MAGIC, 15, "header says block {base}")
        if head is None:
            continue
        name = c.rel(path)
        data = path.read_bytes()
        covered = lengths.get(head.base, len(data) if c.ckpt is None else 0)
        if len(data) < covered:
            c.add(
                name,
                "block-short",
                len(data),
                f"{len(data)} bytes; the checkpoint saw {covered}",
                fixable=False,
            )
            covered = len(data)
        if len(data) > covered:
            c.add(
                name,
                "block-tail",
                covered,
                "bytes past the checkpoint's length: the next "
                "start cuts them and appends the records again",
                fixable=False,
                damage=False,
            )
        try:
            entries = decode_entries(data[:covered], HEADER_SIZE, name)
            for off, n in zip(entries.offsets.tolist(), entries.lengths.tolist(), strict=True):
                block, length = formats.decode(data, off)
                if not isinstance(block, formats.Block) or length != n:
                    raise CorruptData(f"entry at byte {off - 8} holds no BLOCK record")
                held.append(block.heads["seq"])
        except CorruptData as exc:
            c.add(name, "block-corrupt", None, str(exc), fixable=False)
        c.report.file(name).facts.update(bytes=len(data))
    _orphans(c, np.concatenate(held))


def _orphans(c: Checker, held: np.ndarray) -> None:
    """BLOCKED state bytes of messages no block holds."""
    states = c.states
    if states is None:
        return
    for (first, end), name in c.state_chunks:
        got = states.raw_many(np.arange(first, end, dtype=np.uint64))
        blocked = np.flatnonzero(got == BLOCKED).astype(np.uint64) + np.uint64(first)
        lost = blocked[~np.isin(blocked, held)]
        if len(lost):
            c.add(
                name,
                "block-orphan",
                int(lost[0]),
                f"{len(lost)} messages read BLOCKED but no block holds them (first: seq "
                f"{lost[0]}): they would never be delivered",
                fixable=False,
            )
