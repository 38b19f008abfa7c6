"""A consumer group's delivery policy as the engine keeps it: checked, logged
(POLICY records), read back with the settings' defaults for groups none was set
for, paused and resumed, listed; surviving a clean restart, a kill (replayed from
the log) and a checkpoint."""

from __future__ import annotations

from dataclasses import replace

import pytest

from delayq import FakeClock, InvalidArgument
from delayq.engine import AckOutcome, Backoff, BackoffKind, GroupPolicy, Jitter, PushTarget
from delayq.settings import AttemptLimits
from tests.support.engines import Make, drain, ids, req, run_until

POLICY = GroupPolicy(
    max_attempts=5,
    backoff=Backoff(
        kind=BackoffKind.EXPONENTIAL, initial_ms=100, multiplier=3.0, max_ms=5000,
        jitter=Jitter.EQUAL,
    ),
    rate_per_s=2.5,
    max_in_flight=7,
)  # fmt: skip
TARGET = PushTarget(
    url="https://user:pw@hooks.example/in?sig=1", method="PUT", headers=(("X-Env", "prod"),),
    timeout_ms=2500, secret_ref="hooks/current",
)  # fmt: skip
PUSH = GroupPolicy(max_attempts=3, push=TARGET)


def test_a_policy_set_is_checked_stored_and_read_back(make_engine: Make) -> None:
    e = make_engine(
        delivery_attempts=AttemptLimits(4, (("special", 9),)), max_inflight_per_group=50
    )
    assert e.group_policy("t", "g") == GroupPolicy(max_attempts=4), "in flight: the server's"
    assert e.group_policy("t", "special").max_attempts == 9
    stored = e.set_group_policy("t", "g", POLICY)
    assert stored.burst == 3, "a rate without a burst: the rate rounded up"
    assert e.group_policy("t", "g") == stored
    assert e.group_policy("other", "g") == GroupPolicy(max_attempts=4)
    with pytest.raises(InvalidArgument, match=r"policy\.backoff\.max_ms"):
        e.set_group_policy("t", "g", GroupPolicy(backoff=Backoff(initial_ms=10, max_ms=5)))
    with pytest.raises(InvalidArgument, match=r"policy\.rate_per_s"):
        e.set_group_policy("t", "g", GroupPolicy(rate_per_s=-1.0))
    with pytest.raises(InvalidArgument, match="group"):
        e.set_group_policy("t", "bad group!", POLICY)
    assert e.group_policy("t", "g") == stored, "a refused policy changes nothing"


