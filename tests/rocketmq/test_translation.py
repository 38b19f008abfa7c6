"""The RocketMQ adapter's pure parts: properties as headers, recall handles, tag
filters, the Settings answer, routes from a shard map, status codes, a send's
keys and dedup ids, and which rows are passed on to other shards."""

from __future__ import annotations

import pytest

from delayq.delivery.policy import Backoff, BackoffKind, GroupPolicy
from delayq.errors import Congested, InvalidArgument, NotMaster, Unavailable
from delayq.rocketmq import properties as props
from delayq.rocketmq.convert import delayq_key, sendable
from delayq.rocketmq.filters import TagFilter
from delayq.rocketmq.handles import recall_handle, recalled
from delayq.rocketmq.names import delayq_topic
from delayq.rocketmq.passing import elsewhere
from delayq.rocketmq.routes import assignments, endpoints, queues, shard_of
from delayq.rocketmq.sessions import NO_LIMIT, answer, retry_policy
from delayq.rocketmq.status import code_of, send_error, status_of
from delayq.rocketmq.v2 import definition_pb2 as rmq
from delayq.settings import AttemptLimits
from delayq.shardmap import ShardEntry, ShardMap, shard_of_key


def test_properties_travel_as_headers_and_come_back() -> None:
    headers = props.headers_of(
        tag="created", keys=["k1", "k2"], message_id="01AB", kind="DELAY",
        born_ms=1700, born_host="h1", user={"colour": "blue"}, field="messages[0]",
    )  # fmt: skip
    assert headers["colour"] == "blue" and headers["rocketmq.keys"] == "k1 k2"
    c = props.carried(headers)
    assert (c.tag, c.keys, c.message_id, c.kind, c.born_ms, c.born_host) == (
        "created", ["k1", "k2"], "01AB", "DELAY", 1700, "h1"
    )  # fmt: skip
    assert props.user_properties(headers) == {"colour": "blue"}
    empty = props.carried({})
    assert (empty.tag, empty.keys, empty.born_ms) == ("", [], 0)
    with pytest.raises(InvalidArgument, match=r"messages\[2\]\.user_properties: 'rocketmq\.x'"):
        props.headers_of(tag="", keys=[], message_id="", kind="", born_ms=0, born_host="",
                         user={"rocketmq.x": "1"}, field="messages[2]")  # fmt: skip


def test_a_recall_handle_names_its_topic_and_message() -> None:
    h = recall_handle("orders", "AQAAAAEAAAAAAAAAAA", "01ABC")
    assert recalled(h, "orders") == ("AQAAAAEAAAAAAAAAAA", "01ABC")
    assert recalled(recall_handle("orders", "AQ"), "orders") == ("AQ", "")
    with pytest.raises(InvalidArgument, match="not of 'payments'"):
        recalled(h, "payments")
    for bad in ("", "%%%", recall_handle("orders", "")[:-2], "djEgb3JkZXJz"):
        with pytest.raises(InvalidArgument, match="recall_handle"):
            recalled(bad, "orders")


@pytest.mark.parametrize(
    ("expression", "tag", "matches"),
    [("*", "x", True), ("", "", True), ("a || b", "b", True), ("a||b", "c", False)],
)
def test_tag_filters(expression: str, tag: str, matches: bool) -> None:
    assert TagFilter.parse("TAG", expression).matches(tag) is matches


def test_sql_and_malformed_tag_filters_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="SQL92"):
        TagFilter.parse("SQL", "a > 1")
    with pytest.raises(InvalidArgument, match="filter_expression"):
        TagFilter.parse("TAG", "a || || b")


