"""Drive the official RocketMQ 5 Python client (``rocketmq-python-client``, the
gRPC 5.x client, ``import rocketmq``) against a ``MessagingService`` endpoint, for
delayq's tests (``tests/rocketmq/pyclient.py`` runs it).

Run it with the python of the client's own venv, never delayq's: the client ships
its own generated ``apache.rocketmq.v2`` modules, which must not share a process
with delayq's.

    client_driver.py --endpoint HOST:PORT [--timeout S] [--request-timeout S]
                     [--client-log-dir DIR] COMMAND [options]

Commands (``COMMAND --help`` for their options):

- ``produce``: a Producer with its topics declared sends NORMAL messages and
  DELAY messages (with a delivery timestamp), with tag, keys and user
  properties; a ``sent`` line per message (its id, its recall handle if the
  server gave one).
- ``recall``: sends one DELAY message and recalls it by the handle its send
  returned (or recalls ``--handle``); a ``recalled`` line, or
  ``recall_unsupported`` when this client version has no recall.
- ``simple-consume``: a SimpleConsumer receives and acks until ``--count``
  messages or ``--deadline-s``; a ``received`` line per delivery, then ``done``.
  ``--lapse N`` acks none of the first N messages' first deliveries and expects
  each back once its invisibility lapsed, with the next delivery attempt.

Output: one JSON object per line on stdout, each with an ``event``. Exit status:
0 done; 1 the client raised (an ``error`` line says in which phase and what);
2 bad arguments; 124 ``--timeout`` passed. That last is a watchdog thread's doing:
parts of the client wait without a limit (a route query's callback, a Settings
reply for some client types), and this script must never hang a test.

Facts of the 5.1.2 client this script relies on: ``Message.delivery_timestamp``
is written to the wire as ``Timestamp.seconds`` (whole epoch seconds, although its
docstring says milliseconds); ``Message.keys`` is a property whose setter adds one
key per assignment; receive and invisibility durations are whole seconds; the
client logs to ``$HOME/logs/rocketmq_python/`` (hence ``--client-log-dir``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

EXIT_FAILED = 1
EXIT_TIMEOUT = 124

_out_lock = threading.Lock()  # the watchdog thread may print while the main one does
_phase = "start"  # what the main thread is doing, for the error and timeout lines
_client_errors: deque[str] = deque(maxlen=8)  # the client's last warnings, for "error"


def emit(event: str, **fields: Any) -> None:
    """Print one JSON line on stdout, at once."""
    line = json.dumps({"event": event, **fields}, sort_keys=True, default=str)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def set_phase(phase: str) -> None:
    global _phase
    _phase = phase


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- arguments -----------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="client_driver.py",
        description="Drive rocketmq-python-client against a MessagingService endpoint.",
    )
    p.add_argument("--endpoint", required=True, help="HOST:PORT of the MessagingService")
    p.add_argument(
        "--timeout", type=float, default=60.0, help="hard limit on the whole run, s (60)"
    )
    p.add_argument(
        "--request-timeout",
        type=int,
        default=3,
        help="the client's per-request timeout, whole s (3, the client's default)",
    )
    p.add_argument(
        "--client-log-dir",
        help="where the client writes its log (DIR/logs/rocketmq_python/); a temp dir if unset",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    prod = sub.add_parser("produce", help="send NORMAL and DELAY messages")
    prod.add_argument(
        "--topic",
        action="append",
        required=True,
        help="a topic declared on the Producer (repeatable); messages go to the first",
    )
    prod.add_argument("--normal", type=int, default=0, help="NORMAL messages to send (0)")
    prod.add_argument("--delayed", type=int, default=0, help="DELAY messages to send (0)")
    prod.add_argument(
        "--delay-s",
        type=float,
        default=5.0,
        help="the DELAY messages' delay: delivery at ceil(now + this), whole s (5)",
    )
    _message_options(prod)
    prod.add_argument(
        "--message",
        action="append",
        default=[],
        type=_json_object,
        metavar="JSON",
        help='an exact message (repeatable), sent after the counted ones: {"body": str, '
        '"topic"?, "tag"?, "keys"?: [str], "properties"?: {str: str}, '
        '"delay_s"?: number | "deliver_at_s"?: int}',
    )

    rec = sub.add_parser("recall", help="send a DELAY message, then recall it")
    rec.add_argument("--topic", required=True)
    rec.add_argument("--delay-s", type=float, default=30.0, help="the message's delay, s (30)")
    rec.add_argument("--body", default="recall-me")
    rec.add_argument("--handle", help="recall this handle instead of sending a message")

    con = sub.add_parser("simple-consume", help="receive and ack with a SimpleConsumer")
    con.add_argument("--topic", required=True)
    con.add_argument("--group", required=True, help="the consumer group")
    con.add_argument("--filter", default="*", help='tag expression ("*", "a||b")')
    con.add_argument(
        "--count", type=int, default=0, help="stop once this many messages are acked (0: none)"
    )
    con.add_argument(
        "--deadline-s",
        type=float,
        default=30.0,
        help="stop receiving after this long, s (30); a receive under way ends first",
    )
    con.add_argument("--batch", type=int, default=16, help="max messages per receive (16)")
    con.add_argument("--await-s", type=int, default=5, help="long-polling time, whole s (5)")
    con.add_argument("--invisible-s", type=int, default=30, help="invisible duration, whole s (30)")
    con.add_argument(
        "--lapse",
        type=int,
        default=0,
        help="ack none of the first N messages' first deliveries; expect each again (0)",
    )
    con.add_argument(
        "--require-complete",
        action="store_true",
        help="exit 1 unless the count was reached and every lapsed message came back",
    )
    args = p.parse_args(argv)
    if args.timeout <= 0 or args.request_timeout <= 0:
        p.error("--timeout and --request-timeout must be positive")
    if args.command == "produce" and not (args.normal or args.delayed or args.message):
        p.error("produce: nothing to send (--normal, --delayed or --message)")
    if args.command == "simple-consume" and (args.count < 0 or args.lapse < 0):
        p.error("simple-consume: --count and --lapse must not be negative")
    return args


def _message_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tag", help="the counted messages' tag")
    p.add_argument("--key", action="append", default=[], help="a key of theirs (repeatable)")
    p.add_argument(
        "--property",
        action="append",
        default=[],
        type=_key_value,
        metavar="K=V",
        help="a user property of theirs (repeatable)",
    )
    p.add_argument("--body-prefix", default="", help="their bodies: PREFIX + normal-I / delay-I")


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    return key, value


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("body"), str):
        raise argparse.ArgumentTypeError('expected an object with a string "body"')
    if "delay_s" in value and "deliver_at_s" in value:
        raise argparse.ArgumentTypeError('give "delay_s" or "deliver_at_s", not both')
    return value


# -- the client ------------------------------------------------------------------


class _Remember(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _client_errors.append(f"{record.levelname} {record.getMessage()}"[:500])


def load_client(log_dir: str) -> Any:
    """Import the client, its log in ``log_dir`` and its warnings also on stderr."""
    # the client picks its log file from ~ when it is first imported
    os.environ["HOME"] = log_dir
    import rocketmq

    client_log = logging.getLogger("rocketmq-python-client")
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setFormatter(logging.Formatter("client %(levelname)s %(message)s"))
    for handler in (to_stderr, _Remember()):
        handler.setLevel(logging.WARNING)
        client_log.addHandler(handler)
    return rocketmq


def client_version() -> str:
    from importlib.metadata import version

    return version("rocketmq-python-client")


def configuration(rmq: Any, args: argparse.Namespace) -> Any:
    return rmq.ClientConfiguration(
        args.endpoint, rmq.Credentials(), request_timeout=args.request_timeout
    )


def message_type_name(code: int | None) -> str | None:
    names = {1: "NORMAL", 2: "FIFO", 3: "DELAY", 4: "TRANSACTION", 5: "LITE", 6: "PRIORITY"}
    return None if code is None else names.get(code, str(code))


def build_message(rmq: Any, topic: str, spec: dict[str, Any]) -> tuple[Any, int | None]:
    """A client ``Message`` from ``spec``, and its delivery time (whole epoch s) if
    it is a DELAY message."""
    msg = rmq.Message()
    msg.topic = spec.get("topic", topic)
    msg.body = spec["body"].encode()
    if spec.get("tag"):
        msg.tag = spec["tag"]
    for key in spec.get("keys", ()):
        msg.keys = key  # the setter adds one key
    for key, value in spec.get("properties", {}).items():
        msg.add_property(key, value)
    deliver_at_s: int | None = None
    if "deliver_at_s" in spec:
        deliver_at_s = int(spec["deliver_at_s"])
    elif "delay_s" in spec:
        deliver_at_s = math.ceil(time.time() + float(spec["delay_s"]))
    if deliver_at_s is not None:
        msg.delivery_timestamp = deliver_at_s  # whole seconds on the wire (see above)
    return msg, deliver_at_s


def send(producer: Any, msg: Any, deliver_at_s: int | None, index: int) -> Any:
    set_phase(f"send #{index}")
    receipt = producer.send(msg)
    emit(
        "sent",
        index=index,
        topic=msg.topic,
        message_id=receipt.message_id,
        recall_handle=getattr(receipt, "recall_handle", None),
        offset=receipt.offset,
        message_type=message_type_name(msg.message_type),
        delivery_timestamp_s=deliver_at_s,
        sent_at_ms=now_ms(),
        tag=msg.tag,
        keys=sorted(msg.keys),
        properties=dict(msg.properties),
        body=msg.body.decode(errors="backslashreplace"),
    )
    return receipt


@contextmanager
def started(client: Any, what: str) -> Iterator[Any]:
    """Start ``client``, and shut it down after the block; a failure keeps the
    phase it happened in (for the ``error`` line), not the shutdown's."""
    set_phase(f"{what} startup")
    client.startup()
    try:
        yield client
    except BaseException:
        failed = _phase
        set_phase(f"{what} shutdown, after a failure during {failed}")
        try:
            client.shutdown()
        except Exception as exc:  # the failure that brought us here is the news
            print(f"client_driver: {what} shutdown failed too: {exc}", file=sys.stderr)
        set_phase(failed)
        raise
    set_phase(f"{what} shutdown")
    client.shutdown()


