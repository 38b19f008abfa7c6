"""RocketMQ 4's delay levels through a real ``delayq serve`` process: the client's
``level=`` over gRPC, the server's ``--delay-levels``, and per-item errors naming
``messages[i].delay_level``."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc

from delayq import Client, Outgoing
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_level_is_a_delay_of_the_servers_default_levels(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        before = _now_ms()
        sent = c.schedule("t", b"x", level=3)  # RocketMQ's third level: 10s
        after = _now_ms()
        assert sent.ok, sent.error
        assert before + 10_000 <= sent.deliver_at_ms <= after + 10_000
        assert c.lookup(sent.id).deliver_at_ms == sent.deliver_at_ms  # type: ignore[arg-type]
        (bad,) = c.schedule_many([Outgoing(topic="t", body=b"x", level=25)])
    assert bad.id is None and bad.error.code == INVALID_ARGUMENT
    assert bad.error.field == "messages[0].delay_level"
    assert bad.error.message == "delay_level: must be 1..18 (the server's --delay-levels), got 25"


def test_custom_levels_deliver_on_time_and_a_bad_one_is_refused_alone(
    start_server: Start,
) -> None:
    srv = start_server("--delay-levels", "1s 1h")
    with Client(srv.address) as c:
        before = _now_ms()
        out = c.schedule_many(
            [
                Outgoing(topic="t", body=b"soon", level=1),
                Outgoing(topic="t", body=b"bad", level=3),
                Outgoing(topic="t", body=b"later", level=2),
            ]
        )
        after = _now_ms()
        assert out[0].ok and out[2].ok
        assert before + 1000 <= out[0].deliver_at_ms <= after + 1000
        assert before + 3_600_000 <= out[2].deliver_at_ms <= after + 3_600_000
        assert out[1].id is None and out[1].error.field == "messages[1].delay_level"
        assert "must be 1..2" in out[1].error.message
        got = []
        deadline = time.time() + 5
        while not got and time.time() < deadline:
            got = c.receive("t", "g", max_messages=10, wait_s=0.5)
        assert [m.body for m in got] == [b"soon"]
        assert got[0].delivered_at_ms >= got[0].deliver_at_ms == out[0].deliver_at_ms


def test_raw_grpc_delay_level_errors_name_the_field(start_server: Start) -> None:
    srv = start_server("--delay-levels", "1s 5s")
    with grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.DelayQueueStub(channel)
        (res,) = stub.Schedule(
            pb.ScheduleRequest(messages=[pb.NewMessage(topic="t", body=b"x", delay_level=-1)])
        ).results
        assert res.error.code == INVALID_ARGUMENT
        assert res.error.field == "messages[0].delay_level"
        assert (
            res.error.message == "delay_level: must be 1..2 (the server's --delay-levels), got -1"
        )
        (ok,) = stub.Schedule(
            pb.ScheduleRequest(messages=[pb.NewMessage(topic="t", body=b"x", delay_level=2)])
        ).results
        assert ok.id and not ok.HasField("error")
