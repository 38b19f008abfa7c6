"""Engine benchmark: one shard in process, 200-byte bodies, async flush.

Prints (and with ``--json FILE`` writes) these figures:
  schedule_msgs_per_s   accepted *and linked into the wheel*, delays 1 min .. 30 days
  schedule_cpu_us_per_msg  the process's CPU time (every thread: the caller's and
                        the stages') per message of that phase: steadier than the
                        rate on a shared machine
  schedule_engine_cpu_us_per_msg  the same less the benchmark's own making of the
                        requests (a keyed ScheduleRequest costs the caller ~0.25 us
                        more to build than a keyless one): the engine's cost alone
  deliver_msgs_per_s    due messages moved into ready queues (fake clock, all due)
  receive_ack_msgs_per_s  consumer receive + ack through the ready queue
  cancel_msgs_per_s     cancels by id of pending messages
  rss_mb_1m_pending, rss_mb_10m_pending   RSS of the engine process
  reopen_s_10m_pending  from Engine.start() after SIGKILL to the first served call
  lateness_ms_p50/p99/max, early_count    real clock, ~10k deliveries/s

Each phase runs in a child process (``--worker``) so RSS is the engine's own and
the reopen really follows a SIGKILL. ``--pending N`` scales the big pending set
(default 10M; the "1m" figure is taken at min(1M, N)). ``--keys plain`` gives
each message of the big set its own key (filed in the key index: its RSS and
its rebuild at the reopen are in the figures), ``--keys reject|keep|replace``
also asks that mode's check (``if_exists``); ``--big-only`` runs the big set's
phases alone (schedule, reopen after SIGKILL, cancel; for paired runs).
Usage: python -m bench.engine [--pending N] [--batch B (1000)] [--keys MODE]
       [--big-only] [--json FILE] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lateness import lateness_figures

BODY = b"b" * 200
DAY = 86_400_000


def _emit(**kw: Any) -> None:
    print(json.dumps(kw), flush=True)


def _rss_mb() -> float:
    import psutil

    rss: int = psutil.Process().memory_info().rss
    return round(rss / 2**20, 1)


def _schedule_all(engine: Any, reqs: list[Any]) -> list[Any]:
    """Schedule a batch, waiting out Congested as a client would."""
    from delayq import Congested

    while True:
        try:
            return list(engine.schedule(reqs))
        except Congested as exc:
            time.sleep(exc.retry_after_ms / 1000)


def worker_schedule(data: Path, pending: int, batch: int, keys: str = "none") -> None:
    """Schedule ``pending`` far-future messages (``keys``: none, plain or a mode);
    report rate and RSS; then keep scheduling (so the kill lands under load, with
    a log tail to replay) until SIGKILLed. Writes a sample of ids for the cancel
    phase."""
    import numpy as np

    from delayq import Engine, EngineSettings
    from delayq.engine import ScheduleRequest
    from delayq.types import IfExists

    mode = IfExists.NONE if keys in ("none", "plain") else IfExists[keys.upper()]

    engine = Engine(EngineSettings(data_dir=data)).start()
    rng = np.random.default_rng(1)
    sample: list[str] = []
    marks = {min(1_000_000, pending): "rss_mb_1m_pending", pending: "rss_mb_10m_pending"}
    start = time.perf_counter()
    cpu = time.process_time()
    made = 0.0  # CPU time spent making the requests (not the engine's)
    done = 0
    while True:
        making = time.thread_time()
        n = batch if done >= pending else min(batch, pending - done)
        delays = rng.integers(60_000, 30 * DAY, n).tolist()
        if keys == "none":
            reqs = [ScheduleRequest(topic="bench", body=BODY, delay_ms=d) for d in delays]
        else:
            reqs = [
                ScheduleRequest(
                    topic="bench", body=BODY, delay_ms=d, key=f"key-{done + i}", if_exists=mode
                )
                for i, d in enumerate(delays)
            ]
        made += time.thread_time() - making
        out = _schedule_all(engine, reqs)
        if len(sample) < 200_000 and done % 20 == 0:
            sample.extend(o.id for o in out[:10] if o.id)
        done += n
        for mark, name in marks.items():
            if done == mark:
                while engine.observing.gauges()["enqueue_queue"]:
                    time.sleep(0.01)
                elapsed = time.perf_counter() - start
                _emit(
                    phase="schedule",
                    done=done,
                    seconds=round(elapsed, 2),
                    schedule_msgs_per_s=round(done / elapsed),
                    schedule_cpu_us_per_msg=round((time.process_time() - cpu) / done * 1e6, 2),
                    schedule_engine_cpu_us_per_msg=round(
                        (time.process_time() - cpu - made) / done * 1e6, 2
                    ),
                    **{name: _rss_mb()},
                )
        if done == pending:
            (data.parent / "sample.ids").write_text("\n".join(sample))
            gauges = engine.observing.gauges()
            _emit(
                phase="scheduled",
                pending=gauges["pending"],
                key_index_entries=gauges["key_index_entries"],
            )


def worker_reopen(data: Path, batch: int) -> None:
    """Reopen after SIGKILL; time to first served call; then cancel throughput."""
    from delayq import Engine, EngineSettings
    from delayq.engine import ScheduleRequest

    t0 = time.perf_counter()
    engine = Engine(EngineSettings(data_dir=data)).start()
    engine.schedule([ScheduleRequest(topic="bench", body=BODY, delay_ms=60_000)])
    reopen = time.perf_counter() - t0
    _emit(
        phase="reopen",
        key_index_entries=engine.observing.gauges()["key_index_entries"],
        reopen_s_10m_pending=round(reopen, 3),
        recovery=engine.recovery,
        rss_after_reopen_mb=_rss_mb(),
    )
    ids = (data.parent / "sample.ids").read_text().split()
    t0 = time.perf_counter()
    for i in range(0, len(ids), batch):
        engine.cancel(ids[i : i + batch])
    elapsed = time.perf_counter() - t0
    _emit(phase="cancel", cancel_msgs_per_s=round(len(ids) / elapsed), cancelled=len(ids))
    engine.close()


def worker_deliver(data: Path, count: int, batch: int) -> None:
    """Delivery capacity: ``count`` messages due within one minute of fake time,
    then the clock passes them all and the stages run flat out."""
    from delayq import Engine, EngineSettings, FakeClock
    from delayq.engine import ScheduleRequest

    clock = FakeClock()
    engine = Engine(
        EngineSettings(
            data_dir=data,
            enqueue_queue_messages=10**8,
            slot_limit=10**7,
            release_buffer_messages=10**8,
        ),
        clock,
        background=False,
    ).start()
    rng = random.Random(2)
    for i in range(0, count, batch):
        engine.schedule(
            [
                ScheduleRequest(topic="bench", body=BODY, delay_ms=rng.randint(1000, 60_000))
                for _ in range(min(batch, count - i))
            ]
        )
    engine.pump()
    clock.advance(61_000)
    t0 = time.perf_counter()
    engine.pump()
    elapsed = time.perf_counter() - t0
    delivered = engine.observing.counters["delivered"]
    t1 = time.perf_counter()
    got = 0
    while msgs := engine.receive("bench", "g", max_messages=1000):
        engine.ack("bench", "g", [m.receipt for m in msgs])
        got += len(msgs)
    elapsed_rx = time.perf_counter() - t1
    _emit(
        phase="deliver",
        delivered=delivered,
        deliver_msgs_per_s=round(delivered / elapsed),
        received=got,
        receive_ack_msgs_per_s=round(got / elapsed_rx),
    )
    engine.close()


def worker_lateness(data: Path, rate: int, seconds: int) -> None:
    """Lateness at ``rate`` deliveries/s on the real clock with background stages."""
    from delayq import Engine, EngineSettings
    from delayq.engine import ScheduleRequest

    engine = Engine(EngineSettings(data_dir=data)).start()
    total = rate * seconds
    start = int(time.time() * 1000) + 3000
    rng = random.Random(3)
    dues = sorted(start + rng.randint(0, seconds * 1000) for _ in range(total))
    for i in range(0, total, 1000):
        engine.schedule(
            [ScheduleRequest(topic="bench", body=BODY, deliver_at_ms=d) for d in dues[i : i + 1000]]
        )
    late: list[int] = []
    deadline = time.time() + seconds + 10
    while len(late) < total and time.time() < deadline:
        msgs = engine.receive("bench", "g", max_messages=2000, wait_ms=100)
        if msgs:
            late.extend(m.delivered_ms - m.deliver_at_ms for m in msgs)
            engine.ack("bench", "g", [m.receipt for m in msgs])
    _emit(phase="lateness", delivered=len(late), expected=total, **lateness_figures(sorted(late)))
    engine.close()


def _run(args: list[str], *, kill_after: str | None = None) -> list[dict[str, Any]]:
    """Run a worker; collect its JSON lines. With ``kill_after``, SIGKILL it once a
    line of that phase arrives."""
    cmd = [sys.executable, "-m", "bench.engine", "--worker", *args]
    lines: list[dict[str, Any]] = []
    root = Path(__file__).resolve().parents[1]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=root) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            rec = json.loads(raw)
            lines.append(rec)
            print("  ", raw.strip(), file=sys.stderr, flush=True)
            if kill_after and rec.get("phase") == kill_after:
                time.sleep(1.5)  # let it run on under load for a moment, then kill
                proc.send_signal(signal.SIGKILL)
                break
    if not kill_after and proc.returncode != 0:
        raise SystemExit(f"worker {args[0]} failed with {proc.returncode}")
    return lines


def _all_arrived(rec: dict[str, Any], want: int, *counts: str) -> None:
    """Stop when a phase lost messages: a figure measured on part of its load is void."""
    for name in counts:
        if rec[name] != want:
            raise SystemExit(f"{rec['phase']}: {name} {rec[name]} of {want} messages")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pending", type=int, default=10_000_000, help="size of the big pending set")
    ap.add_argument("--batch", type=int, default=1000, help="messages per schedule/cancel call")
    ap.add_argument("--deliver", type=int, default=1_000_000, help="messages in the delivery phase")
    ap.add_argument("--rate", type=int, default=10_000, help="deliveries/s in the lateness phase")
    ap.add_argument("--seconds", type=int, default=20, help="length of the lateness phase")
    ap.add_argument(
        "--keys",
        choices=("none", "plain", "reject", "keep", "replace"),
        default="none",
        help="the big set's keys: none, one each, or one each with that if_exists mode",
    )
    ap.add_argument(
        "--big-only", action="store_true", help="only the big set's phases (schedule, reopen)"
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, *rest = a.worker
        {
            "schedule": lambda: worker_schedule(
                Path(rest[0]), int(rest[1]), int(rest[2]), *rest[3:]
            ),
            "reopen": lambda: worker_reopen(Path(rest[0]), int(rest[1])),
            "deliver": lambda: worker_deliver(Path(rest[0]), int(rest[1]), int(rest[2])),
            "lateness": lambda: worker_lateness(Path(rest[0]), int(rest[1]), int(rest[2])),
        }[kind]()
        return
    root = Path(tempfile.mkdtemp(prefix="delayq-bench-", dir=a.dir))
    figures: dict[str, Any] = {}
    try:
        for rec in _run(
            ["schedule", str(root / "big" / "data"), str(a.pending), str(a.batch), a.keys],
            kill_after="scheduled",
        ):
            figures.update(
                {
                    k: v
                    for k, v in rec.items()
                    if k.endswith(("_s", "_mb", "_per_msg")) or "pending" in k
                }
            )
        figures.pop("pending", None)
        for rec in _run(["reopen", str(root / "big" / "data"), str(a.batch)]):
            figures.update(
                {
                    k: v
                    for k, v in rec.items()
                    if k.endswith("_per_s") or k.startswith(("reopen", "key_index", "rss_after"))
                }
            )
        shutil.rmtree(root / "big", ignore_errors=True)
        if a.big_only:
            _report(figures, a)
            return
        for rec in _run(["deliver", str(root / "deliver"), str(a.deliver), "1000"]):
            _all_arrived(rec, a.deliver, "delivered", "received")
            figures.update({k: v for k, v in rec.items() if k.endswith("_per_s")})
        for rec in _run(["lateness", str(root / "late"), str(a.rate), str(a.seconds)]):
            _all_arrived(rec, rec["expected"], "delivered")
            figures.update({k: v for k, v in rec.items() if k.startswith(("lateness", "early"))})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    _report(figures, a)


def _report(figures: dict[str, Any], a: argparse.Namespace) -> None:
    figures["batch"] = a.batch
    if a.keys != "none":
        figures["keys"] = a.keys
    if a.pending < 10_000_000:
        figures["scaled_pending"] = a.pending
    print(json.dumps(figures, indent=2))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
