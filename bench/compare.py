"""Side-by-side benchmark: delayq against what people build delay queues from.

    python -m bench.compare [--quick] [--scale F] [--systems a,b] [--rounds N]
                            [--json FILE] [--plot DIR]

Systems (see ``bench.systems``): ``delayq`` (server, client batches of 100) vs
``redis`` (ZSET + Lua, AOF everysec, pipelines of 100); ``delayq_engine`` (in
process, batches of 100) vs ``rocksdb`` (rocksdict) and ``heap`` (no disk);
``delayq_rmq5`` (delayq's RocketMQ 5 port) vs ``rocketmq5_proxy`` (rocketmq-proxy in
local mode), both driven by the official RocketMQ 5 Java client (``ClientDriven``:
one message per send, recall and ack request; their own uniform and burst workloads,
``rmq5_uniform``/``rmq5_burst``, with the same due times and figures as far as they
apply, sends/s as schedule_msgs_per_s and recalls/s as cancel_msgs_per_s).
Each system runs in its own worker process, one after another.

Workloads: ``uniform`` (schedule with delays 1 s..1 h, then a delivery phase
with delays 1..20 s), ``burst`` (all due in the same second), ``far`` (delays
3..90 days: pending capacity, RSS, disk, restart after SIGKILL) and ``cancel``
(half of the scheduled messages cancelled before due).

Figures: schedule_msgs_per_s, deliver_msgs_per_s, cancel_msgs_per_s,
lateness_ms_p50/p99/max, lateness_ms_cdf (the lateness at each of ``CDF_QUANTILES``:
what the lateness plot draws), early_count, rss_mb (peak), rss_bytes_per_msg (growth
while the far-future set is scheduled), disk_bytes_per_msg, restart_s, plus
lost/resurrected/wrong_body counts that must be 0 (every system hands the consumer
each message's body, and it is checked). Nothing here asserts speed; tests only
check shape and correctness.

``--rounds N`` runs every system N times, the systems interleaved round by round
(a shared, noisy machine drifts over minutes): each figure is then the median
over the rounds, a maximum or a correctness count the worst of them (see
``combine``), and the JSON keeps every round under ``rounds``. ``--merge A B ...``
folds the rounds of several saved runs (of the same sizes) into one result, as if
they were one run: ``--json`` and ``--plot`` then write the merged result.

After the table comes the goal, checked (``bench.goal``): per pair, whether
the delayq side is ahead on every goal figure, and in how many rounds. Last, the
machine's pace (``loop_ms``: a fixed Python loop timed before and after each
system's run, kept per system and round in the JSON): on a shared VM it tells a
calm run from a loaded one.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from bench.goal import RATES, goal_report
from bench.lateness import lateness_figures, percentile
from bench.peers.rocketmq5.client import Bench5, ClientDriven
from bench.systems import PAIRS, SYSTEMS, current_rss_bytes, now_ms, peak_rss_sampler

# Incompressible 200-byte bodies: a repeated character would flatter the peers that
# compress (Redis' RDB preamble, RocksDB's Snappy) in the disk figure.
BODY = random.Random(0).randbytes(200)
BATCH = 100
HOUR = 3_600_000
DAY = 24 * HOUR
WARMUP = 2000  # the RocketMQ 5 client's sends and recalls before any is timed (JIT, routes)
SIZES = {"uniform": 100_000, "deliver": 50_000, "burst": 100_000, "far": 200_000, "cancel": 50_000}


class Timing(NamedTuple):
    """How long the phases wait: the paced phases spread their due times over a
    window; the burst comes due ``burst_lead_ms`` after scheduling starts (plus room
    to schedule them all first: ``room_ms``)."""

    window_s: int  # the uniform workload's delivery phase
    cancel_window_s: int
    burst_lead_ms: int


FULL = Timing(window_s=20, cancel_window_s=10, burst_lead_ms=2000)
QUICK = Timing(window_s=3, cancel_window_s=3, burst_lead_ms=1000)  # --quick: <= 90 s in all


# where the lateness CDF is sampled (its figure ``lateness_ms_cdf``: the lateness at
# each of these fractions delivered): every 2% and the tail finer, 0 the minimum, 1 the max
CDF_QUANTILES = (*(i / 50 for i in range(50)), 0.98, 0.99, 0.995, 0.999, 1.0)


def schedule_dues(system: Any, dues: list[int]) -> tuple[list[Any], float]:
    """Schedule a message per due time, ``BATCH`` per call: the handles and msgs/s."""
    handles: list[Any] = []
    t0 = time.perf_counter()
    for i in range(0, len(dues), BATCH):
        handles += system.schedule([(BODY, d) for d in dues[i : i + BATCH]])
    return handles, len(dues) / (time.perf_counter() - t0)


def cancel_handles(system: Any, handles: list[Any]) -> tuple[int, float]:
    """Cancel these, ``BATCH`` per call: how many the system found, and msgs/s."""
    t0 = time.perf_counter()
    found = sum(system.cancel(handles[i : i + BATCH]) for i in range(0, len(handles), BATCH))
    return found, len(handles) / (time.perf_counter() - t0)


def _deliver(system: Any, expect: set[Any], until_ms: int) -> dict[str, Any]:
    """Poll until every handle in ``expect`` arrived (or ``until_ms``); lateness is
    what the consumer sees: its clock at receipt (``Polled``: stamped in the thread
    that received the batch) minus the due time, in ms to the µs (due times are
    whole ms, so a whole-ms clock would round every trip up or down to a full ms)."""
    late: list[float] = []
    seen: set[Any] = set()
    wrong = 0
    first = last = 0.0
    while not expect <= seen and now_ms() < until_ms:
        t, got = system.poll(1000, 0.2)
        ours = len(late)
        for handle, at, body in got:
            if handle in expect:  # leftovers of earlier phases do not count here
                late.append(t - at)
                wrong += body != BODY
            seen.add(handle)
        if len(late) > ours:  # the span too: from this phase's first batch to its last
            last = time.perf_counter()
            first = first or last
    late.sort()
    return {
        **lateness_cdf(late),
        "lost": len(expect - seen),
        "wrong_body": wrong,
        "_seen": seen,
        "_span": max(last - first, 1e-3),
    }


def lateness_cdf(late: list[float]) -> dict[str, Any]:
    """``lateness_figures`` of sorted latenesses, and their CDF (None when empty)."""
    return {
        **lateness_figures(late),
        "lateness_ms_cdf": [percentile(late, q) for q in CDF_QUANTILES] if late else None,
    }


# The workloads' due times (also the phases of ``bench.paired``): ``rng`` seeded per
# workload, so every system is given the same times relative to when it starts.
def uniform_dues(rng: random.Random, now: int, n: int) -> list[int]:
    """Spread over 1 s .. 1 h."""
    return [now + rng.randint(1000, 3_600_000) for _ in range(n)]


def burst_dues(at: int, n: int) -> list[int]:
    """All within the second from ``at``."""
    return [at + (i % 1000) for i in range(n)]


def cancel_dues(rng: random.Random, start: int, n: int, window_s: int) -> list[int]:
    """Spread over ``window_s`` from ``start`` (a few seconds out)."""
    return [start + rng.randint(0, window_s * 1000) for _ in range(n)]


def far_dues(rng: random.Random, now: int, n: int) -> list[int]:
    """Spread over 3 .. 90 days (rolled)."""
    return [now + rng.randint(3 * DAY, 90 * DAY) for _ in range(n)]


def room_ms(ops: int, rate: float, per_ms: int) -> int:
    """How long before its messages come due a phase of ``ops`` calls' worth of messages
    (schedules, cancels) is given: 1 ms per ``per_ms`` of them (what every system gets),
    or twice what the system's own measured schedule ``rate`` needs when that is longer,
    so that a slower system too has them all scheduled before the first comes due."""
    return max(ops // per_ms, round(2 * ops * 1000 / max(rate, 1)))


def wl_uniform(system: Any, n: int, deliver: int, window_s: int) -> dict[str, Any]:
    rng = random.Random(1)
    _, rate = schedule_dues(system, uniform_dues(rng, now_ms(), n))
    start = now_ms() + 1000 + room_ms(deliver, rate, 20)  # due once they are all scheduled
    dues = [start + rng.randint(0, (window_s - 1) * 1000) for _ in range(deliver)]
    handles, _ = schedule_dues(system, dues)
    res = _deliver(system, set(handles), start + window_s * 1000 + 30_000)
    res["schedule_msgs_per_s"] = round(rate)
    res["deliver_msgs_per_s"] = round(len(res["_seen"] & set(handles)) / res["_span"])
    return res


def wl_burst(system: Any, n: int, lead_ms: int, pace: float) -> dict[str, Any]:
    """``pace``: the system's schedule rate in the uniform workload (see ``room_ms``)."""
    at = now_ms() + lead_ms + room_ms(n, pace, 20)  # room to schedule them all first
    handles, rate = schedule_dues(system, burst_dues(at, n))
    wait = at / 1000 - time.time()
    if wait > 0:
        time.sleep(wait)
    t0 = time.perf_counter()
    res = _deliver(system, set(handles), at + 60_000)
    res["schedule_msgs_per_s"] = round(rate)
    res["deliver_msgs_per_s"] = round((n - res["lost"]) / (time.perf_counter() - t0))
    return res


