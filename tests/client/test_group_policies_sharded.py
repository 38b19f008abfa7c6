"""Consumer groups' policies on a cluster of shards (real processes): the client
sets them on every shard's master and they agree; each shard enforces its share
of the in-flight limit (the server tells the engine how many shards the topics
span); shards that disagree fail a read naming them and are mended by setting
the policy again; a shard that is down fails the call naming it (a write: and
the shards that took it); the CLI's ``delayq group`` commands over the cluster."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from bench.systems import free_port

import delayq
from delayq.shardmap import ShardMap
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.cluster import LocalCluster, delayq_cli
from tests.support.servers import ServerProcess

SHARDS = 3
POLICY = delayq.GroupPolicy(
    max_attempts=6,
    backoff=delayq.Backoff(kind=delayq.BackoffKind.EXPONENTIAL, initial_ms=500, max_ms=30_000),
    rate_per_s=300.0,
    burst=30,
    max_in_flight=1000,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("groups") / "c", shards=SHARDS) as c:
        c.wait_serving()
        yield c


def shard_policy(address: str, topic: str, group: str) -> pb.GroupPolicyResponse:
    with grpc.insecure_channel(address) as channel:
        req = pb.GetGroupPolicyRequest(topic=topic, group=group)
        resp: pb.GroupPolicyResponse = pb_grpc.DelayQueueStub(channel).GetGroupPolicy(
            req, timeout=10
        )
        return resp


def test_every_shard_takes_the_policy_and_enforces_its_share(cluster: LocalCluster) -> None:
    with delayq.Client(cluster.address(0)) as c:
        assert c.set_group_policy("orders", "billing", POLICY) == POLICY
        for shard in range(SHARDS):
            resp = shard_policy(cluster.address(shard), "orders", "billing")
            assert resp.explicit and resp.node.shard == shard
            assert resp.policy.max_in_flight == POLICY.max_in_flight, "topic-wide, as set"
        assert c.group_policy("orders", "billing") == POLICY
        [info] = c.groups("orders")
        assert info == delayq.GroupInfo("orders", "billing", POLICY, True, (0, 1, 2))
        for i in range(SHARDS * 4):
            c.schedule("orders", b"x", key=f"k{i}")
        assert c.receive("orders", "billing", max_messages=100, wait_s=3)
        share = math.ceil(POLICY.max_in_flight / SHARDS)
        for s in c.stats("orders").shards:
            (g,) = (g for t in s.topics for g in t.groups if g.group == "billing")
            assert g.in_flight_limit == share, f"shard {s.node.shard}: its share"


def test_shards_that_disagree_are_named_and_mended_by_setting_again(
    cluster: LocalCluster,
) -> None:
    odd = pb.SetGroupPolicyRequest(
        topic="orders", group="odd", policy=pb.GroupPolicy(max_attempts=2)
    )
    with delayq.Client(cluster.address(0)) as c:
        c.set_group_policy("orders", "odd", POLICY)
        with grpc.insecure_channel(cluster.address(2)) as channel:
            pb_grpc.DelayQueueStub(channel).SetGroupPolicy(odd, timeout=10)
        with pytest.raises(delayq.FailedPrecondition, match="shard 2 disagree"):
            c.group_policy("orders", "odd")
        info = next(i for i in c.groups("orders") if i.group == "odd")
        assert info.policy == POLICY and info.disagreeing == (2,)
        c.set_group_policy("orders", "odd", POLICY)
        assert c.group_policy("orders", "odd") == POLICY


def test_the_cli_sets_gets_lists_pauses_and_resumes(cluster: LocalCluster) -> None:
    server = ("--server", cluster.address(1))
    done = delayq_cli(
        "group", "set", "cli-topic", "cli", "--max-attempts", "7", "--backoff", "exponential",
        "--backoff-initial", "2s", "--backoff-max", "5m", "--backoff-multiplier", "3",
        "--jitter", "full", "--rate", "200", "--max-in-flight", "900", "--json", *server,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["max_attempts"] == 7 and doc["rate_per_s"] == 200 and doc["burst"] == 200
    assert doc["backoff"] == {
        "kind": "exponential", "initial_ms": 2000, "multiplier": 3.0, "max_ms": 300_000,
        "jitter": "full",
    }  # fmt: skip
    # set again: only what is given changes
    done = delayq_cli("group", "set", "cli-topic", "cli", "--rate", "50", "--json", *server)
    doc = json.loads(done.stdout)
    assert (doc["rate_per_s"], doc["max_attempts"], doc["max_in_flight"]) == (50, 7, 900)
    assert doc["backoff"]["initial_ms"] == 2000
    done = delayq_cli("group", "pause", "cli-topic", "cli", *server)
    assert done.returncode == 0 and "paused         yes" in done.stdout, done.stdout
    done = delayq_cli("group", "get", "cli-topic", "cli", *server)
    assert "backoff        exponential 2s x3 up to 5m, full jitter" in done.stdout, done.stdout
    assert "rate           50/s (burst 200)" in done.stdout
    done = delayq_cli("group", "list", "--topic", "cli-topic", *server)
    assert done.returncode == 0, done.stderr
    head, row = done.stdout.splitlines()
    assert head.split()[:6] == ["TOPIC", "GROUP", "PAUSED", "ATTEMPTS", "RATE/S", "IN"]
    assert row.split()[:6] == ["cli-topic", "cli", "yes", "7", "50", "900"]
    done = delayq_cli("group", "resume", "cli-topic", "cli", "--json", *server)
    assert json.loads(done.stdout)["paused"] is False
    listed = json.loads(delayq_cli("group", "list", "--json", *server).stdout)
    [entry] = [e for e in listed if e["group"] == "cli"]
    assert entry["shards"] == [0, 1, 2] and entry["explicit"]
    done = delayq_cli("group", "pause", "cli-topic", "cli", *server)
    done = delayq_cli("stats", "--shards", "cli-topic", *server)
    assert done.returncode == 0, done.stderr
    shown = [line for line in done.stdout.splitlines() if "in flight" in line]
    assert shown == ["  group cli: 0 of 300 in flight, 0 waiting to retry, paused"] * 3, shown
    delayq_cli("group", "resume", "cli-topic", "cli", *server)
    bad = delayq_cli("group", "set", "cli-topic", "cli", "--rate", "-1", *server)
    assert bad.returncode == 2 and "policy.rate_per_s" in bad.stderr, bad.stderr
    bad = delayq_cli("group", "set", "cli-topic", "cli", "--backoff-max", "1s", *server)
    assert bad.returncode == 2 and "policy.backoff.max_ms" in bad.stderr, bad.stderr


def test_a_shard_that_is_down_fails_the_call_naming_it(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]  # nothing will listen on shard 1's
    m = ShardMap.of_masters([f"127.0.0.1:{p}" for p in ports], 1)
    (tmp_path / "shards.json").write_text(m.dumps())
    args = ["--listen", f"127.0.0.1:{ports[0]}", "--shard", "0"]
    srv = ServerProcess(tmp_path / "shard-0", [*args, "--shard-map", str(tmp_path / "shards.json")])
    srv.start()
    try:
        retry = delayq.RetryPolicy(attempts=2, base_s=0.01, max_s=0.05)
        with delayq.Client(srv.address, timeout_s=3, retry=retry) as c:
            with pytest.raises(delayq.Unavailable) as down:
                c.set_group_policy("orders", "billing", POLICY)
            text = str(down.value)
            assert "group billing of orders: shard 1 failed" in text, text
            assert "done on shard 0; call again" in text, text
            with pytest.raises(delayq.Unavailable, match="shard 1 failed"):
                c.group_policy("orders", "billing")
            with pytest.raises(delayq.Unavailable, match="groups: shard 1 failed"):
                c.groups()
        assert shard_policy(srv.address, "orders", "billing").explicit, "shard 0 took it"
    finally:
        srv.stop()


def test_the_cli_makes_a_push_group_on_every_shard_and_a_pull_group_again(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    server = ("--server", cluster.address(1))
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    (tmp_path / "ca.pem").write_text(pem)
    bad = delayq_cli("group", "set", "cli-push", "hook", "--push-method", "PUT", *server)
    assert bad.returncode != 0 and "--push-url" in bad.stderr, bad.stderr
    done = delayq_cli(
        "group", "set", "cli-push", "hook", "--max-attempts", "4",
        "--push-url", "https://ops:hunter2@hooks.example.com/in?token=abc",
        "--push-header", "X-Env=prod", "--push-header", "X-Api-Key=Bearer xyz",
        "--push-timeout", "2500ms", "--push-ca-file", str(tmp_path / "ca.pem"), "--json", *server,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    push = json.loads(done.stdout)["push"]
    assert push == {
        "url": "https://ops:hunter2@hooks.example.com/in?token=abc", "method": "POST",
        "headers": {"X-Api-Key": "Bearer xyz", "X-Env": "prod"}, "timeout_ms": 2500,
        "ca_bundle": pem, "secret_ref": "",
    }, "--json: the target as set"  # fmt: skip
    with delayq.Client(cluster.address(0)) as c:
        assert c.group_policy("cli-push", "hook").push is not None, "on every shard, agreed"
    # flags given change the target, the rest is kept
    done = delayq_cli("group", "set", "cli-push", "hook", "--push-method", "PATCH", *server)
    assert done.returncode == 0, done.stderr
    assert (
        "push           PATCH https://hooks.example.com/in (unsigned, timeout 2500ms)"
        in done.stdout
    ), done.stdout
    assert "hunter2" not in done.stdout and "token" not in done.stdout
    listed = delayq_cli("group", "list", "--topic", "cli-push", *server)
    assert "push https://hooks.example.com/in" in listed.stdout and "hunter2" not in listed.stdout
    bad = delayq_cli("group", "set", "cli-push", "hook", "--push-url", "http://127.0.0.1/", *server)
    assert bad.returncode == 2 and "policy.push.url" in bad.stderr and "loopback" in bad.stderr
    bad = delayq_cli("group", "set", "cli-push", "hook", "--pull", "--push-method", "PUT", *server)
    assert bad.returncode != 0 and "--pull" in bad.stderr, bad.stderr
    done = delayq_cli("group", "set", "cli-push", "hook", "--pull", *server)
    assert done.returncode == 0 and "push           none (pull)" in done.stdout, done.stdout
