"""Which holder answers a REJECT, a KEEP or a taken dedup id: the oldest pending
one, an ended one still in its dedup window only when no message of the name is
pending (real files, a fake clock)."""

from __future__ import annotations

from delayq.engine import MessageState
from delayq.types import IfExists, KeyOutcome
from tests.support.engines import Make, ids, req

REJECT, KEEP, REPLACE = IfExists.REJECT, IfExists.KEEP, IfExists.REPLACE
HOUR = 3_600_000


def test_after_a_replace_reject_and_keep_answer_the_pending_message(make_engine: Make) -> None:
    e = make_engine()
    [old] = ids(e.schedule([req(60_000, b"A", key="k", if_exists=REPLACE, dedup_window_ms=HOUR)]))
    [new] = e.schedule([req(60_000, b"B", key="k", if_exists=REPLACE, dedup_window_ms=HOUR)])
    assert new.key_outcome is KeyOutcome.REPLACED and new.id != old
    for mode, outcome in ((KEEP, KeyOutcome.KEPT), (REJECT, KeyOutcome.EXISTS)):
        [got] = e.schedule([req(60_000, b"C", key="k", if_exists=mode)])
        assert (got.id, got.key_outcome) == (new.id, outcome)
        assert e.lookup(got.id or "").state is MessageState.PENDING


def test_after_a_reschedule_by_id_reject_answers_the_new_message(make_engine: Make) -> None:
    e = make_engine()
    [x] = ids(e.schedule([req(60_000, b"X", key="j", if_exists=REJECT, dedup_window_ms=HOUR)]))
    y = e.reschedule(x, delay_ms=90_000)
    [z] = e.schedule([req(60_000, b"Z", key="j", if_exists=REJECT)])
    assert (z.id, z.key_outcome) == (y.id, KeyOutcome.EXISTS)
    assert e.lookup(x).state is MessageState.RESCHEDULED


def test_a_dedup_id_answers_its_pending_message_before_an_ended_one(make_engine: Make) -> None:
    e = make_engine()
    [a] = ids(e.schedule([req(60_000, b"A", dedup_id="d", dedup_window_ms=HOUR)]))
    b = e.reschedule(a, delay_ms=90_000)  # the copy keeps its dedup id
    [c] = e.schedule([req(60_000, b"C", dedup_id="d", dedup_window_ms=HOUR)])
    assert (c.id, c.key_outcome) == (b.id, KeyOutcome.KEPT)


def test_an_ended_holder_answers_while_no_message_is_pending(make_engine: Make) -> None:
    e = make_engine()
    [a] = ids(e.schedule([req(60_000, b"A", key="k", if_exists=REJECT, dedup_window_ms=HOUR)]))
    assert e.cancel_keys("t", ["k"]) == [1]
    [b] = e.schedule([req(60_000, b"B", key="k", if_exists=KEEP)])
    assert (b.id, b.key_outcome) == (a, KeyOutcome.KEPT)
