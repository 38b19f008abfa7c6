"""The state map (``state/*.map``, their side files ``state/*.fwd`` and
``state/retired.json``) against the CommitLog records that ended messages; a
mismatch is reported only where it is certain.

Each chunk's and side file's header must carry the chunk number its name says.
A chunk or side file that ``retired.json`` lists but that is still on disk is a
``state-leftover`` (a kill while retiring; the next open deletes it, so the
state map is opened only under ``--fix``). Then, damage:

- ``state-bad-value``: a state byte holds no known state, or a far forward's
  side file names a shard past the map's last (repaired by a replay);
- ``missing``: a chunk holds a far forward and has no side file, and a
  checkpoint would spare its records the next start's replay (repaired by a
  whole replay, which makes the side file again; without a checkpoint the next
  start replays them anyway);
- ``state-mismatch``: a message reads PENDING (or BLOCKED) though a DELIVER, CANCEL or
  rescheduling SCHEDULE record before the checkpoint's applied end ended it
  (the fix sets the byte from the record); records at or past the applied end
  are left out, as the next start applies them again;
- ``missing``: the chunk of such a message is not there (repaired by a replay);
- ``unreadable``: ``retired.json`` does not parse.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .. import formats
from ..errors import CorruptData
from ..formats.fileheader import HEADER_SIZE, FileHeader
from ..formats.messagestate import BLOCKED, MessageState, forward_state, is_known, state_of
from ..store.datadir import STATE
from ..store.retiredchunks import RETIRED_FILE, Retired
from ..store.statemap import MAGIC as STATE_MAGIC
from ..store.statemap import SIDE_MAGIC, NoSideFile, StateMap
from .checker import Checker, Mismatch

__all__ = ["check", "ended_by"]

_DEFAULT_CHUNK = 1 << 22  # entries per chunk when no chunk is there to say


def ended_by(pos: int, rec: formats.Record) -> list[tuple[int, int, int]]:
    """The messages a valid CommitLog record at ``pos`` ended, as (position, seq,
    the state value it left them with): what the CommitLog walk collects for ``check``."""
    if isinstance(rec, formats.Deliver):
        return [(pos, rec.seq, MessageState.DELIVERED)]
    if isinstance(rec, formats.Cancels):
        became = MessageState.CANCELLED if rec.target is None else forward_state(rec.target)
        return [(pos, s, became) for s in rec.seq]
    if isinstance(rec, formats.Cancel):
        return [(pos, rec.seq, MessageState.CANCELLED)]
    if isinstance(rec, formats.Message) and rec.replaces_seq:
        return [(pos, rec.replaces_seq, MessageState.RESCHEDULED)]
    return []


def check(c: Checker, open_state: bool) -> None:
    """Check the chunks' headers and bytes, then the state map against what the
    CommitLog walk collected (``c.ended``). ``open_state`` False: a directory
    whose state map an open would change (a retired chunk's leftover file) is not
    opened."""
    folder = c.root / STATE
    if not folder.is_dir():
        return
    retired = _retired(folder)
    if retired is None:
        c.add(f"state/{RETIRED_FILE}", "unreadable", None, "does not parse", fixable=False)
        return
    leftover = False
    chunks: list[int] = []
    fine = True
    files = [(p, STATE_MAGIC) for p in sorted(folder.glob("*.map"))]
    for path, magic in files + [(p, SIDE_MAGIC) for p in sorted(folder.glob("*.fwd"))]:
        head = c.named_header(path, magic, 12, "header base != name")
        if head is None:
            fine = False
            continue
        if head.base in retired:
            leftover = True
            c.add(
                c.rel(path),
                "state-leftover",
                None,
                "retired chunk still on disk (a kill while retiring): the next open deletes it",
                fixable=True,
            )
            continue
        if magic == STATE_MAGIC:
            chunks.append(head.base)
    if not fine or (leftover and not open_state):
        return  # StateMap's open would delete the leftover: only under --fix
    c.states = StateMap(folder, c.now_ms)
    sideless: set[int] = set()  # chunks whose far forwards cannot be read
    for n in chunks:
        name = _chunk_name(n)
        try:
            span = _chunk_entries(folder, n)
            first = n * span
            got = c.states.raw_many(np.arange(first, first + span, dtype=np.uint64))
        except NoSideFile as exc:
            if c.ckpt is not None:
                c.replay(f"state/{n:012d}.fwd", "missing", None, str(exc))
            sideless.add(n)
            continue
        except (CorruptData, OSError) as exc:
            c.add(name, "bad-header", 0, str(exc), fixable=False)
            continue
        wrong = np.flatnonzero(~is_known(got))
        if len(wrong):
            c.replay(
                name,
                "state-bad-value",
                int(first + wrong[0]),
                f"{len(wrong)} state entries hold no known state (first: seq {first + wrong[0]})",
            )
        c.report.file(name).facts["ended"] = int(np.count_nonzero(got))
        c.state_chunks.append(((first, first + span), name))
    _against_records(c, set(chunks), retired, sideless)


def _against_records(c: Checker, chunks: set[int], retired: Retired, sideless: set[int]) -> None:
    k, states = c.ckpt, c.states
    if k is None or states is None or not c.ended:
        return
    folder = c.root / STATE
    per = _chunk_entries(folder, next(iter(chunks), 0)) if chunks else _DEFAULT_CHUNK
    for pos, seq, want in c.ended:
        if pos >= k.applied_end:
            continue  # re-applied by the next start
        n = seq // per
        if n in retired or n in sideless:
            continue  # reads as done; or reported already
        if n not in chunks:
            c.replay(
                _chunk_name(n),
                "missing",
                seq,
                f"state chunk of seq {seq} (ended at {pos}) is not there",
            )
            chunks.add(n)  # once
            continue
        if states.raw(seq) not in (MessageState.PENDING, BLOCKED):
            continue
        f = c.add(
            _chunk_name(n),
            "state-mismatch",
            seq,
            f"seq {seq} reads PENDING, yet the record at {pos} made it {state_of(want).name}",
            fixable=True,
        )
        c.mismatches.append((f, Mismatch(seq, want)))


def _chunk_name(n: int) -> str:
    return f"state/{n:012d}.map"


def _retired(folder: Path) -> Retired | None:
    """The retired chunks (``state/retired.json``), None if it does not parse."""
    path = folder / RETIRED_FILE
    if not path.exists():
        return Retired()
    try:
        doc = json.loads(path.read_text())
        return Retired.from_ranges((int(a), int(b)) for a, b in doc["retired"])
    except (ValueError, KeyError, TypeError, OSError):
        return None


def _chunk_entries(folder: Path, n: int) -> int:
    """Entries per state chunk, from chunk ``n``'s header (param)."""
    fd = os.open(folder / f"{n:012d}.map", os.O_RDONLY)
    try:
        return FileHeader.decode(os.pread(fd, HEADER_SIZE, 0), STATE_MAGIC, "state").param
    finally:
        os.close(fd)
