"""A rebalance's two steps over real processes (admin ``Release`` on the source,
``Import`` on the target) on a 2-shard ``delayq cluster``: a released message is
delivered once, by the target; its old id keeps working through the source
(cancel, lookup, reschedule are passed on); between the two steps a call by the
old id is UNAVAILABLE (retried), never NOT_FOUND; an import sent twice makes one
copy. And the same to shard 700 (two servers, no map: the release names the
target's address), past the 128 shards a state byte names."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.client import Client, Outgoing
from delayq.ids import MessageId
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.cluster import LocalCluster
from tests.support.servers import ServerProcess


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("moving") / "c", shards=2) as c:
        c.wait_serving()
        yield c


def admin(address: str) -> tuple[grpc.Channel, arpc.ShardAdminStub]:
    channel = grpc.insecure_channel(address)
    return channel, arpc.ShardAdminStub(channel)


def on_shard(client: Client, shard: int, n: int, delay_s: float) -> list[str]:
    """``n`` keyed messages that land on ``shard``."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        batch = [
            Outgoing(topic="moves", body=b"m-%d" % (i + k), key=f"key-{i + k}", delay=delay_s)
            for k in range(50)
        ]
        i += 50
        for s in client.schedule_many(batch):
            assert s.id is not None
            if MessageId.parse(s.id).shard == shard and len(out) < n:
                out.append(s.id)
    return out


def moved(client: Client, ids: list[str]) -> list[apb.MovedMessage]:
    rows = []
    for mid in ids:
        m = client.lookup(mid)
        rows.append(
            apb.MovedMessage(
                source_id=mid,
                topic=m.topic,
                key=m.key,
                headers=m.headers,
                body=m.body,
                deliver_at_ms=m.deliver_at_ms,
            )
        )
    return rows


def test_old_ids_follow_a_released_and_imported_message(cluster: LocalCluster) -> None:
    src, dst = cluster.address(0), cluster.address(1)
    with Client(src, timeout_s=5) as client:
        ids = on_shard(client, 0, 4, delay_s=3_600)
        rows = moved(client, ids)
        ch_src, a_src = admin(cluster.admin_address(0))
        ch_dst, a_dst = admin(cluster.admin_address(1))
        public = grpc.insecure_channel(src)
        with ch_src, ch_dst, public:
            out = a_src.Release(apb.ReleaseRequest(ids=ids, target=1, target_address=dst, job="t"))
            assert [r.outcome for r in out.results] == [apb.RELEASE_OUTCOME_RELEASED] * 4
            # between the steps: passed on, the target has no copy yet: retry later
            with pytest.raises(grpc.RpcError) as between:
                pb_grpc.DelayQueueStub(public).Lookup(pb.LookupRequest(id=ids[0]), timeout=5)
            assert between.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "moving to this shard" in (between.value.details() or "")
            first = a_dst.Import(apb.ImportRequest(messages=rows, job="t"))
            again = a_dst.Import(apb.ImportRequest(messages=rows, job="t"))
            copies = [r.id for r in first.results]
            assert all(copies) and [r.id for r in again.results] == copies, "one copy each"
            assert {MessageId.parse(c).shard for c in copies} == {1}
        looked = client.lookup(ids[0])
        assert looked.state == "pending"
        assert (looked.body, looked.id) == (rows[0].body, copies[0])
        assert looked.headers["delayq-moved-from"] == ids[0]
        assert client.cancel(ids[1]) == ["cancelled"]
        assert client.lookup(copies[1]).state == "cancelled"
        again_at = client.reschedule(ids[2], delay=0.5)
        assert again_at.id is not None and MessageId.parse(again_at.id).shard == 1
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not got:
            for m in client.receive("moves", "g", max_messages=10, wait_s=1):
                got.append(m.body)
                client.ack("moves", "g", [m.receipt])
        assert got == [rows[2].body], "the rescheduled copy, delivered once, by the target"
        assert client.lookup(ids[3]).state == "pending"


def test_a_release_refuses_what_it_cannot_move(cluster: LocalCluster) -> None:
    src = cluster.address(0)
    with Client(src, timeout_s=5) as client:
        ids = on_shard(client, 0, 2, delay_s=3_600)
        assert client.cancel(ids[0]) == ["cancelled"]
        ch, a = admin(cluster.admin_address(0))
        with ch:
            out = a.Release(apb.ReleaseRequest(ids=[ids[0], ids[1], ids[1]], target=1))
            with pytest.raises(grpc.RpcError) as self_target:
                a.Release(apb.ReleaseRequest(ids=[ids[1]], target=0))
        assert [r.outcome for r in out.results] == [
            apb.RELEASE_OUTCOME_ALREADY_CANCELLED,
            apb.RELEASE_OUTCOME_RELEASED,
            apb.RELEASE_OUTCOME_RELEASED,
        ]
        assert self_target.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "target" in (self_target.value.details() or "")


def test_old_ids_follow_a_message_released_to_shard_700(tmp_path: Path) -> None:
    src = ServerProcess(tmp_path / "s0").start()
    far = ServerProcess(tmp_path / "s700", ["--shard", "700"]).start()
    try:
        with Client(src.address, timeout_s=5) as client:
            ids = [
                str(s.id)
                for s in client.schedule_many(
                    [Outgoing(topic="moves", body=b"m-%d" % i, delay=3_600) for i in range(2)]
                )
            ]
            rows = moved(client, ids)
            ch_src, a_src = admin(src.admin_address)
            ch_far, a_far = admin(far.admin_address)
            with ch_src, ch_far:
                release = apb.ReleaseRequest(
                    ids=ids, target=700, target_address=far.address, job="t"
                )
                out = a_src.Release(release, timeout=10)
                assert [r.outcome for r in out.results] == [apb.RELEASE_OUTCOME_RELEASED] * 2
                copies = [
                    r.id for r in a_far.Import(apb.ImportRequest(messages=rows, job="t")).results
                ]
            assert {MessageId.parse(c).shard for c in copies} == {700}
            looked = client.lookup(ids[0])  # asked of shard 0, answered by shard 700
            assert (looked.id, looked.state) == (copies[0], "pending")
            assert client.cancel(ids[1]) == ["cancelled"]
        with Client(far.address, timeout_s=5) as on_far:
            assert on_far.lookup(copies[1]).state == "cancelled"
    finally:
        src.stop()
        far.stop()
