"""Pure pieces of the client: routing, retry policy, targets it can dial."""

from __future__ import annotations

import grpc
import pytest

from delayq.addresses import check_target
from delayq.client import AsyncClient, Client
from delayq.client.core import RetryPolicy, jump_hash, retry_after_ms


def test_jump_hash_is_stable_and_moves_little_when_growing() -> None:
    keys = range(10_000)
    before = [jump_hash(k * 0x9E3779B97F4A7C15, 4) for k in keys]
    after = [jump_hash(k * 0x9E3779B97F4A7C15, 5) for k in keys]
    assert set(before) == {0, 1, 2, 3}
    moved = sum(a != b for a, b in zip(before, after, strict=True))
    assert all(b == 4 for a, b in zip(before, after, strict=True) if a != b)
    assert 0.15 < moved / 10_000 < 0.25  # about 1/5


def test_retry_policy_honours_retry_after_and_gives_up() -> None:
    p = RetryPolicy(attempts=3, base_s=0.01, max_s=0.05)
    assert p.delay_s(1, grpc.StatusCode.INVALID_ARGUMENT, None) is None
    assert p.delay_s(1, grpc.StatusCode.RESOURCE_EXHAUSTED, 200) == pytest.approx(0.2)
    assert 0 <= (p.delay_s(2, grpc.StatusCode.UNAVAILABLE, None) or 0) <= 0.05
    assert p.delay_s(3, grpc.StatusCode.UNAVAILABLE, None) is None
    assert retry_after_ms([("retry-after-ms", "150")]) == 150
    assert retry_after_ms(None) is None


def test_route_table_sends_keys_and_ids_to_their_shards() -> None:
    from delayq.client.core import Outgoing, RouteTable, gather
    from delayq.ids import MessageId
    from delayq.v1 import delayq_pb2 as pb

    resp = pb.GetRouteResponse(
        topology_epoch=3,
        shard_count=3,
        shards=[pb.ShardRoute(index=i, master=f"h{i}:1") for i in (2, 0, 1)],
    )
    table = RouteTable.from_response(resp)
    assert table.masters == ("h0:1", "h1:1", "h2:1")
    msgs = [Outgoing(topic="t", body=b"x", key=k) for k in ("a", "b", "a", "")]
    groups = table.schedule_groups(msgs, spread=0)
    shard_of = {i: s for s, idx in groups.items() for i in idx}
    assert shard_of[0] == shard_of[2], "one key, one shard"
    assert table.id_groups([str(MessageId(2, 1, 99)), "junk"]) == {2: [0], 0: [1]}
    assert gather(3, [([2, 0], ["c", "a"]), ([1], ["b"])]) == ["a", "b", "c"]
    single = RouteTable(1, ("only:1",))
    assert single.shard_for_key("anything", 7) == single.shard_for_id("junk") == 0
    with pytest.raises(ValueError, match="incomplete"):
        RouteTable.from_response(pb.GetRouteResponse(shards=[pb.ShardRoute(index=1)]))


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:7420",
        "[::1]:7420",
        "dq-0.dq.svc:1",
        ":7420",
        "dns:///dq:7420",
        "unix:/tmp/dq.sock",
    ],
)
def test_client_targets_that_can_be_dialled_pass(target: str) -> None:
    check_target(target)
    Client(target).close()  # the client takes them too (gRPC connects lazily)


@pytest.mark.parametrize(
    "target", ["127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", "host:http", "::1:7420", "localhost:"]
)
def test_client_targets_gRPC_would_misread_are_refused_naming_the_field(target: str) -> None:
    with pytest.raises(ValueError, match=r"^address: "):
        check_target(target)
    with pytest.raises(ValueError, match=r"^address: "):
        Client(target)  # 127.0.0.1:99999 would otherwise dial port 34463
    with pytest.raises(ValueError, match=r"^address: "):
        AsyncClient(target)
