"""Sharding end to end over real processes. On a 3-shard ``delayq cluster up``,
through one client: keys land where jump hash says, keyless messages spread
evenly, id-based calls reach every shard, receive and subscribe fan in exactly
once, the CLI works from any node, and a call that reaches the wrong shard is
FAILED_PRECONDITION (never NOT_FOUND). On hand-run ``delayq serve --shard-map``
nodes whose map file the test rewrites: a client with a stale map recovers,
and a bad map file is kept out."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from bench.systems import free_port

from delayq import shardmap
from delayq.client import AckOutcome, CancelOutcome, Client, MessageState, Outgoing
from delayq.ids import MessageId
from delayq.receipts import Receipt
from delayq.shardmap import ShardMap
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.cluster import LocalCluster
from tests.support.servers import ServerProcess

SHARDS = 3


class Nodes:
    """One ``delayq serve`` per shard on fixed loopback ports, all reading one map."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.map_file = root / "shards.json"
        self.ports = [free_port() for _ in range(SHARDS)]
        self.procs: list[ServerProcess | None] = [None] * SHARDS
        self.write_map(1, self.ports)

    def write_map(self, epoch: int, ports: list[int]) -> ShardMap:
        m = ShardMap.of_masters([f"127.0.0.1:{p}" for p in ports], epoch)
        tmp = self.map_file.with_suffix(".tmp")
        tmp.write_text(m.dumps())
        tmp.replace(self.map_file)
        return m

    def start(self, shard: int, port: int) -> None:
        args = ["--listen", f"127.0.0.1:{port}", "--shard", str(shard)]
        args += ["--shard-map", str(self.map_file), "--flush-interval", "100ms"]
        self.procs[shard] = ServerProcess(self.root / f"shard-{shard}", args).start()

    def stop(self, shard: int) -> None:
        proc = self.procs[shard]
        if proc is not None:
            proc.stop()
            self.procs[shard] = None

    def address(self, shard: int) -> str:
        proc = self.procs[shard]
        assert proc is not None
        return proc.address


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cluster") / "c", shards=SHARDS) as c:
        c.wait_serving()
        yield c


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    n = Nodes(tmp_path_factory.mktemp("sharded"))
    try:
        for shard, port in enumerate(n.ports):
            n.start(shard, port)
        yield n
    finally:
        for shard in range(SHARDS):
            n.stop(shard)


def _stub(address: str) -> pb_grpc.DelayQueueStub:
    return pb_grpc.DelayQueueStub(grpc.insecure_channel(address))