def wl_cancel(system: Any, n: int, window_s: int, pace: float) -> dict[str, Any]:
    rng = random.Random(3)
    # due only once scheduling n and cancelling n / 2 can be done
    start = now_ms() + 1000 + room_ms(n + n // 2, pace, 15)
    handles, rate = schedule_dues(system, cancel_dues(rng, start, n, window_s))
    victims = handles[::2]
    cancelled, cancel_rate = cancel_handles(system, victims)
    res = _deliver(system, set(handles[1::2]), start + window_s * 1000 + 30_000)
    res["resurrected"] = len(res["_seen"] & set(victims))
    res.update(
        schedule_msgs_per_s=round(rate),
        cancel_msgs_per_s=round(cancel_rate),
        not_cancelled=len(victims) - cancelled,
    )
    return res


def wl_far(system: Any, n: int, workdir: Path) -> dict[str, Any]:
    rng = random.Random(4)
    time.sleep(1.5)  # one flush interval: earlier workloads' writes are on disk
    before = system.disk_bytes()
    mem_before = current_rss_bytes(system)
    handles, rate = schedule_dues(system, far_dues(rng, now_ms(), n))
    del handles  # the benchmark's own list must not count for the in-process systems
    time.sleep(1.5)  # one flush interval: the disk figure counts what is written
    res: dict[str, Any] = {
        "schedule_msgs_per_s": round(rate),
        # what holding the pending set costs in memory (RSS growth over the phase)
        "rss_bytes_per_msg": round((current_rss_bytes(system) - mem_before) / n, 1),
        # what the pending set adds, not the earlier workloads' history (delayq keeps
        # delivered messages for its retention period; the peers delete on pop)
        "disk_bytes_per_msg": round((system.disk_bytes() - before) / n, 1),
    }
    restart = system.restart()
    res["restart_s"] = None if restart is None else round(restart, 3)
    return res


# The workloads of the systems driven by the RocketMQ 5 Java client (``ClientDriven``:
# one message per request, ``IN_FLIGHT`` unanswered; a SimpleConsumer acks each message).
# The same figures as the adapters' workloads, plus the sends' ack time and resends.
def _sent(client: Bench5, dues: list[int]) -> tuple[list[int], dict[str, Any]]:
    """Send one message per due time: their numbers, and the send figures."""
    got = client.send(dues)
    acks = sorted(ms for ms in got["ack_ms"] if ms > 0)  # 0: never answered (failed)
    if got["failed"]:
        print(f"{got['failed']} sends failed: {got['error']}", file=sys.stderr)
    return list(range(got["first"], got["first"] + len(dues))), {
        "schedule_msgs_per_s": round(len(dues) / got["secs"]),
        "send_ack_ms_p50": percentile(acks, 0.5),
        "send_ack_ms_p99": percentile(acks, 0.99),
        "send_failed": got["failed"],
        "resends": got["resends"],
    }


def _recalled(client: Bench5, numbers: list[int]) -> dict[str, Any]:
    got = client.recall(numbers)
    if got["failed"]:
        print(f"{got['failed']} recalls failed: {got['error']}", file=sys.stderr)
    return {
        "cancel_msgs_per_s": round(len(numbers) / got["secs"]),
        "not_cancelled": len(numbers) - got["found"],
    }


def _received(client: Bench5, numbers: list[int], until_ms: int) -> dict[str, Any]:
    """Wait for these: lateness and the correctness counts, and ``_first_ms``/``_last_ms``."""
    got = client.expect(numbers, until_ms)
    late = sorted(got["lateness"])
    cols = [sorted(c) for c in zip(*got["batches"], strict=True)] or [[], [], []]
    size, took, acks = cols
    return {
        **lateness_cdf(late),
        **{k: got[k] for k in ("lost", "wrong_body", "duplicates", "resurrected")},
        # each receive that brought messages: how many, how long it took (a long poll
        # waits while nothing is due), how long acking them one request each took
        "receive_batch_p50": percentile(size, 0.5),
        "receive_ms_p50": percentile(took, 0.5),
        "ack_batch_ms_p50": percentile(acks, 0.5),
        "ack_batch_ms_p99": percentile(acks, 0.99),
        "_first_ms": got["first_ms"],
        "_last_ms": got["last_ms"],
    }


def rmq5_uniform(client: Bench5, n: int, deliver: int, window_s: int) -> dict[str, Any]:
    """``n`` sends due 1..2 h out, half of them recalled (rates), then ``deliver`` sends
    due over ``window_s`` once they are all sent, received."""
    rng = random.Random(1)
    sent, res = _sent(client, uniform_dues(rng, now_ms() + HOUR, n))
    res.update(_recalled(client, sent[::2]))
    start = now_ms() + 1000 + room_ms(deliver, res["schedule_msgs_per_s"], 20)
    paced, _ = _sent(client, cancel_dues(rng, start, deliver, window_s - 1))
    # each delivery is a receive's share and an ack request: room to drain at the send rate
    until = start + window_s * 1000 + 30_000 + room_ms(deliver, res["schedule_msgs_per_s"], 20)
    res.update(_received(client, paced, until))
    span_s = max(res.pop("_last_ms") - res.pop("_first_ms"), 1.0) / 1000
    res["deliver_msgs_per_s"] = round((deliver - res["lost"]) / span_s)
    return res


def rmq5_burst(client: Bench5, n: int, lead_ms: int, pace: float) -> dict[str, Any]:
    """``n`` sends all due in one second, a quarter of them recalled before; the rest
    received (``pace``: the uniform workload's send rate, see ``room_ms``)."""
    at = now_ms() + lead_ms + room_ms(n + n // 4, pace, 20)
    sent, res = _sent(client, burst_dues(at, n))
    res.update(_recalled(client, sent[::4]))
    kept = [m for i, m in enumerate(sent) if i % 4]
    res.update(_received(client, kept, at + 60_000 + room_ms(n, pace, 20)))
    del res["_first_ms"]
    span_s = max(res.pop("_last_ms") - at, 1.0) / 1000
    res["deliver_msgs_per_s"] = round((len(kept) - res["lost"]) / span_s)
    return res


def run_client_driven(
    system: ClientDriven, sizes: dict[str, int], timing: Timing
) -> dict[str, Any]:
    """The uniform and burst workloads through the RocketMQ 5 Java client, after a warm-up."""
    warmup = min(WARMUP, sizes["uniform"])
    client = system.start_client(warmup + sizes["uniform"] + sizes["deliver"] + sizes["burst"])
    warm, _ = _sent(client, uniform_dues(random.Random(0), now_ms() + HOUR, warmup))
    _recalled(client, warm)
    out = {"uniform": rmq5_uniform(client, sizes["uniform"], sizes["deliver"], timing.window_s)}
    pace = out["uniform"]["schedule_msgs_per_s"]
    out["burst"] = rmq5_burst(client, sizes["burst"], timing.burst_lead_ms, pace)
    return out


def run_system(name: str, sizes: dict[str, int], timing: Timing, workdir: Path) -> dict[str, Any]:
    system = SYSTEMS[name]()
    system.open(workdir)
    # What exists once the system is open (interpreter, libraries, the system's own
    # start-up state) is frozen, as `delayq serve` does for itself: a full collection
    # then walks only what the workloads make. The same for every system.
    gc.collect()
    gc.freeze()
    rss = peak_rss_sampler(system) if not system.in_process else None
    try:
        if isinstance(system, ClientDriven):
            out = run_client_driven(system, sizes, timing)
        else:
            out = _adapter_workloads(system, sizes, timing, workdir)
        peak = rss() if rss else round(system.rss_mb(), 1)
        for figures in out.values():
            figures["rss_mb"] = peak
            for key in [k for k in figures if k.startswith("_")]:
                del figures[key]
    finally:
        system.close()
    return out


def _adapter_workloads(
    system: Any, sizes: dict[str, int], timing: Timing, workdir: Path
) -> dict[str, Any]:
    out = {"uniform": wl_uniform(system, sizes["uniform"], sizes["deliver"], timing.window_s)}
    pace = out["uniform"]["schedule_msgs_per_s"]
    out["burst"] = wl_burst(system, sizes["burst"], timing.burst_lead_ms, pace)
    out["cancel"] = wl_cancel(system, sizes["cancel"], timing.cancel_window_s, pace)
    out["far"] = wl_far(system, sizes["far"], workdir)
    return out


def loop_ms() -> float:
    """The machine's pace: how long a fixed pure-Python loop takes (~110 ms on the
    development VM when calm; under load up to twice that). Timed around every
    system's run, so a result says what the machine was like while it was measured."""
    t0, total = time.perf_counter(), 0
    for i in range(3_000_000):
        total += i
    return round((time.perf_counter() - t0) * 1000, 1)


def _worker(args: list[str]) -> None:
    name, sizes, timing = args[0], json.loads(args[1]), Timing(*json.loads(args[2]))
    before = loop_ms()
    figures = run_system(name, sizes, timing, Path(args[3]))
    print(json.dumps({"figures": figures, "loop_ms": [before, loop_ms()]}), flush=True)


# figures where the worst round counts, not the median: maxima and what must be 0
WORST = ("lateness_ms_max", "early_count", "lost", "wrong_body", "resurrected", "not_cancelled")


def combine(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One system's results over several rounds ({workload: {figure: value}} each):
    per figure the median (the lower middle one for an even count: never a value
    no round measured), or the largest for a figure in ``WORST``; a figure some
    round lacks or left None is None. A list figure (the lateness CDF) is folded
    point by point: the median round's lateness at each fraction."""
    out: dict[str, dict[str, Any]] = {}
    for wl in rounds[0]:
        out[wl] = {}
        for fig in rounds[0][wl]:
            values = [r.get(wl, {}).get(fig) for r in rounds]
            if any(v is None for v in values):
                out[wl][fig] = None
            elif isinstance(values[0], list):
                out[wl][fig] = [_fold(fig, list(point)) for point in zip(*values, strict=True)]
            else:
                out[wl][fig] = _fold(fig, values)
    return out


def lower_median(values: Iterable[Any]) -> Any:
    """The median, and for an even count the lower of the two middle values: always
    a value some round (or pair) measured, never a mean of two."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def _fold(fig: str, values: list[Any]) -> Any:
    return max(values) if fig in WORST else lower_median(values)


def merge_runs(docs: list[Any], labels: list[str] | None = None) -> dict[str, Any]:
    """Saved runs (``--json`` documents) as one: every system's rounds, in the
    order given (a run of one round is its ``systems``), combined again. The runs
    must have the same sizes and systems: a figure of other sizes is not the same
    figure. Errors name a run by its label (default: "run N")."""
    if not docs:
        raise ValueError("nothing to merge")
    label = labels or [f"run {i + 1}" for i in range(len(docs))]
    for i, doc in enumerate(docs):
        _check_doc(doc, label[i])
    sizes = docs[0].get("sizes")
    rounds: dict[str, list[Any]] = {name: [] for name in docs[0]["systems"]}
    pace: dict[str, list[Any]] = {name: [] for name in rounds}
    for i, doc in enumerate(docs):
        if doc.get("sizes") != sizes:
            raise ValueError(f"{label[i]} has sizes {doc.get('sizes')}, {label[0]} {sizes}")
        if set(doc["systems"]) != set(rounds):
            raise ValueError(
                f"{label[i]} has systems {sorted(doc['systems'])}, {label[0]} {sorted(rounds)}"
            )
        for name in rounds:
            rounds[name] += doc.get("rounds", {}).get(name) or [doc["systems"][name]]
            pace[name] += doc.get("loop_ms", {}).get(name, [])
    return {
        "systems": {name: combine(r) for name, r in rounds.items()},
        "sizes": sizes,
        "rounds": rounds,
        "loop_ms": pace,
    }


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    cols = [
        "schedule_msgs_per_s",
        "deliver_msgs_per_s",
        "cancel_msgs_per_s",
        "lateness_ms_p50",
        "lateness_ms_p99",
        "lateness_ms_max",
        "early_count",
        "rss_mb",
        "rss_bytes_per_msg",
        "disk_bytes_per_msg",
        "restart_s",
    ]
    short = [
        "sched/s",
        "deliv/s",
        "cancel/s",
        "p50ms",
        "p99ms",
        "maxms",
        "early",
        "rssMB",
        "rss B/msg",
        "disk B/msg",
        "restart s",
    ]
    lines = [f"{'system':14} {'workload':9} " + " ".join(f"{c:>10}" for c in short)]
    for system, workloads in results.items():
        for wl, figs in workloads.items():
            cells = []
            for c in cols:
                v = figs.get(c)
                cells.append(f"{'-' if v is None else v:>10}")
            lines.append(f"{system:14} {wl:9} " + " ".join(cells))
    lines.append("")
    for system, workloads in results.items():  # the RocketMQ 5 client's own figures
        for wl, figs in workloads.items():
            if figs.get("send_ack_ms_p50") is not None:
                lines.append(
                    f"{system} [{wl}]: send ack p50/p99 {figs['send_ack_ms_p50']}/"
                    f"{figs['send_ack_ms_p99']} ms ({figs['resends']} resent); a receive "
                    f"brought {figs['receive_batch_p50']} in {figs['receive_ms_p50']} ms, "
                    f"acking them took {figs['ack_batch_ms_p50']} ms (p99 "
                    f"{figs['ack_batch_ms_p99']}) (medians)"
                )
    if any(f.get("send_ack_ms_p50") is not None for w in results.values() for f in w.values()):
        lines.append("")
    for peer, ours in PAIRS.items():
        if peer in results and ours in results:
            for wl in results[ours]:
                parts = []
                for c in (*RATES, "lateness_ms_p99", "rss_mb", "rss_bytes_per_msg"):
                    a, b = results[ours][wl].get(c), results[peer][wl].get(c)
                    if a is not None and b:
                        parts.append(f"{c.removesuffix('_msgs_per_s')} x{a / b:.2f}")
                lines.append(f"{ours} vs {peer} [{wl}]: " + ", ".join(parts))
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict[str, Any]]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for figure in RATES:
        fig, ax = plt.subplots(figsize=(9, 4))
        systems = list(results)
        workloads = sorted({w for r in results.values() for w in r})
        width = 0.8 / max(1, len(systems))
        for i, s in enumerate(systems):
            vals = [results[s].get(w, {}).get(figure) or 0 for w in workloads]
            ax.bar([x + i * width for x in range(len(workloads))], vals, width, label=s)
        ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(workloads))])
        ax.set_xticklabels(workloads)
        ax.set_yscale("log")  # the heap is 10-50x the rest: a linear axis hides them
        ax.set_ylabel("messages / s (log)")
        ax.set_title(figure.replace("_", " "))
        ax.legend()
        path = out / f"{figure}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    delivered = ("uniform", "burst", "cancel")
    fig, axes = plt.subplots(1, len(delivered), figsize=(13, 4.2), sharey=True)
    for ax, wl in zip(axes, delivered, strict=True):
        for s, figures in results.items():
            pts = lateness_points(figures.get(wl, {}))
            if pts:
                xs, ys = [max(v, 0.01) for _, v in pts], [q for q, _ in pts]
                ax.plot(xs, ys, label=s, marker="o" if len(pts) <= len(_POINTS) else None)
        ax.set_xscale("log")
        ax.set_xlabel("lateness, ms (log)")
        ax.set_title(f"{wl} ({'paced' if wl != 'burst' else 'all due in one second'})")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction delivered within")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("lateness CDF per system, as each consumer saw it")
    path = out / "lateness.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [*paths, path]


def lateness_points(figures: dict[str, Any]) -> list[tuple[float, float]]:
    """(fraction delivered, lateness ms) points of one workload's CDF: the sampled
    CDF, or (results saved before it was) the p50, p99 and max alone."""
    cdf = figures.get("lateness_ms_cdf")
    if cdf is not None:
        pts = list(zip(CDF_QUANTILES, cdf, strict=True))
    else:
        pts = [(q, figures.get(f"lateness_ms_{name}")) for q, name in _POINTS]
    return [(q, v) for q, v in pts if v is not None and v >= 0]


_POINTS = ((0.5, "p50"), (0.99, "p99"), (1.0, "max"))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="reduced sizes and windows (<= 90 s)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every size by this")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated subset")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every system N times, interleaved; report per-figure medians (default 1)",
    )
    ap.add_argument("--json", type=Path, help="write {systems: {name: {workload: {figure}}}}")
    ap.add_argument("--plot", type=Path, help="write PNG charts into this directory")
    ap.add_argument("--from-json", type=Path, help="redraw table and plots from saved results")
    ap.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="fold the rounds of saved runs (--json files of the same sizes) into one result",
    )
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(a.worker)
        return
    if a.from_json:
        try:
            saved = read_json(a.from_json)
            _check_doc(saved, str(a.from_json))
        except ValueError as exc:
            raise SystemExit(f"--from-json: {exc}") from exc
        report(saved, None, a.plot)
        return
    if a.merge:
        try:
            docs = [read_json(f) for f in a.merge]
            merged = merge_runs(docs, [str(f) for f in a.merge])
        except ValueError as exc:
            raise SystemExit(f"--merge: {exc}") from exc
        report(merged, a.json, a.plot)
        return
    scale = a.scale * (0.1 if a.quick else 1.0)
    sizes = {k: max(200, int(v * scale)) for k, v in SIZES.items()}
    timing = QUICK if a.quick else FULL
    names = [n.strip() for n in a.systems.split(",") if n.strip()]
    unknown = set(names) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; choose from {sorted(SYSTEMS)}")
    if a.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1, got {a.rounds}")
    runs: dict[str, list[Any]] = {name: [] for name in names}
    pace: dict[str, list[list[float]]] = {name: [] for name in names}
    root = Path(tempfile.mkdtemp(prefix="delayq-compare-"))
    try:
        for rnd, name in itertools.product(range(a.rounds), names):
            workdir = root / f"{name}-{rnd}"
            workdir.mkdir()
            print(
                f"== {name}" + (f" (round {rnd + 1})" if a.rounds > 1 else ""),
                file=sys.stderr,
                flush=True,
            )
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.compare",
                    "--worker",
                    name,
                    json.dumps(sizes),
                    json.dumps(timing),
                    str(workdir),
                ],
                capture_output=True,
                text=True,
                cwd=Path(__file__).resolve().parents[1],
            )
            if run.returncode != 0:
                raise SystemExit(f"{name} failed:\n{run.stderr[-3000:]}")
            got = json.loads(run.stdout.strip().splitlines()[-1])
            runs[name].append(got["figures"])
            pace[name].append(got["loop_ms"])
            shutil.rmtree(workdir, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    doc: dict[str, Any] = {
        "systems": {name: combine(r) for name, r in runs.items()},
        "sizes": sizes,
        "loop_ms": pace,
    }
    if a.rounds > 1:
        doc["rounds"] = runs
    report(doc, a.json, a.plot)


def _check_doc(doc: Any, label: str) -> None:
    if not isinstance(doc, dict) or not isinstance(doc.get("systems"), dict):
        raise ValueError(f"{label} is not a bench.compare --json document")


def read_json(path: Path) -> Any:
    """A saved ``--json`` document; ValueError naming the file if it cannot be read."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # json's errors are ValueErrors
        raise ValueError(f"{path}: {exc}") from exc


def report(doc: dict[str, Any], json_out: Path | None, plot_dir: Path | None) -> None:
    """Print the table; write the document and the plots where asked."""
    print(table(doc["systems"]))
    try:
        goal = goal_report(doc)
    except ValueError as exc:  # a saved document whose sides ran unequal rounds
        goal = f"goal not checked: {exc}"
    if goal:
        print("\n" + goal)
    paces = [ms for runs in doc.get("loop_ms", {}).values() for run in runs for ms in run]
    if paces:
        print(
            f"\nmachine pace: a fixed Python loop took {min(paces):g}-{max(paces):g} ms "
            "around the systems' runs (lower is calmer; see loop_ms)"
        )
    if json_out:
        json_out.write_text(json.dumps(doc, indent=2) + "\n")
    if plot_dir:
        for p in plot(doc["systems"], plot_dir):
            print(f"wrote {p}", file=sys.stderr)


if __name__ == "__main__":
    main()
