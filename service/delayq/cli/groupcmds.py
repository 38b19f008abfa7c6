"""``delayq group set|get|list|pause|resume``: a consumer group's delivery policy,
through the client alone (``Client.set_group_policy`` ...), printed as a table or
``--json``. ``add_parser`` builds its parser (for ``main``), ``run`` its body.

``set`` changes the flags given and keeps the rest of the group's policy (the
one set, else the server's defaults; with shards that disagree, the lowest
shard's: setting mends them). Durations are in the CLI's units ("30s", "5m").
The ``--push-*`` flags make the group a push group or change its target (a CA
file is read here and sent as PEM; ``--push-header`` given replaces the target's
headers), ``--pull`` makes it a pull group again. Printed, a target shows its
URL's safe form (``pushurls.safe_url``: no credentials, no query); ``--json``
prints it as set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from ..durations import duration_text
from ..pushurls import safe_url

__all__ = ["add_parser", "run"]

_POLICY_FLAGS = ("max_attempts", "rate_per_s", "burst", "max_in_flight")
_PUSH_FLAGS = {
    "push_url": "url",
    "push_method": "method",
    "push_timeout": "timeout_ms",
    "push_secret_ref": "secret_ref",
}
_BACKOFF_FLAGS = {
    "backoff": "kind",
    "backoff_initial": "initial_ms",
    "backoff_multiplier": "multiplier",
    "backoff_max": "max_ms",
    "jitter": "jitter",
}


def add_parser(
    sub: Any,
    client_cmd: Callable[..., argparse.ArgumentParser],
    duration: Callable[[str], int],
) -> None:
    """``group`` and its commands under ``sub``; ``client_cmd(sub, name, help)`` adds a
    client command's parser (its --server, TLS and --timeout options)."""
    group = sub.add_parser(
        "group",
        help="a consumer group's delivery policy: retries, backoff, rate, in flight, pause",
        description="A consumer group's delivery policy on a topic, on every shard: how "
        "many attempts before its dead-letter topic, the backoff between them, how fast "
        "and how many messages it is handed, and whether it is paused. Rates and "
        "in-flight limits are the group's over the whole topic (each shard enforces its "
        "even share).",
    )
    cmds = group.add_subparsers(dest="group_command", required=True, metavar="COMMAND")

    def named(name: str, help_text: str) -> argparse.ArgumentParser:
        c = client_cmd(cmds, name, help_text)
        c.add_argument("topic", metavar="TOPIC")
        c.add_argument("group", metavar="GROUP")
        c.add_argument("--json", action="store_true", help="the policy as one JSON object")
        return c

    s = named(
        "set",
        "change a group's policy: the flags given, the rest kept; prints the policy stored",
    )
    s.add_argument(
        "--max-attempts",
        dest="max_attempts",
        type=int,
        metavar="N",
        help="deliveries before the dead-letter topic dlq.<group> (0: unlimited)",
    )
    s.add_argument(
        "--backoff",
        choices=("fixed", "exponential"),
        help="the wait before each retry: fixed, or growing by --backoff-multiplier",
    )
    s.add_argument(
        "--backoff-initial",
        dest="backoff_initial",
        type=duration,
        metavar="D",
        help="the wait after the first failed attempt, e.g. 1s (0: at once)",
    )
    s.add_argument(
        "--backoff-multiplier",
        dest="backoff_multiplier",
        type=float,
        metavar="X",
        help="exponential: the wait's factor per failed attempt (1..100)",
    )
    s.add_argument(
        "--backoff-max",
        dest="backoff_max",
        type=duration,
        metavar="D",
        help="the longest wait, e.g. 5m (at least --backoff-initial)",
    )
    s.add_argument(
        "--jitter",
        choices=("none", "full", "equal"),
        help="spread each wait: full (0..wait), equal (wait/2..wait)",
    )
    s.add_argument(
        "--rate",
        dest="rate_per_s",
        type=float,
        metavar="PER_S",
        help="messages handed out per second over the topic (0: no limit)",
    )
    s.add_argument(
        "--burst",
        type=int,
        metavar="N",
        help="most handed out at once under --rate (0: the rate rounded up)",
    )
    s.add_argument(
        "--max-in-flight",
        dest="max_in_flight",
        type=int,
        metavar="N",
        help="handed out and not yet acked, over the topic (0: the server's default)",
    )
    _add_push_flags(s, duration)
    named("get", "show a group's policy (the one set, else the server's defaults)")
    named("pause", "hand a group nothing until resumed (messages due meanwhile wait)")
    named("resume", "hand a paused group its messages again, in due order")
    ls = client_cmd(cmds, "list", "every consumer group the shards know, with its policy")
    ls.add_argument("--topic", default="", help="only this topic's groups")
    ls.add_argument("--json", action="store_true", help="a JSON array")


