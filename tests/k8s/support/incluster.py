"""A delayq client run inside the test cluster (``LocalKubelet.run_in_cluster``:
the shard map's Service and pod names resolve there). One JSON object on stdout.

    python -m tests.k8s.support.incluster schedule ADDRESS TOPIC COUNT DELAY_S
    python -m tests.k8s.support.incluster receive ADDRESS TOPIC GROUP COUNT TIMEOUT_S
    python -m tests.k8s.support.incluster lookup ADDRESS ID...
    python -m tests.k8s.support.incluster export ADDRESS
    python -m tests.k8s.support.incluster load ADDRESS TOPIC STOP_FILE
    python -m tests.k8s.support.incluster routes ADDRESS STOP_FILE
    python -m tests.k8s.support.incluster groups ADDRESS TOPIC
    python -m tests.k8s.support.incluster drift ADDRESS TOPIC GROUP COUNT
    python -m tests.k8s.support.incluster get-schedule ADDRESS NAME
    python -m tests.k8s.support.incluster delete-schedule ADDRESS NAME

``schedule`` sends keyed messages (``key-<i>``, body ``m<i>``) in batches of 100;
``export`` lists every shard's pending messages (``id``, ``shard``, ``key``,
``body``; forwarded ones left out) from export snapshots, as the rebalance job
reads them (``delayq_spark.shards``); ``load`` runs
the queue workload of ``bench/queuecheck.py`` (produce, cancel, consume) until
STOP_FILE exists, drains it, and prints the checker's findings with, per shard,
the times (ms, rounded to 10) at which schedules on it were acknowledged.
``routes`` is a client refreshing its route while the shard count changes, until
STOP_FILE exists: it fetches the map from ADDRESS, asks every shard's master it
names for its ``Stats``, and when one does not answer fetches the map again at
once; a refreshed map that still names a shard whose master does not answer is
a client sent to a stopped shard (``stale``; ``routes``: maps fetched, ``shards``:
the shard counts seen).
``groups`` lists the topic's consumer groups as every shard's master holds them
(``Client.groups``: ``group``, ``policy``, ``explicit``, ``shards``,
``disagreeing``). ``drift`` schedules COUNT messages due at once, receives them
for GROUP without acking them (invisible 10 minutes: in flight) and then sets
GROUP's policy by hand: paused, at most 3 attempts (``received``: how many).
``receive`` gives each message's ``id``, ``body``, ``key``, ``headers`` and how
early it came (``early_ms``). ``get-schedule`` reads a recurring schedule
(``found``; ``paused``, ``fired``, ``last_fire_ms``, ``id``), ``delete-schedule`` deletes one.
The clients speak TLS when ``DELAYQ_TLS_CA`` (and for mutual TLS
``DELAYQ_TLS_CERT`` / ``DELAYQ_TLS_KEY``) are set.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Any

from bench.queuecheck import QueueLoad, check

import delayq
from delayq.ids import MessageId

BATCH = 100


def _client(address: str) -> delayq.Client:
    """A client of ``address``, over TLS when ``DELAYQ_TLS_*`` say so."""
    return delayq.Client(address, tls=delayq.TlsConfig.from_env(os.environ))


def schedule(address: str, topic: str, count: int, delay_s: float) -> dict[str, Any]:
    with _client(address) as c:
        sent = []
        for first in range(0, count, BATCH):
            sent += c.schedule_many(
                [
                    delayq.Outgoing(
                        topic=topic, body=f"m{i}".encode(), delay=delay_s, key=f"key-{i}"
                    )
                    for i in range(first, min(count, first + BATCH))
                ]
            )
    ids = [s.id for s in sent if s.ok]
    return {
        "ids": ids,
        "errors": [str(s.error) for s in sent if not s.ok],
        "shards": sorted({MessageId.parse(i).shard for i in ids if i}),
    }


def receive(address: str, topic: str, group: str, count: int, timeout_s: float) -> dict[str, Any]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    with _client(address) as c:
        while len(got) < count and time.monotonic() < deadline:
            batch = c.receive(topic, group, max_messages=500, wait_s=2)
            for m in batch:
                got.append(
                    {
                        "id": m.id,
                        "body": m.body.decode(),
                        "early_ms": m.deliver_at_ms - m.delivered_at_ms,
                        "key": m.key,
                        "headers": dict(m.headers),
                    }
                )
            if batch:
                c.ack(topic, group, [m.receipt for m in batch])
    return {"received": got}


def lookup(address: str, ids: list[str]) -> dict[str, Any]:
    with _client(address) as c:
        return {"states": [c.lookup(i).state for i in ids]}


def export(address: str) -> dict[str, Any]:
    from delayq_spark import shards  # (the spark extra: only this command needs it)

    snaps = shards.begin(shards.shard_map(address))
    rows = []
    try:
        for s in snaps:
            for part in s.parts():
                for batch in shards.read(part):
                    rows += [
                        {
                            "id": r["id"],
                            "shard": r["shard"],
                            "key": r["key"],
                            "body": r["body"].decode(),
                        }
                        for r in batch.to_pylist()
                        if r["forwarded_to"] < 0
                    ]
    finally:
        shards.end(snaps)
    return {"rows": rows}


def load(address: str, topic: str, stop_file: str) -> dict[str, Any]:
    q = QueueLoad(address, topic=topic, batch=10, pause_s=0.02, delay_s=(1.0, 4.0)).start()
    while not os.path.exists(stop_file):
        time.sleep(0.1)
    q.drain(quiet_s=3.0, timeout_s=90)
    acks: dict[int, set[int]] = {}
    for mid, at in q.history.acked_at.items():
        acks.setdefault(MessageId.parse(mid).shard, set()).add(at // 10 * 10)
    h = q.history
    seen = {mid for mid, _, _ in h.received}
    lost = set(h.acked) - set(h.cancelled) - h.cancel_unknown - seen
    by_shard: dict[int, list[str]] = {}
    for mid in lost:
        by_shard.setdefault(MessageId.parse(mid).shard, []).append(mid)
    lost_where = {
        k: {
            "count": len(v),
            "acked_ms": [min(h.acked_at[i] for i in v), max(h.acked_at[i] for i in v)],
            "due_ms": [min(h.acked[i] for i in v), max(h.acked[i] for i in v)],
            "epochs": sorted({MessageId.parse(i).epoch for i in v}),
        }
        for k, v in by_shard.items()
    }
    return {
        **check(h),
        "lost_where": lost_where,
        "ack_times": {k: sorted(v) for k, v in acks.items()},
    }


def routes(address: str, stop_file: str) -> dict[str, Any]:
    import grpc

    from delayq.client.routing import route_of
    from delayq.v1 import delayq_pb2, delayq_pb2_grpc

    channels: dict[str, grpc.Channel] = {}

    def stub(at: str) -> delayq_pb2_grpc.DelayQueueStub:
        if at not in channels:
            channels[at] = grpc.insecure_channel(at)
        return delayq_pb2_grpc.DelayQueueStub(channels[at])

    def route() -> Any:
        return route_of(stub(address).GetRoute(delayq_pb2.GetRouteRequest(), timeout=5))

    def answers(at: str) -> bool:
        try:
            stub(at).Stats(delayq_pb2.StatsRequest(), timeout=2)
        except grpc.RpcError as exc:
            return bool(exc.code() != grpc.StatusCode.UNAVAILABLE)
        return True

    fetched, counts, stale = 0, set(), []
    try:
        while not os.path.exists(stop_file):
            m = route()
            fetched += 1
            counts.add(m.count)
            for e in m.shards:
                if answers(e.master):
                    continue
                again = route()  # refreshed at once, as a client does after UNAVAILABLE
                fetched += 1
                named = e.index < again.count and again.shards[e.index].master == e.master
                if named and not answers(e.master):
                    stale.append(f"shard {e.index} at {e.master}, map {again.topology_epoch}")
            time.sleep(0.02)
    finally:
        for ch in channels.values():
            ch.close()
    return {"routes": fetched, "shards": sorted(counts), "stale": stale}


def groups(address: str, topic: str) -> dict[str, Any]:
    with _client(address) as c:
        listed = c.groups(topic)
    return {
        "groups": {
            g.group: {
                "policy": dataclasses.asdict(g.policy),
                "explicit": g.explicit,
                "shards": list(g.shards),
                "disagreeing": list(g.disagreeing),
            }
            for g in listed
        }
    }


def drift(address: str, topic: str, group: str, count: int) -> dict[str, Any]:
    with _client(address) as c:
        c.schedule_many([delayq.Outgoing(topic=topic, body=b"d", delay=0) for _ in range(count)])
        held = 0
        deadline = time.monotonic() + 30
        while held < count and time.monotonic() < deadline:
            held += len(
                c.receive(topic, group, max_messages=count - held, wait_s=2, invisible_s=600)
            )
        policy = c.group_policy(topic, group)
        c.set_group_policy(topic, group, dataclasses.replace(policy, max_attempts=3, paused=True))
    return {"received": held}


def get_schedule(address: str, name: str) -> dict[str, Any]:
    with _client(address) as c:
        try:
            s = c.get_schedule(name)
        except delayq.NotFound:
            return {"found": False}
    return {
        "found": True,
        "paused": s.paused,
        "fired": s.fired,
        "last_fire_ms": s.last_fire_ms,
        "id": s.id,
    }


def delete_schedule(address: str, name: str) -> dict[str, Any]:
    with _client(address) as c:
        c.delete_schedule(name)
    return {"deleted": name}


def main(argv: list[str]) -> None:
    cmd, address, *rest = argv
    if cmd == "schedule":
        out = schedule(address, rest[0], int(rest[1]), float(rest[2]))
    elif cmd == "receive":
        out = receive(address, rest[0], rest[1], int(rest[2]), float(rest[3]))
    elif cmd == "lookup":
        out = lookup(address, rest)
    elif cmd == "export":
        out = export(address)
    elif cmd == "load":
        out = load(address, rest[0], rest[1])
    elif cmd == "routes":
        out = routes(address, rest[0])
    elif cmd == "groups":
        out = groups(address, rest[0])
    elif cmd == "drift":
        out = drift(address, rest[0], rest[1], int(rest[2]))
    elif cmd == "get-schedule":
        out = get_schedule(address, rest[0])
    elif cmd == "delete-schedule":
        out = delete_schedule(address, rest[0])
    else:
        raise SystemExit(f"unknown command {cmd}")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
