"""A delayq client run inside the test cluster (``LocalKubelet.run_in_cluster``:
the shard map's Service and pod names resolve there). One JSON object on stdout.

    python -m tests.support.incluster schedule ADDRESS TOPIC COUNT DELAY_S
    python -m tests.support.incluster receive ADDRESS TOPIC GROUP COUNT TIMEOUT_S
    python -m tests.support.incluster lookup ADDRESS ID...
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import delayq
from delayq.ids import MessageId


def schedule(address: str, topic: str, count: int, delay_s: float) -> dict[str, Any]:
    with delayq.Client(address) as c:
        sent = [
            c.schedule(topic, f"m{i}".encode(), delay=delay_s, key=f"key-{i}") for i in range(count)
        ]
    ids = [s.id for s in sent if s.ok]
    return {
        "ids": ids,
        "errors": [str(s.error) for s in sent if not s.ok],
        "shards": sorted({MessageId.parse(i).shard for i in ids if i}),
    }


def receive(address: str, topic: str, group: str, count: int, timeout_s: float) -> dict[str, Any]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    with delayq.Client(address) as c:
        while len(got) < count and time.monotonic() < deadline:
            batch = c.receive(topic, group, max_messages=500, wait_s=2)
            for m in batch:
                got.append(
                    {
                        "id": m.id,
                        "body": m.body.decode(),
                        "early_ms": m.deliver_at_ms - m.delivered_at_ms,
                    }
                )
            if batch:
                c.ack(topic, group, [m.receipt for m in batch])
    return {"received": got}


def lookup(address: str, ids: list[str]) -> dict[str, Any]:
    with delayq.Client(address) as c:
        return {"states": [c.lookup(i)["state"] for i in ids]}


def main(argv: list[str]) -> None:
    cmd, address, *rest = argv
    if cmd == "schedule":
        out = schedule(address, rest[0], int(rest[1]), float(rest[2]))
    elif cmd == "receive":
        out = receive(address, rest[0], rest[1], int(rest[2]), float(rest[3]))
    elif cmd == "lookup":
        out = lookup(address, rest)
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
