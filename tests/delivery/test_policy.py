"""``delivery.policy``: backoff delays, checks naming the field, a topic-wide
policy's per-shard share and the token bucket (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delayq.delivery.policy import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_MS,
    Backoff,
    BackoffKind,
    GroupPolicy,
    Jitter,
    TokenBucket,
    check,
    share,
)
from delayq.errors import InvalidArgument

EXP = BackoffKind.EXPONENTIAL


def test_fixed_backoff_waits_the_same_after_every_failure() -> None:
    b = Backoff(initial_ms=1500)
    assert [b.delay_ms(n) for n in (1, 2, 10, 1000)] == [1500] * 4


def test_exponential_backoff_multiplies_up_to_its_maximum() -> None:
    b = Backoff(kind=EXP, initial_ms=100, multiplier=2, max_ms=1000)
    assert [b.delay_ms(n) for n in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]
    huge = Backoff(kind=EXP, initial_ms=1, multiplier=100, max_ms=MAX_BACKOFF_MS)
    assert huge.delay_ms(10**6) == MAX_BACKOFF_MS  # no overflow


def test_jitter_stays_within_the_delay() -> None:
    full = Backoff(initial_ms=1000, jitter=Jitter.FULL)
    equal = Backoff(initial_ms=1000, jitter=Jitter.EQUAL)
    assert (full.delay_ms(1, 0.0), full.delay_ms(1, 0.25)) == (0, 250)
    assert (equal.delay_ms(1, 0.0), equal.delay_ms(1, 0.999)) == (500, 999)


@given(
    st.integers(0, MAX_BACKOFF_MS),
    st.floats(1, 100),
    st.integers(0, MAX_BACKOFF_MS),
    st.integers(1, 10_000),
    st.floats(0, 1, exclude_max=True),
    st.sampled_from(list(Jitter)),
)
def test_a_checked_exponential_backoff_never_waits_past_its_maximum_nor_shrinks(
    initial: int, mult: float, extra: int, failed: int, draw: float, jitter: Jitter
) -> None:
    top = min(initial + extra, MAX_BACKOFF_MS)
    b = Backoff(kind=EXP, initial_ms=initial, multiplier=mult, max_ms=top)
    check(GroupPolicy(backoff=b))
    assert initial <= b.delay_ms(failed) <= top
    assert b.delay_ms(failed) <= b.delay_ms(failed + 1)
    jittered = Backoff(kind=EXP, initial_ms=initial, multiplier=mult, max_ms=top, jitter=jitter)
    assert 0 <= jittered.delay_ms(failed, draw) <= b.delay_ms(failed)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (GroupPolicy(rate_per_s=-1), "policy.rate_per_s"),
        (GroupPolicy(rate_per_s=float("nan")), "policy.rate_per_s"),
        (GroupPolicy(max_attempts=MAX_ATTEMPTS + 1), "policy.max_attempts"),
        (GroupPolicy(max_in_flight=-5), "policy.max_in_flight"),
        (GroupPolicy(backoff=Backoff(initial_ms=-1)), "policy.backoff.initial_ms"),
        (
            GroupPolicy(backoff=Backoff(kind=EXP, initial_ms=500, max_ms=100)),
            "policy.backoff.max_ms",
        ),
        (GroupPolicy(backoff=Backoff(initial_ms=500, max_ms=100)), "policy.backoff.max_ms"),
        (
            GroupPolicy(backoff=Backoff(kind=EXP, initial_ms=1, multiplier=0.5, max_ms=9)),
            "policy.backoff.multiplier",
        ),
        (GroupPolicy(backoff=Backoff(max_ms=MAX_BACKOFF_MS + 1)), "policy.backoff.max_ms"),
        # a fixed backoff's multiplier too: stored and compared across shards
        (GroupPolicy(backoff=Backoff(multiplier=float("nan"))), "policy.backoff.multiplier"),
        (GroupPolicy(backoff=Backoff(multiplier=float("inf"))), "policy.backoff.multiplier"),
        (GroupPolicy(backoff=Backoff(multiplier=-5)), "policy.backoff.multiplier"),
        (GroupPolicy(backoff=Backoff(multiplier=101)), "policy.backoff.multiplier"),
    ],
)
def test_check_refuses_a_field_out_of_bounds_by_name(policy: GroupPolicy, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        check(policy)
    assert err.value.field == field


def test_check_fills_in_a_burst_of_one_seconds_worth() -> None:
    assert check(GroupPolicy(rate_per_s=2.5)).burst == 3
    assert check(GroupPolicy(rate_per_s=0.1)).burst == 1
    assert check(GroupPolicy(rate_per_s=10, burst=50)).burst == 50
    assert check(GroupPolicy()).burst == 0


def test_share_splits_rate_and_in_flight_across_the_topics_shards() -> None:
    whole = check(GroupPolicy(rate_per_s=200, max_in_flight=10, max_attempts=3))
    part = share(whole, 3)
    assert part.rate_per_s == pytest.approx(200 / 3)
    assert (part.max_in_flight, part.burst, part.max_attempts) == (4, 67, 3)
    assert share(whole, 1) is whole
    assert share(GroupPolicy(), 4).max_in_flight == 0  # the server's default stays


def test_token_bucket_meters_hand_outs_at_its_rate_after_its_burst() -> None:
    bucket = TokenBucket(rate_per_s=100, burst=10, now_ms=0)
    assert bucket.allowed(0, 50) == 10
    bucket.take(10)
    assert bucket.allowed(0, 5) == 0
    assert bucket.next_ms(0) == 10  # one token per 10 ms
    assert bucket.allowed(55, 50) == 5
    bucket.take(5)
    assert bucket.allowed(10_000, 50) == 10  # never more than the burst
    unlimited = TokenBucket(rate_per_s=0, burst=0, now_ms=0)
    assert unlimited.allowed(0, 10**6) == 10**6
    assert unlimited.next_ms(7) == 7


def test_token_bucket_over_a_long_run_hands_out_the_rate() -> None:
    bucket = TokenBucket(rate_per_s=200, burst=200, now_ms=0)
    handed = 0
    for now in range(0, 30_000, 7):  # a receiver asking every 7 ms for 30 s
        n = bucket.allowed(now, 32)
        bucket.take(n)
        handed += n
    assert 200 * 30 <= handed <= 200 * 30 + 200 + 1