def _add_push_flags(s: argparse.ArgumentParser, duration: Callable[[str], int]) -> None:
    s.add_argument(
        "--push-url",
        dest="push_url",
        metavar="URL",
        help="make it a push group: the shards' masters send each message to URL "
        "(http or https), signed, retried by the backoff",
    )
    s.add_argument("--push-method", dest="push_method", choices=("POST", "PUT", "PATCH"))
    s.add_argument(
        "--push-header",
        dest="push_header",
        action="append",
        metavar="K=V",
        help="a header sent with each push (repeat; given, replaces the target's headers)",
    )
    s.add_argument(
        "--push-timeout",
        dest="push_timeout",
        type=duration,
        metavar="D",
        help="a request's limit from its connection to its answer, e.g. 10s (0.1s..60s)",
    )
    s.add_argument(
        "--push-ca-file",
        dest="push_ca_file",
        metavar="PEM",
        help="CA certificates (PEM) to check an https target by (default: system roots)",
    )
    s.add_argument(
        "--push-secret-ref",
        dest="push_secret_ref",
        metavar="NAME",
        help="the signing secret's name in the server's --push-secret-dir (\"\": unsigned)",
    )
    s.add_argument(
        "--pull", action="store_true", help="make it a pull group again (drop its push target)"
    )


def run(c: Any, args: argparse.Namespace) -> int:
    """Run ``delayq group <args.group_command>`` with client ``c``; its exit code."""
    cmd = args.group_command
    if cmd == "list":
        infos = c.groups(args.topic)
        if args.json:
            print(json.dumps([dataclasses.asdict(i) for i in infos]))
        else:
            _print_list(infos)
        return 0
    if cmd == "set":
        policy = c.set_group_policy(args.topic, args.group, _changed(c, args))
    elif cmd == "get":
        policy = c.group_policy(args.topic, args.group)
    elif cmd == "pause":
        policy = c.pause_group(args.topic, args.group)
    else:
        assert cmd == "resume", cmd
        policy = c.resume_group(args.topic, args.group)
    if args.json:
        print(json.dumps({"topic": args.topic, "group": args.group, **dataclasses.asdict(policy)}))
    else:
        _print_policy(args.topic, args.group, policy)
    return 0


def _changed(c: Any, args: argparse.Namespace) -> Any:
    """The group's policy now (the lowest shard's when they disagree) with the flags
    given in place."""
    from ..client import BackoffKind, Jitter

    now = next((i.policy for i in c.groups(args.topic) if i.group == args.group), None)
    if now is None:
        now = c.group_policy(args.topic, args.group)
    backoff: dict[str, Any] = {}
    for flag, name in _BACKOFF_FLAGS.items():
        value = getattr(args, flag)
        if value is not None:
            backoff[name] = value
    if "kind" in backoff:
        backoff["kind"] = BackoffKind(backoff["kind"])
    if "jitter" in backoff:
        backoff["jitter"] = Jitter(backoff["jitter"])
    given = {f: getattr(args, f) for f in _POLICY_FLAGS if getattr(args, f) is not None}
    push = _push_changed(now.push, args)
    if args.pull:
        if push is not now.push:
            raise SystemExit("--pull drops the push target: no --push-* flag with it")
        push = None
    return dataclasses.replace(
        now, backoff=dataclasses.replace(now.backoff, **backoff), push=push, **given
    )


