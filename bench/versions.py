"""Before/after: one benchmark run from two source trees in turns.

    python -m bench.versions --before DIR --after DIR [--pairs N] [--bench engine|e2e]
                             [--json FILE] [-- BENCH ARGS...]

Each pair runs ``python -m bench.<bench> --json ...`` once from each tree (their own
``service/`` and ``bench/``, the first mover alternating from pair to pair), so both
halves of a pair meet nearly the same machine. A tree is any checkout, e.g.
``git worktree add /tmp/before <commit>``. Prints, per rate figure, each side's
median and the after/before ratio over the pairs (its median, range and in how
many pairs "after" was ahead); per cost figure (CPU µs per message) the
before/after ratio, so above 1 means "after is better" for every line. Speed is
never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .compare import lower_median
from .paired import ratio_summary

__all__ = ["main", "run_once", "summarise"]

RATES = {
    "engine": [
        "schedule_msgs_per_s",
        "deliver_msgs_per_s",
        "cancel_msgs_per_s",
        "receive_ack_msgs_per_s",
    ],
    "e2e": ["schedule_msgs_per_s", "deliver_msgs_per_s"],
}
COSTS = {
    "engine": ["schedule_cpu_us_per_msg", "schedule_engine_cpu_us_per_msg"],
    "e2e": [
        "schedule_server_cpu_us_per_msg",
        "schedule_client_cpu_us_per_msg",
        "deliver_server_cpu_us_per_msg",
        "deliver_client_cpu_us_per_msg",
    ],
}
"""Figures where lower is better: their ratio is before/after (above 1: after cheaper)."""
QUICK = {
    "engine": ["--pending", "200000", "--deliver", "200000", "--seconds", "3"],
    "e2e": ["--quick"],
}


def run_once(tree: Path, bench: str, args: list[str]) -> dict[str, Any]:
    """One run of ``bench.<bench>`` from ``tree``; its figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'service'}"}
        cmd = [sys.executable, "-m", f"bench.{bench}", *args, "--json", str(out)]
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"bench.versions: {tree}: exit {done.returncode}\n{done.stderr}")
        figures: dict[str, Any] = json.loads(out.read_text())
        return figures


def summarise(
    pairs: list[dict[str, dict[str, Any]]], figures: list[str], costs: Sequence[str] = ()
) -> dict[str, Any]:
    """Per figure: each side's median and the after/before ratios (before/after for
    ``costs``: above 1 is always "after is better")."""
    out: dict[str, Any] = {}
    for fig in [*figures, *costs]:
        before = [p["before"][fig] for p in pairs if p["before"].get(fig) is not None]
        after = [p["after"][fig] for p in pairs if p["after"].get(fig) is not None]
        new, old = ("before", "after") if fig in costs else ("after", "before")
        ratios = [p[new][fig] / p[old][fig] for p in pairs if p[old].get(fig) and p[new].get(fig)]
        out[fig] = {
            "before": lower_median(before) if before else None,
            "after": lower_median(after) if after else None,
            "ratio": ratio_summary(ratios),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.versions", description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, required=True, help="source tree of the old version")
    p.add_argument("--after", type=Path, default=Path.cwd(), help="new version (default: here)")
    p.add_argument("--bench", choices=sorted(RATES), default="engine")
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--json", type=Path, help="also write every pair and the summary here")
    p.add_argument("args", nargs="*", help="the benchmark's own arguments (after --)")
    a = p.parse_args()
    args = a.args or QUICK[a.bench]
    pairs: list[dict[str, dict[str, Any]]] = []
    for i in range(a.pairs):
        order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
        pair = {side: run_once(getattr(a, side).resolve(), a.bench, args) for side in order}
        pairs.append(pair)
        rates = {side: {f: pair[side].get(f) for f in RATES[a.bench]} for side in order}
        print(json.dumps({"pair": i + 1, **rates}), flush=True)
    summary = summarise(pairs, RATES[a.bench], COSTS[a.bench])
    print(
        f"\n{'figure':<32} {'before':>10} {'after':>10}  ratio (rates after/before, "
        "costs before/after): median [min, max] ahead"
    )
    for fig, s in summary.items():
        if s["before"] is None or s["after"] is None:
            continue  # a figure this run does not give (e.g. engine's --big-only)
        r = s["ratio"]
        span = f"x{r['median']:.3f} [{r['min']:.3f}, {r['max']:.3f}] {r['ahead']}/{r['pairs']}"
        print(f"{fig:<32} {s['before']:>10} {s['after']:>10}  {span}")
    if a.json:
        a.json.write_text(json.dumps({"pairs": pairs, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
