"""The RocketMQ 5 port over raw gRPC stubs of the vendored protos, against a real
``delayq serve --rocketmq-listen`` process: sessions, routes, send, recall,
receive, ack, invisibility, filters, and every refusal's code and message."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import delayq
from delayq.rocketmq.v2 import definition_pb2 as rmq
from delayq.rocketmq.v2 import service_pb2 as svc
from delayq.rocketmq.v2 import service_pb2_grpc as svc_grpc
from tests.rocketmq.rawcalls import message, name, receive, received, send
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(120)

MAX_BODY = 4096
TWICE = "twice"
"""A group with two delivery attempts."""


@pytest.fixture(scope="module", params=["native", "grpcio"])
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    """One server per module and gRPC server kind (``--grpc-server``): every test
    runs against both."""
    data = tmp_path_factory.mktemp("rmq") / "data"
    s = ServerProcess(
        data,
        [
            "--rocketmq-listen", "127.0.0.1:0",
            "--grpc-server", request.param,
            "--max-body-bytes", str(MAX_BODY),
            "--max-delivery-attempts", f"16 {TWICE}=2",
        ],
    ).start()  # fmt: skip
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[svc_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(server.rocketmq_address) as channel:
        yield svc_grpc.MessagingServiceStub(channel)


def test_the_ports_are_served_by_the_grpc_server_asked_for(server: ServerProcess) -> None:
    """``native``: pygrpc-native's Rust I/O threads serve the plaintext ports (and
    health answers there); ``grpcio``: none run."""
    asked = server.args[server.args.index("--grpc-server") + 1]
    assert server.proc is not None
    tasks = Path(f"/proc/{server.proc.pid}/task").iterdir()
    threads = {(t / "comm").read_text().strip() for t in tasks}
    assert ("grpc-native-io" in threads) == (asked == "native"), threads
    for address in (server.address, server.rocketmq_address):
        with grpc.insecure_channel(address) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert answer.status == health_pb2.HealthCheckResponse.SERVING


def _settings(**kind: Any) -> svc.TelemetryCommand:
    s = rmq.Settings(**kind)
    return svc.TelemetryCommand(settings=s)


def test_telemetry_answers_every_settings_it_is_written_and_stays_open(stub: Any) -> None:
    producer = _settings(client_type=rmq.PRODUCER, publishing=rmq.Publishing())
    consumer = _settings(client_type=rmq.SIMPLE_CONSUMER, subscription=rmq.Subscription())
    bare = _settings(client_type=rmq.PRODUCER)
    replies = stub.Telemetry(iter([producer, consumer, bare]), timeout=10,
                             metadata=(("x-mq-client-id", "c1"),))  # fmt: skip
    p, c, b = list(replies)
    assert p.status.code == rmq.OK
    assert p.settings.publishing.max_body_size == MAX_BODY
    assert p.settings.publishing.validate_message_type
    assert p.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    assert p.settings.backoff_policy.max_attempts == 3
    assert p.settings.metric.on is False
    assert c.status.code == rmq.OK
    assert c.settings.subscription.receive_batch_size == 32
    assert c.settings.subscription.long_polling_timeout.seconds == 20
    assert c.settings.subscription.fifo is False
    assert c.settings.backoff_policy.max_attempts == 16
    assert b.status.code == rmq.BAD_REQUEST and "publishing" in b.status.message


def test_the_route_is_a_queue_per_shard_at_the_endpoints_asked(stub: Any) -> None:
    topic = name()
    req = svc.QueryRouteRequest()
    req.topic.name = topic
    req.endpoints.scheme = rmq.IPv4
    req.endpoints.addresses.add(host="10.0.0.9", port=8081)
    resp = stub.QueryRoute(req, timeout=10)
    assert resp.status.code == rmq.OK
    (q,) = resp.message_queues
    assert q.topic.name == topic and q.permission == rmq.READ_WRITE
    assert q.broker.name == "shard-0" and q.broker.id == 0
    assert q.broker.endpoints == req.endpoints
    assert list(q.accept_message_types) == [rmq.NORMAL, rmq.DELAY]
    bad = svc.QueryRouteRequest()
    bad.topic.name = "no spaces"
    refused = stub.QueryRoute(bad, timeout=10)
    assert refused.status.code == rmq.ILLEGAL_TOPIC and "topic.name" in refused.status.message
    assignment = svc.QueryAssignmentRequest(topic=req.topic, endpoints=req.endpoints)
    got = stub.QueryAssignment(assignment, timeout=10)
    assert [a.message_queue.broker.name for a in got.assignments] == ["shard-0"]


def test_a_normal_message_now_and_a_delay_message_never_before_its_time(stub: Any) -> None:
    topic, group = name(), name()
    due = int(time.time() * 1000) + 2500
    normal = message(topic, b"now", tag="a", keys=["k1", "k2"])
    normal.user_properties["colour"] = "blue"
    delayed = message(topic, b"later", due_ms=due)
    resp = send(stub, normal, delayed)
    assert resp.status.code == rmq.OK, resp
    assert [e.message_id for e in resp.entries] == [
        normal.system_properties.message_id,
        delayed.system_properties.message_id,
    ]
    assert all(e.status.code == rmq.OK and e.recall_handle for e in resp.entries)

    st, got, _ = receive(stub, topic, group, wait_s=1)
    assert st.code == rmq.OK
    (m,) = got
    assert m.body == b"now" and m.topic.name == topic
    sp = m.system_properties
    assert sp.tag == "a" and list(sp.keys) == ["k1", "k2"]
    assert sp.message_id == normal.system_properties.message_id
    assert dict(m.user_properties) == {"colour": "blue"}
    assert sp.body_digest.type == rmq.MD5
    assert sp.body_digest.checksum == hashlib.md5(b"now").hexdigest().upper()
    assert sp.delivery_attempt == 1 and sp.receipt_handle and sp.message_type == rmq.NORMAL

    while int(time.time() * 1000) < due - 300:
        st, early, _ = receive(stub, topic, group, wait_s=0.2)
        assert st.code == rmq.OK and not early, "a delay message arrived before its time"
    got = received(stub, topic, group, wait_s=5)
    (late,) = got
    arrived = int(time.time() * 1000)
    assert late.body == b"later" and arrived >= due
    assert late.system_properties.message_type == rmq.DELAY
    assert late.system_properties.delivery_timestamp.ToMilliseconds() == due


def test_an_empty_poll_ends_ok_within_its_long_polling_timeout(stub: Any) -> None:
    st, got, took = receive(stub, name(), name(), wait_s=1)
    assert st.code == rmq.OK and got == []
    assert took < 4, "the poll outlasted its long-polling timeout"


def test_a_poll_without_long_polling_timeout_leaves_the_clients_request_timeout_free(
    stub: Any,
) -> None:
    """As the Go SimpleConsumer asks: no long_polling_timeout, a deadline of its await
    duration (here 1 s) plus the request_timeout of its Settings (here 10 s). The poll
    ends after the await, not just before the deadline, where it would race the
    client's own timer (its answer lost, with any message in it, under load)."""
    settings = rmq.Settings(client_type=rmq.SIMPLE_CONSUMER, subscription=rmq.Subscription())
    settings.request_timeout.FromSeconds(10)
    client = (("x-mq-client-id", name()),)
    done = threading.Event()

    def commands() -> Iterator[svc.TelemetryCommand]:
        yield svc.TelemetryCommand(settings=settings)
        done.wait(60)  # the session lasts while its stream does

    session = stub.Telemetry(commands(), timeout=60, metadata=client)
    try:
        assert next(session).status.code == rmq.OK
        req = svc.ReceiveMessageRequest(batch_size=16)
        req.group.name, req.message_queue.topic.name = name(), name()
        req.message_queue.broker.name = "shard-0"
        req.filter_expression.type, req.filter_expression.expression = rmq.TAG, "*"
        req.invisible_duration.FromSeconds(15)
        began = time.monotonic()
        frames = list(stub.ReceiveMessage(req, timeout=11, metadata=client))
        took = time.monotonic() - began
    finally:
        done.set()
        session.cancel()
    assert [f.status.code for f in frames if f.WhichOneof("content") == "status"] == [rmq.OK]
    assert took < 7, f"polled {took:.1f} s: past the await (1 s), into the request timeout"


