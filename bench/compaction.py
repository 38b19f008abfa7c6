"""Compaction benchmark: CommitLog bytes written per far-future message over a
simulated year, and disk bytes per pending far-future message, with and without
compaction (``delayq-spark compact``'s shard side, ``Engine.moving.add_block``).

One engine in process on a fake clock (no threads: ``pump`` every 6 simulated
hours), ``--messages`` messages due 30..365 days out (uniform), 200-byte bodies,
the default 2-day window and 7-day retention. Only the slot length differs from
the defaults (``--precision-ms``, 10 minutes: 288 slots a window instead of
172,800, so a year runs in a minute); it sets how many slots the wheel has, not
how often a message rolls (every window either way) nor what a copy costs.
CommitLog segments are 512 KiB, so that retention keeps about its period's
worth of the log (with 1 GiB segments and this little traffic it would delete
none within the year, and the disk figures would be the segments' size).

With compaction, ``compact`` runs once a simulated day, as the Spark job would:
an export snapshot, the rows of rolled messages due 7 days or more ahead and not
blocked yet, sorted by due time, grouped into day blocks (those starting at
least two windows ahead), each block sent with ``add_block`` in calls of at most
10,000 rows.

Figures: CommitLog bytes written per message over the year (and per window),
rolls, blocks, and at day 180 the disk bytes per pending message of the files
that grow with the messages (CommitLog segments and kept records, TimerLog,
block files; the wheel and the 4 MiB state-map chunks are of a fixed size and
counted apart).

    python -m bench.compaction [--messages N] [--precision-ms MS] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from delayq import Engine, EngineSettings, FakeClock
from delayq.engine import BlockOutcome, BlockRow, ScheduleBatch
from delayq.ids import MessageId

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
    snap = engine.moving.begin_export(64 << 20)
    try:
        rows: list[BlockRow] = []
        for start, end in snap.partitions:
            for b in engine.moving.export(snap, start, end, 65536):
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
        engine.moving.end_export(snap)
    first = now + 2 * engine.settings.window_ms
    blocks: dict[int, list[BlockRow]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r.deliver_at_ms):
        start = r.deliver_at_ms // block_ms * block_ms
        if start >= first:
            blocks[start].append(r)
    counts: dict[str, int] = defaultdict(int)
    for start, members in sorted(blocks.items()):
        for i in range(0, len(members), MAX_ROWS):
            out = engine.moving.add_block(job, start, start + block_ms, members[i : i + MAX_ROWS])
            for o in out:
                counts[o.value if isinstance(o, BlockOutcome) else "error"] += 1
    counts["blocks"] = len(blocks)
    return dict(counts)


_PER_MESSAGE = {"commitlog": "commitlog", "timerlog": "timerlog", "blocks": "blocks"}
"""The folders whose size follows the messages (the rest, the wheel and state-map
chunks above all, are of a fixed size: 4 MiB a state chunk, allocated whole)."""


def _disk_bytes(root: Path) -> dict[str, int]:
    """Bytes of disk the data directory's files use (holes not counted), by what
    holds them: ``commitlog`` (segments and kept records), ``timerlog``, ``blocks``,
    and ``fixed`` (the rest)."""
    out = dict.fromkeys([*_PER_MESSAGE, "fixed"], 0)
    for p in root.rglob("*"):
        if p.is_file():
            top = p.relative_to(root).parts[0]
            out[_PER_MESSAGE.get(top, "fixed")] += p.stat().st_blocks * 512
    return out


def _drain(e: Engine) -> int:
    n = 0
    while batch := e.receive("far", "g", max_messages=10_000):
        e.ack("far", "g", [m.receipt for m in batch])
        n += len(batch)
    return n


def run(
    root: Path, messages: int, *, compacting: bool, precision_ms: int, seed: int = 7
) -> dict[str, Any]:
    """A simulated year of ``messages`` far-future messages on one engine."""
    clock = FakeClock(START_MS)
    settings = EngineSettings(
        data_dir=root,
        precision_ms=precision_ms,
        window_ms=2 * DAY_MS,  # the default
        retention_ms=7 * DAY_MS,  # the default
        flush_interval_ms=min(3_600_000, 2 * DAY_MS // 10),
        # small enough that retention keeps only about its period's worth of the log
        commitlog_segment_bytes=512 << 10,
        timerlog_segment_bytes=256 << 10,
    )
    e = Engine(settings, clock, background=False).start()
    rng = np.random.default_rng(seed)
    dues = START_MS + rng.integers(30 * DAY_MS, 365 * DAY_MS, messages)
    try:
        for i in range(0, messages, 1000):
            part = dues[i : i + 1000]
            out = e.schedule_batch(
                ScheduleBatch(topic="far", bodies=[b"x" * 200] * len(part), deliver_at_ms=part)
            )
            assert not out.errors
        first_end = e.commitlog_end
        delivered, mid = 0, {}
        for day in range(1, 367):
            until = START_MS + day * DAY_MS
            while clock.now_ms() < until:
                clock.advance(min(6 * 3_600_000, until - clock.now_ms()))
                e.pump()
            if compacting:
                compact(e, beyond_ms=7 * DAY_MS, block_ms=DAY_MS)
            delivered += _drain(e)
            if day == 180:
                e.checkpoint()
                pending = sum(s.pending for s in e.stats())
                disk = _disk_bytes(root)
                held = sum(v for k, v in disk.items() if k != "fixed")
                mid = {
                    "pending_at_day_180": pending,
                    "disk_bytes_at_day_180": disk,
                    "disk_bytes_per_pending_at_day_180": round(held / pending, 1),
                }
        written = e.commitlog_end - first_end
        c = e.observing.counters
        return {
            "messages": messages,
            "delivered": delivered,
            "commitlog_bytes_per_message": round(written / messages, 1),
            "commitlog_bytes_per_message_per_window": round(written / messages / 182.5, 2),
            "rolled": c["rolled"],
            "blocked": c["blocked"],
            "loaded": c["loaded"],
            "rolls_avoided": c["rolls_avoided"],
            "blocks": c["blocks_added"],
            **mid,
        }
    finally:
        e.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--precision-ms", type=int, default=600_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="delayq-compaction-"))
    try:
        out: dict[str, Any] = {}
        for compacting in (False, True):
            name = "compacted" if compacting else "rolling"
            out[name] = run(
                root / name, args.messages, compacting=compacting, precision_ms=args.precision_ms
            )
            print(name, json.dumps(out[name]), file=sys.stderr, flush=True)
            if out[name]["delivered"] != args.messages:
                raise SystemExit(f"{name}: {out[name]['delivered']} of {args.messages} delivered")
        ratio = (
            out["rolling"]["commitlog_bytes_per_message"]
            / out["compacted"]["commitlog_bytes_per_message"]
        )
        out["commitlog_bytes_fewer_x"] = round(ratio, 1)
        out["disk_bytes_fewer_x"] = round(
            out["rolling"]["disk_bytes_per_pending_at_day_180"]
            / out["compacted"]["disk_bytes_per_pending_at_day_180"],
            1,
        )
        print(json.dumps(out))
        if args.json:
            args.json.write_text(json.dumps(out, indent=2))
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