def producer_of(rmq: Any, args: argparse.Namespace, topics: list[str]) -> Any:
    return started(rmq.Producer(configuration(rmq, args), topics), "producer")


def counted_messages(args: argparse.Namespace) -> list[dict[str, Any]]:
    common: dict[str, Any] = {"keys": args.key, "properties": dict(args.property)}
    if args.tag:
        common["tag"] = args.tag
    specs = [{**common, "body": f"{args.body_prefix}normal-{i}"} for i in range(args.normal)]
    specs += [
        {**common, "body": f"{args.body_prefix}delay-{i}", "delay_s": args.delay_s}
        for i in range(args.delayed)
    ]
    return specs


def produce(rmq: Any, args: argparse.Namespace) -> None:
    with producer_of(rmq, args, args.topic) as producer:
        for index, spec in enumerate(counted_messages(args) + args.message):
            msg, deliver_at_s = build_message(rmq, args.topic[0], spec)
            send(producer, msg, deliver_at_s, index)


def recall(rmq: Any, args: argparse.Namespace) -> None:
    if not hasattr(rmq.Producer, "recall_message"):
        emit("recall_unsupported", client_version=client_version())
        return
    with producer_of(rmq, args, [args.topic]) as producer:
        handle = args.handle
        if handle is None:
            msg, deliver_at_s = build_message(
                rmq, args.topic, {"body": args.body, "delay_s": args.delay_s}
            )
            receipt = send(producer, msg, deliver_at_s, 0)
            handle = getattr(receipt, "recall_handle", None)
            if not handle:
                raise RuntimeError("the server's send reply carried no recall handle")
        set_phase("recall")
        message_id = producer.recall_message(args.topic, handle)
        emit("recalled", message_id=message_id, recall_handle=handle, at_ms=now_ms())


