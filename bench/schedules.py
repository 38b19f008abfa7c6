"""Recurring schedules benchmark: ``--schedules`` schedules (100,000) on one shard,
a real ``delayq serve`` (default flush), each firing once a period: ``* * * * *``
(every minute on the minute, all at once: the burst a real fleet of cron jobs
makes), or ``--every S`` (every S seconds, all at once too; ``--spread``: their
starts spread evenly over the period). A consumer receives (and acks) the
firings of ``--rounds`` periods after every schedule exists, then the server is
SIGKILLed and started again on its data directory.

Figures: ``create_per_s`` (schedules created per second, 64 calls in flight),
firing lateness p50/p99/max in ms, client side (received minus nominal time,
``--consumers`` threads receiving) and server side (delivered minus nominal),
and the server's own p50/p99 of when each firing was written (minus nominal:
0 when written ahead; ``Stats``' bucket bounds, since it started) and its
``missed`` count, ``firings`` (received of the expected, one per schedule and
round; ``duplicates``: nominal times received under a second id, must be 0;
``early``: delivered before the nominal time, must be 0), the server's CPU per
period (seconds of CPU over the rounds, per
period) and RSS at the end, and ``recovery_s`` (SIGKILL to the restarted
server answering Stats again: the process' start, recovery and the first call).

    python -m bench.schedules                          # 100,000, every minute, 3 rounds
    python -m bench.schedules --schedules 1000 --every 2 --rounds 2   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.adapter import dir_bytes, now_ms, stop_process
from bench.lateness import lateness_figures
from bench.systems import spawn_delayq_node
from delayq import (
    AlreadyExists,
    AsyncClient,
    Client,
    ClientError,
    MessageTemplate,
    ScheduleSpec,
)
from delayq.recurrence import SCHEDULE_HEADER, SCHEDULE_TIME_HEADER

TOPIC = "ticks"
GROUP = "bench"
IN_FLIGHT = 64
"""Create calls in flight at once."""


@dataclass
class Seen:
    """What the consumer received: per (name, nominal ms) the ids, and latenesses."""

    ids: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    client_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    early: int = 0


class Consumer:
    """Receives ``TOPIC`` on ``threads`` threads, each a client of its own,
    acking, keeping firings of nominal times in ``[first_ms, end_ms)``."""

    def __init__(self, address: str, threads: int) -> None:
        self.seen = Seen()
        self.first_ms, self.end_ms = 0, 0
        self._lock = threading.Lock()  # the main thread reads what the consumers add
        self._stop = threading.Event()
        self._clients = [Client(address, timeout_s=30) for _ in range(threads)]
        self._threads = [
            threading.Thread(target=self._run, args=(c,), name="consumer", daemon=True)
            for c in self._clients
        ]
        for t in self._threads:
            t.start()

    def _run(self, client: Client) -> None:
        while not self._stop.is_set():
            try:
                got = client.receive(TOPIC, GROUP, max_messages=1000, wait_s=1)
                at = time.time() * 1000
                if got:
                    client.ack(TOPIC, GROUP, [m.receipt for m in got])
            except ClientError:  # the server killed for the recovery figure
                time.sleep(0.2)
                continue
            with self._lock:
                for m in got:
                    nominal = int(m.headers[SCHEDULE_TIME_HEADER])
                    if not self.first_ms <= nominal < self.end_ms:
                        continue
                    key = (m.headers[SCHEDULE_HEADER], nominal)
                    ids = self.seen.ids.setdefault(key, set())
                    if not ids:
                        self.seen.client_ms.append(at - nominal)
                        self.seen.server_ms.append(m.delivered_at_ms - nominal)
                        self.seen.early += m.delivered_at_ms < nominal
                    ids.add(m.id)

    def count(self) -> int:
        with self._lock:
            return len(self.seen.ids)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        for c in self._clients:
            c.close()


def _spec(i: int, n: int, a: argparse.Namespace, start_ms: int) -> ScheduleSpec:
    template = MessageTemplate(topic=TOPIC, body=b"tick")
    if a.every is None:
        return ScheduleSpec(template=template, cron="* * * * *")
    period = a.every * 1000
    offset = i * period // n if a.spread else 0
    return ScheduleSpec(template=template, every_ms=period, start_ms=start_ms + offset)


async def _create(address: str, a: argparse.Namespace, start_ms: int) -> float:
    """Every schedule created; the seconds it took."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    t0 = time.perf_counter()
    async with AsyncClient(address, timeout_s=60) as client:

        async def one(i: int) -> None:
            async with gate:
                # a call the client sent again (its answer lost to a timeout) meets
                # its own schedule
                with contextlib.suppress(AlreadyExists):
                    await client.create_schedule(f"s-{i}", _spec(i, a.schedules, a, start_ms))

        await asyncio.gather(*(one(i) for i in range(a.schedules)))
    return time.perf_counter() - t0


