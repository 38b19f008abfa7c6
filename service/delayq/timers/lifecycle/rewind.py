"""Cutting a shard's data back to a CommitLog position (a closed data directory):
what a node does when its log diverged from its new master's (an old master back
with a tail nobody else has). The CommitLog is cut at the divergence point, the
epoch history with it; everything derived from the log (TimerLog, wheel, state
map, ready queues and consumer groups, checkpoint) is removed, and the compaction
blocks' files lose the entries of the records cut, so the next open rebuilds it
from the log (``recovery`` with no checkpoint replays it whole: the
one rare path whose work grows with the log, as RocketMQ's rebuild of its
ConsumeQueue after a truncation does). The cut tail was never in the in-sync set,
so nothing acknowledged is lost (see ``failover``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...store.blockfiles import BlockFiles
from ...store.commitlog import CommitLog
from ...store.datadir import BLOCKS, COMMITLOG, DERIVED
from ...store.epochfile import EPOCHS_FILE, load_epochs, save_epochs

__all__ = ["rewind_dir"]

"""What the CommitLog's records rebuild, under the data directory."""


def rewind_dir(data_dir: Path, pos: int, segment_bytes: int) -> int:
    """Cut the CommitLog of the (closed) shard in ``data_dir`` at ``pos`` and drop
    what derives from it; return the bytes cut."""
    cl = CommitLog(data_dir / COMMITLOG, segment_bytes)
    try:
        cut = max(0, cl.end - pos)
        cl.truncate(pos)
    finally:
        cl.close()
    blocks = BlockFiles(data_dir / BLOCKS)  # kept: a log cut short of its start needs them
    try:
        blocks.cut_from(pos)
    finally:
        blocks.close()
    history = load_epochs(data_dir / EPOCHS_FILE)
    if history.truncated(pos) != history:
        save_epochs(data_dir / EPOCHS_FILE, history.truncated(pos))
    for name in DERIVED:
        path = data_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return cut
