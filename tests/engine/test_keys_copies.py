"""Copies of a stored message (a reschedule by id or by key, a rebalance's import)
keep what the record holds: its key as it is, unchecked (a message stored under
earlier rules may have a key a new schedule may not), while new schedules are
checked; their dedup window's end as it was (never stretched); a reschedule by
key writes its copies in one append, all or none (real files, a fake clock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq import Congested, Engine, FakeClock, InvalidArgument
from delayq.engine import ImportRow, MessageState
from delayq.timers.columns import Columns, Prepared
from delayq.types import IfExists, KeyOutcome, ScheduleOutcome
from tests.support.engines import Make, ids, req, small_settings

REJECT = IfExists.REJECT
OLD_KEY = "a\tb"  # a control character: refused for new schedules since keys are checked


def stored_with_old_key(e: Engine) -> str:
    """A message whose record has ``OLD_KEY``, written as an earlier version did
    (straight to the accept stage, past today's checks)."""
    now = e.clock.now_ms()
    with e._life.held() as sh:  # data of an earlier version
        mid, _, _, _ = sh.accept.accept(
            Columns.of([Prepared("t", now + 60_000, OLD_KEY.encode(), b"", b"old")]), now
        )
    assert mid[0] is not None
    return mid[0]


def test_a_reschedule_by_id_keeps_a_key_stored_under_earlier_rules(make_engine: Make) -> None:
    e = make_engine()
    old = stored_with_old_key(e)
    copy = e.reschedule(old, delay_ms=5000)
    assert copy.id != old and e.lookup(copy.id).key == OLD_KEY
    [new] = e.schedule([req(1000, key=OLD_KEY)])
    assert isinstance(new.error, InvalidArgument) and new.error.field == "key"


def test_an_import_keeps_a_key_stored_under_earlier_rules(
    make_engine: Make, tmp_path: Path, clock: FakeClock
) -> None:
    src = make_engine()
    old = stored_with_old_key(src)
    m = src.lookup(old)
    dst = Engine(small_settings(tmp_path / "dst", shard=1), clock, background=False).start()
    try:
        [copy] = dst.moving.import_messages(
            [ImportRow(old, m.topic, m.body, m.deliver_at_ms, m.key, m.headers)]
        )
        assert isinstance(copy, str) and dst.lookup(copy).key == OLD_KEY
    finally:
        dst.close()


def test_a_reschedule_by_key_is_all_or_none(make_engine: Make) -> None:
    """The copies of a key's messages go in one append: when they cannot all be
    stored (the accept queue has room for one), none is, and the key's messages
    stay as they were."""
    e = make_engine(enqueue_queue_messages=4)
    held = ids(e.schedule([req(900, key="k"), req(1_500, key="k"), req(500)]))  # 3 queued
    with pytest.raises(Congested):
        e.reschedule_key("t", "k", delay_ms=500)
    assert [r.id for r in e.lookup_key("t", "k")] == held[:2]
    assert [e.lookup(i).state for i in held[:2]] == [MessageState.PENDING] * 2
    e.pump()  # linked: the queue is empty
    got = e.reschedule_key("t", "k", delay_ms=2_000)
    assert all(isinstance(o, ScheduleOutcome) and o.id not in held for o in got)
    assert [r.id for r in e.lookup_key("t", "k")] == [o.id for o in got]


def test_a_copy_does_not_stretch_the_dedup_window(make_engine: Make, clock: FakeClock) -> None:
    """The window's end is stored absolute: a reschedule's copy (and a copy of the
    copy) holds the name until the first message's acceptance + window."""
    e = make_engine()
    [a] = ids(e.schedule([req(60_000, key="k", if_exists=REJECT, dedup_window_ms=10_000)]))
    end = e.lookup(a).accepted_ms + 10_000
    clock.advance(4_000)
    e.reschedule(a, delay_ms=60_000)
    clock.advance(4_000)
    [c] = e.reschedule_key("t", "k", delay_ms=60_000)
    assert isinstance(c, ScheduleOutcome)
    assert e.lookup(c.id).headers["delayq-dedup-until"] == str(end)
    assert e.cancel_keys("t", ["k"]) == [1]
    clock.advance(end - 1 - clock.now_ms())
    [held] = e.schedule([req(100, key="k", if_exists=REJECT)])
    assert (held.id, held.key_outcome) == (a, KeyOutcome.EXISTS)  # the oldest, ended
    clock.advance(1)
    [free] = e.schedule([req(100, key="k", if_exists=REJECT)])
    assert free.key_outcome is KeyOutcome.NEW
