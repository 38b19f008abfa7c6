"""Consumer groups' delivery policies over the public API, against a real ``delayq
serve``: set, get, list, pause, resume and nack round trips through the sync and
the async client and over the raw wire; bad policies refused INVALID_ARGUMENT
naming the field; a paused group handed nothing until resumed (also for
``DELAYQ_PAUSE_WINDOW_S``, 10 s, under a producer's load: nothing lost, due order
after the resume); a nacked message
handed out again no earlier than its backoff; Stats showing each group's policy;
a replica refusing the writes as it refuses an Ack; the policy kept over a
restart."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

import grpc
import pytest

import delayq
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc
from tests.support.servers import ServerProcess

Start = Callable[..., ServerProcess]

POLICY = delayq.GroupPolicy(
    max_attempts=4,
    backoff=delayq.Backoff(
        kind=delayq.BackoffKind.EXPONENTIAL,
        initial_ms=1500,
        multiplier=3.0,
        max_ms=60_000,
        jitter=delayq.Jitter.EQUAL,
    ),
    rate_per_s=500.0,
    burst=100,
    max_in_flight=2000,
)


@pytest.fixture
def srv(start_server: Start) -> ServerProcess:
    return start_server("--max-delivery-attempts", "16 billing=3")


def status(address: str, method: str, request: object) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(address) as channel:
        try:
            getattr(pb_grpc.DelayQueueStub(channel), method)(request, timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def test_set_get_list_pause_resume_round_trip(srv: ServerProcess) -> None:
    with delayq.Client(srv.address) as c:
        defaults = c.group_policy("orders", "billing")
        assert defaults.max_attempts == 3, "the server's --max-delivery-attempts for billing"
        assert not defaults.paused and defaults.rate_per_s == 0
        assert c.set_group_policy("orders", "billing", POLICY) == POLICY
        assert c.group_policy("orders", "billing") == POLICY
        assert c.pause_group("orders", "billing").paused
        assert c.group_policy("orders", "billing") == delayq.GroupPolicy(
            **{**_fields(POLICY), "paused": True}
        )
        assert c.resume_group("orders", "billing") == POLICY
        # a rate without a burst is stored with one: the rate rounded up
        assert c.set_group_policy("audit", "g", delayq.GroupPolicy(rate_per_s=2.5)).burst == 3
        c.schedule("orders", b"x")
        infos = {(i.topic, i.group): i for i in c.groups()}
        assert infos[("orders", "billing")] == delayq.GroupInfo(
            "orders", "billing", POLICY, True, (0,)
        )
        assert infos[("audit", "g")].explicit
        assert [i.group for i in c.groups("audit")] == ["g"]


def test_a_policy_without_max_attempts_keeps_the_servers_for_the_group(srv: ServerProcess) -> None:
    """Left out (None), ``max_attempts`` is the server's default for that group,
    stored and answered as the number: setting a rate does not turn off
    dead-lettering; 0 given stays "no limit"."""
    with delayq.Client(srv.address) as c:
        rated = c.set_group_policy("orders", "billing", delayq.GroupPolicy(rate_per_s=200))
        assert (rated.max_attempts, rated.rate_per_s) == (3, 200)
        assert c.group_policy("orders", "billing").max_attempts == 3
        assert c.set_group_policy("orders", "other", delayq.GroupPolicy()).max_attempts == 16
        unlimited = delayq.GroupPolicy(max_attempts=0)
        assert c.set_group_policy("orders", "billing", unlimited).max_attempts == 0
    # over the raw wire: absent is the default, and the answer always carries it
    with grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.DelayQueueStub(channel)
        req = pb.SetGroupPolicyRequest(topic="orders", group="raw", policy=pb.GroupPolicy())
        got = stub.SetGroupPolicy(req, timeout=10).policy
        assert got.HasField("max_attempts") and got.max_attempts == 16


def _fields(p: delayq.GroupPolicy) -> dict[str, object]:
    return {f: getattr(p, f) for f in p.__dataclass_fields__}


def test_the_async_client_does_the_same(srv: ServerProcess) -> None:
    async def run() -> None:
        async with delayq.AsyncClient(srv.address) as c:
            assert await c.set_group_policy("orders", "async", POLICY) == POLICY
            assert (await c.pause_group("orders", "async")).paused
            assert not (await c.resume_group("orders", "async")).paused
            assert await c.group_policy("orders", "async") == POLICY
            assert [i.group for i in await c.groups("orders")] == ["async"]

    asyncio.run(run())


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (pb.GroupPolicy(rate_per_s=-1), "policy.rate_per_s"),
        (
            pb.GroupPolicy(
                backoff=pb.Backoff(kind=pb.BACKOFF_KIND_EXPONENTIAL, initial_ms=5000, max_ms=1000)
            ),
            "policy.backoff.max_ms",
        ),
        (pb.GroupPolicy(max_attempts=10**9), "policy.max_attempts"),
        (pb.GroupPolicy(max_in_flight=2**62), "policy.max_in_flight"),
        (pb.GroupPolicy(backoff=pb.Backoff(initial_ms=2**40)), "policy.backoff.initial_ms"),
        (pb.GroupPolicy(backoff=pb.Backoff(kind=5)), "policy.backoff.kind"),  # type: ignore[arg-type]
        (pb.GroupPolicy(backoff=pb.Backoff(jitter=9)), "policy.backoff.jitter"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_policy_is_invalid_argument_naming_the_field(
    srv: ServerProcess, policy: pb.GroupPolicy, field: str
) -> None:
    req = pb.SetGroupPolicyRequest(topic="orders", group="billing", policy=policy)
    code, details = status(srv.address, "SetGroupPolicy", req)
    assert code is grpc.StatusCode.INVALID_ARGUMENT, details
    assert details.startswith(field), details
    with delayq.Client(srv.address) as c:
        assert c.group_policy("orders", "billing").max_attempts == 3, "nothing stored"


def test_names_are_checked_as_receives_are(srv: ServerProcess) -> None:
    for method, req in (
        ("SetGroupPolicy", pb.SetGroupPolicyRequest(topic="orders", group="bad group!")),
        ("GetGroupPolicy", pb.GetGroupPolicyRequest(topic="orders", group="")),
        ("PauseGroup", pb.PauseGroupRequest(topic="bad topic!", group="g")),
        ("ResumeGroup", pb.PauseGroupRequest(topic="orders", group="x" * 500)),
        ("ListGroups", pb.ListGroupsRequest(topic="no/slashes")),
    ):
        code, details = status(srv.address, method, req)
        assert code is grpc.StatusCode.INVALID_ARGUMENT, (method, details)
        assert details.startswith(("group", "topic")), (method, details)
    with delayq.Client(srv.address) as c, pytest.raises(delayq.InvalidArgument) as refused:
        c.set_group_policy("orders", "bad group!", POLICY)
    assert refused.value.field == "group"
    assert "shard 0 failed" not in str(refused.value), "every shard refused it: its own error"


def test_a_bad_policy_from_the_client_raises_invalid_argument(srv: ServerProcess) -> None:
    with delayq.Client(srv.address) as c, pytest.raises(delayq.InvalidArgument) as refused:
        c.set_group_policy("orders", "billing", delayq.GroupPolicy(rate_per_s=-5))
    assert refused.value.field == "policy.rate_per_s"


def test_a_paused_group_is_handed_nothing_until_resumed(srv: ServerProcess) -> None:
    with delayq.Client(srv.address) as c:
        c.pause_group("orders", "paused")
        sent = [c.schedule("orders", f"m{i}".encode(), delay=i * 0.01).id for i in range(5)]
        assert c.receive("orders", "paused", max_messages=10, wait_s=1.5) == []
        other = c.receive("orders", "other", max_messages=10, wait_s=5)
        assert len(other) == 5, "another group is not paused"
        shard = c.stats("orders").shards[0]
        [topic] = shard.topics
        paused = {g.group: g for g in topic.groups}["paused"]
        assert paused.paused and paused.policy.paused and paused.explicit
        c.resume_group("orders", "paused")
        got: list[str] = []
        until = time.monotonic() + 15
        while len(got) < 5 and time.monotonic() < until:
            got += [m.id for m in c.receive("orders", "paused", max_messages=10, wait_s=2)]
        assert got == sent, "all of them, in due order"


PAUSE_WINDOW_S = float(os.environ.get("DELAYQ_PAUSE_WINDOW_S", "10"))


def test_a_group_paused_under_a_producers_load_loses_nothing_and_resumes_in_due_order(
    srv: ServerProcess,
) -> None:
    sent: list[str] = []
    refused: list[object] = []
    stop = threading.Event()

    def produce() -> None:  # ~200 messages/s, due 0..0.45 s after they are sent
        with delayq.Client(srv.address) as p:
            while not stop.is_set():
                batch = [delayq.Outgoing(topic="load", body=b"%d" % i, delay=0.05 * (i % 10))
                         for i in range(20)]  # fmt: skip
                out = p.schedule_many(batch)
                sent.extend(o.id for o in out if o.ok)
                refused.extend(o for o in out if not o.ok)
                time.sleep(0.1)

    with delayq.Client(srv.address) as c:
        c.pause_group("load", "g")
        producer = threading.Thread(target=produce)
        producer.start()
        handed: list[delayq.Received] = []
        try:
            until = time.monotonic() + PAUSE_WINDOW_S
            while time.monotonic() < until:
                handed += c.receive("load", "g", max_messages=100, wait_s=0.5)
        finally:
            stop.set()
            producer.join()
        assert not refused and len(sent) > 100
        assert handed == [], "a paused group is handed nothing"
        c.resume_group("load", "g")
        got: list[delayq.Received] = []
        until = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < until:
            batch = c.receive("load", "g", max_messages=1000, wait_s=1)
            got += batch
            c.ack("load", "g", [m.receipt for m in batch])
    assert sorted(m.id for m in got) == sorted(sent), "each one once: nothing lost"
    # in the order they were released: their due order, but for a message due as it
    # was sent (delay 0) whose link came a few ms late (it is released when linked)
    released = [m.delivered_at_ms for m in got]
    assert released == sorted(released), "handed out in release order after the resume"
    assert all(m.delivered_at_ms >= m.deliver_at_ms for m in got)


def test_a_subscription_of_a_paused_group_gets_nothing_until_resumed(srv: ServerProcess) -> None:
    req = pb.ReceiveRequest(topic="orders", group="streamed", wait_ms=200)
    with delayq.Client(srv.address) as c:
        c.pause_group("orders", "streamed")
        sent = [c.schedule("orders", f"held{i}".encode()).id for i in range(2)]
        with grpc.insecure_channel(srv.address) as channel:
            stream = pb_grpc.DelayQueueStub(channel).Subscribe(req, timeout=1.5)
            got = []
            with pytest.raises(grpc.RpcError) as ended:
                for resp in stream:
                    got += list(resp.messages)
            assert ended.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            assert got == [], "a paused group's stream is handed nothing"
        c.resume_group("orders", "streamed")
        ids: list[str] = []
        with c.subscribe("orders", "streamed", wait_s=0.2) as sub:
            for batch in sub:
                ids += [m.id for m in batch]
                if len(ids) >= 2:
                    break
        assert ids == sent, "all of them, in due order"


def test_a_nacked_message_comes_again_no_earlier_than_its_backoff(srv: ServerProcess) -> None:
    backoff = delayq.Backoff(initial_ms=1500)
    with delayq.Client(srv.address) as c:
        c.set_group_policy("orders", "retry", delayq.GroupPolicy(max_attempts=5, backoff=backoff))
        sent = c.schedule("orders", b"flaky")
        [first] = c.receive("orders", "retry", wait_s=5)
        assert (first.id, first.attempt) == (sent.id, 1)
        nacked_at = time.monotonic()
        assert c.nack("orders", "retry", [first.receipt]) == [delayq.AckOutcome.ACKED]
        again = []
        until = time.monotonic() + 20
        while not again and time.monotonic() < until:
            again = list(c.receive("orders", "retry", wait_s=2))
        came = time.monotonic()
        assert [(m.id, m.attempt) for m in again] == [(sent.id, 2)]
        assert came - nacked_at >= 1.5, "never before its backoff"
        # nack's outcomes are change_invisibility's: the old receipt is stale now
        assert c.nack("orders", "retry", [first.receipt]) == [delayq.AckOutcome.STALE]
        [bad] = c.nack("orders", "retry", ["nonsense"])
        assert isinstance(bad, delayq.ItemError) and bad.field.startswith("receipts")
        # the Stats count the retry the nack scheduled (no rate: nothing throttled)
        [g] = [
            g for t in c.stats("orders").shards[0].topics for g in t.groups if g.group == "retry"
        ]
        assert (g.retries, g.throttled) == (1, 0)


def test_stats_show_each_groups_policy(srv: ServerProcess) -> None:
    with delayq.Client(srv.address) as c:
        c.set_group_policy("orders", "billing", POLICY)
        c.schedule("orders", b"x")
        assert c.receive("orders", "billing", wait_s=5)
        shard = c.stats("orders").shards[0]
        [topic] = shard.topics
        g = {g.group: g for g in topic.groups}["billing"]
        assert g.policy == POLICY and g.explicit and not g.paused
        assert g.in_flight == 1 and g.in_flight_limit == POLICY.max_in_flight
        assert g.attempts == {1: 1}
        assert c.stats("orders").topics[0].groups == (), "the summed view has none"


def test_the_policy_is_kept_over_a_restart(srv: ServerProcess) -> None:
    with delayq.Client(srv.address) as c:
        c.set_group_policy("orders", "billing", POLICY)
        c.pause_group("orders", "billing")
    srv.stop()
    srv.start()
    with delayq.Client(srv.address) as c:
        kept = c.group_policy("orders", "billing")
        assert kept == delayq.GroupPolicy(**{**_fields(POLICY), "paused": True})


def test_a_replica_refuses_the_writes_as_it_refuses_an_ack(start_server: Start) -> None:
    replica = start_server("--role", "replica")
    set_req = pb.SetGroupPolicyRequest(topic="orders", group="g", policy=pb.GroupPolicy())
    ack_req = pb.AckRequest(topic="orders", group="g", receipts=["x"])
    pause_req = pb.PauseGroupRequest(topic="orders", group="g")
    ack = status(replica.address, "Ack", ack_req)
    assert ack[0] is grpc.StatusCode.FAILED_PRECONDITION and "replica" in ack[1]
    for method, req in (("SetGroupPolicy", set_req), ("PauseGroup", pause_req)):
        code, details = status(replica.address, method, req)
        assert code is ack[0] and details.endswith(ack[1].partition(": ")[2]), (method, details)
    get = pb.GetGroupPolicyRequest(topic="orders", group="g")
    assert status(replica.address, "GetGroupPolicy", get)[0] is grpc.StatusCode.OK, "reads go on"