def describe(msg: Any, received_at_ms: int) -> dict[str, Any]:
    return {
        "message_id": msg.message_id,
        "topic": msg.topic,
        "tag": msg.tag,
        "keys": sorted(msg.keys),
        "properties": dict(msg.properties),
        "body": msg.body.decode(errors="backslashreplace"),
        "message_type": message_type_name(msg.message_type),
        "delivery_timestamp_ms": msg.delivery_timestamp,
        "born_timestamp_ms": msg.born_timestamp,
        "received_at_ms": received_at_ms,
        "delivery_attempt": msg.delivery_attempt,
        "corrupted": msg.corrupted,
        "receipt_handle": msg.receipt_handle,
    }


def simple_consume(rmq: Any, args: argparse.Namespace) -> bool:
    """Receive and ack as asked; return whether the goal was met (``done`` says)."""
    consumer = rmq.SimpleConsumer(
        configuration(rmq, args),
        args.group,
        {args.topic: rmq.FilterExpression(args.filter)},
        await_duration=args.await_s,
    )
    acked: set[str] = set()
    lapsed: dict[str, dict[str, Any]] = {}  # message id -> its attempts and times
    deliveries = 0

    def complete() -> bool:
        back = all(len(v["attempts"]) == 2 for v in lapsed.values())
        return len(acked) >= args.count and back and len(lapsed) == args.lapse

    with started(consumer, "consumer"):
        deadline = time.monotonic() + args.deadline_s
        while time.monotonic() < deadline and not (args.count and complete()):
            set_phase("receive")
            batch = consumer.receive(args.batch, args.invisible_s)
            received_at_ms = now_ms()
            for msg in batch:
                deliveries += 1
                mid = msg.message_id
                line = describe(msg, received_at_ms)
                if mid in acked:  # delivered again after its ack: report, leave it
                    emit("received", **line, acked=False, duplicate=True)
                    continue
                if mid not in lapsed and len(lapsed) < args.lapse:
                    lapsed[mid] = {"attempts": [msg.delivery_attempt], "at_ms": [received_at_ms]}
                    emit("received", **line, acked=False, lapsing=True)
                    continue
                if mid in lapsed:
                    lapsed[mid]["attempts"].append(msg.delivery_attempt)
                    lapsed[mid]["at_ms"].append(received_at_ms)
                set_phase(f"ack {mid}")
                consumer.ack(msg)
                acked.add(mid)
                emit("received", **line, acked=True)
    redelivered_in_order = all(
        v["attempts"][1] == (v["attempts"][0] or 1) + 1
        for v in lapsed.values()
        if len(v["attempts"]) == 2
    )
    ok = complete() and redelivered_in_order
    emit(
        "done",
        acked=len(acked),
        deliveries=deliveries,
        lapsed=[{"message_id": k, **v} for k, v in lapsed.items()],
        complete=ok,
    )
    return ok


