"""A group's delivery policy enforced where messages are handed out (``take``):
paused groups get nothing and then everything in due order, backoff after a
lapse or a nack (never early), the rate's token bucket, the in-flight limit
(dropping on ack, nack and lapse), the policy's ``max_attempts``, the group's
stats; engines on a fake clock driven by hand, and one real-clock engine with
concurrent receivers."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

from delayq import Engine, FakeClock
from delayq.engine import AckOutcome, Backoff, BackoffKind, GroupPolicy, Jitter
from tests.support.engines import Make, ids, req, run_until, small_settings

EXPONENTIAL = Backoff(kind=BackoffKind.EXPONENTIAL, initial_ms=200, multiplier=2.0, max_ms=1000)


def delivered(e: Engine, clock: FakeClock, n: int, step_ms: int = 10) -> list[str]:
    """``n`` messages released to topic t, due ``step_ms`` apart, in due order."""
    sent = ids(e.schedule([req(10 + step_ms * i, b"%d" % i) for i in range(n)]))
    run_until(e, clock, clock.now_ms() + 20 + step_ms * n)
    return sent


def test_a_paused_group_gets_nothing_then_everything_in_due_order(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    e.pause_group("t", "g", True)
    sent = delivered(e, clock, 6)
    assert e.receive("t", "g", max_messages=10) == []
    assert len(e.receive("t", "other", max_messages=10)) == 6, "other groups go on"
    more = ids(e.schedule([req(10, b"late")]))
    run_until(e, clock, clock.now_ms() + 50)
    assert e.receive("t", "g", max_messages=10) == []
    stats = e.group_stats()["t", "g"]
    assert stats.paused and stats.ready == 7
    e.pause_group("t", "g", False)
    got = e.receive("t", "g", max_messages=10)
    assert [m.id for m in got] == sent + more, "nothing lost, in due order"
    assert [m.deliver_at_ms for m in got] == sorted(m.deliver_at_ms for m in got)


def _hand_outs(
    e: Engine, clock: FakeClock, until_ms: int, *, invisible_ms: int, nack: bool = False
) -> list[tuple[int, int]]:
    """(time, attempt) of each hand-out of the one message of topic t to group g,
    never acked (nacked at once with ``nack``), looking every 5 ms."""
    out = []
    while clock.now_ms() < until_ms:
        for m in e.receive("t", "g", invisible_ms=invisible_ms):
            out.append((clock.now_ms(), m.attempt))
            if nack:
                assert e.nack("t", "g", [m.receipt]) == [AckOutcome.ACKED]
        clock.advance(5)
        e.pump()
    return out


def _gaps(got: list[tuple[int, int]]) -> list[int]:
    """The time between each hand-out and the next."""
    return [b - a for (a, _), (b, _) in itertools.pairwise(got)]


def test_backoff_after_a_lapse_waits_the_policys_delay_never_less(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    e.set_group_policy("t", "g", GroupPolicy(backoff=EXPONENTIAL))
    delivered(e, clock, 1)
    got = _hand_outs(e, clock, clock.now_ms() + 5000, invisible_ms=100)
    assert [a for _, a in got] == list(range(1, len(got) + 1))
    gaps = _gaps(got)
    want = [100 + EXPONENTIAL.delay_ms(n) for n in range(1, len(got))]  # 300, 500, 900, 1100..
    assert all(w <= g < w + 5 for g, w in zip(gaps, want, strict=True)), (gaps, want)
    stats = e.group_stats()["t", "g"]
    assert len(got) >= 4 and stats.attempts == (0, 0, 0, 1, 0), "one message, at attempt 4-7"
    assert stats.next_retry_ms > clock.now_ms() - 1100


def test_a_nack_waits_the_backoff_for_its_attempt(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    e.set_group_policy("t", "g", GroupPolicy(backoff=EXPONENTIAL, max_attempts=4))
    delivered(e, clock, 1)
    got = _hand_outs(e, clock, clock.now_ms() + 5000, invisible_ms=60_000, nack=True)
    assert [a for _, a in got] == [1, 2, 3, 4], "then dead-lettered: 4 attempts"
    gaps = _gaps(got)
    assert all(w <= g < w + 5 for g, w in zip(gaps, [200, 400, 800], strict=True)), gaps
    run_until(e, clock, clock.now_ms() + 200)
    (dead,) = e.receive("dlq.g", "ops")
    assert dead.headers["dlq.attempts"] == "4"
    stats = e.group_stats()["t", "g"]
    assert stats.retries == (1, 1, 1, 0, 0), "a retry after attempts 1, 2, 3; the 4th the last"


def test_jittered_backoff_is_never_early_nor_longer_than_its_delay(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    jittered = Backoff(initial_ms=400, jitter=Jitter.FULL)
    e.set_group_policy("t", "g", GroupPolicy(backoff=jittered))
    delivered(e, clock, 1)
    got = _hand_outs(e, clock, clock.now_ms() + 6000, invisible_ms=100)
    gaps = _gaps(got)
    assert len(gaps) >= 10
    assert all(100 <= g < 100 + 400 + 5 for g in gaps), gaps
    assert len(set(gaps)) > 3, "spread by the jitter"


def test_the_rate_is_a_token_bucket_over_every_receive(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    e.set_group_policy("t", "g", GroupPolicy(rate_per_s=50, burst=5))
    delivered(e, clock, 400, step_ms=1)
    assert len(e.receive("t", "h", max_messages=1000)) == 400, "another group: no limit"
    counts = []
    for _ in range(200):  # 2 s, looking every 10 ms
        counts.append(len(e.receive("t", "g", max_messages=100)))
        clock.advance(10)
    assert counts[0] == 5, "the burst at once"
    assert 5 + 100 - 1 <= sum(counts) <= 5 + 100, "then 50 a second"
    for i in range(1, len(counts) - 100):
        assert sum(counts[i : i + 100]) <= 50 + 1, "no second over the rate"
    stats = e.group_stats()["t", "g"]
    assert stats.throttled > 0
    e.set_topic_shards(2)  # this shard's share: 25 a second, a burst of 3
    clock.advance(10_000)
    got = 0
    for _ in range(100):
        got += len(e.receive("t", "g", max_messages=100))
        clock.advance(10)
    assert 3 + 25 - 1 <= got <= 3 + 25


def test_in_flight_never_exceeds_the_limit_and_drops_on_ack_nack_and_lapse(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    e.set_group_policy("t", "g", GroupPolicy(max_in_flight=3, backoff=Backoff(initial_ms=1000)))
    delivered(e, clock, 10)
    first = e.receive("t", "g", max_messages=10, invisible_ms=500)
    assert len(first) == 3
    assert e.receive("t", "g", max_messages=10) == []
    e.ack("t", "g", [first[0].receipt])
    assert len(e.receive("t", "g", max_messages=10, invisible_ms=60_000)) == 1, "ack: room"
    e.nack("t", "g", [first[1].receipt])
    assert len(e.receive("t", "g", max_messages=10, invisible_ms=60_000)) == 1, "nack: room"
    clock.advance(501)  # first[2] lapses: it waits its backoff, not in flight
    assert len(e.receive("t", "g", max_messages=10, invisible_ms=60_000)) == 1, "lapse: room"
    stats = e.group_stats()["t", "g"]
    assert (stats.inflight, stats.inflight_limit, stats.waiting) == (3, 3, 2)
    assert stats.attempts == (5, 0, 0, 0, 0)
    assert stats.next_retry_ms == clock.now_ms() - 501 + 1000  # the nacked one's
    clock.advance(1000)  # both waiting are due; no room: they wait for it
    assert e.receive("t", "g", max_messages=10) == []
    stats = e.group_stats()["t", "g"]
    assert stats.inflight == 3


def test_concurrent_receivers_never_hold_more_than_the_limit(tmp_path: Path) -> None:
    e = Engine(small_settings(tmp_path / "d")).start()
    try:
        e.set_group_policy("t", "g", GroupPolicy(max_in_flight=7))
        e.schedule([req(0, b"%d" % i) for i in range(300)])
        lock, held, most, acked = threading.Lock(), [0], [0], [0]

        def receiver() -> None:
            while True:
                got = e.receive("t", "g", max_messages=5, wait_ms=300, invisible_ms=60_000)
                if not got:
                    with lock:
                        if acked[0] >= 300:
                            return
                    continue
                with lock:  # counted on once handed, off before the ack: never more
                    held[0] += len(got)  # than the engine holds in flight
                    most[0] = max(most[0], held[0])
                time.sleep(0.002)  # the work: others receive meanwhile
                with lock:
                    held[0] -= len(got)
                    acked[0] += len(got)
                e.ack("t", "g", [m.receipt for m in got])

        threads = [threading.Thread(target=receiver) for _ in range(4)]
        for t in threads:
            t.start()
        samples = []
        while any(t.is_alive() for t in threads):
            stats = e.group_stats().get(("t", "g"))
            samples.append(stats.inflight if stats else 0)
        for t in threads:
            t.join()
        assert acked[0] == 300
        assert max(samples) <= 7 and most[0] <= 7
    finally:
        e.close()


def test_a_waiting_receiver_is_woken_when_its_group_resumes(tmp_path: Path) -> None:
    e = Engine(small_settings(tmp_path / "d")).start()
    try:
        e.pause_group("t", "g", True)
        e.schedule([req(0, b"held")])
        got: list[bytes] = []
        waiter = threading.Thread(
            target=lambda: got.extend(m.body for m in e.receive("t", "g", wait_ms=20_000))
        )
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and got == [], "paused: the receiver waits"
        e.pause_group("t", "g", False)
        waiter.join(15)
        assert got == [b"held"]
    finally:
        e.close()
