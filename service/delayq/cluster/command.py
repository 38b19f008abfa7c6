"""``delayq cluster up|status|scale``: the command line of the local cluster. ``add_parser``
hangs the ``cluster`` group under the ``delayq`` command's subcommands and ``run``
runs what was parsed, so the CLI needs two lines to offer it.

Exit codes: ``up``: 0 after a clean stop (SIGINT, SIGTERM), 2 when the cluster
cannot start (one line on stderr); ``status``: 0 every node serves, 1 some does
not, 2 no cluster in DIR; ``scale``: 0 once the cluster has the shards asked for,
1 when the change failed (the map as it was), 2 when it cannot be asked for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..durations import parse_duration_ms
from ..role import DEFAULT_LEASE_MS
from .errors import ClusterError
from .layout import (
    DEFAULT_BASE_PORT,
    DEFAULT_MIN_INSYNC,
    DEFAULT_REPLICAS,
    DEFAULT_SHARDS,
    PORTS_PER_NODE,
    REPLICATION_MODES,
)

__all__ = ["add_parser", "run"]

UP_EPILOG = """\
Files: DIR/shards.json (the shard map, written atomically), DIR/cluster.json
(supervisor pid; per node: shard, name, address, metrics and admin address,
pid, restarts; per shard: the recorded epoch, master, in-sync set, failovers),
DIR/shard-S/node-K/ (data) and DIR/shard-S/node-K.log (the node's output);
with --tls, DIR/tls/ (a throwaway CA and certificates).
Ports: node j = S*R+K listens on 127.0.0.1:P+4j (gRPC), P+4j+1 (metrics),
P+4j+2 (admin) and P+4j+3 (RocketMQ 5).
Stdout: a line "node shard-S/node-K serving on HOST:PORT (...)" per node, then
"cluster up: N shard(s), R node(s) each, map DIR/shards.json" once all serve.
A node that dies is restarted on its data and ports (with a growing back-off
while it crash-loops). With --replicas R > 1, node 0 of a shard starts as its
master and the others as replicas; the supervisor probes every node each
--probe-interval, fails a master silent for --lease over to an in-sync replica
(fence first, then promote), keeps each shard's in-sync set, and rewrites the
map when a master changes; a restarted node rejoins as a replica of the current
master. SIGINT/SIGTERM stops every node (SIGKILL after --grace) and exits 0; a
second signal kills at once. An existing DIR is reused when its map has the same
shard count, refused otherwise."""


def _duration_ms(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _duration_s(text: str) -> float:
    try:
        return parse_duration_ms(text) / 1000
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_parser(sub: Any) -> None:
    """Add ``cluster`` (with ``up`` and ``status``) to ``sub``, the subparsers of
    the ``delayq`` command."""
    cluster = sub.add_parser(
        "cluster",
        help="run a local cluster of real processes (development and tests)",
        description="A local cluster: several shards, each a real `delayq serve` "
        "process on 127.0.0.1, supervised in the foreground.",
    )
    actions = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="start the cluster in the foreground; Ctrl-C stops it",
        description="Start every node of a local cluster, restart those that die,\n"
        "stop them all on SIGINT or SIGTERM.",
        epilog=UP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    up.add_argument("--dir", type=Path, required=True, help="the cluster's directory")
    up.add_argument(
        "--shards", type=int, default=DEFAULT_SHARDS, help=f"shard count ({DEFAULT_SHARDS})"
    )
    up.add_argument(
        "--replicas",
        type=int,
        default=DEFAULT_REPLICAS,
        help="nodes a shard, master included (1)",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="serve TLS with a throwaway CA made in DIR/tls/ (ca.crt for clients' --tls-ca); "
        "the admin ports take only the supervisor's certificate",
    )
    up.add_argument(
        "--replication",
        choices=REPLICATION_MODES,
        default="async",
        help="async: a write is acked after the master's append; sync: after "
        "--min-insync nodes fsynced it (async)",
    )
    up.add_argument(
        "--min-insync",
        type=int,
        default=DEFAULT_MIN_INSYNC,
        metavar="N",
        help=f"sync mode: nodes, master included, that fsync a write before it is acked "
        f"({DEFAULT_MIN_INSYNC}; at most --replicas)",
    )
    up.add_argument(
        "--probe-interval",
        type=_duration_ms,
        default=250,
        metavar="DURATION",
        help="how often each node of a replicated shard is probed (250ms)",
    )
    up.add_argument(
        "--lease",
        type=_duration_ms,
        default=DEFAULT_LEASE_MS,
        metavar="DURATION",
        help=f"a master's lease: one silent this long is failed over ({DEFAULT_LEASE_MS}ms)",
    )
    up.add_argument(
        "--base-port",
        type=int,
        default=DEFAULT_BASE_PORT,
        help=f"first of the {PORTS_PER_NODE} ports a node takes on 127.0.0.1 ({DEFAULT_BASE_PORT})",
    )
    up.add_argument(
        "--placement",
        type=Path,
        metavar="FILE",
        help='JSON: where nodes run, by label: {"shard-0/node-0": {"host": ADDRESS, '
        '"launcher": [COMMAND PREFIX]}} (e.g. each node in its own network namespace)',
    )
    up.add_argument(
        "--grace",
        type=_duration_s,
        default=20.0,
        metavar="DURATION",
        help="how long nodes get to stop before SIGKILL (20s)",
    )
    up.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="the supervisor's log on stderr (text); nodes log JSON to their own files",
    )
    up.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")

    status = actions.add_parser(
        "status",
        help="one row per node: role, epoch, address, pid, state, log end, lag, in-sync",
        description="Ask every node of a local cluster how it is. State: serving, "
        "recovering (health NOT_SERVING) or down (no answer). Exit code 0 when every "
        "node serves, 1 otherwise, 2 when DIR holds no cluster.",
    )
    status.add_argument("--dir", type=Path, required=True, help="the cluster's directory")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.add_argument(
        "--timeout",
        type=_duration_s,
        default=1.0,
        metavar="DURATION",
        help="how long a node has to answer (1s)",
    )

    scale = actions.add_parser(
        "scale",
        help="change the shard count of a running cluster (moves messages with Spark)",
        description="Ask the running `delayq cluster up` of DIR for --shards active shards "
        "and follow the change: new shards are started and listed as joining; the rebalance "
        "job (delayq-spark rebalance, local Spark) moves every pending message whose shard "
        "changes; only when it succeeds does the map switch; shards that go are drained "
        "(every consumer group acked what they delivered), dropped from the map and stopped. "
        "Schedules, cancels and receives keep working throughout. Exit 0 when done, 1 when "
        "the change failed (the map stays as it was; scale again to retry), 2 when it "
        "cannot be asked for.",
        epilog=SCALE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    scale.add_argument("--dir", type=Path, required=True, help="the cluster's directory")
    scale.add_argument("--shards", type=int, required=True, help="active shards wanted")
    scale.add_argument(
        "--timeout",
        type=_duration_s,
        default=3600.0,
        metavar="DURATION",
        help="how long to follow the change before giving up following (1h); the change goes on",
    )


SCALE_EPILOG = """Files: DIR/scale.json (the request and its progress: state requested, running,
done or failed; step add, rebalance, drain, done), DIR/rebalance.log (the job's
output). Removed shards' directories are kept as DIR/shard-S.removed-E.
Restarting `cluster up` needs --shards equal to the shards the map lists."""


def run(args: argparse.Namespace) -> int:
    """Run the parsed ``cluster`` action; a ``ClusterError`` is one line on stderr
    and exit code 2."""
    try:
        if args.cluster_command == "up":
            return _up(args)
        if args.cluster_command == "scale":
            return _scale(args)
        return _status(args)
    except ClusterError as exc:
        print(f"delayq cluster {args.cluster_command}: {exc}", file=sys.stderr)
        return 2


def _up(args: argparse.Namespace) -> int:
    from ..control.keeper import KeeperSettings
    from ..logs import configure
    from .layout import parse_placement, plan
    from .supervisor import Supervisor

    placement = None
    if args.placement is not None:
        try:
            text = args.placement.read_text()
        except OSError as exc:
            raise ClusterError(f"--placement {args.placement}: {exc.strerror or exc}") from None
        placement = parse_placement(text, f"--placement {args.placement}")
    layout = plan(
        args.dir.absolute(),
        shards=args.shards,
        replicas=args.replicas,
        base_port=args.base_port,
        replication=args.replication,
        min_insync=args.min_insync,
        tls=args.tls,
        placement=placement,
    )
    try:
        keeper = KeeperSettings(
            probe_interval_ms=args.probe_interval,
            lease_ms=args.lease,
            min_insync=layout.view_min_insync,
            sync=layout.replication == "sync",
        )
    except ValueError as exc:
        raise ClusterError(f"--lease, --probe-interval: {exc}") from None
    configure(args.log_format, args.log_level)
    return Supervisor(layout, grace_s=args.grace, keeper=keeper).run()


def _status(args: argparse.Namespace) -> int:
    from .statusreport import collect

    report = collect(args.dir, args.timeout)
    print(report.to_json() if args.json else report.to_text())
    return report.exit_code


def _scale(args: argparse.Namespace) -> int:
    import time

    from ..atomicfile import read_text
    from ..shardmap import ShardMapError, parse
    from .scaling import DONE, FAILED, read_request, request
    from .statusreport import supervisor_running

    dir = args.dir.absolute()
    if not supervisor_running(dir):
        raise ClusterError(f"no running `delayq cluster up` in {dir}: start it first")
    text = read_text(dir / "shards.json")
    try:
        current = parse(text or "")
    except ShardMapError as exc:
        raise ClusterError(f"{dir / 'shards.json'}: {exc}") from None
    req = request(dir, args.shards, current)
    print(f"scaling {dir} from {current.owners} to {args.shards} shard(s)", flush=True)
    deadline = time.monotonic() + args.timeout
    step = ""
    while time.monotonic() < deadline:
        got = read_request(dir)
        if got is not None and got.requested_ms == req.requested_ms:
            if got.step != step and got.step:
                step = got.step
                print(f"step: {step}", flush=True)
            if got.state == DONE:
                moved = got.job.get("moved")
                tail = f"; moved {moved} message(s)" if moved is not None else ""
                print(f"done: {args.shards} shard(s){tail}", flush=True)
                return 0
            if got.state == FAILED:
                print(f"delayq cluster scale: {got.error}", file=sys.stderr)
                return 1
            if not supervisor_running(dir):
                print("delayq cluster scale: the supervisor stopped", file=sys.stderr)
                return 1
        time.sleep(0.2)
    print("delayq cluster scale: still going; follow DIR/scale.json", file=sys.stderr)
    return 1
