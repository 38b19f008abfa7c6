"""Key index benchmark (``timers.memory.keyindex``, ``store.keyfile``): the memory
a shard's key index holds and what its operations cost, at N keyed pending
messages (one topic, keys ``order-<i>``, positions rising as a log's).

Per size, in a child process of its own (so RSS is the index's), prints one JSON
line (and with ``--json FILE`` writes them all):
  nbytes_mb, bytes_per_entry    what the index holds (``KeyIndex.nbytes``)
  rss_delta_mb, rss_peak_delta_mb  the process's RSS over its start, at the end
                                and at its highest (``ru_maxrss``: resizes too)
  add_ns_per_entry              ``add`` of batches of ``--batch`` rows (hashing
                                included; the index's share of a rebuild from the
                                log, or of a keyed schedule batch)
  add_one_us                    ``add`` of a single row (a schedule of one)
  find_us, find_miss_us         ``find`` of a filed name, of a name never filed
  sweep_s                       a whole sweep (every message live: nothing goes)
  sweep_limit_ms                a sweep limited to ``--limit`` rows
  save_s, load_s, file_mb       ``save_keys`` / ``load_keys`` of ``keys.idx``

Sizes: ``--entries`` (default 1M); ``--ten-million`` adds 10M. ``--rebuild N``:
an engine's log of N keyed pending messages (10-byte bodies), then in a reopened
engine the rebuild of its indexes from that log (``lifecycle.keyrecovery``:
rebuild_s) against a load of them saved (``store.keyfile``: load_s).
Usage: python -m bench.keyindex [--entries N ...] [--ten-million] [--rebuild N]
       [--batch B] [--limit L] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TOPIC = 1


def _rss() -> int:
    import psutil

    rss: int = psutil.Process().memory_info().rss
    return rss


def _peak() -> int:
    """The process's highest RSS so far (every transient of a resize included)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _names(start: int, n: int) -> list[bytes]:
    return [b"order-%d" % i for i in range(start, start + n)]