def test_the_servers_per_shard_in_flight_limit_is_no_topic_wide_figure_to_split(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(max_inflight_per_group=50)
    e.set_topic_shards(3)
    e.schedule([req(0)])
    run_until(e, clock, clock.now_ms() + 200)
    assert e.receive("t", "g")
    assert e.group_stats()["t", "g"].inflight_limit == 50, "the flag: per shard, not split"
    # a set that keeps the rest of what it read (``delayq group set --rate``) keeps that
    e.set_group_policy("t", "g", replace(e.group_policy("t", "g"), rate_per_s=200.0))
    assert e.group_policy("t", "g").max_in_flight == 0
    assert e.group_stats()["t", "g"].inflight_limit == 50


def test_pause_resume_and_the_list_of_groups(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    e.schedule([req(0, topic="u")])
    run_until(e, clock, clock.now_ms() + 200)
    assert drain(e, "u", "used")  # known by use: the defaults
    e.set_group_policy("t", "g", POLICY)
    before = e.group_policy("t", "g")
    assert e.pause_group("t", "g", True) == replace(before, paused=True)
    assert e.group_policy("t", "g").paused
    assert e.pause_group("t", "h", True).paused, "a group with no policy yet: the defaults, paused"
    rows = e.group_policies()
    assert [(t, g, explicit) for t, g, _, explicit in rows] == [
        ("t", "g", True),
        ("t", "h", True),
        ("u", "used", False),
    ]
    assert [g for _, g, _, _ in e.group_policies("u")] == ["used"]
    resumed = e.pause_group("t", "g", False)
    assert not resumed.paused and resumed.max_attempts == 5


@pytest.mark.parametrize("stop", ["close", "kill", "checkpoint-kill"])
def test_a_policy_survives_a_restart(make_engine: Make, clock: FakeClock, stop: str) -> None:
    e = make_engine()
    ids(e.schedule([req(0)]))
    stored = e.set_group_policy("t", "g", POLICY)
    e.pause_group("t", "h", True)
    pushed = e.set_group_policy("t", "pushed", PUSH)
    if stop == "checkpoint-kill":
        e.checkpoint()
        e.set_group_policy("t", "late", GroupPolicy(max_attempts=2))
    if stop == "close":
        e.close()
    else:
        e.abandon()
    again = make_engine()
    assert again.group_policy("t", "g") == stored
    assert again.group_policy("t", "h").paused
    assert again.group_policy("t", "pushed") == pushed and pushed.push is not None
    assert again.push_groups() == [("t", "pushed", pushed)]
    if stop == "checkpoint-kill":
        assert again.group_policy("t", "late").max_attempts == 2
    assert [(g, x) for _, g, _, x in again.group_policies("t")][:2] == [("g", True), ("h", True)]


def test_the_policys_max_attempts_holds_across_kills(make_engine: Make, clock: FakeClock) -> None:
    """A policy's ``max_attempts`` (not the settings') decides the dead letter, and the
    attempts of a message go on across two kills."""
    e = make_engine()
    e.set_group_policy("t", "g", GroupPolicy(max_attempts=3))
    (mid,) = ids(e.schedule([req(10, b"poison")]))
    run_until(e, clock, clock.now_ms() + 50)
    attempts = []
    for _ in range(3):
        (m,) = e.receive("t", "g", invisible_ms=1000)
        attempts.append(m.attempt)
        e.abandon()
        e = make_engine()
        run_until(e, clock, clock.now_ms() + 1001, step_ms=100)
    assert attempts == [1, 2, 3]
    assert e.receive("t", "g") == []
    run_until(e, clock, clock.now_ms() + 200)
    (dead,) = e.receive("dlq.g", "ops")
    assert (dead.headers["dlq.id"], dead.headers["dlq.attempts"]) == (mid, "3")


def test_push_groups_are_the_groups_set_with_a_target(make_engine: Make) -> None:
    e = make_engine()
    assert e.push_groups() == []
    b = e.set_group_policy("u", "b", PUSH)
    a = e.set_group_policy("t", "a", PUSH)
    assert b.push is not None and b.push.timeout_ms == 2500 and b.push.method == "PUT"
    e.set_group_policy("t", "pull", GroupPolicy(max_attempts=2))
    assert e.push_groups() == [("t", "a", a), ("u", "b", b)], "by topic and group"
    e.pause_group("t", "a", True)
    assert e.push_groups()[0][2].paused, "a paused push group is still one"
    e.set_group_policy("u", "b", replace(b, push=None))
    assert [g for _, g, _ in e.push_groups()] == ["a"]
    with pytest.raises(InvalidArgument, match=r"policy\.push\.timeout_ms"):
        e.set_group_policy("t", "a", replace(PUSH, push=replace(TARGET, timeout_ms=5)))


def test_a_nack_waits_at_least_what_it_is_told(make_engine: Make, clock: FakeClock) -> None:
    """A push target's Retry-After: the message is not handed out again before it,
    though its group's backoff is shorter, even across a kill (the due is in the
    HANDOUT record); a plain nack waits the backoff."""
    e = make_engine()
    e.set_group_policy("t", "g", GroupPolicy(backoff=Backoff(initial_ms=100)))
    ids(e.schedule([req(10, b"a"), req(10, b"b")]))
    run_until(e, clock, clock.now_ms() + 50)
    a, b = e.receive("t", "g", max_messages=2, invisible_ms=60_000)
    assert e.nack("t", "g", [a.receipt], at_least_ms=5000) == [AckOutcome.ACKED]
    assert e.nack("t", "g", [b.receipt]) == [AckOutcome.ACKED]
    e.abandon()
    e = make_engine()
    clock.advance(100)
    assert [m.body for m in e.receive("t", "g", max_messages=2)] == [b"b"]
    clock.advance(4899)
    assert e.receive("t", "g", max_messages=2) == [], "not before its 5 s"
    clock.advance(1)
    (again,) = e.receive("t", "g", max_messages=2)
    assert (again.body, again.attempt) == (b"a", 2)
    with pytest.raises(InvalidArgument, match="at_least_ms"):
        e.nack("t", "g", [again.receipt], at_least_ms=-1)
