"""``delayq top``'s screen (pure: no terminal, no clock): a frame as lines of text,
and what a key press does to the view.

``lines`` is the whole frame: a title line, the node table (a row a node), the
topic table and the group table (PAUSED: yes, no, or paused shards/shards when
they disagree; IN_FLIGHT against its limit when the group has one; THR/S and
RETRY/S: receives its rate cut short and retries its backoff scheduled, a
second; a push group's PUSH/S, its 2xx answers a second, FAIL, its requests
failed in a row, and LAST-OK, the time since its last 2xx; "-": not known, or a
pull group), each column as wide as its widest cell
(``delayq top --once`` prints it). ``screen`` fits it into a terminal of
``width`` x ``height``: lines cut at the width, the tables cut at the height
(the last line saying how many were left out), and the key line at the bottom.

Keys (``on_key``): ``q`` quits; ``s`` and ``S`` take the next and the previous
sort key of ``rows.SORTS``; ``n``, ``p``, ``d`` and ``l`` sort by name,
pending, delivered/s and lateness p99; ``?`` shows or hides the keys' help.
Others do nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..role import Role
from .rows import SORTS, Frame, GroupRow, NodeRow

__all__ = ["HELP", "KEYS", "View", "lines", "on_key", "screen"]

KEYS = "q quit  s sort  ? help"
HELP = (
    "q quit  s/S next/previous sort  n name  p pending  d delivered/s  l lateness p99  ? hide help"
)
_SORT_KEYS = {"n": "name", "p": "pending", "d": "delivered", "l": "lateness"}
_SORT_TEXT = {
    "name": "shard, node",
    "pending": "pending",
    "delivered": "delivered/s",
    "lateness": "lateness p99",
}


@dataclass(frozen=True)
class View:
    """How the frames are shown: their sort, the help line, and whether to quit."""

    sort: str = "name"
    help: bool = False
    quit: bool = False


def on_key(view: View, key: str) -> View:
    """The view after ``key`` (one character) is pressed."""
    if key in ("q", "Q"):
        return dataclasses.replace(view, quit=True)
    if key in ("s", "S"):
        step = 1 if key == "s" else -1
        return dataclasses.replace(view, sort=SORTS[(SORTS.index(view.sort) + step) % len(SORTS)])
    if key in _SORT_KEYS:
        return dataclasses.replace(view, sort=_SORT_KEYS[key])
    if key == "?":
        return dataclasses.replace(view, help=not view.help)
    return view


def _count(v: int | None) -> str:
    return "-" if v is None else str(v)


def _per_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _bytes(v: int | None) -> str:
    if v is None:
        return "-"
    size = float(v)
    for unit in ("B", "K", "M", "G"):
        if size < 1024 or unit == "G":
            return f"{v}B" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    raise AssertionError(v)


def _ms(v: int | None) -> str:
    return "-" if v is None else f"{v}ms"


def _age(v: float | None) -> str:
    """Seconds as ``42s``, ``17m``, ``5h`` or ``3d``."""
    if v is None:
        return "-"
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if v >= size:
            return f"{v // size:.0f}{unit}"
    return f"{v:.0f}s"


def _insync(r: NodeRow, shard_nodes: int) -> str:
    if r.role == Role.MASTER and r.insync_set:
        return f"{len(r.insync_set)}/{shard_nodes}"
    return {None: "-", True: "yes", False: "no"}[r.insync]


def _role(r: NodeRow) -> str:
    return "fenced" if r.fenced else r.role


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: Collection[int]) -> list[str]:
    """``head`` and ``rows`` in columns; the columns ``left`` (by index) aligned left,
    the others (figures) right."""
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]

    def cell(i: int, text: str) -> str:
        return text.ljust(widths[i]) if i in left else text.rjust(widths[i])

    return ["  ".join(cell(i, c) for i, c in enumerate(row)).rstrip() for row in (head, *rows)]


def _title(f: Frame) -> str:
    serving = sum(r.state == "serving" for r in f.nodes)
    at = datetime.datetime.fromtimestamp(f.wall_ms / 1000, datetime.UTC)
    clock = at.strftime("%H:%M:%SZ")
    return (
        f"delayq top - {f.source}  topology epoch {f.topology_epoch}  "
        f"{f.shards} shard(s), {serving}/{len(f.nodes)} node(s) serving  "
        f"sort: {_SORT_TEXT[f.sort]}  {clock} ({f.took_ms} ms)"
    )


def _nodes(f: Frame) -> list[str]:
    per_shard: dict[int, int] = {}
    for r in f.nodes:
        per_shard[r.shard] = per_shard.get(r.shard, 0) + 1
    head = (
        *("SHARD", "NODE", "ROLE", "EPOCH", "STATE", "PENDING", "DUE<1M", "DELIV/S"),
        *("P99", "LAG", "LAG_MS", "INSYNC", "ADDRESS"),
    )
    rows = [
        (
            str(r.shard),
            r.node,
            _role(r),
            str(r.epoch),
            r.state,
            _count(r.pending),
            _count(r.due_next_minute),
            _per_s(r.delivered_per_s),
            _ms(r.lateness_p99_ms),
            _bytes(r.lag_bytes),
            _ms(r.lag_ms),
            _insync(r, per_shard[r.shard]),
            r.address,
        )
        for r in f.nodes
    ]
    return _table(head, rows, left=(0, 1, 2, 3, 4, 12))


def _topics(f: Frame) -> list[str]:
    head = ("TOPIC", "PENDING", "DUE<1M", "DELIVERED", "DELIV/S", "CANCELLED")
    rows = [
        (
            t.topic,
            str(t.pending),
            str(t.due_next_minute),
            str(t.delivered),
            _per_s(t.delivered_per_s),
            str(t.cancelled),
        )
        for t in f.topics
    ]
    if f.shards_answering < f.shards:
        missing = f.shards - f.shards_answering
        note = [f"(without {missing} of {f.shards} shard(s): no master answered)"]
    else:
        note = []
    if not rows:
        return ["(no topics)", *note]
    return [*_table(head, rows, left=(0,)), *note]


def _groups(f: Frame) -> list[str]:
    if not f.groups:
        return ["(no consumer groups)"]
    head = ("TOPIC", "GROUP", "BACKLOG", "PAUSED", "IN_FLIGHT", "THR/S", "RETRY/S",
            "DEAD_LETTERED", "PUSH/S", "FAIL", "LAST-OK")  # fmt: skip
    rows = [
        (
            g.topic,
            g.group,
            str(g.backlog),
            _paused(g),
            _in_flight(g),
            _per_s(g.throttled_per_s),
            _per_s(g.retries_per_s),
            str(g.dead_lettered),
            _per_s(g.pushes_per_s),
            _count(g.push_failing),
            _age(g.push_ok_age_s),
        )
        for g in f.groups
    ]
    return _table(head, rows, left=(0, 1, 3))


def _paused(g: GroupRow) -> str:
    if not g.shards:
        return "-"
    if g.paused_shards in (0, g.shards):
        return "yes" if g.paused_shards else "no"
    return f"{g.paused_shards}/{g.shards}"  # a shard that disagrees


def _in_flight(g: GroupRow) -> str:
    if not g.shards:
        return "-"
    return f"{g.in_flight}/{g.in_flight_limit}" if g.in_flight_limit else str(g.in_flight)


def lines(f: Frame) -> list[str]:
    """The whole frame as text (module notes)."""
    out = [_title(f)]
    if f.error:
        out.append(f"! {f.error}")
    return [*out, "", *_nodes(f), "", *_topics(f), "", *_groups(f), *_schedules(f)]


def _schedules(f: Frame) -> list[str]:
    """A line of the recurring schedules, when the shards hold or missed any."""
    s = f.schedules
    if not (s.schedules or s.missed):
        return []
    return [
        "",
        f"recurring schedules {s.schedules}: {_per_s(s.fired_per_s)} fired/s, "
        f"{s.missed} missed, firing lateness p99 {_ms(s.lateness_p99_ms)}",
    ]


def screen(f: Frame, view: View, width: int, height: int) -> list[str]:
    """``lines`` fitted into ``width`` x ``height`` with the key line last (module
    notes): ``height`` lines (blank ones to fill), none longer than ``width``."""
    if width <= 0 or height <= 0:
        return []
    body = lines(f)
    room = height - 1
    if len(body) > room:
        left_out = len(body) - (room - 1)
        body = [*body[: max(0, room - 1)], f"... {left_out} more line(s): a taller terminal"]
        body = body[-room:] if room > 0 else []
    keys = HELP if view.help else KEYS
    body += [""] * (room - len(body))  # the key line on the bottom row
    return [line[:width] for line in (*body, keys)]
