"""A consumer group's rate and in-flight limits over a real 3-shard ``delayq
cluster up``, pull and RocketMQ consumers mixed: with a backlog far above what
the limits let through, the group receives its rate (200/s over the topic, each
shard its share) within 10 %, and in no sample of every shard's Stats is more in
flight than its limit (each shard's share, the topic's whole). The achieved rate,
its error and the most in flight seen are printed.

The measured window: 10 s (30 s with ``--long``, or ``DELAYQ_RATE_WINDOW_S``),
after a warm-up that spends the buckets' initial burst.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import grpc
import pytest

import delayq
from delayq.rocketmq.v2 import service_pb2 as svc
from delayq.rocketmq.v2 import service_pb2_grpc as svc_grpc
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.rocketmq.rawcalls import receive
from tests.support.cluster import LocalCluster
from tests.support.sizes import size

SHARDS = 3
RATE = 200.0
IN_FLIGHT = 60
WINDOW_S = size("DELAYQ_RATE_WINDOW_S", ci=10, long=30)
WARM_UP_S = 3.0
TOPIC, GROUP = "limited", "metered"

pytestmark = [pytest.mark.long, pytest.mark.timeout(300)]


class Tally:
    """Hand-outs by when they were received, and in-flight samples."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: list[float] = []
        self.per_shard_max = [0] * SHARDS
        self.total_max = 0
        self.samples = 0
        self.errors: list[BaseException] = []

    def got(self, n: int) -> None:
        now = time.monotonic()
        with self.lock:
            self.received += [now] * n


def pull(address: str, tally: Tally, stop: threading.Event) -> None:
    with delayq.Client(address) as c:
        while not stop.is_set():
            msgs = c.receive(TOPIC, GROUP, max_messages=40, wait_s=0.5, invisible_s=30)
            if msgs:
                tally.got(len(msgs))
                time.sleep(0.02)  # held a moment: in flight
                c.ack(TOPIC, GROUP, [m.receipt for m in msgs])


def rocketmq(address: str, shard: int, tally: Tally, stop: threading.Event) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = svc_grpc.MessagingServiceStub(channel)
        while not stop.is_set():
            _, msgs, _ = receive(stub, TOPIC, GROUP, wait_s=0.5, batch=16, shard=shard)
            if not msgs:
                continue
            tally.got(len(msgs))
            time.sleep(0.02)
            req = svc.AckMessageRequest()
            req.group.name, req.topic.name = GROUP, TOPIC
            for m in msgs:
                sp = m.system_properties
                req.entries.add(message_id=sp.message_id, receipt_handle=sp.receipt_handle)
            stub.AckMessage(req, timeout=10)


def sample(masters: list[str], tally: Tally, stop: threading.Event) -> None:
    channels = [grpc.insecure_channel(a) for a in masters]
    try:
        stubs = [pb_grpc.DelayQueueStub(ch) for ch in channels]
        while not stop.is_set():
            counts = []
            for stub in stubs:
                resp = stub.Stats(pb.StatsRequest(topic=TOPIC), timeout=10)
                groups = [g for t in resp.topics for g in t.groups if g.group == GROUP]
                counts.append(sum(g.in_flight for g in groups))
            with tally.lock:
                tally.samples += 1
                tally.total_max = max(tally.total_max, sum(counts))
                for s, n in enumerate(counts):
                    tally.per_shard_max[s] = max(tally.per_shard_max[s], n)
            time.sleep(0.05)
    finally:
        for ch in channels:
            ch.close()


def guarded(fn: object, tally: Tally, *args: object) -> threading.Thread:
    def run() -> None:
        try:
            fn(*args)  # type: ignore[operator]
        except BaseException as exc:  # reported by the test
            tally.errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_rate_and_in_flight_limits_hold_over_shards_and_protocols(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LocalCluster(tmp_path / "c", shards=SHARDS) as cluster:
        cluster.wait_serving()
        shards = cluster.current_map().shards
        masters = [s.master for s in shards]
        with delayq.Client(masters[0]) as c:
            c.set_group_policy(
                TOPIC, GROUP, delayq.GroupPolicy(rate_per_s=RATE, max_in_flight=IN_FLIGHT)
            )
            backlog = int(RATE * (WARM_UP_S + WINDOW_S) * 1.5)
            for i in range(0, backlog, 500):
                batch = [
                    delayq.Outgoing(topic=TOPIC, body=b"m", key=f"k{j}")
                    for j in range(i, min(backlog, i + 500))
                ]
                assert all(s.error is None for s in c.schedule_many(batch))
        tally, stop = Tally(), threading.Event()
        threads = [guarded(sample, tally, masters, tally, stop)]
        threads += [guarded(pull, tally, masters[0], tally, stop) for _ in range(2)]
        threads += [guarded(rocketmq, tally, s.rocketmq, s.index, tally, stop) for s in shards]
        began = time.monotonic()
        time.sleep(WARM_UP_S + WINDOW_S)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not tally.errors, tally.errors
    start, end = began + WARM_UP_S, began + WARM_UP_S + WINDOW_S
    got = sum(1 for t in tally.received if start <= t < end)
    rate = got / WINDOW_S
    error = (rate - RATE) / RATE
    share = math.ceil(IN_FLIGHT / SHARDS)
    with capsys.disabled():
        print(
            f"\ngroup limits: {rate:.1f}/s against {RATE:g}/s ({error:+.1%}) over "
            f"{WINDOW_S} s; most in flight {tally.total_max} (limit {IN_FLIGHT}), per "
            f"shard {tally.per_shard_max} (limit {share} each), {tally.samples} samples"
        )
    assert len(tally.received) < backlog, "the backlog outlasted the run"
    assert abs(error) <= 0.10, f"{rate:.1f}/s, not {RATE:g}/s within 10 %"
    assert tally.samples > 10
    assert max(tally.per_shard_max) <= share, tally.per_shard_max
    assert tally.total_max <= IN_FLIGHT, tally.total_max
