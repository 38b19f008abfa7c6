"""The in-sync set's rules (``delayq.control.membership``): who joins, who may be
removed, who leaves."""

from __future__ import annotations

from delayq.control.failover import MASTER
from delayq.control.membership import START_GRACE_MS, joiners, leaver, may_remove
from delayq.control.views import Answer, Replica, Watch
from tests.control.fakeshard import LEASE


def _master(high_water: int, **replicas: tuple[int, bool]) -> Answer:
    return Answer(
        name="m", role=MASTER, epoch=2, flushed=1000, log_end=1000, high_water=high_water,
        replicas=tuple(Replica(name=n, flushed=f, connected=c) for n, (f, c) in replicas.items()),
    )  # fmt: skip


def test_a_connected_replica_at_the_high_water_mark_joins() -> None:
    m = _master(500, a=(500, True), b=(499, True), c=(900, False), d=(900, True))
    answers: dict[str, Answer | None] = {
        "a": Answer(name="a", epoch=2),
        "b": Answer(name="b", epoch=2),
        "c": Answer(name="c", epoch=2),
        "d": Answer(name="d", epoch=1),  # not yet at the master's epoch
    }
    assert joiners(2, "m", frozenset({"m"}), m, answers) == {"a"}
    assert joiners(2, "m", frozenset({"m", "a"}), m, answers) == frozenset()
    fenced = {**answers, "a": Answer(name="a", epoch=2, fenced=True)}
    assert joiners(2, "m", frozenset({"m"}), m, fenced) == frozenset()
    assert joiners(2, "m", frozenset({"m"}), m, {**answers, "a": None}) == frozenset()


def test_a_member_leaves_only_if_min_insync_others_hold_what_may_depend_on_it() -> None:
    members = {"m", "a", "x"}
    # sync, min_insync 2: x fsynced 100 with the master; a is at 50. A write at 80
    # may have been acked by m and x alone: dropping x would leave it on m only,
    # though every remaining member is at or above the high-water mark (50).
    held = {"m": 100, "a": 50}
    assert not may_remove("x", members, held, name_flushed=100, high_water=50, min_insync=2,
                          sync=True)  # fmt: skip
    held["a"] = 100  # a caught up: everything x may have helped ack is on two others
    assert may_remove("x", members, held, name_flushed=100, high_water=50, min_insync=2,
                      sync=True)  # fmt: skip
    # async acks on the master's append: only the high-water mark must be held
    assert may_remove("x", members, {"m": 100, "a": 50}, name_flushed=100, high_water=50,
                      min_insync=1, sync=False)  # fmt: skip
    assert not may_remove("x", {"m", "x"}, {"m": 40}, name_flushed=100, high_water=50,
                          min_insync=1, sync=False)  # fmt: skip
    # sync with two members left needs both: never below min_insync
    assert not may_remove("a", {"m", "a"}, {"m": 100}, name_flushed=0, high_water=0,
                          min_insync=2, sync=True)  # fmt: skip


def test_the_leaver_is_a_member_out_of_touch_for_longer_than_the_lease() -> None:
    m = _master(100, a=(300, True), x=(200, False))
    ws = {
        "m": Watch(name="m", address="", seen_ms=0, in_ms=10_000),
        "a": Watch(name="a", address="", seen_ms=0, in_ms=10_000),
        "x": Watch(name="x", address="", seen_ms=0, in_ms=7_000),
    }
    ws["a"].observe(Answer(name="a", epoch=2, flushed=300, log_end=300), 10_000)
    ws["x"].note_flushed(2, 200)
    insync = frozenset({"m", "a", "x"})

    def out(now: int, sync: bool = True) -> str | None:
        return leaver(2, "m", insync, m, ws, now_ms=now, lease_ms=LEASE, min_insync=2,
                      sync=sync)  # fmt: skip

    assert out(10_000) is None, "out for exactly the lease: not yet"
    assert out(10_001) == "x"
    ws["x"].note_flushed(2, 400)  # x once held more than a has now
    assert out(10_001) is None
    assert out(10_001, sync=False) == "x", "async: only the high-water mark must be held"
    ws["m"].in_ms = 0
    assert out(20_000) is None, "the master never leaves"


def test_a_member_never_heard_from_keeps_its_place_through_the_start_grace() -> None:
    """A node still starting (no answer yet) is not out of touch until the grace
    after the master came into office (at 1 s) has passed; once it has answered,
    the lease alone counts, and without a start (None) only the lease does."""
    m = _master(0, a=(0, True))
    ws = {
        "m": Watch(name="m", address="", seen_ms=0, in_ms=1_000),
        "a": Watch(name="a", address="", seen_ms=0, in_ms=1_000),
        "x": Watch(name="x", address="", seen_ms=0, in_ms=1_000),
    }
    ws["a"].observe(Answer(name="a", epoch=2), 1_000)
    insync = frozenset({"m", "a", "x"})

    def out(now: int, started: int | None = 1_000) -> str | None:
        ws["a"].in_ms = now  # a counts in at every probe
        return leaver(2, "m", insync, m, ws, now_ms=now, lease_ms=LEASE, min_insync=1,
                      sync=False, started_ms=started)  # fmt: skip

    assert LEASE + 1_000 < START_GRACE_MS
    assert out(LEASE + 1_001) is None, "x never answered: still starting"
    assert out(START_GRACE_MS + 1_000) is None
    assert out(START_GRACE_MS + 1_001) == "x", "the grace is over"
    assert out(LEASE + 1_001, started=None) == "x", "no start: the lease alone"
    ws["x"].observe(Answer(name="x", epoch=1), 1_000)  # it answered once, then fell silent
    assert out(LEASE + 1_001) == "x"