def _first_after(ms: int, period_ms: int, start_ms: int) -> int:
    """The first nominal time of the common grid after ``ms``."""
    return start_ms + ((max(ms, start_ms) - start_ms) // period_ms + 1) * period_ms


def _wait_serving(address: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    with Client(address, timeout_s=5) as c:
        while True:
            try:
                c.stats()
                return
            except ClientError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def _recovery(data: Path, extra: list[str]) -> tuple[subprocess.Popen[str], float]:
    """The server started again on ``data``: it, and the seconds to serving."""
    t0 = time.perf_counter()
    proc, address, _ = spawn_delayq_node(data, *extra)
    _wait_serving(address)
    return proc, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--schedules", type=int, default=100_000)
    ap.add_argument("--every", type=int, default=None, help="seconds (default: cron * * * * *)")
    ap.add_argument("--spread", action="store_true", help="--every: starts spread over it")
    ap.add_argument("--rounds", type=int, default=3, help="periods measured")
    ap.add_argument("--consumers", type=int, default=4, help="receiving threads")
    ap.add_argument("--server-args", default="", help="more `delayq serve` options")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    period_ms = (a.every or 60) * 1000
    root = Path(tempfile.mkdtemp(prefix="delayq-schedules-"))
    data = root / "data"
    extra = a.server_args.split()
    proc, address, _ = spawn_delayq_node(data, *extra)
    try:
        server = psutil.Process(proc.pid)
        grid = (now_ms() // period_ms + 1) * period_ms  # --every's common start
        create_s = asyncio.run(_create(address, a, grid))
        consumer = Consumer(address, a.consumers)
        # the rounds measured: the first nominal time after every schedule exists
        # (and its lead), so every schedule fires each of them
        consumer.first_ms = _first_after(now_ms() + 2_000, period_ms, grid)
        consumer.end_ms = consumer.first_ms + a.rounds * period_ms
        # CPU over whole periods, each with one round's writes (a lead before it)
        # and deliveries
        cpu_from = consumer.first_ms - period_ms // 2
        while now_ms() < cpu_from:
            time.sleep(0.05)
        cpu0 = sum(server.cpu_times()[:2])
        while now_ms() < cpu_from + a.rounds * period_ms:
            time.sleep(0.05)
        cpu = sum(server.cpu_times()[:2]) - cpu0
        with Client(address) as c:  # the server's own: when each firing was written
            written = c.stats().schedules
        expected = a.schedules * a.rounds
        deadline = consumer.end_ms + 120_000
        while consumer.count() < expected and now_ms() < deadline:
            time.sleep(0.2)
        rss = server.memory_info().rss
        consumer.close()
        stop_process(proc, signal.SIGKILL)
        proc, recovery_s = _recovery(data, extra)
        seen = consumer.seen
        out: dict[str, Any] = {
            "schedules": a.schedules,
            "period_s": period_ms // 1000,
            "spec": f"every {a.every}s" + (" spread" if a.spread else "")
            if a.every
            else "cron * * * * *",
            "rounds": a.rounds,
            "create_per_s": round(a.schedules / create_s),
            "firings": len(seen.ids),
            "expected": expected,
            "duplicates": sum(len(v) > 1 for v in seen.ids.values()),
            "early": seen.early,
            **{
                k.replace("lateness_ms", "client_lateness_ms"): v
                for k, v in lateness_figures(sorted(seen.client_ms)).items()
                if k != "early_count"
            },
            **{
                k.replace("lateness_ms", "server_lateness_ms"): v
                for k, v in lateness_figures(sorted(seen.server_ms)).items()
                if k != "early_count"
            },
            "written_lateness_ms_p50": written.lateness_ms_p50,
            "written_lateness_ms_p99": written.lateness_ms_p99,
            "missed": written.missed,
            "cpu_s_per_period": round(cpu / a.rounds, 2),
            "cpu_share": round(cpu / (a.rounds * period_ms / 1000), 3),
            "rss_mb": round(rss / 2**20, 1),
            "data_mb": round(dir_bytes(data) / 2**20),
            "recovery_s": round(recovery_s, 2),
        }
        print(json.dumps(out))
        if a.json:
            a.json.write_text(json.dumps(out, indent=2))
    finally:
        stop_process(proc, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
