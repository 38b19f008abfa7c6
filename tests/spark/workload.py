"""A mixed set of messages on a running cluster and what should then be pending:
keyed and unkeyed, two topics, headers, far-future ones (they roll), some
cancelled, some rescheduled, some delivered and acked. And what a cluster holds
pending, read from export snapshots of every shard (``exported``), and a wait
until given messages have rolled (``wait_rolled``)."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field

import delayq
from delayq_spark import shards

DAY_MS = 86_400_000


@dataclass(frozen=True)
class Expected:
    topic: str
    key: str
    headers: dict[str, str]
    body: bytes
    deliver_at_ms: int


@dataclass
class Workload:
    pending: dict[str, Expected] = field(default_factory=dict)  # id -> what it holds
    gone: set[str] = field(default_factory=set)  # cancelled, rescheduled away or delivered
    far: set[str] = field(default_factory=set)  # due beyond the window: rolled


def populate(client: delayq.Client, keyed: int = 600, unkeyed: int = 200) -> Workload:
    w = Workload()
    now = int(time.time() * 1000)
    out: list[tuple[delayq.Outgoing, int]] = []
    for i in range(keyed):
        due = now + (i % 30 + 1) * DAY_MS + i
        topic = "orders" if i % 3 else "payments"
        headers = {"n": str(i), "kind": "keyed"}
        msg = delayq.Outgoing(
            topic=topic, body=b"k-%d" % i, at=due, key=f"customer-{i % 150}", headers=headers
        )
        out.append((msg, due))
    for i in range(unkeyed):
        due = now + 900_000 + i * 1000  # not due while a slow machine runs the test
        out.append((delayq.Outgoing(topic="orders", body=b"u-%d" % i, at=due), due))
    got = client.schedule_many([m for m, _ in out])
    for (m, due), s in zip(out, got, strict=True):
        assert s.ok and s.id is not None, s.error
        w.pending[s.id] = Expected(m.topic, m.key, dict(m.headers), m.body, due)
        if due - now > 2_000:
            w.far.add(s.id)
    ids = list(w.pending)
    for mid in ids[:keyed:9]:  # some cancelled
        assert client.cancel(mid) == ["cancelled"]
        w.gone.add(mid)
        del w.pending[mid]
    for mid in ids[keyed + 1 :: 20]:  # some moved: a new id, a new time
        old = w.pending.pop(mid)
        w.gone.add(mid)
        moved = client.reschedule(mid, delay=7 * 86_400)
        assert moved.id is not None
        w.pending[moved.id] = Expected(
            old.topic, old.key, old.headers, old.body, moved.deliver_at_ms
        )
        w.far.add(moved.id)
    soon = client.schedule_many(
        [delayq.Outgoing(topic="orders", body=b"soon-%d" % i, delay=0.2) for i in range(30)]
    )
    w.gone |= {s.id for s in soon if s.id}
    deadline = time.monotonic() + 30
    left = {s.id for s in soon}
    while left and time.monotonic() < deadline:  # delivered and acked: not pending
        for m in client.receive("orders", "spark-tests", max_messages=100, wait_s=1):
            client.ack("orders", "spark-tests", [m.receipt])
            left.discard(m.id)
    assert not left, f"{len(left)} due messages never came"
    return w


def exported(address: str) -> list[dict[str, object]]:
    """Every shard's pending messages (forwarded ones left out), from snapshots."""
    route = shards.shard_map(address)
    snaps = shards.begin(route)
    try:
        rows: list[dict[str, object]] = []
        for s in snaps:
            for part in s.parts():
                for batch in shards.read(part):
                    rows += [r for r in batch.to_pylist() if r["forwarded_to"] < 0]
        return rows
    finally:
        shards.end(snaps)


def wait_rolled(address: str, ids: Collection[str], timeout_s: float = 60) -> None:
    """Return once every one of ``ids`` is pending and has rolled at least once
    (a window after it was scheduled, on an idle machine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rolled = {r["id"] for r in exported(address) if int(r["roll_count"]) >= 1}  # type: ignore[call-overload]
        left = set(ids) - rolled
        if not left:
            return
        assert time.monotonic() < deadline, f"{len(left)} of {len(ids)} never rolled"
        time.sleep(0.5)
