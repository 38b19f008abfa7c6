"""Paired trials of two systems: which is faster, on a machine whose pace drifts.

    python -m bench.paired [--pair A,B] [--trials N] [--size N] [--quick] [--json FILE]
    python -m bench.paired --merge FILE... [--json FILE]

``bench.compare`` runs each system for about a minute, one after another. On a
shared VM whose pace changes by up to 2x from one minute to the next (see
``loop_ms``), its rates for two close systems say as much about when each ran as
about the systems. Here one worker process per system (default ``delayq_engine``
and ``rocksdb``) stays open and the two take turns on the same short phase, the
first mover alternating from trial to trial, so both halves of a pair meet nearly
the same machine.

Phases: ``bench.compare``'s schedule phases with its due times and batches of
100, ``--size`` messages each (default 20,000): ``uniform`` (1 s .. 1 h),
``burst`` (one second, ten minutes out), ``cancel`` (spread over 10 s a few
seconds out, then half of them cancelled) and ``far`` (3 .. 90 days). The cancel
phase then cancels its other half too, untimed, so that nothing but a few of
uniform's messages comes due while the trials run.

Per figure it prints the ratio A/B (above 1: A is faster): its median over the
pairs, its range and in how many pairs A was ahead, then the same over the calm
pairs only (a machine pace of at most ``CALM_MS`` before the trial). ``--json
FILE`` keeps every trial; ``--merge A B ...`` sums up saved runs together (given
one, it prints that run again). Speed is never asserted; the test checks the shape
and that the cancels found every message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.compare import (
    BATCH,
    FULL,
    burst_dues,
    cancel_dues,
    cancel_handles,
    far_dues,
    loop_ms,
    lower_median,
    read_json,
    schedule_dues,
    uniform_dues,
)
from bench.peers.rocketmq5.client import ClientDriven
from bench.systems import SYSTEMS, now_ms, stop_process

BURST_LEAD_MS = 600_000  # the burst comes due long after the trials end
CALM_MS = 130.0  # a machine pace (``loop_ms``) at or below this counts as calm
PAUSE_S = 0.2  # between phases: the systems' background work of one phase settles
WORKER_EXIT_S = 30.0  # how long a worker may take to close its system at the end

DueMaker = Callable[[random.Random, int, int], list[int]]
PHASES: dict[str, DueMaker] = {
    "uniform": uniform_dues,
    "burst": lambda _rng, now, n: burst_dues(now + BURST_LEAD_MS, n),
    "cancel": lambda rng, now, n: cancel_dues(rng, now + 1000 + n // 10, n, FULL.cancel_window_s),
    "far": far_dues,
}
# the figures compared: (phase, figure)
FIGURES = [(phase, "schedule_msgs_per_s") for phase in PHASES] + [("cancel", "cancel_msgs_per_s")]


def run_phase(system: Any, phase: str, n: int, seed: int) -> dict[str, float]:
    """One phase on an open system: its rates, and how many cancels missed."""
    handles, rate = schedule_dues(system, PHASES[phase](random.Random(seed), now_ms(), n))
    out = {"schedule_msgs_per_s": rate, "scheduled": float(len(handles))}
    if phase == "cancel":
        found, cancel_rate = cancel_handles(system, handles[::2])
        rest, _ = cancel_handles(system, handles[1::2])  # untimed: nothing comes due later
        out.update(cancel_msgs_per_s=cancel_rate, not_cancelled=float(n - found - rest))
    return out


def _worker(name: str, workdir: Path) -> None:
    """Open ``name`` in ``workdir`` and say "ready"; run each phase asked on stdin
    (a JSON line ``[phase, n, seed]``), answering with a JSON line of its figures."""
    system = SYSTEMS[name]()
    system.open(workdir)
    print(json.dumps("ready"), flush=True)
    try:
        for line in sys.stdin:
            phase, n, seed = json.loads(line)
            print(json.dumps(run_phase(system, phase, n, seed)), flush=True)
    finally:
        system.close()


def _ask(name: str, worker: subprocess.Popen[str], phase: str, n: int, seed: int) -> Any:
    stdin = worker.stdin
    assert stdin is not None
    stdin.write(json.dumps([phase, n, seed]) + "\n")
    stdin.flush()
    return _reply(name, worker)


def _reply(name: str, worker: subprocess.Popen[str]) -> Any:
    assert worker.stdout is not None
    line = worker.stdout.readline()
    if not line:
        raise SystemExit(f"bench.paired: the {name} worker ended (exit code {worker.wait()})")
    return json.loads(line)


def ratio_summary(ratios: list[float]) -> dict[str, Any] | None:
    """Median (the lower middle one for an even count), range and how many above 1."""
    if not ratios:
        return None
    ordered = sorted(ratios)
    return {
        "median": lower_median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "ahead": sum(r > 1 for r in ordered),
        "pairs": len(ordered),
    }


def summarise(trials: list[dict[str, Any]], a: str, b: str, calm_ms: float) -> dict[str, Any]:
    """Per ``phase.figure``: each system's median rate, and the A/B ratios over all
    pairs and over the calm ones (``ratio_summary``; None when no pair was calm)."""
    out: dict[str, Any] = {}
    for phase, fig in FIGURES:
        rows = [(t["phases"][phase][a][fig], t["phases"][phase][b][fig], t) for t in trials]
        calm = [x / y for x, y, t in rows if t["loop_ms"] <= calm_ms]
        out[f"{phase}.{fig}"] = {
            a: lower_median(x for x, _, _ in rows),
            b: lower_median(y for _, y, _ in rows),
            "all": ratio_summary([x / y for x, y, _ in rows]),
            "calm": ratio_summary(calm),
        }
    return out


def pooled(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Saved runs (``--json`` documents of one pair and size) as one, summed up anew."""
    first = docs[0]
    for doc in docs[1:]:
        if (doc["pair"], doc["size"]) != (first["pair"], first["size"]):
            why = f"{doc['pair']} at {doc['size']} is not {first['pair']} at {first['size']}"
            raise ValueError(f"runs of different pairs or sizes: {why}")
    trials = [t for doc in docs for t in doc["trials"]]
    a, b = first["pair"]
    out = {"pair": first["pair"], "size": first["size"], "calm_ms": first["calm_ms"]}
    return {**out, "trials": trials, "summary": summarise(trials, a, b, first["calm_ms"])}


