"""The client's pure routing core (``client.routing``, ``client.fanin``): grouping
by owner, the fan-out's retry decisions, stats merging, fair fan-in."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from delayq import shardmap
from delayq.client import routing
from delayq.client.core import Call, Outgoing, Received, RetryPolicy
from delayq.client.fanin import EXPIRY_MARGIN_S, FanIn
from delayq.errors import WrongShard
from delayq.ids import MessageId
from delayq.receipts import Receipt
from delayq.shardmap import ShardEntry, ShardMap
from delayq.v1 import delayq_pb2 as pb

THREE = ShardMap(
    topology_epoch=3, shards=tuple(ShardEntry(index=i, master=f"h{i}:1") for i in range(3))
)


class FakeError(grpc.RpcError):
    """An RpcError as a shell sees it: a code and trailers."""

    def __init__(self, code: grpc.StatusCode, trailers: tuple[tuple[str, str], ...] = ()):
        self._code, self._trailers = code, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailers


WRONG = FakeError(grpc.StatusCode.FAILED_PRECONDITION, ((WrongShard.OWNER_KEY, "2"),))


def test_route_of_a_getroute_reply() -> None:
    resp = pb.GetRouteResponse(
        topology_epoch=3,
        shard_count=3,
        shards=[pb.ShardRoute(index=i, master=f"h{i}:1", epoch=1) for i in (2, 0, 1)],
    )
    assert routing.route_of(resp) == THREE
    with pytest.raises(shardmap.ShardMapError, match="unusable"):
        routing.route_of(pb.GetRouteResponse(shards=[pb.ShardRoute(index=1, master="a:1")]))


def test_groups_send_keys_ids_and_receipts_to_their_owners() -> None:
    msgs = [Outgoing(topic="t", body=b"x", key=k) for k in ("a", "b", "a", "", "")]
    groups = routing.schedule_groups(THREE, msgs, spread=4)
    shard_of = {i: s for s, idx in groups.items() for i in idx}
    assert shard_of[0] == shard_of[2] == shardmap.shard_of_key("a", 3)
    assert shard_of[1] == shardmap.shard_of_key("b", 3)
    assert shard_of[3] == shard_of[4] == 4 % 3  # keyless: the call's turn
    ids = [str(MessageId(2, 1, 99)), "junk", str(MessageId(7, 1, 5)), str(MessageId(1, 1, 5))]
    assert routing.id_groups(THREE, ids) == {2: [0], 0: [1, 2], 1: [3]}
    receipts = [str(Receipt(1, 1, 5, 1)), "junk", str(Receipt(2, 1, 5, 1))]
    assert routing.receipt_groups(THREE, receipts) == {1: [0], 0: [1], 2: [2]}
    one = ShardMap.single("a:1")
    assert routing.schedule_groups(one, msgs, 5) == {0: [0, 1, 2, 3, 4]}
    assert routing.id_groups(one, ids) == {0: [0, 1, 2, 3]}


def _fanout(items: list[str], attempts: int = 4) -> routing.Fanout[str, str]:
    def make(part: list[str]) -> Call[list[str]]:
        return Call("Cancel", part, 1.0, lambda r: r)

    return routing.Fanout(
        items, routing.id_groups, make, RetryPolicy(attempts=attempts, base_s=0.01), 100.0
    )


def test_fanout_keeps_answers_and_resends_only_what_a_wrong_shard_refused() -> None:
    ids = [str(MessageId(s, 1, 10 + s)) for s in (0, 1, 2, 1)]
    fan = _fanout(ids)
    steps = fan.plan(THREE)
    assert [(s.shard, s.items) for s in steps] == [(0, [0]), (1, [1, 3]), (2, [2])]
    wait = fan.settle([(steps[0], ["a"]), (steps[1], WRONG), (steps[2], ["c"])], now_s=0)
    assert not fan.done and fan.stale_route and 0 <= wait <= 0.01
    again = fan.plan(THREE)
    assert [(s.shard, s.items) for s in again] == [(1, [1, 3])]  # answered ones stay answered
    assert fan.settle([(again[0], ["b", "d"])], now_s=0) == 0
    assert fan.done and fan.ordered() == ["a", "b", "c", "d"]


def test_fanout_gives_up_on_a_callers_error_attempts_or_the_deadline() -> None:
    fan = _fanout([str(MessageId(0, 1, 1))])
    step = fan.plan(THREE)[0]
    bad = FakeError(grpc.StatusCode.INVALID_ARGUMENT)
    with pytest.raises(FakeError):
        fan.settle([(step, bad)], now_s=0)
    fan = _fanout([str(MessageId(0, 1, 1))], attempts=2)
    for _ in range(1):
        fan.settle([(fan.plan(THREE)[0], WRONG)], now_s=0)
    with pytest.raises(FakeError):
        fan.settle([(fan.plan(THREE)[0], WRONG)], now_s=0)  # the second try was the last
    fan = _fanout([str(MessageId(0, 1, 1))])
    busy = FakeError(grpc.StatusCode.RESOURCE_EXHAUSTED, (("retry-after-ms", "500"),))
    assert fan.settle([(fan.plan(THREE)[0], busy)], now_s=0) == pytest.approx(0.5)
    assert not fan.stale_route  # congestion is not a routing problem
    with pytest.raises(FakeError):
        fan.settle([(fan.plan(THREE)[0], busy)], now_s=99.8)  # past the deadline


def test_merge_stats_sums_topics_and_keeps_each_shard() -> None:
    def shard(n: int, late: int) -> dict[str, Any]:
        return {
            "topics": [
                {
                    "topic": "t",
                    "pending": n,
                    "delivered": 1,
                    "cancelled": 0,
                    "group_backlog": {"g": n},
                    "due": [{"within_ms": 1000, "count": n}],
                }
            ],
            "lateness_ms_p50": late,
            "lateness_ms_p99": late,
            "release_lag_ms": 0,
            "node": {"shard": n},
        }

    merged = routing.merge_stats([shard(1, 5), shard(2, 9)])
    (t,) = merged["topics"]
    assert (t["pending"], t["delivered"], t["group_backlog"]) == (3, 2, {"g": 3})
    assert t["due"] == [{"within_ms": 1000, "count": 3}]
    assert merged["lateness_ms_p99"] == 9 and len(merged["shards"]) == 2


def _msgs(shard: int, n: int) -> list[Received]:
    return [Received(f"{shard}-{i}", "t", "", {}, b"", 0, 0, "r", 1) for i in range(n)]


def test_fanin_takes_in_turn_honours_the_maximum_and_drops_expired() -> None:
    fan = FanIn()
    assert FanIn.share(3, 10) == 4 and FanIn.share(3, 1) == 1
    fan.inflight.update({0: "poll", 2: "poll"})
    assert fan.idle(3) == [1]
    fan.add(0, _msgs(0, 3), now_s=0, invisible_s=30)
    fan.add(2, _msgs(2, 3), now_s=0, invisible_s=30)
    assert fan.inflight == {}
    first = [m.id for m in fan.take(4, now_s=1)]
    assert first == ["0-0", "2-0", "0-1", "2-1"]  # fair: in turn, four in all
    assert [m.id for m in fan.take(4, now_s=1)] == ["2-2", "0-2"]  # the next turn starts at 2
    fan.add(1, _msgs(1, 2), now_s=0, invisible_s=2)
    assert fan.buffered(now_s=2 - EXPIRY_MARGIN_S) == 0  # its lease ran out: dropped