def test_timestamps_protobuf_refuses_are_each_an_entrys_status(stub: Any) -> None:
    """A Timestamp whose nanos are out of range (protobuf's ToMilliseconds raises): the
    entry's status names the field, not INTERNAL (found by the fuzz test)."""
    topic = name()
    bad = message(topic, b"bad", due_ms=int(time.time() * 1000) + 60_000)
    bad.system_properties.delivery_timestamp.nanos = -(2**31)
    born = message(topic, b"born")
    born.system_properties.born_timestamp.nanos = 2_000_000_000
    good = message(topic, b"good")
    sent = send(stub, bad, born, good)
    codes = [e.status.code for e in sent.entries]
    assert codes == [rmq.ILLEGAL_DELIVERY_TIME, rmq.BAD_REQUEST, rmq.OK], sent
    assert "messages[0].system_properties.delivery_timestamp" in sent.entries[0].status.message
    assert "messages[1].system_properties.born_timestamp" in sent.entries[1].status.message


def test_recall_cancels_before_the_time_and_says_so_after_delivery(stub: Any) -> None:
    topic, group = name(), name()
    # due well after the recall, however slowly a loaded machine sends it (1.5 s was
    # passed once under the full suite's load: the recall found it delivered)
    due = int(time.time() * 1000) + 4000
    sent = send(stub, message(topic, b"recalled", due_ms=due), message(topic, b"kept"))
    recalled, kept = sent.entries

    def recall(handle: str, of: str = topic) -> Any:
        req = svc.RecallMessageRequest(recall_handle=handle)
        req.topic.name = of
        return stub.RecallMessage(req, timeout=10)

    first = recall(recalled.recall_handle)
    assert first.status.code == rmq.OK and first.message_id == recalled.message_id
    assert recall(recalled.recall_handle).status.code == rmq.OK  # a second recall: no harm
    got = received(stub, topic, group, wait_s=1)
    assert [m.body for m in got] == [b"kept"]
    after = recall(kept.recall_handle)
    assert after.status.code == rmq.PRECONDITION_FAILED and "delivered" in after.status.message
    time.sleep(max(0, due - time.time() * 1000) / 1000 + 0.5)
    got = received(stub, topic, group, wait_s=0.5)
    assert got == [], "a recalled message was delivered"
    forged = recall("bm90IGEgaGFuZGxl")
    assert forged.status.code == rmq.BAD_REQUEST and "recall_handle" in forged.status.message
    other = recall(recalled.recall_handle, of=name())
    assert other.status.code == rmq.BAD_REQUEST and "topic" in other.status.message


