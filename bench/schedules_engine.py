"""Recurring schedules through one embedded engine (``engine.scheduling``,
``engine.firing``), real clock, stages on their threads: N schedules each firing
once a minute, a consumer taking and acking every firing.

Prints one JSON object:
  create_s, create_per_s        making the N schedules, one call each
  firings, distinct, early      firings received, distinct (schedule, nominal
                                time) pairs among them, released early (counter)
  write_late_p50/p99_ms         how late the firer wrote firings after their
                                nominal times (``Observing.schedule_lateness_snapshot``)
  deliver_late_p50/p99/max_ms   delivered_ms - nominal time of each firing received
  release_late_p50/p99_ms       the engine's release lateness of every message
                                (``Engine.lateness``: bucket bounds)
  cpu_s, cpu_pct                the process's CPU over the firing minutes
  rss_mb                        the process's RSS at the end
  list_ms                       a first page of 1000 (``list_schedules``): the scan
  reopen_s                      an open after an abandon (a kill): recovery and the
                                key index's build, with N plans in the log

``--cron``: every schedule is ``* * * * *`` (all fire in the same second: the
herd); default: ``every_ms=60000`` (``--every-ms``), anchored at each one's
creation (spread).
Usage: python -m bench.schedules_engine [--schedules N] [--minutes M] [--cron]
       [--every-ms MS] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from delayq import Engine, EngineSettings
from delayq.recurrence.spec import SCHEDULE_TIME_HEADER, MessageTemplate, ScheduleSpec


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return round(pages * resource.getpagesize() / (1 << 20), 1)


def _consume(engine: Engine, stop: threading.Event, late: list[int], seen: set[str]) -> None:
    while not stop.is_set():
        got = engine.receive("t", "g", max_messages=1000, wait_ms=200)
        if not got:
            continue
        engine.ack("t", "g", [m.receipt for m in got])
        for m in got:
            t = int(m.headers[SCHEDULE_TIME_HEADER])
            late.append(m.delivered_ms - t)
            seen.add(f"{m.key}@{t}")


def run(n: int, minutes: float, cron: bool, data: Path, every_ms: int = 60_000) -> dict[str, Any]:
    settings = EngineSettings(data_dir=data)
    rhythm: dict[str, Any] = {"cron": "* * * * *"} if cron else {"every_ms": every_ms}
    spec = ScheduleSpec(MessageTemplate("t", b"tick"), **rhythm)
    engine = Engine(settings).start()
    out: dict[str, Any] = {"schedules": n, "minutes": minutes, "cron": cron}
    t0 = time.perf_counter()
    for i in range(n):
        engine.create_schedule(f"s{i}", spec)
    out["create_s"] = round(time.perf_counter() - t0, 2)
    out["create_per_s"] = round(n / (time.perf_counter() - t0))
    late: list[int] = []
    seen: set[str] = set()
    stop = threading.Event()
    consumer = threading.Thread(target=_consume, args=(engine, stop, late, seen), daemon=True)
    consumer.start()
    cpu0, w0 = time.process_time(), time.perf_counter()
    time.sleep(minutes * 60)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - w0
    stop.set()
    consumer.join()
    hist = engine.observing.schedule_lateness_snapshot()
    arr = np.array(late or [0])
    out.update(
        firings=len(late),
        distinct=len(seen),
        early=engine.observing.counters["early"],
        write_late_p50_ms=hist.percentile(0.5),
        write_late_p99_ms=hist.percentile(0.99),
        deliver_late_p50_ms=int(np.percentile(arr, 50)),
        deliver_late_p99_ms=int(np.percentile(arr, 99)),
        deliver_late_max_ms=int(arr.max()),
        release_late_p50_ms=engine.lateness()["p50"],
        release_late_p99_ms=engine.lateness()["p99"],
        cpu_s=round(cpu, 1),
        cpu_pct=round(100 * cpu / wall),
        rss_mb=_rss_mb(),
    )
    t0 = time.perf_counter()
    engine.list_schedules(limit=1000)
    out["list_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    engine.abandon()
    t0 = time.perf_counter()
    again = Engine(settings).start()
    out["reopen_s"] = round(time.perf_counter() - t0, 2)
    again.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", type=int, default=100_000)
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--cron", action="store_true")
    ap.add_argument("--every-ms", type=int, default=60_000)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        data = Path(tmp) / "data"
        print(json.dumps(run(args.schedules, args.minutes, args.cron, data, args.every_ms)))


if __name__ == "__main__":
    main()
