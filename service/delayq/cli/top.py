"""``delayq top``: a live view of a cluster in the terminal (curses), refreshed every
``--interval``; ``--once`` prints one frame (``--json``: its JSON document) and exits.

The figures come from ``top.sampler`` (the I/O), are made into frames by
``top.rows`` and into text by ``top.screen`` (both pure); this
module holds the options, the terminal and the loop: sample, draw, take keys
until the next sample is due (a key redraws at once, re-sorting the frame
already taken), sample again. A resize redraws at the new size.

Exit codes: 0 after ``q`` (or a ``--once`` frame); 1 when no node answered the
first sample; 2 bad usage, DIR holds no cluster, or no terminal for the live view;
130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import curses
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..addresses import DEFAULT_ADDRESS
from ..cluster.errors import ClusterError
from ..durations import parse_duration_ms
from ..top.rows import SORTS, Frame, frame, order, to_json
from ..top.sampler import DirNodes, NodeSource, Sampler, ServerNodes
from ..top.samples import Sample
from ..top.screen import View, lines, on_key, screen

__all__ = ["add_parser", "run"]

EPILOG = """\
Rows: one per node of every shard (the shard map's masters and replicas): ROLE
and EPOCH as the node says (fenced: told to stop), STATE serving, recovering or
down, PENDING messages waiting, DUE<1M of them due within a minute or overdue,
DELIV/S deliveries a second since the last refresh, P99 lateness of releases,
LAG of a replica behind its master (bytes, ms), INSYNC: a master's in-sync set
(members/nodes), whether a replica is in it. Then each topic (summed over the
shards' masters) and each consumer group (BACKLOG: delivered, not acked;
DEAD_LETTERED: sent to dlq.<group>). "-": not known.
Keys: q quit, s/S next/previous sort, n name, p pending, d delivered/s,
l lateness, ? help.
--once --json prints {"nodes": [...], "topics": [...], "groups": [...], ...}:
the schema is in service/delayq/top/rows.py and README ("delayq top").
Exit codes: 0 done, 1 no node answered, 2 bad usage, no cluster in DIR, or
no terminal (use --once)."""


def _seconds(text: str) -> float:
    try:
        ms = parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if ms <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return ms / 1000


def add_parser(sub: Any, tls_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``top`` to ``sub``, the ``delayq`` command's subparsers (``tls_options``
    adds the TLS flags the client commands take)."""
    top = sub.add_parser(
        "top",
        help="a live view of a cluster: per shard and node, per topic and group",
        description="A live terminal view of a cluster, refreshed every --interval: "
        "one row per shard and node, a topic and a group section; keys sort and quit.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = top.add_mutually_exclusive_group()
    where.add_argument(
        "--server",
        help="any node of the cluster (its GetRoute gives the others): host:port or a gRPC "
        f"target URI (default $DELAYQ_SERVER or {DEFAULT_ADDRESS})",
    )
    where.add_argument(
        "--dir",
        type=Path,
        help="a local cluster's directory (delayq cluster up); its own TLS files, not --tls-*",
    )
    tls_options(top)
    top.add_argument(
        "--interval", type=_seconds, default=1.0, metavar="DURATION", help="refresh period (1s)"
    )
    top.add_argument(
        "--timeout",
        type=_seconds,
        metavar="DURATION",
        help="how long a node has to answer a call (a third of --interval, at most 1s)",
    )
    top.add_argument("--sort", choices=SORTS, default="name", help="the first sort (name)")
    top.add_argument(
        "--once",
        action="store_true",
        help="print one frame and exit (two samples --interval apart, for delivered/s)",
    )
    top.add_argument("--json", action="store_true", help="with --once: the frame as JSON")


def _source(args: argparse.Namespace) -> NodeSource:
    if args.dir is not None:
        return DirNodes(args.dir)
    from ..addresses import check_target
    from ..tls import TlsConfig

    server = args.server or os.environ.get("DELAYQ_SERVER") or DEFAULT_ADDRESS
    check_target(server, "--server")  # ValueError: exit 2
    return ServerNodes(server, TlsConfig.of(args.tls_ca, args.tls_cert, args.tls_key))


def run(args: argparse.Namespace) -> int:
    """Run the parsed ``top`` command (module notes for the exit codes)."""
    if args.json and not args.once:
        print("delayq top: --json only with --once", file=sys.stderr)
        return 2
    timeout_s = args.timeout if args.timeout is not None else min(1.0, args.interval / 3)
    try:
        with Sampler(_source(args), timeout_s) as sampler:
            first = sampler.sample()
            if first.answered == 0:
                why = f": {first.error}" if first.error else ""
                print(f"delayq top: no node answered ({first.source}{why})", file=sys.stderr)
                return 1
            if args.once:
                return _once(sampler, first, args)
            return _live(sampler, first, args.interval, View(sort=args.sort))
    except ClusterError as exc:
        print(f"delayq top: {exc}", file=sys.stderr)
        return 2


def _once(sampler: Sampler, first: Sample, args: argparse.Namespace) -> int:
    # the measurement's own interval, not a wait for a condition
    time.sleep(max(0.0, first.at_s + args.interval - time.monotonic()))
    f = frame(sampler.sample(), first, args.sort)
    print(json.dumps(to_json(f)) if args.json else "\n".join(lines(f)))
    return 0


def _live(sampler: Sampler, first: Sample, interval_s: float, view: View) -> int:
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        print("delayq top: the live view needs a terminal (--once prints a frame)", file=sys.stderr)
        return 2
    # the terminal's own size (ioctl, and SIGWINCH on a resize), not $LINES and
    # $COLUMNS, which ncurses would take first: a shell exports them, stale after a resize
    for name in ("LINES", "COLUMNS"):
        os.environ.pop(name, None)
    try:
        curses.wrapper(_loop, sampler, first, interval_s, view)
    except curses.error as exc:  # (a terminal curses cannot drive)
        print(f"delayq top: cannot draw on this terminal: {exc}", file=sys.stderr)
        return 2
    return 0


def _loop(stdscr: Any, sampler: Sampler, first: Sample, interval_s: float, view: View) -> None:
    with contextlib.suppress(curses.error):
        curses.curs_set(0)  # (some terminals cannot hide it)
    stdscr.keypad(True)
    prev: Sample | None = None
    cur = first
    while True:
        f = frame(cur, prev, view.sort)
        due = cur.at_s + interval_s
        while True:  # draw and take keys until the next sample is due
            _draw(stdscr, f, view)
            left = due - time.monotonic()
            if left <= 0:
                break
            stdscr.timeout(max(1, round(left * 1000)))
            key = stdscr.getch()  # -1: the timeout; KEY_RESIZE: drawn again at the new size
            if 0 <= key < 256:
                view = on_key(view, chr(key))
                if view.quit:
                    return
                f = order(f, view.sort)
        prev, cur = cur, sampler.sample()


def _draw(stdscr: Any, f: Frame, view: View) -> None:
    height, width = stdscr.getmaxyx()
    stdscr.erase()
    # width - 1: curses refuses to write the bottom right cell
    shown = screen(f, view, width - 1, height)
    for y, line in enumerate(shown):
        attr = curses.A_BOLD if y == 0 else curses.A_REVERSE if y == len(shown) - 1 else 0
        with contextlib.suppress(curses.error):
            stdscr.addstr(y, 0, line, attr)
    stdscr.refresh()