def test_ack_settles_and_a_lapsed_invisibility_redelivers_with_the_next_attempt(
    stub: Any,
) -> None:
    topic, group = name(), name()
    send(stub, message(topic, b"one"), message(topic, b"two"))
    got = received(stub, topic, group, wait_s=1, batch=2)
    one, two = sorted(got, key=lambda m: m.body)

    def ack(m: rmq.Message, handle: str | None = None) -> Any:
        req = svc.AckMessageRequest()
        req.group.name, req.topic.name = group, topic
        req.entries.add(message_id=m.system_properties.message_id,
                        receipt_handle=handle or m.system_properties.receipt_handle)  # fmt: skip
        return stub.AckMessage(req, timeout=10)

    assert ack(one).status.code == rmq.OK
    assert ack(one).status.code == rmq.OK  # again: already acknowledged
    forged = ack(one, handle="not-a-handle")
    assert forged.status.code == rmq.INVALID_RECEIPT_HANDLE
    assert forged.entries[0].status.code == rmq.INVALID_RECEIPT_HANDLE

    change = svc.ChangeInvisibleDurationRequest(receipt_handle=two.system_properties.receipt_handle)
    change.group.name, change.topic.name = group, topic
    change.invisible_duration.FromMilliseconds(0)  # a nack: deliver again now
    changed = stub.ChangeInvisibleDuration(change, timeout=10)
    assert changed.status.code == rmq.OK and changed.receipt_handle
    fresh = changed.receipt_handle
    assert fresh != two.system_properties.receipt_handle, "a new handle"
    stale = stub.ChangeInvisibleDuration(change, timeout=10)
    assert stale.status.code == rmq.INVALID_RECEIPT_HANDLE and "new handle" in stale.status.message
    again = received(stub, topic, group, wait_s=3)
    (m,) = again
    assert m.body == b"two" and m.system_properties.delivery_attempt == 2
    assert ack(two).status.code == rmq.INVALID_RECEIPT_HANDLE, "the first attempt's handle is stale"
    assert ack(m, handle=fresh).status.code == rmq.INVALID_RECEIPT_HANDLE, "and so is the nack's"
    assert ack(m).status.code == rmq.OK


def _change(topic: str, group: str, handle: str, ms: int) -> svc.ChangeInvisibleDurationRequest:
    req = svc.ChangeInvisibleDurationRequest(receipt_handle=handle)
    req.group.name, req.topic.name = group, topic
    req.invisible_duration.FromMilliseconds(ms)
    return req


