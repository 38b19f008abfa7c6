"""The checks of a data directory, in the order they run (reads only; ``fix``
repairs what they found). Each file kind has its module:

- ``checker``: every file's 32-byte header, stray ``.new``/``.tmp`` files;
- ``checkpoint``: read first (the walks need its replay start), then checked
  against the logs' valid ends;
- ``logs``: CommitLog and TimerLog segments record by record, their tails, the
  kept records;
- ``wheel``: the TimerWheel's slots and chains against the TimerLog;
- ``statemap``: the state map against the records that ended messages;
- ``compaction.loading``: the compaction blocks' files, and the blocked messages they hold;
- ``ready``: the ready queues against the checkpoint's counts;
- ``epochs``, ``receiptkey``: the epoch history and the receipt key, readable;
- ``keyindex``: the saved key indexes against the CommitLog's keyed records.

Every file is opened through its ``store`` class, so the checks follow the
formats wherever their codecs live. Positions in findings are global log
positions (logs), slot numbers (wheel), seqs (state map) or entry indexes
(ready queues).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from . import blocks, checkpoint, epochs, keyindex, logs, ready, receiptkey, statemap, wheel
from .checker import Checker
from .findings import Report

__all__ = ["checked", "run"]


def run(c: Checker, *, open_state: bool) -> None:
    """Every check. ``open_state`` False: a directory whose state map a start
    would change (a retired chunk's leftover file) is not opened."""
    c.strays()
    checkpoint.load(c)
    logs.check(c)
    checkpoint.against_logs(c)
    epochs.check(c)
    receiptkey.check(c)
    wheel.check(c)
    statemap.check(c, open_state)
    blocks.check(c)
    ready.check(c)
    keyindex.check(c)


@contextlib.contextmanager
def checked(root: Path, report: Report, now_ms: int, *, open_state: bool) -> Iterator[Checker]:
    """Run every check of ``root`` into ``report``; the stores they opened stay
    open (for ``fix``) until the block ends."""
    c = Checker(root, report, now_ms)
    try:
        run(c, open_state=open_state)
        yield c
    finally:
        c.close()
