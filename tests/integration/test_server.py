"""The server as users meet it: a real ``delayq serve`` process, real sockets,
the Python client, raw gRPC for status codes, SIGKILL and SIGTERM."""

from __future__ import annotations

import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from delayq import Client, Outgoing, RetryPolicy
from delayq.client import ClientError, InvalidArgument, ItemError
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]


def drain(c: Client, topic: str, group: str, until: float) -> list[Any]:
    got: list[Any] = []
    while time.time() < until:
        msgs = c.receive(topic, group, max_messages=500, wait_s=0.2)
        got += msgs
        if msgs:
            assert set(c.ack(topic, group, [m.receipt for m in msgs])) == {"acked"}
    return got


def test_messages_arrive_on_time_never_early(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        delays = [0.2, 0.5, 0.9, 1.3, 1.6]
        sent = {c.schedule("t", f"m{d}".encode(), delay=d).id: d for d in delays}
        assert c.receive("t", "g", max_messages=10) == [], "nothing is due yet"
        got = drain(c, "t", "g", time.time() + 3)
    assert {m.id for m in got} == set(sent)
    for m in got:
        assert m.delivered_at_ms >= m.deliver_at_ms
        assert m.delivered_at_ms - m.deliver_at_ms < 500
    assert [m.body for m in got] == [f"m{d}".encode() for d in delays], "in due order"


def test_receive_carries_key_headers_and_receipt_only_where_set(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        c.schedule("kh", b"plain", delay=0)
        c.schedule("kh", b"dressed", delay=0, key="order-7", headers={"trace": "abc"})
        got: dict[bytes, Any] = {}
        deadline = time.time() + 5
        while len(got) < 2 and time.time() < deadline:
            got.update((m.body, m) for m in c.receive("kh", "g", max_messages=10, wait_s=0.5))
        assert (got[b"dressed"].key, got[b"dressed"].headers) == ("order-7", {"trace": "abc"})
        assert (got[b"plain"].key, got[b"plain"].headers) == ("", {})
        assert got[b"plain"].receipt and got[b"dressed"].receipt


def test_cancel_reschedule_and_lookup(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        a = c.schedule("t", b"a", delay=0.3)
        b = c.schedule("t", b"b", delay=60)
        x = c.schedule("t", b"x", delay=60)
        assert c.lookup(b.id).state == "pending"
        outcomes = c.cancel(x.id, x.id, "garbage")
        assert outcomes[:2] == ["cancelled", "already_cancelled"]
        bad = outcomes[2]
        assert isinstance(bad, ItemError) and bad.status is grpc.StatusCode.INVALID_ARGUMENT
        assert bad.message.startswith("ids[2]: malformed message id 'garbage'")
        with pytest.raises(InvalidArgument) as only_bad:  # one id: its error is raised
            c.cancel("garbage")
        assert only_bad.value.message.startswith("id: malformed message id 'garbage'")
        new = c.reschedule(b.id, delay=0.5)
        assert new.id != b.id
        assert c.lookup(b.id).state == "rescheduled"
        got = drain(c, "t", "g", time.time() + 1.5)
        assert sorted(m.body for m in got) == [b"a", b"b"]
        assert c.lookup(a.id).state == "delivered"
        assert c.cancel(a.id) == ["already_delivered"]
        assert c.lookup(x.id).state == "cancelled"
        stats = c.stats("t").topics[0]
        assert (stats.pending, stats.delivered, stats.cancelled) == (0, 2, 1)


def test_receive_ack_and_redelivery_after_invisibility(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        c.schedule("t", b"once", delay=0)
        first = c.receive("t", "g", wait_s=2, invisible_s=0.5)
        assert [m.attempt for m in first] == [1]
        assert c.receive("t", "g") == []
        time.sleep(0.6)
        second = c.receive("t", "g", wait_s=1)
        assert [(m.body, m.attempt) for m in second] == [(b"once", 2)]
        assert c.ack("t", "g", [first[0].receipt]) == ["stale"]
        assert c.ack("t", "g", [second[0].receipt]) == ["acked"]
        time.sleep(0.6)
        assert c.receive("t", "g", wait_s=0.3) == []


def test_auto_ack_receive_is_never_redelivered(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        c.schedule("t", b"a", delay=0)
        c.schedule("t", b"b", delay=1.0)  # far enough that a slow first call cannot get it
        got = c.receive("t", "g", max_messages=10, wait_s=2, invisible_s=0.2, auto_ack=True)
        assert [(m.body, m.receipt) for m in got] == [(b"a", "")]
        later = c.receive("t", "g", max_messages=10, wait_s=3, auto_ack=True)
        assert [m.body for m in later] == [b"b"], "the long poll wakes for the next due"
        time.sleep(0.3)
        assert c.receive("t", "g", wait_s=0.2) == []
        assert c.stats("t").topics[0].group_backlog == {"g": 0}


def _subscribed(c: Client, count: int) -> list[Any]:
    """The first ``count`` messages a Subscribe (auto-ack) of topic t, group g pushes."""
    got: list[Any] = []
    with c.subscribe("t", "g", wait_s=0.1, auto_ack=True) as stream:
        for batch in stream:
            got += batch
            if len(got) >= count:
                break
    return got


def test_subscribe_pushes_batches_as_they_come_due(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        sent = [c.schedule("t", f"m{i}".encode(), delay=0.2 * i).id for i in range(4)]
        got = _subscribed(c, len(sent))
        assert [m.id for m in got] == sent
        assert all(0 <= m.delivered_at_ms - m.deliver_at_ms < 500 for m in got)
        assert c.receive("t", "g", wait_s=0.3) == [], "auto-acked: nothing comes back"
        with pytest.raises(InvalidArgument) as err:  # not reopened: the caller's mistake
            next(iter(c.subscribe("t", "bad group")))
        assert "group" in err.value.message


def test_a_subscription_cancelled_from_another_thread_ends_its_reader(
    start_server: Start,
) -> None:
    """The thread iterating a Subscribe stream, blocked with nothing due, ends without
    an error once another thread cancels the subscription (as a consumer shuts down)."""
    srv = start_server()
    with Client(srv.address) as c:
        stream = c.subscribe("t", "g", wait_s=0.1, auto_ack=True)
        got: list[Any] = []
        ended = threading.Event()

        def read() -> None:
            for batch in stream:
                got.extend(batch)
            ended.set()

        threading.Thread(target=read, daemon=True).start()
        c.schedule("t", b"one", delay=0.05)
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [m.body for m in got] == [b"one"]
        time.sleep(0.2)  # the reader is blocked in the stream again
        stream.cancel()
        assert ended.wait(5), "the reader did not end cleanly after the cancel"


def test_sync_flush_receivers_take_on_the_pool_and_still_wake(start_server: Start) -> None:
    """With --flush sync an auto-ack take waits for its fsync, so it runs on the pool,
    not the event loop; waiting receivers still wake for each release."""
    srv = start_server("--flush", "sync")
    with Client(srv.address) as c:
        sent = [c.schedule("t", f"m{i}".encode(), delay=0.2 * i).id for i in range(3)]
        got = _subscribed(c, len(sent))
        assert [m.id for m in got] == sent
        later = c.schedule("t", b"late", delay=0.3).id
        assert [m.id for m in c.receive("t", "g", wait_s=3, auto_ack=True)] == [later]


def test_sigkill_mid_load_loses_nothing_acknowledged(start_server: Start) -> None:
    srv = start_server()
    acked: list[str] = []
    cancelled: list[str] = []
    uncertain: list[str] = []  # a cancel cut by the kill may or may not have happened
    stop = threading.Event()

    def load() -> None:
        with Client(srv.address, timeout_s=2) as c:
            n = 0
            while not stop.is_set():
                batch = [
                    Outgoing(topic="t", body=b"%d" % (n + i), delay=0.5 + (i % 10) / 10)
                    for i in range(50)
                ]
                n += 50
                try:
                    out = c.schedule_many(batch)
                except ClientError:
                    return  # killed mid-call: that call was not acknowledged
                acked.extend(o.id for o in out if o.id)
                victim = out[0].id
                assert victim is not None
                try:
                    if c.cancel(victim) == ["cancelled"]:
                        cancelled.append(victim)
                except ClientError:
                    uncertain.append(victim)  # applied, or not, before the kill cut it
                    return

    worker = threading.Thread(target=load)
    worker.start()
    time.sleep(1.5)
    srv.stop(signal.SIGKILL)
    stop.set()
    worker.join()
    assert len(acked) > 200
    again = start_server(data_dir=srv.data_dir)
    with Client(again.address) as c:
        got = drain(c, "t", "g", time.time() + 4)
        ids = {m.id for m in got}
        missing = set(acked) - set(cancelled) - set(uncertain) - ids
        states = {m: c.lookup(m).state for m in sorted(missing)[:5]}  # what the server says
    assert not missing, f"{len(missing)} acknowledged messages lost: {states}"
    assert not ids & set(cancelled), "a cancel did not hold across SIGKILL"
    assert all(m.delivered_at_ms >= m.deliver_at_ms for m in got)


def _raw(address: str) -> Any:
    return pb_grpc.DelayQueueStub(grpc.insecure_channel(address))


def test_waiting_receivers_hold_no_threads_and_all_wake(start_server: Start) -> None:
    """More long-polls than the server's 64 RPC threads wait on its event loop: a
    call that needs a thread still runs meanwhile, and one release wakes them all
    (each group gets the message); a bad wait_ms is refused before any wait."""
    srv = start_server()
    stub = _raw(srv.address)
    with Client(srv.address) as c:
        c.schedule("w", b"warm", delay=3600)  # the topic exists: Stats can answer
        polls = [
            stub.Receive.future(pb.ReceiveRequest(topic="w", group=f"g{i}", wait_ms=20_000))
            for i in range(100)
        ]
        time.sleep(0.5)  # every poll is waiting now
        assert not any(f.done() for f in polls)
        stats = stub.Stats(pb.StatsRequest(topic="w"), timeout=5)  # a pool call: not starved
        assert stats.topics[0].pending == 1
        sent = c.schedule("w", b"now", delay=0).id
        got = [f.result(timeout=10) for f in polls]
    assert all([m.id for m in r.messages] == [sent] for r in got)
    for bad in (-1, 60_001):
        with pytest.raises(grpc.RpcError) as err:
            stub.Receive(pb.ReceiveRequest(topic="w", group="g", wait_ms=bad))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "wait_ms" in (err.value.details() or "")


def test_bad_input_gets_the_right_status_naming_the_field(start_server: Start) -> None:
    srv = start_server("--max-body-bytes", "1024", "--max-delay", "1d")
    stub = _raw(srv.address)
    cases = [
        (pb.NewMessage(topic="", body=b"x"), "messages[0].topic"),
        (pb.NewMessage(topic="t" * 200, body=b"x"), "messages[0].topic"),
        (pb.NewMessage(topic="t", body=b""), "messages[0].body"),
        (pb.NewMessage(topic="t", body=b"x" * 2000), "messages[0].body"),
        (pb.NewMessage(topic="t", body=b"x", delay_ms=-5), "messages[0].delay_ms"),
        (pb.NewMessage(topic="t", body=b"x", delay_ms=2 * 86_400_000), "messages[0].delay_ms"),
    ]
    for msg, field in cases:
        (res,) = stub.Schedule(pb.ScheduleRequest(messages=[msg])).results
        assert res.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], field
        assert res.error.field == field
        assert field.split(".")[-1] in res.error.message
    with pytest.raises(grpc.RpcError) as err:
        stub.Lookup(pb.LookupRequest(id="not-an-id"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("id: malformed")
    with Client(srv.address) as c:
        real = c.schedule("t", b"x", delay=60).id
    unknown = real[:-2] + ("AA" if real[-2:] != "AA" else "BA")
    with pytest.raises(grpc.RpcError) as err:
        stub.Lookup(pb.LookupRequest(id=unknown))
    assert err.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
    with pytest.raises(grpc.RpcError) as err:
        stub.Reschedule(pb.RescheduleRequest(id=real, delay_ms=-1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "delay_ms" in err.value.details()
    from delayq.receipts import Receipt

    unknown_receipt = str(Receipt(0, 1, 10_000, 1))  # well-formed, never handed out
    acks = stub.Ack(pb.AckRequest(topic="t", group="g", receipts=["zzz", unknown_receipt])).results
    assert acks[0].error.field == "receipts[0]"
    assert acks[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert acks[1].outcome == pb.ACK_OUTCOME_NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        stub.Receive(pb.ReceiveRequest(topic="t", group="bad group"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "group" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.Receive(pb.ReceiveRequest(topic="t", group="g", max_messages=100_000))
    assert "max_messages" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.Stats(pb.StatsRequest(topic="never"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_overload_is_resource_exhausted_and_the_client_retry_succeeds(start_server: Start) -> None:
    srv = start_server("--queue-limit", "100")
    stub = _raw(srv.address)
    batch = pb.ScheduleRequest(
        messages=[pb.NewMessage(topic="t", body=b"x", delay_ms=60_000) for _ in range(100)]
    )
    futures = [stub.Schedule.future(batch) for _ in range(200)]  # a burst, no retries
    refused = []
    for f in futures:
        try:
            f.result()
        except grpc.RpcError as exc:
            refused.append(exc)
    assert refused, "200 concurrent batches against a 100-message queue: some must be refused"
    assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    trailers = dict(refused[0].trailing_metadata() or ())
    assert int(trailers["retry-after-ms"]) > 0
    # The same burst through the retrying client. Forty batches contend for a queue
    # that holds one: under CI load an unlucky one can lose six draws in a row (the
    # default policy), so this client tries longer; what is checked is that retries
    # on RESOURCE_EXHAUSTED get every batch in, with no duplicate and no loss.
    patient = RetryPolicy(attempts=40, base_s=0.02, max_s=0.5)
    with Client(srv.address, retry=patient) as c:
        outs: list[list[Any]] = []
        failures: list[str] = []

        def send() -> None:
            try:
                outs.append(
                    c.schedule_many([Outgoing(topic="t", body=b"y", delay=60) for _ in range(100)])
                )
            except Exception as exc:  # reported by the assertion below, not lost in a thread
                failures.append(repr(exc))

        threads = [threading.Thread(target=send) for _ in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures[:3]
        assert len(outs) == 40 and all(o.ok for out in outs for o in out)
        accepted_first = (len(futures) - len(refused)) * 100
        assert c.stats("t").topics[0].pending == accepted_first + 40 * 100
    with pytest.raises(grpc.RpcError) as err:
        stub.Schedule(pb.ScheduleRequest(messages=list(batch.messages) * 2))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, "a batch that can never fit"


def test_sigterm_shuts_down_cleanly_and_restart_replays_nothing(start_server: Start) -> None:
    srv = start_server()
    with Client(srv.address) as c:
        ids = [c.schedule("t", b"x", delay=30).id for _ in range(10)]
    assert srv.stop(signal.SIGTERM) == 0
    assert any(r.get("msg") == "stopped" for r in srv.log_records())
    again = start_server(data_dir=srv.data_dir)
    serving = next(r for r in again.log_records() if r.get("msg") == "serving")
    assert serving["recovery"]["commitlog_replayed"] == 0  # type: ignore[index]
    with Client(again.address) as c:
        assert {c.lookup(i).state for i in ids} == {"pending"}


def test_health_reflection_route_and_metrics(start_server: Start) -> None:
    srv = start_server()
    # the port answered from before recovery (see test_recovery_gate), then served
    steps = [r for r in srv.log_records() if r.get("msg") in ("recovering", "serving")]
    assert [(r["msg"], r["address"]) for r in steps] == [
        ("recovering", srv.address),
        ("serving", srv.address),
    ]
    channel = grpc.insecure_channel(srv.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "delayq.v1.DelayQueue"):
        resp = health.Check(health_pb2.HealthCheckRequest(service=service))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    answer = next(
        iter(
            refl.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
        )
    )
    names = {s.name for s in answer.list_services_response.service}
    assert "delayq.v1.DelayQueue" in names
    with Client(srv.address) as c:
        route = c.route("t")
        assert (route.shard_count, route.shards[0].master) == (1, srv.address)
        c.schedule("t", b"x", delay=0)
        assert c.receive("t", "g", wait_s=2)
    with urllib.request.urlopen(f"http://{srv.metrics_address()}/metrics") as resp:
        text = resp.read().decode()
    assert "delayq_scheduled_total 1.0" in text
    assert 'delayq_pending{topic="t"} 0\n' in text
    assert "delayq_near_rows 0.0" in text, "the one message went straight to release"
    assert 'delayq_lateness_seconds_bucket{le="+Inf"} 1.0' in text, "the one message released"
    assert "delayq_lateness_seconds_count 1.0" in text