def _consumer_settings(stub: Any, topic: str, group: str) -> rmq.Settings:
    sub = rmq.Subscription(
        group=rmq.Resource(name=group),
        subscriptions=[rmq.SubscriptionEntry(topic=rmq.Resource(name=topic))],
    )
    command = svc.TelemetryCommand(settings=rmq.Settings(subscription=sub))
    (answer,) = stub.Telemetry(iter([command]), timeout=10)
    assert answer.status.code == rmq.OK
    settings: rmq.Settings = answer.settings
    return settings


def test_a_consumers_settings_carry_its_groups_policy(server: ServerProcess, stub: Any) -> None:
    """Set over delayq's API, a group's backoff and attempts reach its RocketMQ
    consumers as their RetryPolicy (a PushConsumer retries by it); a group without
    one keeps the server's back-off."""
    topic, exp, fixed = name(), name(), name()
    backoff = delayq.Backoff(
        kind=delayq.BackoffKind.EXPONENTIAL, initial_ms=3000, multiplier=4.0, max_ms=120_000
    )
    with delayq.Client(server.address) as c:
        c.set_group_policy(topic, exp, delayq.GroupPolicy(max_attempts=5, backoff=backoff))
        fixed_unlimited = delayq.GroupPolicy(max_attempts=0, backoff=delayq.Backoff(initial_ms=700))
        c.set_group_policy(topic, fixed, fixed_unlimited)
    retry = _consumer_settings(stub, topic, exp).backoff_policy
    e = retry.exponential_backoff
    assert retry.max_attempts == 5
    assert (e.initial.ToMilliseconds(), e.max.ToMilliseconds(), e.multiplier) == (3000, 120_000, 4)
    retry = _consumer_settings(stub, topic, fixed).backoff_policy
    assert [d.ToMilliseconds() for d in retry.customized_backoff.next] == [700]
    assert retry.max_attempts == 2**31 - 1, "0: no limit, as the field's largest"
    retry = _consumer_settings(stub, topic, name()).backoff_policy
    assert retry.max_attempts == 16 and retry.exponential_backoff.initial.seconds == 1


def test_a_paused_group_receives_nothing_until_resumed(server: ServerProcess, stub: Any) -> None:
    """Paused over delayq's API, a group's RocketMQ consumers are handed nothing;
    resumed, they get what came due meanwhile."""
    topic, group = name(), name()
    with delayq.Client(server.address) as c:
        c.pause_group(topic, group)
        (sent,) = send(stub, message(topic, b"held")).entries
        assert received(stub, topic, group, wait_s=1) == []
        c.resume_group(topic, group)
    (m,) = received(stub, topic, group, wait_s=5)
    assert m.system_properties.message_id == sent.message_id and m.body == b"held"


def test_past_its_last_attempt_a_message_is_in_the_groups_dlq_topic(stub: Any) -> None:
    """The group has two attempts (the server's --max-delivery-attempts): nacked twice,
    a message goes to %DLQ%<group>, with where it came from; the group's Settings
    tell its consumers the same count."""
    topic = name()
    (sent,) = send(stub, message(topic, b"poison", tag="t")).entries
    for attempt in (1, 2):
        (m,) = received(stub, topic, TWICE, wait_s=3)
        assert m.system_properties.delivery_attempt == attempt
        nack = _change(topic, TWICE, m.system_properties.receipt_handle, 0)
        assert stub.ChangeInvisibleDuration(nack, timeout=10).status.code == rmq.OK
    assert received(stub, topic, TWICE, wait_s=0.5) == [], "no third attempt"
    (dead,) = received(stub, f"%DLQ%{TWICE}", name(), wait_s=3)
    assert dead.body == b"poison" and dead.topic.name == f"%DLQ%{TWICE}"
    assert dead.system_properties.message_id == sent.message_id
    assert dead.system_properties.tag == "t"
    assert dict(dead.user_properties) == {
        "dlq.topic": topic, "dlq.group": TWICE, "dlq.attempts": "2",
        "dlq.id": dict(dead.user_properties)["dlq.id"],
    }  # fmt: skip
    sub = rmq.Settings(subscription=rmq.Subscription(group=rmq.Resource(name=TWICE)))
    (answer,) = stub.Telemetry(iter([svc.TelemetryCommand(settings=sub)]), timeout=10)
    assert answer.settings.backoff_policy.max_attempts == 2


