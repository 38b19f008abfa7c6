"""A consumer group's delivery policy moves with a rebalance: on a 2-shard ``delayq
cluster`` whose group ``g`` is paused with 9 in flight at most over the topic,
``delayq cluster scale --shards 3`` copies the policy to the new shard before the
job moves messages there (``delayq.control.policyspread``). Then the new shard
answers the policy as set (``GetGroupPolicy`` at its master; the client's read,
which every shard must agree on), and enforces it on the messages moved to it:
nothing is handed out while paused, and once resumed at most its share of the
in-flight limit (ceil(9 / 3) = 3) until some are acked; every shard splits the
limit by the 3 shards of the new map.

A scale-down's drain waits for a paused group: 3 -> 2 with messages delivered
on the leaving shard to a paused group keeps the shard listed as leaving, the
supervisor's log names the group, and once it is resumed and has consumed them
the shard is dropped."""

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
from tests.support.cluster import LocalCluster, running_cluster_cli

pytestmark = pytest.mark.timeout(600)

COUNT = 60
LIMIT = 9
POLICY = GroupPolicy(max_attempts=3, max_in_flight=LIMIT, paused=True)


@pytest.fixture
def cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[LocalCluster]:
    for key, value in NODE_ENV.items():
        monkeypatch.setenv(key, value)
    with LocalCluster(tmp_path / "cluster", shards=getattr(request, "param", 2)) as c:
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
        for shard in range(3):
            g = group_on(client, shard)
            assert g is not None and g.paused and g.in_flight_limit == 3, (shard, g)

        client.resume_group("t", "g")
        first = receive_all(client)
        assert len(first) == 3, f"at most its share in flight: {len(first)}"
        client.ack("t", "g", [m.receipt for m in first])
        rest = receive_all(client)
        assert len(rest) == 3 and {m.attempt for m in first + rest} == {1}


def paused_warnings(cluster: LocalCluster) -> list[str]:
    return [
        str(r["msg"])
        for r in cluster.log_records()
        if str(r.get("msg", "")).startswith("the drain waits for paused group(s)")
    ]


@pytest.mark.parametrize("cluster", [3], indirect=True)
def test_a_paused_group_holds_a_drain_until_resumed(cluster: LocalCluster) -> None:
    keys = [k for i in range(200) if shardmap.shard_of_key(k := f"k{i}", 3) == 2][:5]
    with delayq.Client(cluster.address(0), timeout_s=30) as client:
        client.set_group_policy("t", "g", GroupPolicy(paused=True))
        sent = client.schedule_many(
            [delayq.Outgoing(topic="t", body=k.encode(), key=k) for k in keys]
        )
        assert all(s.ok for s in sent)
        deadline = time.monotonic() + 60
        while backlog_on(client, 2) < len(keys):  # delivered on shard 2, not handed out
            assert time.monotonic() < deadline, client.stats("t")
            time.sleep(0.2)
    with running_cluster_cli("scale", "--dir", str(cluster.dir), "--shards", "2") as scale:
        deadline = time.monotonic() + 300
        while not paused_warnings(cluster):
            assert scale.poll() is None, scale.communicate()
            assert time.monotonic() < deadline, cluster.logs()
            time.sleep(0.2)
        assert paused_warnings(cluster) == [
            "the drain waits for paused group(s) t/g: a paused group is handed nothing; "
            "resume it (delayq group resume TOPIC GROUP) and let it consume"
        ]
        m = cluster.current_map()
        assert [e.state for e in m.shards] == ["active", "active", "leaving"]
        assert scale.poll() is None, "the drain waits"
        with delayq.Client(m.shards[0].master, timeout_s=30) as client:
            client.resume_group("t", "g")
            got = receive_all(client)
            assert sorted(bytes(x.body).decode() for x in got) == sorted(keys)
            client.ack("t", "g", [x.receipt for x in got])
        out, err = scale.communicate(timeout=300)
        assert scale.returncode == 0, (out, err, cluster.logs())
        assert cluster.current_map().count == 2
