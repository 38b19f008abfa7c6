"""A master's lease and its followers' liveness on a fake clock, in process (an
engine, its ``ShardNode``, the book of followers): the lease runs from the answer
whose token a probe hands back (``replication.lease``), lapses exactly at its
deadline, is only ever extended (``transitions.renew``); a follower silent for
``SILENT_S`` is not live and a sync ack waits until its deadline
(``replication.followers``). Every lapse comes from advancing the clock, never
from waiting for it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from delayq import Engine, FakeClock
from delayq.errors import Unavailable
from delayq.recurrence.spec import CatchUp
from delayq.recurrence.states import lead_of
from delayq.replication.followers import SILENT_S, Followers
from delayq.replication.lease import KEEP, LEASE_SHARE, LeaseTokens
from delayq.replication.node import ShardNode
from tests.support.engines import drain, ids, req, run_until, small_settings
from tests.support.schedules import every, fired_times

LEASE_MS = 2_000
HELD_MS = int(LEASE_MS * LEASE_SHARE)  # how long a grant holds, from its answer
INSYNC = frozenset({"m"})


@pytest.fixture
def master(tmp_path: Path, clock: FakeClock) -> Iterator[Engine]:
    e = Engine(small_settings(tmp_path / "m", replicated=True), clock, background=False)
    e.start()
    yield e
    e.close()


def acks(e: Engine) -> bool:
    """Whether the master acknowledges a write now (else it says its lease is lost);
    the write is due in a minute."""
    try:
        ids(e.schedule([req(60_000)]))
    except Unavailable as exc:
        assert "lost its lease" in str(exc)
        return False
    return True


def test_tokens_grant_from_their_answers_time(clock: FakeClock) -> None:
    tokens = LeaseTokens(clock)
    first = tokens.mint()
    assert first and tokens.mint() == first + 1, "tokens rise (never 0)"
    answered = clock.monotonic_s()
    clock.advance(400)  # the probe handing it back spent 0.4 s in transit
    assert tokens.deadline(first, LEASE_MS) == answered + HELD_MS / 1000
    assert tokens.deadline(first, 0) is None, "no lease asked: none granted"
    assert tokens.deadline(first ^ 1 << 40, LEASE_MS) is None, "not minted here: nothing"
    assert tokens.deadline(0, LEASE_MS) is None
    # a master not bounded yet is bounded from the probe's arrival
    assert tokens.deadline(0, LEASE_MS, bounded=False) == clock.monotonic_s() + HELD_MS / 1000
    for _ in range(KEEP):
        tokens.mint()
    assert tokens.deadline(first, LEASE_MS) is None, "forgotten after KEEP answers"


def test_a_masters_lease_lapses_exactly_at_its_deadline(master: Engine, clock: FakeClock) -> None:
    assert not master.replicating.lease_bounded() and master.replicating.delivering(), (
        "no lease: never lapses"
    )
    master.replicating.renew_lease(clock.monotonic_s() + 1.5)
    assert master.replicating.lease_bounded()
    due = ids(master.schedule([req(1_000, b"due in lease")]))
    run_until(master, clock, clock.now_ms() + 1_499)
    assert master.replicating.delivering() and acks(master)
    assert [m.id for m in drain(master)] == due, "delivered while the lease runs"
    later = ids(master.schedule([req(1, b"due at the lapse")]))
    clock.advance(1)
    assert not master.replicating.delivering() and not acks(master)
    run_until(master, clock, clock.now_ms() + 5_000)
    (topic,) = master.stats()
    assert (topic.pending, topic.delivered) == (2, 1), "a lapsed master delivers nothing"
    master.replicating.renew_lease(clock.monotonic_s() + 1.5)  # renewed: it delivers again
    master.pump()
    assert [m.id for m in drain(master)] == later


def test_a_renewal_only_extends_the_lease(master: Engine, clock: FakeClock) -> None:
    start = clock.monotonic_s()
    master.replicating.renew_lease(start + 1.0)
    master.replicating.renew_lease(start + 0.5)  # a grant that arrived late cuts nothing
    clock.advance(999)
    assert master.replicating.delivering()
    clock.advance(1)
    assert not master.replicating.delivering()
    master.replicating.renew_lease(start + 0.8)  # a grant already past lifts nothing
    assert not master.replicating.delivering()
    master.replicating.renew_lease(clock.monotonic_s() + 1.0)
    assert master.replicating.delivering() and acks(master)
    master.replicating.renew_lease(None)  # no control plane keeps it any more: it never lapses
    clock.advance(10**9)
    assert master.replicating.delivering() and acks(master)


def test_a_probe_renews_the_lease_from_the_answer_its_token_names(
    master: Engine, clock: FakeClock
) -> None:
    node = ShardNode(master.replicating, name="m", address="127.0.0.1:1")
    node.started()
    answered = node.tokens.mint()  # the answer the control plane got
    clock.advance(400)  # ... and the probe that hands its token back, 0.4 s later
    node.probed(master.epoch, LEASE_MS, INSYNC, answered)
    clock.advance(HELD_MS - 400 - 1)
    assert master.replicating.delivering()
    clock.advance(1)
    assert not master.replicating.delivering() and not acks(master), (
        "it lapses before the plane counts it"
    )
    late = node.tokens.mint()
    clock.advance(HELD_MS)  # a probe delivered after a partition healed: already past
    node.probed(master.epoch, LEASE_MS, INSYNC, late)
    assert not master.replicating.delivering()
    node.probed(master.epoch, LEASE_MS, INSYNC, node.tokens.mint() ^ 1 << 40)
    assert not master.replicating.delivering(), "a token this process never minted grants nothing"
    node.probed(master.epoch + 1, LEASE_MS, INSYNC, node.tokens.mint())
    assert not master.replicating.delivering(), "a probe of another epoch renews nothing"
    node.probed(master.epoch, LEASE_MS, INSYNC, node.tokens.mint())
    assert master.replicating.delivering() and acks(master)


def test_the_first_probe_bounds_a_master_never_kept_from_its_arrival(
    master: Engine, clock: FakeClock
) -> None:
    node = ShardNode(master.replicating, name="m", address="127.0.0.1:1")
    node.started()
    clock.advance(10 * LEASE_MS)  # serving alone for a while: no lease to lapse
    assert master.replicating.delivering()
    node.probed(master.epoch, LEASE_MS, INSYNC, 0)  # names no answer of this process
    clock.advance(HELD_MS - 1)
    assert master.replicating.delivering()
    clock.advance(1)
    assert not master.replicating.delivering()


@pytest.mark.parametrize("answered", [True, False])
def test_a_promotion_takes_office_with_the_lease_its_token_grants(
    tmp_path: Path, clock: FakeClock, answered: bool
) -> None:
    engine = Engine(small_settings(tmp_path / "n", replicated=True), clock, background=False)
    node = ShardNode(engine.replicating, name="n", address="127.0.0.1:1", replica=True)
    engine.start()
    try:
        node.started()
        token = node.tokens.mint() if answered else 0
        asyncio.run(node.promote(2, frozenset({"n"}), LEASE_MS, token))
        assert (engine.role, engine.epoch) == ("master", 2)
        if not answered:
            assert not engine.replicating.delivering(), (
                "no answer named: lapsed until the next probe"
            )
            return
        clock.advance(HELD_MS - 1)
        assert engine.replicating.delivering() and acks(engine)
        clock.advance(1)
        assert not engine.replicating.delivering() and not acks(engine)
    finally:
        engine.close()


def test_a_follower_silent_for_silent_s_is_not_live(clock: FakeClock) -> None:
    book = Followers("m", lambda: 0, clock=clock)
    book.connected("r")
    assert book.insync() == {"m", "r"}, "no set told yet: every live follower counts"
    clock.advance(int(SILENT_S * 1000))
    assert book.live("r") and book.insync() == {"m", "r"}
    clock.advance(1)
    assert not book.live("r") and book.insync() == {"m"}
    book.report("r", 10, 10)  # heard again
    assert book.live("r") and book.insync() == {"m", "r"}
    book.disconnected("r")
    assert not book.live("r")


def test_the_live_part_of_a_told_set_drops_a_silent_member(clock: FakeClock) -> None:
    book = Followers("m", lambda: 0, clock=clock, min_insync=2)
    book.tell_insync(frozenset({"r", "s"}))
    book.connected("r")
    book.connected("x")  # live, not in the set: not counted
    assert book.insync() == {"m", "r", "s"} and book.live_insync() == {"m", "r"}
    clock.advance(int(SILENT_S * 1000) + 1)
    assert book.insync() == {"m", "r", "s"}, "the set is the control plane's"
    assert book.live_insync() == {"m"}, "r went silent"


def test_a_followers_lag_is_the_age_of_its_oldest_unwritten_chunk(clock: FakeClock) -> None:
    book = Followers("m", lambda: 0, clock=clock)
    book.connected("r")
    book.sent("r", 100)
    clock.advance(250)
    book.sent("r", 200)
    clock.advance(100)
    (f,) = book.snapshot()
    assert f.lag_ms(clock.monotonic_s()) == 350
    book.report("r", 100, 100)
    (f,) = book.snapshot()
    assert f.lag_ms(clock.monotonic_s()) == 100
    book.report("r", 200, 200)
    (f,) = book.snapshot()
    assert f.lag_ms(clock.monotonic_s()) == 0


def _waiter(
    book: Followers, end: int, timeout_s: float
) -> tuple[threading.Thread, list[object], threading.Event]:
    """A thread in ``book.wait(end, timeout_s)``: its outcome (None: returned, else
    the exception) and an event set at each turn of its loop."""
    outcome: list[object] = []
    turned = threading.Event()

    def stops_in() -> float | None:
        turned.set()
        return None

    def run() -> None:
        try:
            book.wait(end, timeout_s, stops_in)
            outcome.append(None)
        except Unavailable as exc:
            outcome.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return t, outcome, turned


def _turns(turned: threading.Event, n: int) -> None:
    """Let the waiter's loop turn ``n`` more times (it looks at the clock each turn)."""
    for _ in range(n):
        turned.clear()
        assert turned.wait(10)