def test_settings_answers_merge_the_servers_part() -> None:
    limits = AttemptLimits(16, (("billing", 3), ("audit", 0)))
    publishing = rmq.Publishing(validate_message_type=False)
    producer, st = answer(rmq.Settings(publishing=publishing), 99, limits)
    assert st.code == rmq.OK and producer.publishing.max_body_size == 99
    assert producer.publishing.validate_message_type
    assert producer.backoff_policy.exponential_backoff.initial.ToMilliseconds() == 10
    consumer, st = answer(
        rmq.Settings(subscription=rmq.Subscription(receive_batch_size=5)), 1, limits
    )
    assert consumer.subscription.receive_batch_size == 32 and not consumer.subscription.fifo
    assert consumer.backoff_policy.max_attempts == 16
    for group, attempts in (("billing", 3), ("audit", NO_LIMIT)):
        sub = rmq.Subscription(group=rmq.Resource(name=group))
        consumer, _ = answer(rmq.Settings(subscription=sub), 1, limits)
        assert consumer.backoff_policy.max_attempts == attempts, "the group's own limit"
    _, st = answer(rmq.Settings(), 1, limits)
    assert st.code == rmq.BAD_REQUEST


def test_a_groups_dead_letter_topic_is_delayqs_dlq_topic() -> None:
    assert delayq_topic("%DLQ%billing") == "dlq.billing"
    assert delayq_topic("orders") == "orders"


def test_routes_follow_the_map_and_echo_what_was_asked_without_an_address() -> None:
    m = ShardMap(
        topology_epoch=2,
        shards=(
            ShardEntry(index=0, master="a:1", rocketmq="10.0.0.1:7423"),
            ShardEntry(index=1, master="b:1"),
            ShardEntry(index=2, master="c:1", state="leaving", rocketmq="node-c.svc:7423"),
        ),
    )
    asked = endpoints("127.0.0.1:9000")
    got = queues(rmq.Resource(name="t"), m, asked)
    assert [q.broker.name for q in got] == ["shard-0", "shard-1", "shard-2"]
    assert got[0].broker.endpoints == endpoints("10.0.0.1:7423")
    assert got[0].broker.endpoints.scheme == rmq.IPv4
    assert got[1].broker.endpoints == asked
    assert got[2].broker.endpoints.scheme == rmq.DOMAIN_NAME
    assert [q.permission for q in got] == [rmq.READ_WRITE, rmq.READ_WRITE, rmq.READ]
    assert [shard_of(q) for q in got] == [0, 1, 2]
    assert len(assignments(got)) == 3
    assert shard_of(rmq.MessageQueue(broker=rmq.Broker(name="broker-a"))) is None
    assert endpoints("[::1]:7423").scheme == rmq.IPv6


def test_errors_map_to_the_most_specific_code() -> None:
    assert code_of(InvalidArgument("message_queue.topic.name", "bad")) == rmq.ILLEGAL_TOPIC
    assert code_of(InvalidArgument("messages[3].body", "must not be empty")) == (
        rmq.MESSAGE_BODY_EMPTY
    )
    assert code_of(InvalidArgument("messages[3].body", "is 9 bytes")) == rmq.MESSAGE_BODY_TOO_LARGE
    assert code_of(InvalidArgument("whatever", "bad")) == rmq.BAD_REQUEST
    for field, code in (("key", rmq.ILLEGAL_MESSAGE_KEY), ("dedup_id", rmq.ILLEGAL_MESSAGE_ID)):
        st = send_error(InvalidArgument(f"messages[0].{field}", "bad"), 3)
        assert st.code == code and st.message.startswith("messages[3].system_properties."), st
    assert code_of(Congested("full", 10)) == rmq.TOO_MANY_REQUESTS
    assert code_of(Unavailable("later")) == rmq.HA_NOT_AVAILABLE
    replica = NotMaster("ids", 0, 1, "a:1", 0)
    assert code_of(replica) == rmq.HA_NOT_AVAILABLE
    assert "(QueryRoute)" in status_of(replica).message, "a RocketMQ client's route call"
    assert code_of(RuntimeError()) == rmq.INTERNAL_SERVER_ERROR


