"""The ``delayq-spark`` command: the cluster-wide jobs that run on Spark.

    delayq-spark export --server ADDR --to PATH [--master local[*]]
    delayq-spark rebalance --server ADDR --shards N [--job ID] [--master local[*]]
    delayq-spark compact --server ADDR [--beyond 7d] [--block 1d]

Exit codes: 0 done; 1 the job failed (one line on stderr saying why); 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence

from delayq.addresses import DEFAULT_ADDRESS
from delayq.durations import parse_duration_ms
from delayq.logs import configure

from . import jobs
from .session import DEFAULT_MASTER, spark_session

__all__ = ["main"]

log = logging.getLogger("delayq_spark")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="delayq-spark",
        description="delayq's Spark jobs: read every shard of a running cluster through its "
        "admin export and work on the pending messages.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def job(name: str, help_text: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_text, description=help_text)
        c.add_argument(
            "--server",
            default=os.environ.get("DELAYQ_SERVER", DEFAULT_ADDRESS),
            help="any node of the cluster (it serves the shard map); default $DELAYQ_SERVER",
        )
        c.add_argument(
            "--master",
            default=os.environ.get("DELAYQ_SPARK_MASTER", DEFAULT_MASTER),
            help="Spark master: local[*] (default), spark://host:port, k8s://https://host:port",
        )
        c.add_argument(
            "--conf",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a Spark setting (repeatable), e.g. spark.executor.memory=2g",
        )
        c.add_argument(
            "--partition-bytes",
            type=int,
            default=int(os.environ.get("DELAYQ_SPARK_PARTITION_BYTES", "0")),
            help="CommitLog bytes per Spark partition of a shard (default "
            "$DELAYQ_SPARK_PARTITION_BYTES, else the shard's, 64 MiB)",
        )
        c.add_argument("--log-format", choices=("text", "json"), default="text")
        return c

    export = job(
        "export", "write the pending messages as Parquet, partitioned by topic and due day"
    )
    export.add_argument("--to", required=True, help="output directory (or any Spark path/URI)")
    export.add_argument(
        "--overwrite", action="store_true", help="replace what is at --to (default: refuse)"
    )
    rebalance = job(
        "rebalance",
        "move the pending messages whose shard changes when the cluster has --shards active "
        "shards (new shards listed as joining first); the caller switches the map after",
    )
    rebalance.add_argument(
        "--shards", type=int, required=True, help="active shards once the rebalance is done"
    )
    rebalance.add_argument(
        "--job",
        default="",
        help="a name for this rebalance in the shards' logs (default rebalance-eE-toN)",
    )
    compact = job(
        "compact",
        "take rolled messages due beyond --beyond out of the roll cycle into --block blocks",
    )
    compact.add_argument("--beyond", type=_duration, default="7d", help="horizon (default 7d)")
    compact.add_argument("--block", type=_duration, default="1d", help="block length (default 1d)")
    return p


def _duration(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _conf(parser: argparse.ArgumentParser, pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"bad --conf {pair!r}: use KEY=VALUE")
        out[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    configure(args.log_format)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    conf = _conf(parser, args.conf)
    started = time.monotonic()
    try:
        route = jobs.route_of(args.server)
        spark = spark_session(args.master, f"delayq-{args.command}", conf)
        log.info(
            "spark session up",
            extra={"master": args.master, "seconds": round(time.monotonic() - started, 2)},
        )
        try:
            if args.command == "export":
                summary = jobs.export(
                    spark, route, args.to, args.partition_bytes, overwrite=args.overwrite
                )
            elif args.command == "rebalance":
                summary = jobs.rebalance(spark, route, args.shards, args.job, args.partition_bytes)
            else:
                summary = jobs.compact(spark, route, args.beyond, args.block, args.partition_bytes)
            # printed before Spark stops: whoever waits for it (to switch the map
            # while the job's hold on new schedules stands) need not wait for that
            summary["seconds"] = round(time.monotonic() - started, 2)
            print(json.dumps(summary, sort_keys=True), flush=True)
        finally:
            spark.stop()
    except (jobs.JobError, OSError) as exc:
        print(f"delayq-spark {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