def test_forward_to_the_dead_letter_queue_on_the_clients_word(stub: Any) -> None:
    topic, group = name(), name()
    send(stub, message(topic, b"bad"), message(topic, b"good"))
    bad, good = sorted(received(stub, topic, group, wait_s=3, batch=2), key=lambda m: m.body)

    def forward(m: rmq.Message, handle: str = "") -> Any:
        req = svc.ForwardMessageToDeadLetterQueueRequest(
            receipt_handle=handle or m.system_properties.receipt_handle,
            message_id=m.system_properties.message_id,
            delivery_attempt=m.system_properties.delivery_attempt,
            max_delivery_attempts=16,
        )
        req.group.name, req.topic.name = group, topic
        return stub.ForwardMessageToDeadLetterQueue(req, timeout=10)

    assert forward(bad).status.code == rmq.OK
    assert forward(good, handle="forged").status.code == rmq.INVALID_RECEIPT_HANDLE
    (dead,) = received(stub, f"%DLQ%{group}", name(), wait_s=3)
    assert dead.body == b"bad" and dead.user_properties["dlq.attempts"] == "1"
    assert received(stub, topic, group, wait_s=0.3) == [], "the dead letter is not the group's"


def test_a_tag_filter_skips_what_it_does_not_match_for_that_group(stub: Any) -> None:
    topic, group, other = name(), name(), name()
    send(stub, message(topic, b"a", tag="a"), message(topic, b"c", tag="c"),
          message(topic, b"b", tag="b"))  # fmt: skip
    got = received(stub, topic, group, wait_s=1, expression="a || b")
    assert sorted(m.body for m in got) == [b"a", b"b"]
    rest = received(stub, topic, group, wait_s=0.5, expression="*")
    assert rest == [], "a message the filter skipped was delivered to the group later"
    everything = received(stub, topic, other, wait_s=1)
    assert sorted(m.body for m in everything) == [b"a", b"b", b"c"], "other groups see all"
    sql, _, _ = receive(stub, topic, group, wait_s=0.2, expression="a > 1", kind=rmq.SQL)
    assert sql.code == rmq.ILLEGAL_FILTER_EXPRESSION and "SQL" in sql.message


def test_refusals_name_what_is_wrong(stub: Any) -> None:
    topic = name()
    far = int(time.time() * 1000) + 4000 * 86_400_000
    fifo = message(topic, message_group="g")
    transaction = message(topic, message_type=rmq.TRANSACTION)
    too_big = message(topic, b"x" * (MAX_BODY + 1))
    empty = message(topic, b"")
    resp = send(stub, message(topic, due_ms=far), too_big, fifo, transaction, empty)
    codes = [e.status.code for e in resp.entries]
    assert codes == [
        rmq.ILLEGAL_DELIVERY_TIME,
        rmq.MESSAGE_BODY_TOO_LARGE,
        rmq.NOT_IMPLEMENTED,
        rmq.NOT_IMPLEMENTED,
        rmq.MESSAGE_BODY_EMPTY,
    ], resp
    assert "messages[0].system_properties.delivery_timestamp" in resp.entries[0].status.message
    assert "FIFO" in resp.entries[2].status.message
    assert resp.status.code == rmq.MULTIPLE_RESULTS
    reserved = message(topic)
    reserved.user_properties["rocketmq.tag"] = "x"
    (entry,) = send(stub, reserved).entries
    assert entry.status.code == rmq.ILLEGAL_MESSAGE_PROPERTY_KEY
    st, _, _ = receive(stub, topic, name(), wait_s=0.2, invisible_s=1)
    assert st.code == rmq.ILLEGAL_INVISIBLE_TIME and "invisible_duration" in st.message


def test_what_delayq_does_not_do_answers_not_implemented(stub: Any) -> None:
    calls = [
        stub.UpdateOffset(svc.UpdateOffsetRequest(), timeout=10),
        stub.GetOffset(svc.GetOffsetRequest(), timeout=10),
        stub.QueryOffset(svc.QueryOffsetRequest(), timeout=10),
        stub.EndTransaction(svc.EndTransactionRequest(), timeout=10),
        stub.SyncLiteSubscription(svc.SyncLiteSubscriptionRequest(), timeout=10),
        *stub.PullMessage(svc.PullMessageRequest(), timeout=10),
    ]
    assert [c.status.code for c in calls] == [rmq.NOT_IMPLEMENTED] * len(calls)
    assert all("not supported" in c.status.message for c in calls)
    assert stub.Heartbeat(svc.HeartbeatRequest(), timeout=10).status.code == rmq.OK
    bye = stub.NotifyClientTermination(svc.NotifyClientTerminationRequest(), timeout=10)
    assert bye.status.code == rmq.OK