def test_auto_renewed_receipts_are_renewed_while_their_client_lives_up_to_the_cap() -> None:
    from delayq.rocketmq.renewals import RENEW_CAP_MS, Renewal, Renewals

    r = Renewals()
    r.hold("c1", "t", "g", ["r1", "r2"], 0)
    r.hold("c2", "t", "g", ["r3"], 0)
    r.hold("c1", "u", "g", ["r4"], 1_000)
    assert r.due(20_000, {"c1", "c2"}) == [
        Renewal("t", "g", ["r1", "r2", "r3"]),
        Renewal("u", "g", ["r4"]),
    ]
    r.settle(["r2"])  # acked
    assert r.due(40_000, {"c1"}) == [Renewal("t", "g", ["r1"]), Renewal("u", "g", ["r4"])]
    assert len(r) == 2, "c2 ended its session: its receipt is let go"
    assert r.due(RENEW_CAP_MS, {"c1"}) == [Renewal("u", "g", ["r4"])], "r1 reached the cap"
    assert r.due(RENEW_CAP_MS + 1_000, {"c1"}) == [] and len(r) == 0


def test_a_consumers_settings_carry_its_groups_policy_as_a_retry_policy() -> None:
    limits = AttemptLimits(16, ())
    sub = rmq.Settings(subscription=rmq.Subscription(group=rmq.Resource(name="billing")))
    exponential = GroupPolicy(
        max_attempts=4,
        backoff=Backoff(
            kind=BackoffKind.EXPONENTIAL, initial_ms=2000, multiplier=3.0, max_ms=90_000
        ),
    )
    consumer, st = answer(sub, 1, limits, exponential)
    retry = consumer.backoff_policy
    assert st.code == rmq.OK and retry.max_attempts == 4
    assert retry.WhichOneof("strategy") == "exponential_backoff"
    e = retry.exponential_backoff
    assert (e.initial.ToMilliseconds(), e.max.ToMilliseconds(), e.multiplier) == (2000, 90_000, 3)
    fixed = GroupPolicy(backoff=Backoff(initial_ms=1500))  # max_attempts 0: unlimited
    retry = answer(sub, 1, limits, fixed)[0].backoff_policy
    assert retry.max_attempts == NO_LIMIT
    assert [d.ToMilliseconds() for d in retry.customized_backoff.next] == [1500]
    assert retry_policy(fixed) == retry
    producer = answer(rmq.Settings(publishing=rmq.Publishing()), 1, limits, exponential)[0]
    assert producer.backoff_policy.max_attempts == 3, "a producer's is the server's own"


def test_a_sends_rows_carry_the_first_key_and_the_message_id_for_dedup() -> None:
    def m(message_id: str, keys: list[str]) -> rmq.Message:
        out = rmq.Message(body=b"x")
        out.topic.name = "t"
        out.system_properties.message_id = message_id
        out.system_properties.keys.extend(keys)
        return out

    s = sendable([m("01A", ["order-42", "b"]), m("", []), m("01C", ["k"])], 60_000)
    b = s.batch()
    assert b.keys == ["order-42", "", "k"]
    assert b.dedup_ids == ["01A", "", "01C"]
    assert b.dedup_window_ms == [60_000, 0, 60_000]  # no message id: not deduplicated
    assert delayq_key([]) == ""
    plain = sendable([m("01A", [])]).batch()  # no window, no key
    assert (plain.keys, plain.dedup_ids, plain.dedup_window_ms) == (None, None, None)
    part = s.only([2])
    assert (part.rows, part.keys, part.entries) == ([2], ["k"], s.entries)


def test_rows_of_other_shards_keys_are_passed_on_by_owner() -> None:
    keys = [f"key-{i}" for i in range(40)] + [""]
    two = ShardMap.of_masters(["a:1", "b:1"])
    away = elsewhere(keys, two, 0)
    assert set(away) == {1}
    assert away[1] == [k for k, key in enumerate(keys) if key and shard_of_key(key, 2) == 1]
    assert 0 < len(away[1]) < 40
    assert elsewhere(keys, ShardMap.single("a:1"), 0) == {}  # alone: every key is its own
    assert elsewhere(["", ""], two, 0) == {}  # keyless: any shard
