"""What one-message RocketMQ ``SendMessage`` calls cost ``delayq serve``'s
RocketMQ port: server CPU µs per call (or thousands of instructions under
callgrind, ``bench.percall``), each source tree's server in turns.

    python -m bench.rmqsend [--trees DIR,DIR] [--calls N] [--pairs N]
                            [--inflight N] [--callgrind] [--json FILE] [-- SERVE_ARGS]

Each turn starts a fresh server from one tree (``PYTHONPATH`` its ``service/``,
this interpreter), sends 200 warm-up messages, then ``--calls`` more of 200 bytes
each to one topic with ``--inflight`` in flight (what a client's ``sendAsync``
keeps going), as raw stub calls; ``SERVE_ARGS`` go to ``delayq serve`` (e.g.
``--grpc-server grpcio``). The trees alternate which goes first. Figures
per tree: the median, min and max over the turns, and how many times cheaper
than the first tree, pair by pair. Speed is never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from bench.percall import Served, drive
from delayq.rocketmq.v2 import definition_pb2 as rmq
from delayq.rocketmq.v2 import service_pb2 as svc
from delayq.rocketmq.v2 import service_pb2_grpc as svc_grpc

__all__ = ["main", "measure"]

BODY = b"b" * 200


def _request(topic: str) -> svc.SendMessageRequest:
    m = rmq.Message(body=BODY)
    m.topic.name = topic
    m.system_properties.message_id = "01" + uuid.uuid4().hex.upper()
    m.system_properties.message_type = rmq.NORMAL
    return svc.SendMessageRequest(messages=[m])


def _one(tree: Path, calls: int, inflight: int, callgrind: bool, extra: Sequence[str]) -> float:
    """Server cost per send of one turn of ``tree``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "service"), str(tree)])}
    with tempfile.TemporaryDirectory(prefix="rmqsend-") as data:
        cmd = [sys.executable, "-m", "delayq.cli.main", "serve", "--data-dir", data]
        cmd += ["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
        cmd += ["--metrics-listen", "off", "--log-level", "warning"]
        cmd += ["--rocketmq-listen", "127.0.0.1:0", *extra]
        with Served(cmd, cwd=tree, env=env, callgrind=callgrind) as served:
            if "rocketmq " not in served.line:
                raise SystemExit(f"delayq did not start: {served.line!r}")
            address = served.line.split("rocketmq ")[1].split(",")[0].rstrip(")")
            with grpc.insecure_channel(address) as channel:
                stub = svc_grpc.MessagingServiceStub(channel)
                topic = "t" + uuid.uuid4().hex[:10]

                def make(n: int) -> None:
                    requests = [_request(topic) for _ in range(n)]
                    sends = iter(requests)
                    drive(lambda: stub.SendMessage.future(next(sends), timeout=120), n, inflight)

                make(200)
                return served.cost(make, calls)[0]


def measure(
    trees: list[Path],
    calls: int,
    pairs: int,
    inflight: int,
    callgrind: bool,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    seen: dict[Path, list[float]] = {t: [] for t in trees}
    for i in range(pairs):
        for tree in trees if i % 2 == 0 else trees[::-1]:
            seen[tree].append(_one(tree, calls, inflight, callgrind, extra))
    cost = "server_kinstr_per_send" if callgrind else "server_cpu_us_per_send"
    rows = []
    for tree, turns in seen.items():
        ratios = sorted(b / t for t, b in zip(turns, seen[trees[0]], strict=True) if t and b)
        rows.append(
            {
                "tree": str(tree),
                cost: round(statistics.median(turns), 1),
                f"{cost}_min": round(min(turns), 1),
                f"{cost}_max": round(max(turns), 1),
                "cheaper_than_first": round(statistics.median(ratios), 3) if ratios else None,
                "cheaper_pairs": sum(r > 1 for r in ratios),
            }
        )
    return {"calls": calls, "pairs": pairs, "inflight": inflight, "trees": rows}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.rmqsend", description=__doc__.split("\n")[0])
    p.add_argument("--trees", default=".", help="source trees, comma-separated (default: here)")
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--pairs", type=int, default=3, help="turns of every tree")
    p.add_argument("--inflight", type=int, default=1)
    p.add_argument("--callgrind", action="store_true", help="count instructions, not CPU")
    p.add_argument("--json", type=Path)
    p.add_argument("serve_args", nargs="*", help="for delayq serve (after --)")
    a = p.parse_args()
    trees = [Path(t).resolve() for t in a.trees.split(",")]
    figures = measure(trees, a.calls, a.pairs, a.inflight, a.callgrind, a.serve_args)
    print(json.dumps(figures, indent=2))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