def test_a_sync_ack_waits_until_its_deadline_on_the_clock(clock: FakeClock) -> None:
    book = Followers("m", lambda: 100, clock=clock, min_insync=2)
    book.tell_insync(frozenset({"m", "r"}))
    book.connected("r")
    t, outcome, turned = _waiter(book, 100, timeout_s=3.0)
    _turns(turned, 1)
    clock.advance(2_999)
    _turns(turned, 2)  # it looked at the clock after the advance, and is still waiting
    assert outcome == []
    clock.advance(1)
    t.join(10)
    assert not t.is_alive()
    (err,) = outcome
    assert isinstance(err, Unavailable) and "did not confirm the write within 3s" in str(err)


def test_a_sync_ack_returns_once_the_insync_set_holds_the_write(clock: FakeClock) -> None:
    book = Followers("m", lambda: 100, clock=clock, min_insync=2)
    book.tell_insync(frozenset({"m", "r"}))
    book.connected("r")
    t, outcome, turned = _waiter(book, 100, timeout_s=3.0)
    _turns(turned, 2)
    book.report("r", 100, 100)
    t.join(10)
    assert not t.is_alive() and outcome == [None]


@pytest.mark.parametrize("policy", [CatchUp.NONE, CatchUp.LATEST])
def test_a_schedules_times_in_a_lapse_of_the_lease_were_missed(
    master: Engine, clock: FakeClock, policy: CatchUp
) -> None:
    """A schedule every second; the lease lapses for 60 s: the times that came
    meanwhile (not written ahead before it, within the plan's lead) could not
    fire, so they were missed (the catch-up policy decides: ``none`` skips them
    all, ``latest`` fires the last), not fired late."""
    start = clock.now_ms()
    master.create_schedule("tick", every(1_000, catch_up=policy))
    master.replicating.renew_lease(clock.monotonic_s() + 3.0)  # lapses at start + 3 s
    run_until(master, clock, start + 63_000, step_ms=50)
    assert not master.replicating.delivering()
    master.replicating.renew_lease(clock.monotonic_s() + 30.0)
    run_until(master, clock, start + 66_500, step_ms=50)
    ahead = [t for t in range(start + 1_000, start + 63_000, 1_000)
             if t - lead_of("tick") <= start + 2_950]  # fmt: skip
    missed = list(range(ahead[-1] + 1_000, start + 63_000, 1_000))
    latest = missed[-1:] if policy is CatchUp.LATEST else []
    assert fired_times(drain(master)) == [
        *ahead,
        *latest,
        *range(start + 63_000, start + 66_001, 1_000),
    ]
    assert master.get_schedule("tick").state.missed == len(missed) - len(latest)