def _wrong_shard(call: object, *args: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call(*args, timeout=5)  # type: ignore[operator]
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION, err.value
    return err.value


def test_getroute_serves_the_map_from_every_node(cluster: LocalCluster) -> None:
    for shard in range(SHARDS):
        resp = _stub(cluster.address(shard)).GetRoute(pb.GetRouteRequest(), timeout=5)
        assert resp.topology_epoch >= 1 and resp.shard_count == SHARDS
        assert [s.master for s in resp.shards] == [cluster.address(i) for i in range(SHARDS)]


def test_keys_land_where_jump_hash_says_and_keyless_spread_evenly(cluster: LocalCluster) -> None:
    with Client(cluster.address(0)) as c:
        keys = [f"order-{i}" for i in range(10_000)]
        ids: list[str | None] = []
        for start in range(0, len(keys), 500):
            batch = [
                Outgoing(topic="keyed", body=b"k", key=k, delay=3600)
                for k in keys[start : start + 500]
            ]
            ids += [r.id for r in c.schedule_many(batch)]
        assert all(ids)
        for key, mid in zip(keys, ids, strict=True):
            assert mid is not None
            assert MessageId.parse(mid).shard == shardmap.shard_of_key(key, SHARDS), key
        per_shard = {s.node.shard: s for s in c.stats("keyed").shards}
        expected = Counter(shardmap.shard_of_key(k, SHARDS) for k in keys)
        for shard in range(SHARDS):
            (t,) = per_shard[shard].topics
            assert t.pending == expected[shard]
        spread: list[str | None] = []
        for _ in range(30):  # keyless: one shard per call, in turn
            batch = [Outgoing(topic="keyless", body=b"x", delay=3600) for _ in range(100)]
            spread += [r.id for r in c.schedule_many(batch)]
        counts = Counter(MessageId.parse(m).shard for m in spread if m)
        assert sum(counts.values()) == 3000
        assert all(abs(counts[s] - 1000) <= 100 for s in range(SHARDS)), counts
        merged = c.stats("keyless")
        assert merged.topics[0].pending == 3000


def test_id_calls_reach_every_shard_through_one_client(cluster: LocalCluster) -> None:
    with Client(cluster.address(1)) as c:
        sent = c.schedule_many(
            [
                Outgoing(topic="ids", body=f"b{i}".encode(), key=f"k{i}", delay=3600)
                for i in range(60)
            ]
        )
        ids = [r.id for r in sent if r.id]
        assert {MessageId.parse(i).shard for i in ids} == set(range(SHARDS))
        for i, mid in enumerate(ids[:30]):
            info = c.lookup(mid)
            assert info.state is MessageState.PENDING and info.body == f"b{i}".encode()
        assert c.cancel(*ids[:20]) == ["cancelled"] * 20
        assert c.cancel(*ids[:3]) == ["already_cancelled"] * 3
        moved = [c.reschedule(mid, delay=7200) for mid in ids[20:40]]
        for old, new in zip(ids[20:40], moved, strict=True):
            assert new.id and MessageId.parse(new.id).shard == MessageId.parse(old).shard
            assert c.lookup(old).state == "rescheduled"
            assert c.lookup(new.id).state == "pending"


def test_receive_fans_in_exactly_once_and_receipts_carry_their_shard(cluster: LocalCluster) -> None:
    with Client(cluster.address(2)) as c:
        due = int(time.time() * 1000) + 1500
        sent = c.schedule_many(
            [Outgoing(topic="fan", body=str(i).encode(), key=f"f{i}", at=due) for i in range(600)]
        )
        ids = [r.id for r in sent if r.id]
        cancelled = set(ids[::10])
        assert c.cancel(*cancelled) == ["cancelled"] * len(cancelled)
        want = set(ids) - cancelled
        for group in ("g1", "g2"):
            got: list[str] = []
            receipts: list[str] = []
            deadline = time.monotonic() + 30
            while len(got) < len(want) and time.monotonic() < deadline:
                msgs = c.receive("fan", group, max_messages=50, wait_s=2)
                assert len(msgs) <= 50  # max_messages over all shards
                now_ms = int(time.time() * 1000)
                for m in msgs:
                    assert m.delivered_at_ms >= m.deliver_at_ms == due and now_ms >= due
                    assert Receipt.parse(m.receipt).shard == MessageId.parse(m.id).shard
                got += [m.id for m in msgs]
                receipts += [m.receipt for m in msgs]
                if msgs:
                    assert set(c.ack("fan", group, [m.receipt for m in msgs])) == {"acked"}
            assert sorted(got) == sorted(want), group  # each exactly once
            assert len(set(receipts)) == len(receipts)
            assert c.receive("fan", group, max_messages=50, wait_s=0.3) == []
        stats = c.stats("fan").topics[0]
        assert stats.delivered == len(want) and stats.cancelled == len(cancelled)


def test_a_call_at_the_wrong_shard_names_the_owner(cluster: LocalCluster) -> None:
    key = next(f"w{i}" for i in range(100) if shardmap.shard_of_key(f"w{i}", SHARDS) == 1)
    at0 = _stub(cluster.address(0))
    req = pb.ScheduleRequest(messages=[pb.NewMessage(topic="w", body=b"x", key=key)])
    err = _wrong_shard(at0.Schedule, req)
    assert "messages[0].key: belongs to shard 1 under shard map epoch" in err.details()
    assert ("delayq-owner-shard", "1") in tuple(err.trailing_metadata())
    with Client(cluster.address(0)) as c:
        sent = c.schedule_many(
            [Outgoing(topic="w", body=b"x", key=f"w{i}", delay=0) for i in range(30)]
        )
        by_shard = {MessageId.parse(r.id).shard: r.id for r in sent if r.id}
        at1 = _stub(cluster.address(1))
        for call, req in [
            (at0.Cancel, pb.CancelRequest(ids=[by_shard[2]])),
            (at0.Lookup, pb.LookupRequest(id=by_shard[2])),
            (at0.Reschedule, pb.RescheduleRequest(id=by_shard[2], delay_ms=5)),
        ]:
            assert "belongs to shard 2" in _wrong_shard(call, req).details()
        msgs: list[object] = []
        deadline = time.monotonic() + 10
        while len(msgs) < 30 and time.monotonic() < deadline:
            msgs += c.receive("w", "g", max_messages=30, wait_s=1)
        of2 = [m.receipt for m in msgs if MessageId.parse(m.id).shard == 2]  # type: ignore[attr-defined]
        ack = pb.AckRequest(topic="w", group="g", receipts=of2)
        assert "receipts[0]: belongs to shard 2" in _wrong_shard(at1.Ack, ack).details()
        assert set(c.ack("w", "g", of2)) == {"acked"}  # the client sends them home
    (node0,) = [n for n in cluster.state()["nodes"] if n["shard"] == 0]
    with urllib.request.urlopen(f"http://{node0['metrics_address']}/metrics", timeout=5) as r:
        text = r.read().decode()
    refused = re.search(r"^delayq_wrong_shard_refusals_total (\S+)$", text, re.M)
    assert refused and float(refused.group(1)) >= 4  # Schedule, Cancel, Lookup, Reschedule
    assert re.search(r"^delayq_shards 3\.0$", text, re.M)


def test_a_stale_client_map_is_refreshed(nodes: Nodes) -> None:
    """Shards 1 and 2 swap ports (the map's epoch goes up): a client still holding
    the old map reaches the wrong shard, fetches the map again and succeeds."""
    with Client(nodes.address(0)) as c:
        old = c.refresh_route()
        keys = [f"s{i}" for i in range(200)]
        nodes.stop(1)
        nodes.stop(2)
        swapped = [nodes.ports[0], nodes.ports[2], nodes.ports[1]]
        new = nodes.write_map(old.topology_epoch + 1, swapped)
        nodes.start(1, swapped[1])
        nodes.start(2, swapped[2])
        _wait_for_epoch(nodes.address(0), new.topology_epoch)
        sent = c.schedule_many([Outgoing(topic="stale", body=b"s", key=k, delay=60) for k in keys])
        assert all(r.ok for r in sent)
        for k, r in zip(keys, sent, strict=True):
            assert r.id and MessageId.parse(r.id).shard == shardmap.shard_of_key(k, SHARDS)
        assert c.refresh_route().topology_epoch == new.topology_epoch
        assert c.lookup(sent[0].id or "").state is MessageState.PENDING


def test_a_subscription_follows_a_shard_a_rebalance_adds(nodes: Nodes) -> None:
    """The map shrinks to shards 0 and 1, a subscriber starts on it; the map grows
    back to three shards: the subscriber learns it from a batch's map epoch and
    subscribes to shard 2 as well, so messages scheduled there come too."""
    with Client(nodes.address(0)) as c:
        epoch = c.refresh_route().topology_epoch
        ports = [int(nodes.address(s).rpartition(":")[2]) for s in range(SHARDS)]  # as now
        try:
            two = nodes.write_map(epoch + 1, ports[:2])
            _wait_for_epoch(nodes.address(0), two.topology_epoch)
            _wait_for_epoch(nodes.address(1), two.topology_epoch)
            c.refresh_route()
            due = int(time.time() * 1000) + 300
            first = c.schedule_many(_keyed("grow", 20, due))
            assert {MessageId.parse(r.id or "").shard for r in first} == {0, 1}
            want = {r.id for r in first}
            got: set[str] = set()
            with c.subscribe("grow", "g", wait_s=0.2) as stream:
                for batch in stream:
                    got |= {m.id for m in batch}
                    c.ack("grow", "g", [m.receipt for m in batch])
                    if got == want and len(want) == 20:  # the map grows back
                        three = nodes.write_map(epoch + 2, ports)
                        for shard in range(SHARDS):
                            _wait_for_epoch(nodes.address(shard), three.topology_epoch)
                        with Client(nodes.address(0)) as other:  # the subscriber's map is old
                            later = other.schedule_many(
                                _keyed("grow", 60, int(time.time() * 1000) + 300)
                            )
                        assert all(r.ok for r in later), [r.error for r in later if not r.ok][:3]
                        assert 2 in {MessageId.parse(r.id or "").shard for r in later}
                        want |= {r.id for r in later}
                    if len(want) > 20 and got >= want:
                        break
            assert got == want
        finally:
            nodes.write_map(epoch + 3, ports)
            for shard in range(SHARDS):
                _wait_for_epoch(nodes.address(shard), epoch + 3)


def test_a_bad_map_file_is_logged_and_the_last_good_one_kept(nodes: Nodes) -> None:
    good = nodes.map_file.read_text()
    epoch = json.loads(good)["topology_epoch"]
    try:
        nodes.map_file.write_text('{"topology_epoch": 99, "shards": [}')
        time.sleep(2.5)  # two polls
        resp = _stub(nodes.address(0)).GetRoute(pb.GetRouteRequest(), timeout=5)
        assert resp.topology_epoch == epoch
        proc = nodes.procs[0]
        assert proc is not None
        warned = [
            r for r in proc.log_records() if r.get("msg", "").startswith("shard map unusable")
        ]
        assert len(warned) == 1 and "not JSON" in str(warned[0]["error"])  # once, not per poll
    finally:
        nodes.map_file.write_text(good)


def test_one_shard_down_does_not_fail_the_others_receives(nodes: Nodes) -> None:
    """Shard 2's node is stopped: keyed sends to it fail with an error for those
    items only, receives of the other shards' messages go on (an empty receive is
    empty, not UNAVAILABLE), and once it is back its messages come too."""
    keys = [f"d{i}" for i in range(60)]
    with Client(nodes.address(0), timeout_s=3) as c:
        due = int(time.time() * 1000)
        sent = c.schedule_many(
            [Outgoing(topic="down", body=k.encode(), key=k, at=due) for k in keys]
        )
        on2 = {
            r.id for k, r in zip(keys, sent, strict=True) if shardmap.shard_of_key(k, SHARDS) == 2
        }
        port2 = int(nodes.address(2).rpartition(":")[2])
        nodes.stop(2)
        got: list[str] = []
        deadline = time.monotonic() + 20
        while len(got) < len(keys) - len(on2) and time.monotonic() < deadline:
            msgs = c.receive("down", "g", max_messages=100, wait_s=1)
            got += [m.id for m in msgs]
            c.ack("down", "g", [m.receipt for m in msgs])
        assert sorted(got) == sorted(r.id for r in sent if r.id not in on2)
        assert c.receive("down", "g", max_messages=100, wait_s=0.5) == []
        late = c.schedule_many([Outgoing(topic="down", body=k.encode(), key=k) for k in keys[:12]])
        owners = [shardmap.shard_of_key(k, SHARDS) for k in keys[:12]]
        failed = [r for r, owner in zip(late, owners, strict=True) if owner == 2]
        assert failed and all(not r.ok and "UNAVAILABLE" in r.error.message for r in failed)
        assert all(r.ok for r in late if r not in failed)  # the other shards took theirs
        nodes.start(2, port2)
        deadline = time.monotonic() + 20
        while on2 and time.monotonic() < deadline:
            msgs = c.receive("down", "g", max_messages=100, wait_s=1)
            on2 -= {m.id for m in msgs}
        assert not on2


def _wait_for_epoch(address: str, epoch: int, timeout: float = 10) -> None:
    stub = _stub(address)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stub.GetRoute(pb.GetRouteRequest(), timeout=5).topology_epoch == epoch:
            return
        time.sleep(0.1)
    raise AssertionError(f"{address} never served map epoch {epoch}")


def _keyed(topic: str, n: int, at_ms: int) -> list[Outgoing]:
    return [
        Outgoing(topic=topic, body=str(i).encode(), key=f"{topic}{i}", at=at_ms) for i in range(n)
    ]


def test_subscribe_merges_every_shards_stream(cluster: LocalCluster) -> None:
    with Client(cluster.address(0)) as c:
        ids = {r.id for r in c.schedule_many(_keyed("sub", 300, int(time.time() * 1000) + 500))}
        assert {MessageId.parse(i).shard for i in ids if i} == set(range(SHARDS))
        got: list[str] = []
        with c.subscribe("sub", "g", max_messages=40, wait_s=0.5) as stream:
            for batch in stream:
                assert 0 < len(batch) <= 40
                got += [m.id for m in batch]
                c.ack("sub", "g", [m.receipt for m in batch])
                if len(got) >= len(ids):
                    break
        assert sorted(got) == sorted(i for i in ids if i)


def test_async_client_routes_and_fans_in(cluster: LocalCluster) -> None:
    from delayq import AsyncClient

    async def main() -> None:
        async with AsyncClient(cluster.address(2)) as c:
            sent = await c.schedule_many(_keyed("aio", 300, int(time.time() * 1000) + 800))
            ids = [r.id for r in sent if r.id]
            for k, mid in zip(range(300), ids, strict=True):
                assert MessageId.parse(mid).shard == shardmap.shard_of_key(f"aio{k}", SHARDS)
            assert (await c.lookup(ids[0])).state is MessageState.PENDING
            assert await c.cancel(ids[0], ids[1]) == [CancelOutcome.CANCELLED] * 2
            got: list[str] = []
            deadline = time.monotonic() + 20
            while len(got) < 298 and time.monotonic() < deadline:
                msgs = await c.receive("aio", "g", max_messages=64, wait_s=1)
                assert len(msgs) <= 64
                got += [m.id for m in msgs]
                if msgs:
                    acked = await c.ack("aio", "g", [m.receipt for m in msgs])
                    assert set(acked) == {AckOutcome.ACKED}
            assert sorted(got) == sorted(ids[2:])
            later = await c.schedule_many(_keyed("aio2", 90, int(time.time() * 1000) + 300))
            streamed: list[str] = []
            async for batch in c.subscribe("aio2", "g", max_messages=50, wait_s=0.5):
                streamed += [m.id for m in batch]
                if len(streamed) >= 90:
                    break
            assert sorted(streamed) == sorted(r.id for r in later if r.id)
            stats = await c.stats("aio")
            assert stats.topics[0].delivered == 298 and len(stats.shards) == SHARDS

    asyncio.run(main())


def test_the_cli_works_against_the_cluster_from_any_node(
    cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from delayq.cli.main import main

    def run(*argv: str, node: int = 0) -> str:
        capsys.readouterr()
        assert main([*argv, "--server", cluster.address(node)]) == 0, capsys.readouterr().err
        return capsys.readouterr().out

    ids = []
    for i in range(12):
        key = f"cli{i}"
        mid = run("send", "--topic", "cli", "--key", key, "--delay", "1h", f"b{i}").strip()
        assert MessageId.parse(mid).shard == shardmap.shard_of_key(key, SHARDS)
        ids.append(mid)
    assert {MessageId.parse(i).shard for i in ids} == set(range(SHARDS))
    for node, mid in enumerate(ids[:3]):  # any node answers for any shard's id
        assert json.loads(run("get", mid, "--json", node=node))["state"] == "pending"
    assert run("cancel", ids[0], ids[1], node=2).split() == [
        f"{ids[0]}:",
        "cancelled",
        f"{ids[1]}:",
        "cancelled",
    ]
    new = run("reschedule", ids[2], "--delay", "1s", node=1).strip()
    assert MessageId.parse(new).shard == MessageId.parse(ids[2]).shard
    out = run(
        "receive", "--topic", "cli", "--group", "g", "--count", "1", "--wait", "10s", "--json"
    )
    assert [json.loads(line)["id"] for line in out.splitlines()] == [new]
    doc = json.loads(run("stats", "cli", "--json", "--shards"))
    assert doc["topics"][0]["pending"] == 9 and doc["topics"][0]["cancelled"] == 2
    assert sorted(s["node"]["shard"] for s in doc["shards"]) == list(range(SHARDS))
    text = run("stats", "cli", "--shards")
    assert all(f"shard {s} at {cluster.address(s)}" in text for s in range(SHARDS))
