"""``delayq schedules create|get|list|update|pause|resume|delete|next``: recurring
schedules, through the client alone (``Client.create_schedule`` ...), printed as
fields or ``--json``. ``add_parser`` builds its parser (for ``main``), ``run`` its
body.

``update`` changes the options given and keeps the rest of the stored spec
(``--cron`` replaces an interval and ``--every`` a cron expression). ``next``
previews a spec stored nowhere when given ``--cron`` or ``--every`` instead of a
name. Durations are in the CLI's units ("30s", "10m", "1h", "7d"), times ISO-8601
with a zone; printed times are UTC, with the schedule's local time beside.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from ..durations import duration_text

__all__ = ["add_parser", "run"]

_CATCH_UP = ("none", "latest", "all")
_OPTIONS = {
    "tz": "time_zone",
    "start": "start_ms",
    "end": "end_ms",
    "jitter": "jitter_ms",
    "catch_up_window": "catch_up_window_ms",
}
"""The spec's fields each option sets as it is (not None: given)."""
PREVIEW_TOPIC = "preview"
"""The template topic of a previewed spec (a preview sends nothing)."""


def add_parser(
    sub: Any,
    client_cmd: Callable[..., argparse.ArgumentParser],
    duration: Callable[[str], int],
    at: Callable[[str], int],
    header: Callable[[str], tuple[str, str]],
) -> None:
    """``schedules`` and its commands under ``sub``; ``client_cmd(sub, name, help)``
    adds a client command's parser (its --server, TLS and --timeout options);
    ``duration``, ``at`` and ``header`` read those arguments."""
    top = sub.add_parser(
        "schedules",
        help="recurring schedules: cron or intervals in a time zone, each firing a message",
        description="A recurring schedule fires a message made of its template (topic, "
        "body, headers; keyed by the schedule's name) at each nominal time of a cron "
        "expression (5 fields, or 6 with seconds first) or an interval, in an IANA time "
        "zone, exactly once each through failovers and rebalances. A local time a "
        "daylight-saving change skips fires at the first instant after the gap; one "
        "it repeats fires once. Times missed while the shard could not fire go by "
        "--catch-up. See docs/schedules.md.",
    )
    cmds = top.add_subparsers(dest="schedules_command", required=True, metavar="COMMAND")

    def named(name: str, help_text: str) -> argparse.ArgumentParser:
        c = client_cmd(cmds, name, help_text)
        c.add_argument("name", metavar="NAME", help="the schedule's name")
        c.add_argument("--json", action="store_true", help="the schedule as one JSON object")
        return c

    def spec_options(c: argparse.ArgumentParser, required: bool) -> None:
        when = c.add_mutually_exclusive_group(required=required)
        when.add_argument(
            "--cron", metavar="EXPR",
            help="cron expression, local times in --tz: 'MIN HOUR DOM MON DOW' or "
            "'SEC MIN HOUR DOM MON DOW' (e.g. '0 9 * * MON-FRI')",
        )  # fmt: skip
        when.add_argument(
            "--every", type=duration, metavar="D",
            help="a fixed interval (at least 1s, e.g. 30s, 10m), from --start or creation",
        )  # fmt: skip
        c.add_argument("--topic", required=required, help="the topic each firing is sent to")
        body = c.add_mutually_exclusive_group()
        body.add_argument("--body", help="each firing's body (text)")
        body.add_argument("--body-file", type=Path, metavar="FILE", help="the body from a file")
        c.add_argument(
            "--header", type=header, action="append", default=None, metavar="K=V",
            help="a header of each firing (repeat for more)",
        )  # fmt: skip
        c.add_argument("--tz", metavar="ZONE", help="IANA time zone of --cron (default UTC)")
        c.add_argument("--start", type=at, metavar="TIME", help="no firing before (ISO-8601)")
        c.add_argument("--end", type=at, metavar="TIME", help="no firing after (ISO-8601)")
        c.add_argument(
            "--jitter", type=duration, metavar="D",
            help="delay each firing by up to this (fixed per time: a hash), e.g. 10s",
        )  # fmt: skip
        c.add_argument(
            "--catch-up", choices=_CATCH_UP,
            help="times missed while the shard could not fire: none (skip them), latest "
            "(fire the latest at once; the default) or all (fire each at once)",
        )  # fmt: skip
        c.add_argument(
            "--catch-up-window", type=duration, metavar="D",
            help="how far back --catch-up goes (1s..7d; default 1h)",
        )  # fmt: skip

    create = named("create", "create a schedule; prints it")
    spec_options(create, required=True)
    create.add_argument(
        "--paused", action="store_true",
        help="make it paused: nothing fires until `delayq schedules resume NAME`",
    )  # fmt: skip
    update = named(
        "update",
        "change a schedule: the options given, the rest kept; its next firing is "
        "computed again from now",
    )
    spec_options(update, required=False)
    named("get", "show a schedule and where it stands")
    named("pause", "fire nothing until resumed")
    named("resume", "resume a paused schedule (missed times go by its --catch-up)")
    delete = client_cmd(cmds, "delete", "delete a schedule and its firings not yet due")
    delete.add_argument("name", metavar="NAME")
    ls = client_cmd(cmds, "list", "the schedules of every shard, by name")
    ls.add_argument("--limit", type=int, default=0, metavar="N", help="at most N (0: all)")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    nxt = client_cmd(
        cmds, "next",
        "the next firing times of a schedule, or of --cron/--every stored nowhere (a preview)",
    )  # fmt: skip
    nxt.add_argument("name", metavar="NAME", nargs="?", help="a stored schedule")
    nxt.add_argument("--count", type=int, default=10, help="how many (10; at most 1000)")
    when = nxt.add_mutually_exclusive_group()
    when.add_argument("--cron", metavar="EXPR", help="preview this cron expression")
    when.add_argument("--every", type=duration, metavar="D", help="preview this interval")
    nxt.add_argument("--tz", metavar="ZONE", help="the preview's time zone (default UTC)")
    nxt.add_argument("--start", type=at, metavar="TIME", help="the preview's start")
    nxt.add_argument("--json", action="store_true", help="a JSON array of epoch ms")


