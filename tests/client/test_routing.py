"""The client's pure routing core (``client.routing``, ``client.fanin``): grouping
by owner, the fan-out's retry decisions, stats merging, fair fan-in."""

from __future__ import annotations

import grpc
import pytest

from delayq import shardmap
from delayq.client import routing
from delayq.client.core import Call, Received, RetryPolicy
from delayq.client.fanin import EXPIRY_MARGIN_S, FanIn
from delayq.client.outgoing import Outgoing
from delayq.client.results import DueBucket, NodeStats, ScheduleStats, ShardStats, TopicStats
from delayq.errors import WrongShard
from delayq.ids import MessageId
from delayq.receipts import Receipt
from delayq.shardmap import ShardMap
from delayq.v1 import delayq_pb2 as pb

THREE = ShardMap.of_masters([f"h{i}:1" for i in range(3)], 3)


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
    assert not fan.done and fan.stale_route and 0 <= wait <= 0.01  # first back-off: base_s
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
    def shard(n: int, late: int) -> ShardStats:
        return ShardStats(
            (TopicStats("t", n, 1, 0, {"g": n}, (DueBucket(1000, n),)),),
            late,
            late,
            0,
            NodeStats(n, 1, "master", 0, 1, f"node-{n}"),
            ScheduleStats(n, 10 * n, n - 1, 0, late),
        )

    merged = routing.merge_stats([shard(1, 5), shard(2, 9), None])
    (t,) = merged.topics
    assert (t.pending, t.delivered, dict(t.group_backlog)) == (3, 2, {"g": 3})
    assert t.due == (DueBucket(1000, 3),)
    assert merged.lateness_ms_p99 == 9 and [s.node.shard for s in merged.shards] == [1, 2]
    assert merged.topic("t") == t and merged.topic("other") is None
    assert merged.schedules == ScheduleStats(3, 30, 1, 0, 9), "counts summed, the worst lateness"


def _msgs(shard: int, n: int) -> list[Received]:
    return [Received(f"{shard}-{i}", "t", "", {}, b"", 0, 0, "r", 1) for i in range(n)]


def test_fanin_takes_in_turn_honours_the_maximum_and_drops_expired() -> None:
    fan = FanIn(invisible_s=30, auto_ack=False)
    assert FanIn.share(3, 10) == 4 and FanIn.share(3, 1) == 1
    fan.sent(0, "poll", now_s=0)
    fan.sent(2, "poll", now_s=0)
    assert fan.idle(3) == [1]
    fan.came_back(0, _msgs(0, 3))
    fan.came_back(2, _msgs(2, 3))
    assert fan.inflight == {}
    first = [m.id for m in fan.take(4, now_s=1)]
    assert first == ["0-0", "2-0", "0-1", "2-1"]  # fair: in turn, four in all
    assert [m.id for m in fan.take(4, now_s=1)] == ["2-2", "0-2"]  # the next turn starts at 2
    # the lease runs from when the poll was sent, not from when it is looked at
    fan.sent(1, "poll", now_s=100)
    fan.came_back(1, _msgs(1, 2))
    assert fan.buffered(now_s=129) == 2
    assert fan.buffered(now_s=130 - EXPIRY_MARGIN_S) == 0  # its lease ran out: dropped
    short = FanIn(invisible_s=0.2, auto_ack=False)  # a short lease keeps a window
    short.sent(0, "poll", now_s=0)
    short.came_back(0, _msgs(0, 1))
    assert short.buffered(now_s=0.1) == 1 and short.buffered(now_s=0.16) == 0


def test_fanin_never_expires_auto_acked_messages() -> None:
    fan = FanIn(invisible_s=1, auto_ack=True)
    fan.sent(0, "poll", now_s=0)
    fan.came_back(0, _msgs(0, 2))
    assert len(fan.take(5, now_s=10_000)) == 2  # acked already: they never come again


class Handle:
    def __init__(self, outcome: object) -> None:
        self.outcome = outcome

    def done(self) -> bool:
        return self.outcome is not None