def worker(entries: int, batch: int, limit: int, scratch: Path) -> dict[str, Any]:
    """Build an index of ``entries`` rows and time what it does (in this process)."""
    import numpy as np

    from delayq.store.keyfile import load_keys, save_keys
    from delayq.timers.memory.keyindex import HASH_KIND, KeyIndex

    base = _rss()
    index = KeyIndex()
    tids = np.full(batch, TOPIC, dtype=np.uint32)
    holds = np.zeros(batch, dtype=np.int64)
    spent = 0.0
    for a in range(0, entries, batch):
        n = min(batch, entries - a)
        names = _names(a, n)
        seqs = np.arange(a, a + n, dtype=np.uint64)
        pos = seqs.astype(np.int64) * 256
        t = time.perf_counter()
        index.add(tids[:n], names, seqs, pos, holds[:n])
        spent += time.perf_counter() - t
    figures: dict[str, Any] = {
        "entries": entries,
        "nbytes_mb": round(index.nbytes / 2**20, 1),
        "bytes_per_entry": round(index.nbytes / entries, 1),
        "rss_delta_mb": round((_rss() - base) / 2**20, 1),
        "rss_peak_delta_mb": round((_peak() - base) / 2**20, 1),
        "add_ns_per_entry": round(spent / entries * 1e9),
    }
    ones = [
        ([b"order-%d" % i], np.array([i], dtype=np.uint64), np.array([i * 256]))
        for i in range(entries, entries + 1000)
    ]
    t = time.perf_counter()
    for name, seq, at in ones:
        index.add(tids[:1], name, seq, at, holds[:1])
    figures["add_one_us"] = round((time.perf_counter() - t) / 1000 * 1e6, 2)
    rng = np.random.default_rng(1)
    probes = [b"order-%d" % i for i in rng.integers(0, entries, 20_000).tolist()]
    t = time.perf_counter()
    assert all(index.find(TOPIC, p) for p in probes)
    figures["find_us"] = round((time.perf_counter() - t) / len(probes) * 1e6, 2)
    misses = [b"never-%d" % i for i in range(20_000)]
    t = time.perf_counter()
    found = sum(len(index.find(TOPIC, p)) for p in misses)  # hash collisions only
    figures["find_miss_us"] = round((time.perf_counter() - t) / len(misses) * 1e6, 2)
    figures["find_miss_collisions"] = found

    def everyone(seqs: np.ndarray) -> np.ndarray:
        return np.ones(len(seqs), dtype=bool)

    t = time.perf_counter()
    assert index.sweep(everyone, 0) == 0
    figures["sweep_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    index.sweep(everyone, 0, limit=limit)
    figures["sweep_limit_ms"] = round((time.perf_counter() - t) * 1e3, 2)
    count = len(index)
    t = time.perf_counter()
    save_keys(scratch, [index, KeyIndex()], 10**12, 0)
    figures["save_s"] = round(time.perf_counter() - t, 3)
    figures["file_mb"] = round((scratch / "keys.idx").stat().st_size / 2**20, 1)
    del index
    t = time.perf_counter()
    got = load_keys(scratch, 10**12, KeyIndex.filled, tables=2, hash_kind=HASH_KIND)
    figures["load_s"] = round(time.perf_counter() - t, 3)
    assert got is not None and len(got[0]) == count
    return figures


def _delay(i: int) -> int:
    """Due 1 h .. 30 days ahead, spread (a wheel slot holds a bounded count)."""
    return 3_600_000 + (i * 997_331) % (29 * 86_400_000)


def worker_rebuild(entries: int, batch: int, scratch: Path) -> dict[str, Any]:
    """Rebuild an engine's key indexes from a log of ``entries`` keyed messages."""
    from delayq import Engine, EngineSettings, FakeClock
    from delayq.engine import ScheduleRequest
    from delayq.store.commitlog import CommitLog
    from delayq.store.keyfile import load_keys, save_keys
    from delayq.timers.lifecycle.keyrecovery import build_keys
    from delayq.timers.memory.keyindex import HASH_KIND, KeyIndex

    data = scratch / "data"
    clock = FakeClock(1_800_000_000_000)
    e = Engine(EngineSettings(data_dir=data), clock, background=False).start()
    for a in range(0, entries, batch):
        reqs = [
            ScheduleRequest(topic="t", body=b"b" * 10, delay_ms=_delay(i), key=f"order-{i}")
            for i in range(a, min(entries, a + batch))
        ]
        assert not [o for o in e.schedule(reqs) if o.error]
        e.pump()
    e.close()
    e = Engine(EngineSettings(data_dir=data), clock, background=False).start()
    state = e._life.opened().state
    assert len(state.keys) == entries
    state.keys.clear()
    t = time.perf_counter()
    build_keys(state)
    figures: dict[str, Any] = {"rebuild_entries": entries}
    figures["rebuild_s"] = round(time.perf_counter() - t, 3)
    keys, dedups = state.keys, state.dedups
    e.close()
    cl = CommitLog(data / "commitlog", 1 << 40)
    end = cl.end
    cl.close()
    save_keys(data, [keys, dedups], end, 0)
    t = time.perf_counter()
    got = load_keys(data, end, KeyIndex.filled, tables=2, hash_kind=HASH_KIND)
    figures["load_s"] = round(time.perf_counter() - t, 3)
    assert got is not None and len(got[0]) == entries
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--entries", type=int, nargs="+", default=[1_000_000], help="index sizes")
    ap.add_argument("--ten-million", action="store_true", help="also at 10M entries")
    ap.add_argument("--rebuild", type=int, help="an engine's log of N keyed messages")
    ap.add_argument("--batch", type=int, default=1000, help="rows per add")
    ap.add_argument("--limit", type=int, default=1 << 16, help="rows of a limited sweep")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rebuild-worker", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="delayq-keyindex-", dir=a.dir) as scratch:
        if a.worker is not None:
            print(json.dumps(worker(a.worker, a.batch, a.limit, Path(scratch))), flush=True)
            return
        if a.rebuild_worker is not None:
            print(json.dumps(worker_rebuild(a.rebuild_worker, a.batch, Path(scratch))))
            return
        runs = [("--worker", n) for n in [*a.entries, *([10_000_000] if a.ten_million else [])]]
        runs += [("--rebuild-worker", a.rebuild)] if a.rebuild else []
        rows = []
        for flag, n in runs:
            cmd = [sys.executable, "-m", "bench.keyindex", flag, str(n)]
            cmd += ["--batch", str(a.batch), "--limit", str(a.limit)]
            if a.dir:
                cmd += ["--dir", str(a.dir)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