def run(c: Any, args: argparse.Namespace) -> int:
    """Run ``delayq schedules <args.schedules_command>`` with client ``c``; its exit code."""
    cmd = args.schedules_command
    if cmd == "list":
        return _list(c, args)
    if cmd == "next":
        return _next(c, args)
    if cmd == "delete":
        c.delete_schedule(args.name)
        print(f"deleted {args.name}", file=sys.stderr)
        return 0
    if cmd == "create":
        s = c.create_schedule(args.name, _spec(args, None), paused=args.paused)
    elif cmd == "update":
        s = c.update_schedule(args.name, _spec(args, c.get_schedule(args.name).spec))
    elif cmd == "get":
        s = c.get_schedule(args.name)
    elif cmd == "pause":
        s = c.pause_schedule(args.name)
    else:
        assert cmd == "resume", cmd
        s = c.resume_schedule(args.name)
    if args.json:
        print(json.dumps(schedule_json(s)))
    else:
        _print_schedule(s)
    return 0


def _spec(args: argparse.Namespace, now: Any) -> Any:
    """The spec of ``create``'s options, or ``update``'s over the stored ``now``."""
    from ..client import CatchUp, MessageTemplate, ScheduleSpec

    if now is None:
        now = ScheduleSpec(template=MessageTemplate(topic=args.topic))
    given: dict[str, Any] = {}
    if args.cron is not None:
        given |= {"cron": args.cron, "every_ms": 0}
    if args.every is not None:
        given |= {"every_ms": args.every, "cron": ""}
    for option, name in _OPTIONS.items():
        if getattr(args, option) is not None:
            given[name] = getattr(args, option)
    if args.catch_up is not None:
        given["catch_up"] = CatchUp(args.catch_up)
    t = now.template
    body = args.body_file.read_bytes() if args.body_file else _encoded(args.body, t.body)
    template = MessageTemplate(
        topic=args.topic or t.topic,
        body=body,
        headers=t.headers if args.header is None else dict(args.header),
    )
    return dataclasses.replace(now, template=template, **given)