# -- the run ----------------------------------------------------------------------


def arm_watchdog(seconds: float) -> None:
    def fire() -> None:
        message = f"timed out after {seconds:g} s (--timeout) during {_phase}"
        try:
            emit("error", phase=_phase, type="Timeout", message=message)
            print(f"client_driver: {message}", file=sys.stderr, flush=True)
        finally:  # a failed write (a full disk, a closed pipe) must not keep it alive
            os._exit(EXIT_TIMEOUT)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True  # it must not keep a finished run alive
    timer.start()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    arm_watchdog(args.timeout)  # before the import: anything after it may block
    log_dir = args.client_log_dir or tempfile.mkdtemp(prefix="rocketmq-python-client-")
    try:
        set_phase("import")
        rmq = load_client(log_dir)
        emit(
            "started",
            command=args.command,
            endpoint=args.endpoint,
            client_version=client_version(),
            client_log=os.path.join(log_dir, "logs", "rocketmq_python", "rocketmq_client.log"),
            pid=os.getpid(),
        )
        if args.command == "produce":
            produce(rmq, args)
        elif args.command == "recall":
            recall(rmq, args)
        elif not simple_consume(rmq, args) and args.require_complete:
            raise RuntimeError("the consumer's goal was not met by --deadline-s (see done)")
    except Exception as exc:
        code = getattr(exc, "code", None)  # a ClientException's status code
        if callable(code):  # a grpc.RpcError's code() instead
            code = str(code())
        emit(
            "error",
            phase=_phase,
            type=type(exc).__name__,
            code=code,
            message=str(exc),
            client_warnings=list(_client_errors),
        )
        print(
            f"client_driver: {args.command} failed during {_phase}: {type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
