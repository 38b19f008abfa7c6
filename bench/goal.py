"""The comparison's goal, checked against a ``bench.compare`` result (pure: a --json
document in, rows and text out).

The goal: ``delayq`` (one ``delayq serve``) ahead of the RocketMQ 5 broker at both
timer precisions (``rocketmq``, ``rocketmq_100ms``) and of ``redis`` on every
throughput figure, with lower p99 lateness, lower peak RSS and a faster restart after
SIGKILL. The in-process rows (``delayq_engine``, ``rocksdb``, ``heap``) are reference
rows with no goal. The same goal holds for ``delayq_rmq5`` (delayq through its RocketMQ 5
port) against ``rocketmq5_proxy`` (RocketMQ's own gRPC proxy), both driven by the official
RocketMQ 5 Java client, on send, delivery and recall rates, p50 and p99 lateness, early
deliveries (no more than the peer's) and peak RSS.

Per pair, workload and goal figure this gives the folded (median) value of both sides
and in how many rounds the delayq side was ahead; rounds pair up by index, as
``--rounds`` interleaves them and ``--merge`` keeps their order. Peak RSS is one figure
per run (every workload carries the same value): it is checked once.

A delivery rate is capped by the rate messages come due (the paced phase's arrival
rate, the burst's 100k in a second), so two systems that both keep up differ by
noise: a delivery rate within ``PAR`` of the peer's counts as keeping up. A p99 of
-1 means nothing was delivered: never ahead, and behind any side that delivered.
"""

from __future__ import annotations

from typing import Any, NamedTuple

GOAL_PAIRS = (
    ("delayq", "rocketmq"),
    ("delayq", "rocketmq_100ms"),
    ("delayq", "redis"),
    ("delayq_rmq5", "rocketmq5_proxy"),
)
RATES = ("schedule_msgs_per_s", "deliver_msgs_per_s", "cancel_msgs_per_s")  # higher is better
LOWER = ("lateness_ms_p99", "rss_mb", "restart_s")
FIGURES = {  # a pair's goal figures, when not (*RATES, *LOWER)
    ("delayq_rmq5", "rocketmq5_proxy"): (
        *RATES,
        "lateness_ms_p50",
        "lateness_ms_p99",
        "early_count",
        "rss_mb",
    ),
}
PER_RUN = ("rss_mb",)  # the same in every workload: checked on the first only
PAR = 0.01  # delivery rates only: both at the arrival rate


class Standing(NamedTuple):
    """One goal figure of one pair on one workload."""

    ours: str
    peer: str
    workload: str
    figure: str
    ours_value: float
    peer_value: float
    won: int  # rounds the delayq side was ahead in (kept up, for a delivery rate)
    rounds: int

    @property
    def met(self) -> bool:
        """Ahead in the folded result (the medians)."""
        return ahead(self.figure, self.ours_value, self.peer_value)


def ahead(figure: str, ours: float, peer: float) -> bool:
    """Whether ``ours`` meets the goal against ``peer`` on ``figure``."""
    if figure == "deliver_msgs_per_s":
        return ours >= peer * (1 - PAR)
    if figure in RATES:
        return ours > peer
    if figure.startswith("lateness_ms_") and min(ours, peer) < 0:  # -1: nothing delivered
        return ours >= 0
    if figure == "early_count":  # both 0 is as good as it gets
        return ours <= peer
    return ours < peer


def standings(doc: dict[str, Any]) -> list[Standing]:
    """Every goal figure of every goal pair present in ``doc``; a figure either
    side lacks (or left None) is skipped. A document without ``rounds`` (one
    round) counts its ``systems`` as that round."""
    systems, by_round = doc["systems"], doc.get("rounds") or {}
    out: list[Standing] = []
    for ours, peer in GOAL_PAIRS:
        if ours not in systems or peer not in systems:
            continue
        mine, theirs = by_round.get(ours) or [systems[ours]], by_round.get(peer) or [systems[peer]]
        if len(mine) != len(theirs):
            raise ValueError(f"{ours} has {len(mine)} rounds, {peer} {len(theirs)}")
        for i, (wl, figures) in enumerate(systems[ours].items()):
            for fig in FIGURES.get((ours, peer), (*RATES, *LOWER)):
                if i and fig in PER_RUN:
                    continue
                a, b = figures.get(fig), systems[peer].get(wl, {}).get(fig)
                if a is None or b is None:
                    continue
                won = 0
                for m, t in zip(mine, theirs, strict=True):
                    x, y = m.get(wl, {}).get(fig), t.get(wl, {}).get(fig)
                    won += x is not None and y is not None and ahead(fig, x, y)
                out.append(Standing(ours, peer, wl, fig, a, b, won, len(mine)))
    return out


def goal_report(doc: dict[str, Any]) -> str:
    """The goal per pair: met or not (and where not), then one line per figure."""
    rows = standings(doc)
    lines: list[str] = []
    for ours, peer in GOAL_PAIRS:
        mine = [r for r in rows if r.ours == ours and r.peer == peer]
        if not mine:
            continue
        short = [f"{r.figure} {r.workload}" for r in mine if not r.met]
        every = sum(r.won == r.rounds for r in mine)
        lines.append(
            f"goal {ours} vs {peer}: {'not met' if short else 'met'} "
            f"(ahead in every round on {every} of {len(mine)} figures)"
            + (f"; behind on {', '.join(short)}" if short else "")
        )
        for r in mine:
            ratio = _ratio(r.ours_value, r.peer_value)
            lines.append(
                f"  {'ok' if r.met else 'NO':2} {r.figure:20} {r.workload:8} "
                f"{_num(r.ours_value):>10} vs {_num(r.peer_value):>10} {ratio:>8}  "
                f"ahead in {r.won}/{r.rounds} rounds"
            )
    return "\n".join(lines)


def _ratio(ours: float, peer: float) -> str:
    if ours <= 0 or peer <= 0:
        return "-"
    r = ours / peer
    return f"x{r:.2f}" if r >= 0.1 else f"x{r:.3f}" if r >= 0.001 else "<x0.001"


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"