def _ratio_cols(got: dict[str, Any] | None, *, spread: bool) -> str:
    """Median, (range,) and pairs ahead, as table columns; dashes for no pairs."""
    if got is None:
        return f"{'-':>13}{'-':>7}"
    cols = f"{'x' + format(got['median'], '.2f'):>13}"
    if spread:
        cols += f"{'x' + format(got['min'], '.2f') + '-x' + format(got['max'], '.2f'):>15}"
    return cols + f"{str(got['ahead']) + '/' + str(got['pairs']):>7}"


def table(doc: dict[str, Any]) -> str:
    """The summary as text: one line per figure."""
    a, b = doc["pair"]
    calm = sum(t["loop_ms"] <= doc["calm_ms"] for t in doc["trials"])
    lines = [
        f"{a} / {b}: {len(doc['trials'])} pairs of {doc['size']:,} messages per phase "
        f"({calm} calm: machine pace <= {doc['calm_ms']:g} ms)",
        f"{'figure':<30}{a:>14}{b:>14}{'median':>13}{'range':>15}{'ahead':>7}"
        f"{'calm median':>13}{'ahead':>7}",
    ]
    for key, row in doc["summary"].items():
        lines.append(
            f"{key:<30}{row[a]:>14,.0f}{row[b]:>14,.0f}"
            + _ratio_cols(row["all"], spread=True)
            + _ratio_cols(row["calm"], spread=False)
        )
    return "\n".join(lines)


def run_pairs(a: str, b: str, trials: int, size: int, root: Path) -> list[dict[str, Any]]:
    """Start a worker per system, run the trials, stop the workers."""
    workers: dict[str, subprocess.Popen[str]] = {}
    cmd = [sys.executable, "-m", "bench.paired", "--worker"]
    try:
        for name in (a, b):
            (root / name).mkdir()
            workers[name] = subprocess.Popen(
                [*cmd, name, str(root / name)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        for name, worker in workers.items():  # both open before the first trial's pace
            _reply(name, worker)
        done: list[dict[str, Any]] = []
        for t in range(trials):
            order = (a, b) if t % 2 == 0 else (b, a)
            trial: dict[str, Any] = {"loop_ms": loop_ms(), "first": order[0], "phases": {}}
            for k, phase in enumerate(PHASES):
                seed = t * len(PHASES) + k  # both systems get the same due times
                trial["phases"][phase] = {n: _ask(n, workers[n], phase, size, seed) for n in order}
                time.sleep(PAUSE_S)
            done.append(trial)
            print(f"trial {t + 1}/{trials} done (pace {trial['loop_ms']} ms)", file=sys.stderr)
        return done
    finally:
        for worker in workers.values():
            if worker.stdin is not None:
                worker.stdin.close()  # end of input: the worker closes its system and ends
        for worker in workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.wait(WORKER_EXIT_S)
            stop_process(worker)  # signalled only if it is still running


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pair", default="delayq_engine,rocksdb", help="A,B: two systems (A/B)")
    ap.add_argument("--trials", type=int, default=12, help="pairs per phase (default 12)")
    ap.add_argument("--size", type=int, default=20_000, help="messages per phase (default 20,000)")
    ap.add_argument("--quick", action="store_true", help="2 trials of 2,000 messages")
    ap.add_argument(
        "--json", type=Path, help="write the trials and the summary (with --merge: pooled)"
    )
    ap.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="sum up the trials of saved runs (--json files of one pair and size) together",
    )
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker[0], Path(args.worker[1]))
        return
    if args.merge:
        try:
            doc = pooled([read_json(f) for f in args.merge])
        except (ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"--merge: {exc}") from exc
        print(table(doc))
        if args.json:
            args.json.write_text(json.dumps(doc, indent=1))
        return
    pair = [n.strip() for n in args.pair.split(",")]
    adapters = sorted(n for n, s in SYSTEMS.items() if not issubclass(s, ClientDriven))
    if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(adapters):
        raise SystemExit(f"--pair: two different systems of {adapters}, got {args.pair!r}")
    trials, size = (2, 2000) if args.quick else (args.trials, args.size)
    if trials < 1 or size < 2 * BATCH:
        raise SystemExit(
            f"--trials must be >= 1 and --size >= {2 * BATCH}, got {trials} and {size}"
        )
    a, b = pair
    root = Path(tempfile.mkdtemp(prefix="delayq-paired-"))
    try:
        done = run_pairs(a, b, trials, size, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    doc = {"pair": pair, "size": size, "calm_ms": CALM_MS, "trials": done}
    doc["summary"] = summarise(done, a, b, CALM_MS)
    print(table(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
