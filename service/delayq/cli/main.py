"""The ``delayq`` command: run the embedded server or talk to one.

Exit codes: 0 ok; 1 the request was understood but not done (e.g. cancel of an
unknown id; ``verify``: damage left); 2 bad usage or a server-side error (one
line on stderr).

A client command (``CLIENT_COMMANDS``) loads the client only: its parser is
built without ``serve``'s, ``top``'s and ``cluster``'s (whose options come from
the server's settings and the cluster's modules), and those commands import what
they run when run; tests/cli/test_light_import.py keeps it so.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from ..addresses import DEFAULT_ADDRESS
from ..client.errors import ClientError, from_rpc
from ..durations import parse_duration_ms, parse_time_ms
from . import groupcmds, schedulecmds
from .clientcmds import run_client_command

__all__ = ["CLIENT_COMMANDS", "main"]

DEFAULT_SERVER = DEFAULT_ADDRESS
CLIENT_COMMANDS = (
    "send", "cancel", "get", "reschedule", "receive", "replay", "stats", "group", "schedules",
)  # fmt: skip
"""The commands that talk to a server through the client (and load nothing else)."""


def _duration(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _time(text: str) -> int:
    try:
        return parse_time_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _header(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"bad header {text!r}: use KEY=VALUE")
    return key, value


def tls_options(c: argparse.ArgumentParser) -> None:
    """``--tls-ca``, ``--tls-cert`` and ``--tls-key`` (or their environment variables)."""
    for flag, env, what in (
        ("--tls-ca", "DELAYQ_TLS_CA", "CA (PEM) to verify the nodes with: dial over TLS"),
        ("--tls-cert", "DELAYQ_TLS_CERT", "client certificate (PEM), for mutual TLS"),
        ("--tls-key", "DELAYQ_TLS_KEY", "the client certificate's key (PEM)"),
    ):
        c.add_argument(flag, type=Path, default=os.environ.get(env) or None,
                       help=f"{what} (default ${env})")  # fmt: skip


def _parser(client_only: bool = False) -> argparse.ArgumentParser:
    """The whole command line; ``client_only``: the client commands' alone (for
    arguments that name one: the others' options need heavy modules)."""
    p = argparse.ArgumentParser(prog="delayq", description="Durable delayed-message service.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if not client_only:
        _serve_parser(sub)

    def client_cmd(
        name: str, help_text: str, deadline: bool = True, under: Any = None
    ) -> argparse.ArgumentParser:
        """A client command's parser (under ``under``'s subparsers, else the top's)."""
        c = (under or sub).add_parser(name, help=help_text, description=help_text)
        c.add_argument(
            "--server",
            default=os.environ.get("DELAYQ_SERVER", DEFAULT_SERVER),
            help="any node of the cluster (it serves the shard map): host:port or a gRPC "
            f"target URI (default $DELAYQ_SERVER or {DEFAULT_SERVER})",
        )
        tls_options(c)
        if deadline:  # receive uses --timeout for how long to wait for messages
            c.add_argument("--timeout", type=_duration, default=10_000, help="call deadline (10s)")
        return c

    def wait_option(c: argparse.ArgumentParser, default_ms: int, help_text: str) -> None:
        """``--timeout``/``--wait``: how long a receiving command waits (``wait_ms``)."""
        c.add_argument(
            "--timeout", "--wait", dest="wait_ms", type=_duration, default=default_ms,
            help=help_text,
        )  # fmt: skip

    send = client_cmd("send", "schedule a message; prints its id")
    send.add_argument("--topic", required=True)
    when = send.add_mutually_exclusive_group(required=True)
    when.add_argument("--delay", type=_duration, help="e.g. 30s, 5m, 2h, 7d")
    when.add_argument("--at", type=_time, help="ISO-8601 with zone, e.g. 2026-12-01T10:00:00Z")
    when.add_argument(
        "--level", type=int, help="RocketMQ delay level 1..N of the server's --delay-levels"
    )
    send.add_argument(
        "--key", default="",
        help="chooses the shard; with --if-exists, the message is scheduled once per key of "
        "its topic (1..1024 bytes of UTF-8, no control characters)",
    )  # fmt: skip
    send.add_argument(
        "--if-exists", choices=("reject", "keep", "replace"),
        help="when a pending message of the topic has --key: reject (print its id, exit 1), "
        "keep (print its id, exit 0) or replace it (cancel it, schedule this one)",
    )  # fmt: skip
    send.add_argument(
        "--dedup-window", type=_duration,
        help="keep the key taken this long after acceptance, even once delivered or "
        "cancelled (e.g. 24h; needs --if-exists; at most the server's --max-dedup-window)",
    )  # fmt: skip
    send.add_argument("--header", type=_header, action="append", default=[], metavar="K=V")
    send.add_argument("body", help="message body; - reads standard input")

    def by_key(c: argparse.ArgumentParser, what: str) -> None:
        """``--topic`` and ``--key``: the pending messages of a key, instead of ids."""
        c.add_argument("--topic", help=f"with --key: {what} every pending message of the key")
        c.add_argument(
            "--key", action="append" if what == "cancel" else "store",
            help="a key of --topic" + (" (repeat for more)" if what == "cancel" else ""),
        )  # fmt: skip

    cancel = client_cmd("cancel", "cancel pending messages by id, or by --topic and --key")
    cancel.add_argument("ids", nargs="*", metavar="ID")
    by_key(cancel, "cancel")

    get = client_cmd(
        "get", "show a message's state, topic and delivery time (by id, or --topic and --key)"
    )
    get.add_argument("id", nargs="?", metavar="ID")
    by_key(get, "show")
    get.add_argument("--json", action="store_true")

    res = client_cmd(
        "reschedule",
        "move a pending message (or every one of --topic's --key) to a new time; prints "
        "the new id(s)",
    )
    res.add_argument("id", nargs="?", metavar="ID")
    by_key(res, "move")
    when = res.add_mutually_exclusive_group(required=True)
    when.add_argument("--delay", type=_duration)
    when.add_argument("--at", type=_time)

    recv = client_cmd("receive", "receive due messages and ack what is printed", deadline=False)
    recv.add_argument("--topic", required=True)
    recv.add_argument("--group", required=True)
    recv.add_argument("--count", type=int, default=10, help="stop after this many (10)")
    wait_option(recv, 5_000, "how long to wait for messages (5s); with --follow, per poll")
    recv.add_argument(
        "--invisible", type=_duration, default=30_000, help="redelivery timeout if not acked (30s)"
    )
    recv.add_argument("--follow", action="store_true", help="keep receiving until interrupted")
    recv.add_argument("--json", action="store_true", help="one JSON object per line")

    replay = client_cmd(
        "replay",
        "schedule a group's dead letters (topic dlq.<group>) again to the topics they came "
        "from, with their keys and headers; acks each once replayed; prints the new ids",
        deadline=False,
    )
    replay.add_argument("--group", required=True, help="the consumer group whose dead letters")
    replay.add_argument("--count", type=int, default=100, help="stop after this many (100)")
    wait_option(replay, 2_000, "how long to wait for dead letters (2s)")
    replay.add_argument("--delay", type=_duration, default=0, help="deliver after this (now)")

    stats = client_cmd("stats", "per-topic counts and due-time histogram, over every shard")
    stats.add_argument("topic", nargs="?", default="")
    stats.add_argument("--json", action="store_true")
    stats.add_argument("--shards", action="store_true", help="also each shard's own figures")

    under = lambda under, name, text: client_cmd(name, text, under=under)  # noqa: E731
    groupcmds.add_parser(sub, under, _duration)
    schedulecmds.add_parser(sub, under, _duration, _time, _header)

    if not client_only:
        _other_parsers(sub)
    return p


def _serve_parser(sub: Any) -> None:
    from ..server.config import OPTIONS

    serve = sub.add_parser(
        "serve",
        help="run the embedded single-node server",
        description="Serve one shard over gRPC. Every option can also come "
        "from DELAYQ_<OPTION> or a TOML --config file (flag > env > file).",
    )
    serve.add_argument("--config", type=Path, help="TOML file with the same keys (snake_case)")
    for name, (_, help_text) in OPTIONS.items():
        serve.add_argument("--" + name.replace("_", "-"), dest=name, help=help_text)


def _other_parsers(sub: Any) -> None:
    """``verify``, ``top`` and ``cluster``."""
    verify = sub.add_parser(
        "verify",
        help="check a data directory offline (and repair it with --fix)",
        description="Check a stopped shard's data directory: every file's header, "
        "the CommitLog's and TimerLog's records to the end, the wheel's slots against "
        "the TimerLog, the checkpoint against the logs' ends, the state map and ready "
        "queues against the records. Prints a line per file (OK, DAMAGED or FIXED) "
        "and a summary. Refuses a directory a running server holds.",
        epilog="--fix cuts torn tails, rebuilds wheel slots from the TimerLog, sets "
        "state bytes from the records, and sets a bad checkpoint aside so that the "
        "next start replays the whole CommitLog (only while retention has deleted "
        "none of it). It never cuts a valid record: a damaged record with valid "
        "records after it is reported, not repaired. Exit codes: 0 clean (or every "
        "damage repaired), 1 damage left, 2 bad usage, not a data directory, or in use.",
    )
    verify.add_argument("data_dir", type=Path, metavar="DATA_DIR")
    verify.add_argument("--fix", action="store_true", help="repair what can be derived again")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")

    from .top import add_parser as add_top_parser

    add_top_parser(sub, tls_options)

    from ..cluster.command import add_parser as add_cluster_parser

    add_cluster_parser(sub)


def _verify(args: argparse.Namespace) -> int:
    from ..verify import DirectoryError, render_json, render_text, verify

    try:
        report = verify(args.data_dir, fix=args.fix)
    except DirectoryError as exc:
        print(f"delayq verify: {exc}", file=sys.stderr)
        return 2
    print(render_json(report) if args.json else render_text(report))
    return report.exit_code


def _serve(args: argparse.Namespace) -> int:
    import asyncio

    from ..logs import configure
    from ..server.app import CannotServe, serve
    from ..server.config import OPTIONS, load

    flags = {name: getattr(args, name) for name in OPTIONS}
    try:
        settings = load(flags, os.environ, args.config)
    except ValueError as exc:
        print(f"delayq serve: {exc}", file=sys.stderr)
        return 2
    configure(settings.log_format, settings.log_level)

    def ready(address: str, admin: str, others: Mapping[str, str]) -> None:
        also = "".join(f", {name} {where}" for name, where in others.items())
        print(
            f"delayq serving on {address} (admin {admin}{also}, "
            f"data in {settings.engine.data_dir})",
            flush=True,
        )

    from ..errors import DelayqError

    frontends = []
    if settings.rocketmq_listen:
        from ..rocketmq.frontend import frontend_spec

        frontends.append(frontend_spec(settings.rocketmq_listen, settings.rocketmq_dedup_window_ms))
    import uvloop

    try:
        # uvloop: a third less CPU per gRPC call than asyncio's own loop (bench.grpcfloor)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(settings, ready, frontends=frontends))
    except (DelayqError, CannotServe) as exc:
        print(f"delayq serve: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(client_only=bool(argv) and argv[0] in CLIENT_COMMANDS).parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "verify":
            return _verify(args)
        if args.command == "cluster":
            from ..cluster.command import run as run_cluster

            return run_cluster(args)
        if args.command == "top":
            from .top import run as run_top

            return run_top(args)
        return run_client_command(args)
    except (ClientError, grpc.RpcError) as exc:  # a cluster command's admin calls: gRPC's
        print(f"delayq {args.command}: {from_rpc(exc)}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"delayq {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