def test_fanin_raises_only_a_callers_error_or_when_no_shard_answered() -> None:
    down = FakeError(grpc.StatusCode.UNAVAILABLE)
    fan = FanIn(invisible_s=30, auto_ack=False)
    fan.begin()
    for shard, outcome in enumerate([down, [], None]):
        fan.sent(shard, Handle(outcome), now_s=0)
    fan.harvest(lambda h: h.outcome)
    assert list(fan.inflight) == [2] and fan.failure() is None  # shard 2 still polls
    fan.came_back(2, [])
    assert fan.failure() is None  # one shard down: the others answered (empty)
    assert fan.stale_route(), "yet its master may have moved: the route is fetched again"
    fan.begin()
    fan.sent(0, Handle(down), now_s=0)
    fan.harvest(lambda h: h.outcome)
    assert fan.failure() is down  # every poll of this call failed
    bad = FakeError(grpc.StatusCode.INVALID_ARGUMENT)
    fan.begin()
    fan.sent(0, Handle([]), now_s=0)
    fan.sent(1, Handle(bad), now_s=0)
    fan.harvest(lambda h: h.outcome)
    assert fan.failure() is bad  # the caller's mistake is raised whatever else came
    assert not fan.stale_route(), "a caller's mistake says nothing of the route"
    fan.begin()
    fan.sent(0, Handle([]), now_s=0)
    fan.sent(1, Handle(WRONG), now_s=0)
    fan.harvest(lambda h: h.outcome)
    assert fan.failure() is None and fan.stale_route(), "a replica refused: fetch the route"


def test_fanout_gives_failed_items_an_error_when_another_shard_wrote() -> None:
    ids = [str(MessageId(s, 1, 10 + s)) for s in (0, 1)]

    def make(part: object) -> Call[list[str]]:
        return Call("Cancel", part, 1.0, lambda r: r)

    fan = routing.Fanout(
        ids, routing.id_groups, make, RetryPolicy(), 100.0, on_error=lambda e: "failed"
    )
    steps = fan.plan(THREE)
    bad = FakeError(grpc.StatusCode.INVALID_ARGUMENT)
    assert fan.settle([(steps[0], ["cancelled"]), (steps[1], bad)], now_s=0) == 0
    assert fan.done and fan.ordered() == ["cancelled", "failed"]
    fan = routing.Fanout(ids, routing.id_groups, make, RetryPolicy(), 100.0, on_error=str)
    steps = fan.plan(THREE)
    with pytest.raises(FakeError):  # nothing was answered: the error itself
        fan.settle([(steps[0], bad), (steps[1], bad)], now_s=0)


def test_fanout_does_not_retry_what_no_shard_of_the_map_owns() -> None:
    fan = _fanout([str(MessageId(0, 1, 1))])
    nobody = FakeError(grpc.StatusCode.FAILED_PRECONDITION, ((WrongShard.OWNER_KEY, "-1"),))
    with pytest.raises(FakeError):
        fan.settle([(fan.plan(THREE)[0], nobody)], now_s=0)
    assert fan.remaining_s(99.5) == pytest.approx(0.5)  # the deadline bounds each RPC


def test_a_refusal_under_a_newer_map_names_the_node_to_ask_first() -> None:
    fan = _fanout([str(MessageId(1, 1, 1))])
    newer = FakeError(
        grpc.StatusCode.FAILED_PRECONDITION,
        ((WrongShard.OWNER_KEY, "2"), (WrongShard.TOPOLOGY_EPOCH_KEY, "9")),
    )
    fan.settle([(fan.plan(THREE)[0], newer)], now_s=0)
    assert fan.stale_route and fan.ask_first == "h1:1"  # it holds epoch 9, we planned with 3
    older = FakeError(
        grpc.StatusCode.FAILED_PRECONDITION,
        ((WrongShard.OWNER_KEY, "2"), (WrongShard.TOPOLOGY_EPOCH_KEY, "2")),
    )
    fan.settle([(fan.plan(THREE)[0], older)], now_s=0)
    assert fan.stale_route and fan.ask_first is None  # it re-reads its map: ask as usual
