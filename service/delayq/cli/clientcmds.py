"""The bodies of the ``delayq`` client commands (``main.CLIENT_COMMANDS``: send,
cancel, get, reschedule, receive, replay, stats; group's in ``groupcmds``,
schedules' in ``schedulecmds``): each
talks to a server through the client alone and prints what it answered; ``main``
parses and dispatches. cancel, get and reschedule take ids, or ``--topic`` and
``--key`` (every pending message of the key), never both (``_by_key``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

from ..deadletters import dead_letter_topic, replayed
from ..durations import duration_text
from . import groupcmds, schedulecmds

__all__ = ["run_client_command"]


def _fmt_ms(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def run_client_command(args: argparse.Namespace) -> int:
    """Run one of ``CLIENT_COMMANDS`` (parsed by ``main``'s parser); its exit code."""
    from ..addresses import check_target
    from ..client import AlreadyExists, CancelOutcome, Client
    from ..tls import TlsConfig

    check_target(args.server, "--server")
    tls = TlsConfig.of(args.tls_ca, args.tls_cert, args.tls_key)  # ValueError: exit 2
    timeout_s = getattr(args, "timeout", 10_000) / 1000
    with Client(args.server, timeout_s=timeout_s, tls=tls) as c:
        cmd = args.command
        if cmd == "send":
            body = sys.stdin.buffer.read() if args.body == "-" else args.body.encode()
            try:
                r = c.schedule(
                    args.topic,
                    body,
                    at=args.at,
                    delay=None if args.delay is None else args.delay / 1000,
                    level=args.level,
                    key=args.key,
                    headers=dict(args.header),
                    if_exists=args.if_exists,
                    dedup_window=None if args.dedup_window is None else args.dedup_window / 1000,
                )
            except AlreadyExists as exc:  # understood, not done: the message that stands
                print(exc.id)
                print(f"delayq send: {exc}", file=sys.stderr)
                return 1
            print(r.id)  # (a refused message raises: exit 2)
            if r.key_outcome != "new":
                print(f"key {args.key}: {r.key_outcome}", file=sys.stderr)
            return 0
        if _by_key(args):
            return _run_by_key(c, args)
        if cmd == "cancel":
            outcomes = c.cancel(*args.ids)
            for i, o in zip(args.ids, outcomes, strict=True):
                print(f"{i}: {o}")
            return 0 if all(o is CancelOutcome.CANCELLED for o in outcomes) else 1
        if cmd == "get":
            _show(c.lookup(args.id), args.json)
            return 0
        if cmd == "reschedule":
            r = c.reschedule(args.id, at=args.at, delay=_delay_s(args))
            print(r.id)
            return 0
        if cmd == "receive":
            return _receive(c, args)
        if cmd == "replay":
            return _replay(c, args)
        if cmd == "stats":
            return _stats(c, args)
        if cmd == "group":
            return groupcmds.run(c, args)
        if cmd == "schedules":
            return schedulecmds.run(c, args)
    raise AssertionError(cmd)


def _delay_s(args: argparse.Namespace) -> float | None:
    return None if args.delay is None else args.delay / 1000


def _show(lookup: Any, as_json: bool) -> None:
    """One looked-up message: a JSON line, or a field a line."""
    info = dataclasses.asdict(lookup)
    info["body"] = info["body"].decode("utf-8", "backslashreplace")
    if as_json:
        print(json.dumps(info))
        return
    for k in ("id", "state", "topic", "key"):
        print(f"{k:14} {info[k]}")
    print(f"{'deliver_at':14} {_fmt_ms(info['deliver_at_ms'])}")
    print(f"{'body':14} {info['body'][:200]}")


def _by_key(args: argparse.Namespace) -> bool:
    """Whether cancel, get or reschedule names its messages by ``--topic`` and
    ``--key`` rather than by id; a ``ValueError`` (exit 2) for both, or neither."""
    if args.command not in ("cancel", "get", "reschedule"):
        return False
    ids = args.ids if args.command == "cancel" else [args.id] if args.id else []
    keyed = args.topic is not None or args.key is not None
    if ids and keyed:
        raise ValueError("give ids, or --topic and --key, not both")
    if not keyed:
        if not ids:
            raise ValueError("give an id, or --topic and --key")
        return False
    if not args.topic or not args.key:
        raise ValueError("--topic and --key go together")
    return True


def _run_by_key(c: Any, args: argparse.Namespace) -> int:
    """cancel, get or reschedule of every pending message of ``--topic``'s ``--key``
    (a key without one: NOT_FOUND, exit 2; cancel: exit 1 when a key had none)."""
    if args.command == "cancel":
        counts = c.cancel_keys(args.topic, args.key)
        for key, n in zip(args.key, counts, strict=True):
            print(f"{key}: {n} cancelled" if isinstance(n, int) else f"{key}: {n}")
        return 0 if all(isinstance(n, int) and n for n in counts) else 1
    if args.command == "get":
        found = c.lookup_key(args.topic, args.key)
        for lookup in found:
            _show(lookup, args.json)
        if found.total > len(found):
            print(f"{found.total} pending, the oldest {len(found)} shown", file=sys.stderr)
        return 0
    for r in c.reschedule_key(args.topic, args.key, at=args.at, delay=_delay_s(args)):
        print(r.id)
    return 0


def _receive(c: Any, args: argparse.Namespace) -> int:
    got = 0
    deadline = time.monotonic() + args.wait_ms / 1000
    while args.follow or (got < args.count and time.monotonic() < deadline):
        left = max(0.0, deadline - time.monotonic())
        wait = args.wait_ms / 1000 if args.follow else min(left, 5.0)
        want = 1000 if args.follow else args.count - got
        msgs = c.receive(
            args.topic,
            args.group,
            max_messages=want,
            wait_s=wait,
            invisible_s=args.invisible / 1000,
        )
        for m in msgs:
            body = m.body.decode("utf-8", "backslashreplace")
            if args.json:
                print(
                    json.dumps(
                        {
                            "id": m.id,
                            "topic": m.topic,
                            "key": m.key,
                            "body": body,
                            "headers": m.headers,
                            "deliver_at_ms": m.deliver_at_ms,
                            "delivered_at_ms": m.delivered_at_ms,
                            "attempt": m.attempt,
                        }
                    )
                )
            else:
                late = m.delivered_at_ms - m.deliver_at_ms
                print(f"{m.id}  {_fmt_ms(m.deliver_at_ms)}  +{late}ms  {body}")
        sys.stdout.flush()
        if msgs:
            c.ack(args.topic, args.group, [m.receipt for m in msgs])
            got += len(msgs)
    return 0


def _replay(c: Any, args: argparse.Namespace) -> int:
    """Dead letters of ``--group`` back to their topics: each scheduled, then acked
    (in the dead-letter topic, by the group itself), so a crash replays it twice at
    worst. A message there that is not a dead letter is left unacked, reported."""
    topic, done, bad = dead_letter_topic(args.group), 0, 0
    deadline = time.monotonic() + args.wait_ms / 1000
    while done < args.count and time.monotonic() < deadline:
        left = max(0.0, deadline - time.monotonic())
        msgs = c.receive(topic, args.group, max_messages=args.count - done, wait_s=left)
        receipts = []
        for m in msgs:
            try:
                home, headers = replayed(m.headers)
            except ValueError as exc:
                print(f"{m.id}: {exc}", file=sys.stderr)
                bad += 1
                continue
            new = c.schedule(home, m.body, key=m.key, headers=headers, delay=args.delay / 1000)
            print(f"{m.id} -> {home} {new.id}")
            receipts.append(m.receipt)
        if receipts:
            c.ack(topic, args.group, receipts)
            done += len(receipts)
        if not msgs:
            break
    print(f"replayed {done} dead letters of group {args.group}", file=sys.stderr)
    return 1 if bad else 0


def _stats(c: Any, args: argparse.Namespace) -> int:
    doc = dataclasses.asdict(c.stats(args.topic))
    if not args.shards:
        doc.pop("shards", None)
    if args.json:
        print(json.dumps(doc))
        return 0
    _print_stats(doc)
    for shard in doc.get("shards", []):
        node = shard["node"]
        print(
            f"\nshard {node['shard']} at {node['address']} ({node['role']}, epoch "
            f"{node['epoch']}, commitlog {node['commitlog_end']} bytes, map epoch "
            f"{node['topology_epoch']})"
        )
        _print_stats(shard)
    return 0


def _print_stats(doc: dict[str, Any]) -> None:
    print(f"{'TOPIC':24} {'PENDING':>10} {'DELIVERED':>10} {'CANCELLED':>10}  DUE (within: count)")
    for t in doc["topics"]:
        due = ", ".join(f"{_bucket(b['within_ms'])}: {b['count']}" for b in t["due"] if b["count"])
        print(
            f"{t['topic']:24} {t['pending']:>10} {t['delivered']:>10} {t['cancelled']:>10}  {due}"
        )
        for g, backlog in t["group_backlog"].items():
            print(f"  group {g}: {backlog} unacked")
        for g in t.get("groups", ()):  # one shard's (--shards)
            limit = f" of {g['in_flight_limit']}" if g["in_flight_limit"] else ""
            paused = ", paused" if g["paused"] else ""
            print(
                f"  group {g['group']}: {g['in_flight']}{limit} in flight, "
                f"{g['waiting']} waiting to retry{paused}"
            )
    print(
        f"lateness p50 {doc['lateness_ms_p50']} ms, p99 {doc['lateness_ms_p99']} ms, "
        f"release lag {doc['release_lag_ms']} ms"
    )
    s = doc["schedules"]
    if s["schedules"] or s["firings"] or s["missed"]:
        print(
            f"recurring schedules {s['schedules']}: {s['firings']} fired, {s['missed']} missed, "
            f"firing lateness p50 {s['lateness_ms_p50']} ms, p99 {s['lateness_ms_p99']} ms"
        )


def _bucket(within_ms: int) -> str:
    if within_ms == 0:
        return "overdue"
    return "later" if within_ms < 0 else duration_text(within_ms)
