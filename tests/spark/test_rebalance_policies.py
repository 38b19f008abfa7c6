"""A consumer group's delivery policy moves with a rebalance: on a 2-shard ``delayq
cluster`` whose group ``g`` is paused with 9 in flight at most over the topic,
``delayq cluster scale --shards 3`` copies the policy to the new shard before the
job moves messages there (``delayq.control.policycopy``). Then the new shard
answers the policy as set (``GetGroupPolicy`` at its master; the client's read,
which every shard must agree on), and enforces it on the messages moved to it:
nothing is handed out while paused, and once resumed at most its share of the
in-flight limit (ceil(9 / 3) = 3) until some are acked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

import delayq
from delayq import shardmap
from delayq.client import GroupPolicy, GroupStats, Received
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as rpc
from tests.spark.test_rebalance import NODE_ENV, scale
from tests.support.cluster import LocalCluster

pytestmark = pytest.mark.timeout(600)

COUNT = 60
LIMIT = 9
POLICY = GroupPolicy(max_attempts=3, max_in_flight=LIMIT, paused=True)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    for key, value in NODE_ENV.items():
        monkeypatch.setenv(key, value)
    with LocalCluster(tmp_path / "cluster", shards=2) as c:
        yield c


def group_on(client: delayq.Client, shard: int) -> GroupStats | None:
    """Group ``g`` of topic ``t`` as shard ``shard`` has it (None: unknown there)."""
    for s in client.stats("t").shards:
        if s.node.shard == shard:
            for t in s.topics:
                for g in t.groups:
                    if t.topic == "t" and g.group == "g":
                        return g
    return None


def backlog_on(client: delayq.Client, shard: int) -> int:
    for s in client.stats("t").shards:
        if s.node.shard == shard:
            return sum(t.group_backlog.get("g", 0) for t in s.topics if t.topic == "t")
    return 0


def receive_all(client: delayq.Client) -> list[Received]:
    """Every message the group is handed, receiving until two receives get none."""
    got: list[Received] = []
    empty = 0
    while empty < 2:
        more = client.receive("t", "g", max_messages=32, wait_s=1.0, invisible_s=300)
        got += more
        empty = 0 if more else empty + 1
    return got


def test_the_new_shard_holds_and_enforces_the_groups_policy(cluster: LocalCluster) -> None:
    with delayq.Client(cluster.address(0), timeout_s=30) as client:
        client.set_group_policy("t", "g", POLICY)
        at = int(time.time() * 1000) + 3_600_000  # pending while the job runs: they move
        batch = [
            delayq.Outgoing(topic="t", body=b"%d" % i, key=f"k{i}", at=at) for i in range(COUNT)
        ]
        sent = client.schedule_many(batch)
        assert all(s.ok for s in sent)
        moving = [
            s.id
            for m, s in zip(batch, sent, strict=True)
            if shardmap.shard_of_key(m.key, 3) == 2 and s.id is not None
        ]
        assert len(moving) > LIMIT // 3

        run = scale(cluster, 3)
        assert run.returncode == 0, (run.stdout, run.stderr, cluster.logs())
    new = cluster.current_map().shards[2].master
    with grpc.insecure_channel(new) as ch:
        r = rpc.DelayQueueStub(ch).GetGroupPolicy(
            pb.GetGroupPolicyRequest(topic="t", group="g"), timeout=10
        )
    assert r.explicit and r.node.shard == 2 and r.node.role == "master"
    assert (r.policy.max_attempts, r.policy.max_in_flight, r.policy.paused) == (3, LIMIT, True)
    with delayq.Client(new, timeout_s=30) as client:  # its route: the 3 shards
        assert GroupPolicy.of(r.policy) == client.group_policy("t", "g")  # every shard agrees
        for mid in moving:  # due now, on the shard they moved to
            client.reschedule(mid, at=int(time.time() * 1000))
        deadline = time.monotonic() + 60
        while backlog_on(client, 2) < len(moving):
            assert time.monotonic() < deadline, [
                (x.node.shard, [(t.pending, t.delivered, dict(t.group_backlog)) for t in x.topics])
                for x in client.stats("t").shards
            ]
            time.sleep(0.2)
        assert len(client.receive("t", "g", wait_s=1.0)) == 0, "the pause holds on the new shard"
        g = group_on(client, 2)
        assert g is not None and g.paused and g.in_flight_limit == 3, g

        client.resume_group("t", "g")
        first = receive_all(client)
        assert len(first) == 3, f"at most its share in flight: {len(first)}"
        client.ack("t", "g", [m.receipt for m in first])
        rest = receive_all(client)
        assert len(rest) == 3 and {m.attempt for m in first + rest} == {1}
