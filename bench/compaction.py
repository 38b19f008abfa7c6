"""Compaction benchmark: CommitLog bytes written per far-future message over a
simulated year, and disk bytes per pending far-future message, with and without
compaction (``delayq-spark compact``'s shard side, ``Engine.add_block``).

One engine in process on a fake clock (no threads: ``pump``), ``--messages``
messages due 30..365 days out, uniformly, 200-byte bodies. The wheel's window is
scaled down with the year (``--scale``: the default 2-day window and 1 s slots
become 2 days / scale and 1 s / scale, every due time and the retention period
likewise), which keeps the number of rolls a message makes exactly what it is
with the defaults: a message due D ahead rolls about D / window times either way.

With compaction, ``compact`` is run once a (scaled) day, as the Spark job would
be: an export snapshot, the rows of rolled messages due beyond ``beyond`` and not
yet blocked, sorted by due time, grouped into day blocks, each block sent with
``add_block`` in calls of at most 10,000 rows.

    python -m bench.compaction [--messages N] [--scale S] [--json FILE]
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from delayq import Engine, MessageId
from delayq.engine import BlockOutcome, BlockRow

DAY_MS = 86_400_000
START_MS = 1_700_000_000_000
MAX_ROWS = 10_000  # rows per add_block call (the admin AddBlock's limit)


def compact(
    engine: Engine, *, beyond_ms: int, block_ms: int, job: str = "compact"
) -> dict[str, int]:
    """One compaction pass over ``engine`` (what the Spark job does to each shard):
    the rolled messages of an export snapshot due ``beyond_ms`` or more from now and
    not in a block yet, in blocks of ``block_ms`` aligned to multiples of it (a
    block starting less than two windows ahead is left out), in due order."""
    now = engine.clock.now_ms()
    snap = engine.begin_export(64 << 20)
    try:
        rows: list[BlockRow] = []
        for start, end in snap.partitions:
            for b in engine.export(snap, start, end, 65536):
                pick = (
                    (b.forwarded_to < 0)
                    & ~b.blocked
                    & (b.roll_counts > 0)
                    & (b.deliver_at_ms >= now + beyond_ms)
                )
                for i in np.flatnonzero(pick).tolist():
                    mid = MessageId(snap.shard, int(b.epochs[i]), int(b.positions[i]))
                    rows.append(
                        BlockRow(
                            str(mid), b.topics[i], int(b.deliver_at_ms[i]), int(b.roll_counts[i])
                        )
                    )
    finally:
        engine.end_export(snap)
    first = now + 2 * engine.settings.window_ms
    blocks: dict[int, list[BlockRow]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r.deliver_at_ms):
        start = r.deliver_at_ms // block_ms * block_ms
        if start >= first:
            blocks[start].append(r)
    counts: dict[str, int] = defaultdict(int)
    for start, members in sorted(blocks.items()):
        for i in range(0, len(members), MAX_ROWS):
            out = engine.add_block(job, start, start + block_ms, members[i : i + MAX_ROWS])
            for o in out:
                counts[o.value if isinstance(o, BlockOutcome) else "error"] += 1
    counts["blocks"] = len(blocks)
    return dict(counts)


def _disk_bytes(root: Path) -> int:
    """Bytes of disk the data directory's files use (holes not counted)."""
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())
