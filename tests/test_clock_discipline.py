"""Time through ``Clock`` only: no module of the shard's side (engine, timers,
delivery, store, replication, server, formats, verify) reads the real time or
sleeps by itself; ``delayq.clock`` does, and the code takes a ``Clock``, so a
test drives due times, leases, liveness and holds with a ``FakeClock``.

A use is found by parsing (``ast``): any use of the ``time`` module (however
imported), ``datetime``'s and ``date``'s ``now``/``utcnow``/``today``, and an event
loop's ``time()``. The few that measure real time on purpose are in ``ALLOWED``,
each with its reason, by module name and use (not by path or line: modules move
between sub-packages, lines shift), and an entry that matches nothing fails too.
Out of scope, where real time is the point or the clock is taken otherwise:
``cluster`` (the local process supervisor), ``control`` (its keeper takes
``clock_ms``), ``client``, ``cli``."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import delayq

ROOT = Path(delayq.__file__).parent
SCOPE = ("engine", "timers", "delivery", "store", "replication", "server", "formats", "verify")

ALLOWED: dict[tuple[str, str], str] = {
    ("chainwalk", "time.perf_counter"): "a chain walk shares the GIL by slices of CPU time",
    ("chainwalk", "time.sleep"): "... and naps between them: a real pause, for other threads",
    ("groupcommit", "time.perf_counter"): "fsync_seconds, a metric, measures the disk",
    ("recovery", "time.perf_counter"): "the report's seconds measure the recovery's work",
    ("keyrecovery", "time.perf_counter"): "... and its keys_seconds the key index's load or build",
    ("calls", "loop.time"): (
        "a schedule's wait for a held map runs to its call's deadline "
        "(context.time_remaining), which is real time, on the event loop's own clock"
    ),
    ("consuming", "loop.time"): "... and so does a receive's long poll",
    ("handlers", "time.perf_counter"): "the RPC latency histogram measures calls in real time",
}

_NOW = {"now", "utcnow", "today"}


def uses_of_real_time(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, use) of every read of the real time or sleep in a parsed module."""
    aliases = {"time"}  # names the time module is bound to here
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name == "time"}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            found += [(node.lineno, f"time.{a.name}") for a in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name | ast.Attribute):
            value, attr = node.value, node.attr
            owner = value.id if isinstance(value, ast.Name) else value.attr
            if isinstance(value, ast.Name) and owner in aliases:
                found.append((node.lineno, f"time.{attr}"))
            elif owner in ("datetime", "date") and attr in _NOW:  # (datetime.)datetime.now
                found.append((node.lineno, f"{owner}.{attr}"))
            elif owner == "loop" and attr == "time":
                found.append((node.lineno, "loop.time"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "time"
            and isinstance(node.func.value, ast.Call)
            and ast.unparse(node.func.value).endswith("_loop()")
        ):
            found.append((node.lineno, "loop.time"))  # asyncio.get_running_loop().time()
    return found


def in_scope() -> list[Path]:
    return sorted(p for package in SCOPE for p in (ROOT / package).rglob("*.py"))


def test_only_the_clock_reads_the_real_time() -> None:
    assert len(in_scope()) > 100, "the scope is where the modules are"
    unexplained: list[str] = []
    allowed_seen: Counter[tuple[str, str]] = Counter()
    for path in in_scope():
        for line, use in uses_of_real_time(ast.parse(path.read_text(), str(path))):
            key = (path.stem, use)
            if key in ALLOWED:
                allowed_seen[key] += 1
            else:
                unexplained.append(f"{path.relative_to(ROOT)}:{line}: {use}")
    assert unexplained == [], (
        "real time read outside delayq.clock: take the engine's Clock (or one passed "
        "in), or, for a measurement of real time, add it to ALLOWED with the reason"
    )
    assert set(allowed_seen) == set(ALLOWED), "an allowed use that is gone: drop it"


def test_the_clock_module_does_read_it() -> None:
    """The scan finds what it looks for (a scan that finds nothing passes anything)."""
    found = {use for _, use in uses_of_real_time(ast.parse((ROOT / "clock.py").read_text()))}
    assert {"time.time_ns", "time.monotonic"} <= found


def test_every_form_of_a_real_time_read_is_found() -> None:
    src = """
import time as t
from time import monotonic
import datetime
from datetime import date
t.sleep(1)
datetime.datetime.now()
date.today()
loop.time()
asyncio.get_running_loop().time()
clock.monotonic_s()
"""
    assert sorted(uses_of_real_time(ast.parse(src))) == [
        (3, "time.monotonic"),
        (6, "time.sleep"),
        (7, "datetime.now"),
        (8, "date.today"),
        (9, "loop.time"),
        (10, "loop.time"),
    ]