def _encoded(text: str | None, kept: bytes) -> bytes:
    return kept if text is None else text.encode()


def _next(c: Any, args: argparse.Namespace) -> int:
    preview = args.cron is not None or args.every is not None
    if preview == (args.name is not None):
        raise ValueError("give a schedule's NAME, or --cron or --every to preview")
    zone = args.tz or "UTC"
    if preview:
        from ..client import MessageTemplate, ScheduleSpec

        spec = ScheduleSpec(
            template=MessageTemplate(topic=PREVIEW_TOPIC),
            cron=args.cron or "",
            every_ms=args.every or 0,
            time_zone=zone,
            start_ms=args.start or 0,
        )
        times = c.next_firings(spec=spec, count=args.count)
    else:
        times = c.next_firings(args.name, count=args.count)
        if not args.json:
            zone = c.get_schedule(args.name).spec.time_zone
    if args.json:
        print(json.dumps(times))
    else:
        for t in times:
            print(_when(t, zone))
    return 0


def _list(c: Any, args: argparse.Namespace) -> int:
    token, shown = "", 0
    while True:
        size = 1000 if not args.limit else min(1000, args.limit - shown)
        page = c.list_schedules(page_size=size, page_token=token)
        for s in page.schedules:
            if args.json:
                print(json.dumps(schedule_json(s)))
            else:
                _print_row(s)
        shown += len(page.schedules)
        token = page.next_page_token
        if not token or (args.limit and shown >= args.limit):
            return 0


def schedule_json(s: Any) -> dict[str, Any]:
    """A ``Schedule`` as plain data (its body as text, bad UTF-8 escaped)."""
    spec, t = s.spec, s.spec.template
    out = {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "spec"}
    out["spec"] = {
        f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "template"
    }
    out["spec"]["catch_up"] = spec.catch_up.value
    out["spec"]["template"] = {
        "topic": t.topic,
        "body": t.body.decode("utf-8", "backslashreplace"),
        "headers": dict(t.headers),
    }
    return out


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _when(ms: int, zone: str) -> str:
    """``ms`` in UTC, and in ``zone`` beside unless that is UTC."""
    if not ms:
        return "-"
    if zone == "UTC":
        return _utc(ms)
    local = datetime.fromtimestamp(ms / 1000, ZoneInfo(zone))
    return f"{_utc(ms)}  ({local:%Y-%m-%d %H:%M:%S %Z})"


def _what(spec: Any) -> str:
    """``cron '0 9 * * *' in Europe/London`` or ``every 30s``."""
    if spec.cron:
        return f"cron '{spec.cron}' in {spec.time_zone}"
    return f"every {duration_text(spec.every_ms)}"


def _print_schedule(s: Any) -> None:
    spec, zone = s.spec, s.spec.time_zone
    state = "ended" if s.ended else "paused" if s.paused else "active"
    rows = [
        ("name", s.name),
        ("when", _what(spec)),
        ("topic", spec.template.topic),
        ("state", state),
        ("next", _when(s.next_fire_ms, zone)),
        ("last", _when(s.last_fire_ms, zone)),
        ("fired", str(s.fired)),
        ("missed", str(s.missed)),
        ("catch_up", f"{spec.catch_up.value} within {duration_text(spec.catch_up_window_ms)}"),
    ]
    if spec.start_ms or spec.end_ms:
        rows.append(("between", f"{_when(spec.start_ms, zone)} .. {_when(spec.end_ms, zone)}"))
    if spec.jitter_ms:
        rows.append(("jitter", duration_text(spec.jitter_ms)))
    for k, v in rows:
        print(f"{k:10} {v}")


def _print_row(s: Any) -> None:
    state = "ended" if s.ended else "paused" if s.paused else "active"
    nxt = _utc(s.next_fire_ms) if s.next_fire_ms else "-"
    print(f"{s.name:30} {state:7} {nxt:25} {s.spec.template.topic:20} {_what(s.spec)}")