def _push_changed(now: Any, args: argparse.Namespace) -> Any:
    """The push target ``now`` (None: a pull group) with the ``--push-*`` flags given
    in place; SystemExit when one is given for a pull group without ``--push-url``."""
    from ..client import PushTarget

    given: dict[str, Any] = {
        name: getattr(args, flag)
        for flag, name in _PUSH_FLAGS.items()
        if getattr(args, flag) is not None
    }
    if args.push_header is not None:
        given["headers"] = dict(_header(h) for h in args.push_header)
    if args.push_ca_file is not None:
        with open(args.push_ca_file, encoding="utf-8") as f:
            given["ca_bundle"] = f.read()
    if not given:
        return now
    if now is None:
        if "url" not in given:
            raise SystemExit("--push-url is needed to make a pull group a push group")
        return PushTarget(**given)
    return dataclasses.replace(now, **given)


def _header(text: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise SystemExit(f"--push-header {text!r}: NAME=VALUE")
    return name, value


def _backoff(b: Any) -> str:
    """``fixed 1s`` / ``exponential 1s x2 up to 5m``, with its jitter."""
    text = f"{b.kind} {duration_text(b.initial_ms)}"
    if b.kind == "exponential":
        text += f" x{b.multiplier:g} up to {duration_text(b.max_ms)}"
    elif b.max_ms:
        text += f" (at most {duration_text(b.max_ms)})"
    return text if b.jitter == "none" else f"{text}, {b.jitter} jitter"


def _limit(value: float, unit: str = "") -> str:
    return "none" if not value else f"{value:g}{unit}"


def _print_policy(topic: str, group: str, p: Any) -> None:
    rows = [
        ("topic", topic),
        ("group", group),
        ("paused", "yes" if p.paused else "no"),
        ("max_attempts", _limit(p.max_attempts).replace("none", "unlimited")),
        ("backoff", _backoff(p.backoff)),
        ("rate", _limit(p.rate_per_s, "/s") + (f" (burst {p.burst})" if p.rate_per_s else "")),
        ("max_in_flight", _limit(p.max_in_flight).replace("none", "the server's default")),
        ("push", _push(p.push)),
    ]
    for k, v in rows:
        print(f"{k:14} {v}")


def _push(t: Any) -> str:
    """``POST https://host/path (secret ref NAME, timeout 10s)``; ``none (pull)``."""
    if t is None:
        return "none (pull)"
    ref = f"secret ref {t.secret_ref}" if t.secret_ref else "unsigned"
    timeout = duration_text(t.timeout_ms) if t.timeout_ms else "the server's 10s"
    return f"{t.method} {safe_url(t.url)} ({ref}, timeout {timeout})"


def _print_list(infos: list[Any]) -> None:
    head = f"{'TOPIC':20} {'GROUP':20} {'PAUSED':6} {'ATTEMPTS':>8} {'RATE/S':>8} {'IN FLIGHT':>9}"
    print(f"{head}  BACKOFF")
    for i in infos:
        p = i.policy
        line = (
            f"{i.topic:20} {i.group:20} {'yes' if p.paused else 'no':6} "
            f"{p.max_attempts or '-':>8} {_limit(p.rate_per_s).replace('none', '-'):>8} "
            f"{p.max_in_flight or '-':>9}  {_backoff(p.backoff)}"
        )
        if p.push is not None:
            line += f"  push {safe_url(p.push.url)}"
        if not i.explicit:
            line += "  (defaults)"
        if i.disagreeing:
            line += f"  (shards {', '.join(map(str, i.disagreeing))} differ: set it again)"
        print(line)
