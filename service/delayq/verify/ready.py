"""The ready queues (``ready/<topic>.idx``) against the checkpoint.

Each queue's header must carry the topic its name says. Every queue must hold
at least the entries the checkpoint counts for its topic (``ready-short``; a
queue the checkpoint counts entries for that is not there is short too), and
every entry it covers, from the topic's floor, must pass its check
(``ready-corrupt``). Both are damage a replay of the whole CommitLog repairs.
Entries past the checkpoint's count are not checked.
"""

from __future__ import annotations

from ..errors import CorruptData
from ..store.datadir import READY
from ..store.readyindex import MAGIC as READY_MAGIC
from ..store.readyindex import ReadyIndex
from .checker import Checker

__all__ = ["check"]

_BLOCK = 1 << 16  # ready entries checked per read


def check(c: Checker) -> None:
    folder = c.root / READY
    k = c.ckpt
    lengths = {} if k is None else {int(t): n for t, n in k.ready_len.items()}
    floors = {} if k is None else {int(t): n for t, n in k.ready_floor.items()}
    seen: set[int] = set()
    for path in sorted(folder.glob("*.idx")) if folder.is_dir() else []:
        name = c.rel(path)
        head = c.header(path, READY_MAGIC)
        if head is None:
            continue
        try:
            tid = int(path.stem)
        except ValueError:
            continue
        seen.add(tid)
        if head.base != tid:
            c.add(name, "bad-header", 0, f"header topic {head.base} != name", fixable=False)
            continue
        ready = ReadyIndex(path, tid, c.now_ms)
        try:
            _one(c, name, ready, lengths.get(tid, 0), floors.get(tid, 0))
        finally:
            ready.close(write_tail=False)
    for tid, n in lengths.items():
        if n and tid not in seen:
            c.replay(
                f"ready/{tid}.idx",
                "ready-short",
                0,
                f"missing, yet the checkpoint counts {n} entries",
            )


def _one(c: Checker, name: str, ready: ReadyIndex, want: int, floor: int) -> None:
    c.report.file(name).facts.update(entries=ready.length, checkpointed=want, floor=floor)
    if ready.length < want:
        c.replay(
            name,
            "ready-short",
            ready.length,
            f"{ready.length} entries, the checkpoint counts {want}",
        )
        want = ready.length
    ready.floor = floor
    at = floor
    while at < want:
        n = min(_BLOCK, want - at)
        try:
            ready.read_many(at, n)
        except CorruptData:
            for k in range(at, at + n):
                try:
                    ready.read_many(k, 1)
                except CorruptData as exc:
                    c.replay(name, "ready-corrupt", k, f"entry {k}: {exc}")
                    return
        at += n
