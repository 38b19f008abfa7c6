"""Keys on the engine, real files and a fake clock: each ``if_exists`` mode, rows
of one batch decided in order (a few, and many: looked up together), the dedup
window and its end, dedup ids, lookup, cancel and reschedule by key, and the
index after a clean restart (loaded from its file) and after a crash (an
abandoned engine: no close, no checkpoint; built from the log)."""

from __future__ import annotations

import pytest

from delayq import Congested, FakeClock, InvalidArgument, NotFound
from delayq.engine import MessageState, ScheduleBatch
from delayq.errors import AlreadyExists
from delayq.ids import MessageId
from delayq.timers.memory import keyindex
from delayq.types import IfExists, KeyOutcome
from tests.support.engines import Make, drain, ids, req, run_until

REJECT, KEEP, REPLACE = IfExists.REJECT, IfExists.KEEP, IfExists.REPLACE


def pending_ids(e: object, key: str, topic: str = "t") -> list[str]:
    try:
        return [r.id for r in e.lookup_key(topic, key)]  # type: ignore[attr-defined]
    except NotFound:
        return []


def test_reject_answers_the_existing_id_with_already_exists(make_engine: Make) -> None:
    e = make_engine()
    [first] = ids(e.schedule([req(5000, key="order-42", if_exists=REJECT)]))
    [again] = e.schedule([req(9000, b"other", key="order-42", if_exists=REJECT)])
    assert again.id == first and again.key_outcome is KeyOutcome.EXISTS
    assert isinstance(again.error, AlreadyExists) and again.error.id == first
    assert again.deliver_at_ms == again.error.deliver_at_ms == e.lookup(first).deliver_at_ms
    assert pending_ids(e, "order-42") == [first]
    assert e.observing.counters["key_exists"] == 1


def test_lookup_by_key_answers_each_message_whole_as_lookup_by_id_does(
    make_engine: Make,
) -> None:
    e = make_engine()
    sent = [req(5000, b"first", key="k", headers={"h": "1"}), req(9000, b"second", key="k")]
    got = ids(e.schedule(sent))
    e.schedule([req(100, b"other", key="other")])
    assert e.lookup_key("t", "k") == [e.lookup(i) for i in got]


def test_keep_answers_the_existing_id_without_an_error(make_engine: Make) -> None:
    e = make_engine()
    [first] = ids(e.schedule([req(5000, key="k", if_exists=KEEP)]))
    [again] = e.schedule([req(100, key="k", if_exists=KEEP)])
    assert (again.id, again.error, again.key_outcome) == (first, None, KeyOutcome.KEPT)
    assert pending_ids(e, "k") == [first]


def test_replace_cancels_the_pending_one_and_stores_the_new(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    [first] = ids(e.schedule([req(5000, b"old", key="k", if_exists=REPLACE)]))
    [new] = e.schedule([req(200, b"new", key="k", if_exists=REPLACE)])
    assert new.error is None and new.id != first and new.key_outcome is KeyOutcome.REPLACED
    assert pending_ids(e, "k") == [new.id]
    assert e.lookup(first).state is MessageState.RESCHEDULED
    run_until(e, clock, clock.now_ms() + 6000)
    assert [m.body for m in drain(e)] == [b"new"]


def test_replace_of_several_pending_ones_cancels_them_all(make_engine: Make) -> None:
    e = make_engine()
    olds = ids(e.schedule([req(5000, key="k"), req(6000, key="k"), req(7000, key="j")]))
    assert pending_ids(e, "k") == olds[:2]
    [new] = e.schedule([req(300, key="k", if_exists=REPLACE)])
    assert new.key_outcome is KeyOutcome.REPLACED
    assert pending_ids(e, "k") == [new.id]
    assert [e.lookup(i).state for i in olds] == [
        MessageState.CANCELLED,
        MessageState.CANCELLED,
        MessageState.PENDING,
    ]
    assert e.stats("t")[0].pending == 2


def test_no_mode_lets_any_number_share_a_key(make_engine: Make) -> None:
    e = make_engine()
    got = ids(e.schedule([req(1000, key="k") for _ in range(3)]))
    [rej] = e.schedule([req(1000, key="k", if_exists=REJECT)])
    assert rej.id == got[0]  # the oldest answers
    assert pending_ids(e, "k") == got


def test_rows_of_one_batch_are_decided_in_order(make_engine: Make) -> None:
    e = make_engine()
    out = e.schedule(
        [
            req(1000, key="a", if_exists=REJECT),
            req(1000, key="a", if_exists=REJECT),
            req(1000, key="b"),
            req(1000, key="b", if_exists=KEEP),
            req(1000, key="c", if_exists=REPLACE),
            req(1000, key="c", if_exists=REPLACE),
            req(1000, key="d", if_exists=KEEP, topic="other"),
            req(1000, key="d", if_exists=KEEP),
        ]
    )
    assert [o.key_outcome for o in out] == [
        KeyOutcome.NEW,
        KeyOutcome.EXISTS,
        KeyOutcome.NEW,
        KeyOutcome.KEPT,
        KeyOutcome.NEW,
        KeyOutcome.REPLACED,
        KeyOutcome.NEW,
        KeyOutcome.NEW,
    ]
    assert out[1].id == out[0].id and isinstance(out[1].error, AlreadyExists)
    assert out[3].id == out[2].id
    assert pending_ids(e, "c") == [out[5].id]
    assert pending_ids(e, "d") == [out[7].id] and pending_ids(e, "d", "other") == [out[6].id]


def test_a_batch_of_columns_reports_key_outcomes_by_row(make_engine: Make) -> None:
    e = make_engine()
    [held] = ids(e.schedule([req(1000, key="x")]))
    got = e.schedule_batch(
        ScheduleBatch(
            topic="t",
            bodies=[b"1", b"2", b"3", b"4"],
            delay_ms=[1000] * 4,
            keys=["x", "y", "", "x"],
            if_exists=[KEEP, REJECT, 0, REPLACE],
        )
    )
    assert got.ids[0] == held and got.key_outcomes == {0: KeyOutcome.KEPT, 3: KeyOutcome.REPLACED}
    assert got.errors == {} and all(got.ids)
    assert pending_ids(e, "x") == [got.ids[3]] and pending_ids(e, "y") == [got.ids[1]]


def test_a_batch_of_many_rows_is_decided_as_its_rows_one_by_one(make_engine: Make) -> None:
    # many rows: their names looked up together (KeyIndex.any_of); new names only
    # make one append, and a name a row of the batch wrote is looked up after it
    e = make_engine()

    def batch(keys: list[str], modes: list[IfExists]) -> ScheduleBatch:
        n = len(keys)
        return ScheduleBatch(
            topic="t", bodies=[b"b"] * n, delay_ms=[1000] * n, keys=keys, if_exists=modes
        )

    first = e.schedule_batch(batch([f"k{i}" for i in range(40)], [REJECT] * 40))
    assert first.errors == {} and first.key_outcomes == {} and all(first.ids)
    keys = [f"n{i}" for i in range(20)] + ["k3", "k7", "m", "m", "m", "k9", "n5"]
    modes = [REJECT] * 20 + [REJECT, KEEP, REPLACE, REPLACE, KEEP, REPLACE, KEEP]
    got = e.schedule_batch(batch(keys, modes))
    assert got.key_outcomes == {
        20: KeyOutcome.EXISTS,
        21: KeyOutcome.KEPT,
        23: KeyOutcome.REPLACED,
        24: KeyOutcome.KEPT,
        25: KeyOutcome.REPLACED,
        26: KeyOutcome.KEPT,
    }
    assert list(got.errors) == [20] and isinstance(got.errors[20], AlreadyExists)
    assert (got.ids[20], got.ids[21]) == (first.ids[3], first.ids[7])
    assert got.ids[24] == got.ids[23] and pending_ids(e, "m") == [got.ids[23]]
    assert got.ids[26] == got.ids[5]
    assert pending_ids(e, "k9") == [got.ids[25]]
    assert [pending_ids(e, f"n{i}") for i in range(20)] == [[i] for i in got.ids[:20]]


def test_a_batch_of_distinct_names_answers_the_held_ones_and_stores_the_rest_in_order(
    make_engine: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every name shares its hash with a filed one (a hash of its length), so each
    row is looked up: the held ones are answered in place, the others (new all
    the same) stored in row order; a REPLACE of a held key among them ends it."""
    monkeypatch.setattr(keyindex.xxhash, "xxh3_64_intdigest", lambda name, seed=0: len(name))
    e = make_engine()

    def batch(keys: list[str], modes: list[IfExists]) -> ScheduleBatch:
        n = len(keys)
        return ScheduleBatch(
            topic="t", bodies=[b"b"] * n, delay_ms=[1000] * n, keys=keys, if_exists=modes
        )

    def positions(got: list[str | None]) -> list[int]:
        return [MessageId.parse(i).position for i in got if i is not None]

    first = e.schedule_batch(batch([f"k{i}" for i in range(10)], [REJECT] * 10))
    keys = [f"n{i}" for i in range(20)] + ["k3", "k7"]
    got = e.schedule_batch(batch(keys, [REJECT] * 20 + [REJECT, KEEP]))
    assert got.key_outcomes == {20: KeyOutcome.EXISTS, 21: KeyOutcome.KEPT}
    assert (got.ids[20], got.ids[21]) == (first.ids[3], first.ids[7])
    assert list(got.errors) == [20] and all(got.ids)
    new = positions(got.ids[:20])
    assert new == sorted(new) and new[0] > max(positions(first.ids))
    assert [pending_ids(e, k) for k in keys[:20]] == [[i] for i in got.ids[:20]]
    keys = ["a", "k5", "b"]
    again = e.schedule_batch(batch(keys, [REJECT, REPLACE, REJECT]))
    assert again.key_outcomes == {1: KeyOutcome.REPLACED} and again.errors == {}
    assert positions(again.ids) == sorted(positions(again.ids))
    assert [pending_ids(e, k) for k in keys] == [[i] for i in again.ids]


def test_the_key_is_free_after_delivery_unless_a_window_holds_it(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    [a] = ids(e.schedule([req(100, key="plain", if_exists=REJECT)]))
    [b] = ids(e.schedule([req(100, key="held", if_exists=REJECT, dedup_window_ms=60_000)]))
    run_until(e, clock, clock.now_ms() + 500)
    assert len(drain(e)) == 2
    [again_a] = e.schedule([req(100, key="plain", if_exists=REJECT)])
    assert again_a.key_outcome is KeyOutcome.NEW and again_a.id != a
    [again_b] = e.schedule([req(100, key="held", if_exists=REJECT)])
    assert again_b.key_outcome is KeyOutcome.EXISTS and again_b.id == b
    with pytest.raises(NotFound):  # held, but not pending
        e.lookup_key("t", "held")
    [replace_b] = e.schedule([req(100, key="held", if_exists=REPLACE)])
    assert replace_b.key_outcome is KeyOutcome.NEW  # nothing pending was cancelled
    clock.advance(60_000)  # the window's end
    e.cancel([replace_b.id or ""])
    [after] = e.schedule([req(100, key="held", if_exists=REJECT)])
    assert after.key_outcome is KeyOutcome.NEW


def test_a_dedup_id_answers_kept_within_its_window(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    [a] = ids(e.schedule([req(100, dedup_id="m-1", dedup_window_ms=10_000)]))
    [b] = e.schedule([req(100, dedup_id="m-1", dedup_window_ms=10_000)])
    assert (b.id, b.key_outcome) == (a, KeyOutcome.KEPT)
    run_until(e, clock, clock.now_ms() + 500)
    assert len(drain(e)) == 1
    [c] = e.schedule([req(100, dedup_id="m-1", dedup_window_ms=10_000)])
    assert c.id == a
    clock.advance(10_000)
    [d] = e.schedule([req(100, dedup_id="m-1", dedup_window_ms=10_000)])
    assert d.key_outcome is KeyOutcome.NEW and d.id != a
    # delayq's own headers are the record's truth, shown as a moved message's are
    got = e.lookup(d.id or "")
    assert got.headers == {
        "delayq-dedup-until": str(got.accepted_ms + 10_000),
        "delayq-dedup-id": "m-1",
    }


def test_cancel_and_reschedule_by_key(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    a = ids(e.schedule([req(5000, key="k"), req(6000, key="k"), req(5000, key="j")]))
    assert e.cancel_keys("t", ["k", "nope", "k"]) == [2, 0, 0]
    assert [e.lookup(i).state for i in a] == [MessageState.CANCELLED] * 2 + [MessageState.PENDING]
    moved = e.reschedule_key("t", "j", delay_ms=100)
    assert len(moved) == 1 and moved[0].id != a[2]
    assert pending_ids(e, "j") == [moved[0].id]
    with pytest.raises(NotFound) as nf:
        e.reschedule_key("t", "k", delay_ms=100)
    assert nf.value.field == "key"
    with pytest.raises(NotFound):
        e.lookup_key("nosuchtopic", "k")
    run_until(e, clock, clock.now_ms() + 300)
    assert len(drain(e)) == 1


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"key": "a\x00b"}, "key"),
        ({"key": "a\x85"}, "key"),
        ({"key": "x" * 1025}, "key"),
        ({"if_exists": REJECT}, "if_exists"),
        ({"if_exists": 9, "key": "k"}, "if_exists"),
        ({"key": "k", "dedup_window_ms": 5}, "dedup_window_ms"),
        ({"key": "k", "if_exists": KEEP, "dedup_window_ms": -1}, "dedup_window_ms"),
        ({"key": "k", "if_exists": KEEP, "dedup_window_ms": 10**12}, "dedup_window_ms"),
        ({"headers": {"delayq-dedup-id": "x"}}, "headers"),
        ({"headers": {"delayq-dedup-until": "5"}}, "headers"),
        ({"headers": {"delayq-dedup-until": "5"}}, "headers"),
        ({"dedup_id": "\x07"}, "dedup_id"),
    ],
)
def test_bad_key_input_is_refused_naming_the_field(
    make_engine: Make, kw: dict[str, object], field: str
) -> None:
    e = make_engine()
    [out] = e.schedule([req(100, **kw)])
    assert isinstance(out.error, InvalidArgument) and out.error.field == field
    got = e.schedule_batch(
        ScheduleBatch(
            topic="t",
            bodies=[b"ok", b"bad"],
            keys=["", str(kw.get("key", ""))],
            headers=[{}, kw.get("headers", {})],  # type: ignore[list-item]
            if_exists=[0, int(kw.get("if_exists", 0))],  # type: ignore[call-overload]
            dedup_window_ms=[0, int(kw.get("dedup_window_ms", 0))],  # type: ignore[call-overload]
            dedup_ids=["", str(kw.get("dedup_id", ""))],
        )
    )
    assert got.ids[0] is not None and got.errors[1].field == field  # type: ignore[attr-defined]
    ids(e.schedule([req(60_000, key="ok")]))
    counts = e.cancel_keys("t", ["ok", "a\x01", ""])  # a malformed key: its error alone
    assert counts[0] == 1 and pending_ids(e, "ok") == []
    assert [getattr(c, "field", None) for c in counts[1:]] == ["keys[1]", "keys[2]"]
    assert all(isinstance(c, InvalidArgument) for c in counts[1:])
    with pytest.raises(InvalidArgument) as bad:
        e.cancel_keys("", ["ok"])  # a bad topic: the call's
    assert bad.value.field == "topic"
    with pytest.raises(InvalidArgument):
        e.lookup_key("t", "")


def test_rows_of_a_checked_batch_refused_for_a_full_slot_leave_the_others_filed(
    make_engine: Make,
) -> None:
    """The batch's names are hashed once for the look-up and the filing: with rows
    refused for a full wheel slot, the stored ones are filed under their own
    names (found, kept) and the refused ones under none."""
    e = make_engine(slot_limit=12)
    ids(e.schedule([req(60_000, key="first")]))  # an index not empty: the batch is hashed
    names = [f"row-{i}" for i in range(20)]

    def batch(mode: IfExists) -> ScheduleBatch:
        return ScheduleBatch(
            topic="t", bodies=[b"b"] * 20, delay_ms=[500] * 20, keys=names, if_exists=[mode] * 20
        )

    got = e.schedule_batch(batch(REJECT))
    stored = [i for i in range(20) if got.ids[i] is not None]
    assert len(stored) == 12 and all(isinstance(got.errors[i], Congested) for i in range(12, 20))
    assert [pending_ids(e, names[i]) for i in range(20)] == [
        [got.ids[i]] if i in stored else [] for i in range(20)
    ]
    again = e.schedule_batch(batch(KEEP))
    assert [again.ids[i] for i in stored] == [got.ids[i] for i in stored]
    assert all(again.key_outcomes[i] is KeyOutcome.KEPT for i in stored)


def test_requests_whose_check_columns_are_all_empty_but_one_are_judged_alike(
    make_engine: Make,
) -> None:
    """A list of requests gives the engine only the check columns some row fills
    (``batch_of``); a value that is empty but not a valid one (0.0 is no
    ``IfExists``) is still refused when another field asks for the check."""
    e = make_engine()
    out = e.schedule(
        [
            req(100, key="a", dedup_window_ms=1000, if_exists=0.0),  # type: ignore[arg-type]
            req(100, key="b", if_exists=KEEP),
            req(100, key="c", dedup_window_ms=1000, if_exists=REJECT),
        ]
    )
    assert isinstance(out[0].error, InvalidArgument) and out[0].error.field == "if_exists"
    assert out[1].id and out[2].id and out[1].error is None and out[2].error is None
    [again] = e.schedule([req(100, key="c", if_exists=KEEP)])
    assert again.id == out[2].id and again.key_outcome is KeyOutcome.KEPT


def test_the_index_survives_a_clean_restart_and_a_crash(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    [a] = ids(e.schedule([req(50_000, key="a", if_exists=REJECT)]))
    [b] = ids(e.schedule([req(100, key="b", if_exists=REJECT, dedup_window_ms=60_000)]))
    e.checkpoint()
    [c] = ids(e.schedule([req(50_000, key="c", if_exists=REJECT)]))  # after the checkpoint
    run_until(e, clock, clock.now_ms() + 500)
    assert len(drain(e)) == 1
    e.close()
    e = make_engine()
    assert e.recovery["keys"] == "loaded"  # saved at the clean close (keys.idx)
    assert pending_ids(e, "a") == [a] and pending_ids(e, "c") == [c]
    assert e.schedule([req(100, key="b", if_exists=REJECT)])[0].id == b
    [d] = ids(e.schedule([req(50_000, key="d", if_exists=KEEP)]))
    e.abandon()
    e = make_engine()
    assert e.recovery["keys"] == "built"  # the file went at the open: built from the log
    assert pending_ids(e, "d") == [d]
    assert e.schedule([req(100, key="a", if_exists=KEEP)])[0].id == a
    assert e.schedule([req(100, key="b", if_exists=KEEP)])[0].id == b


def test_keys_passed_by_the_columns_and_by_prepare_are_the_same(make_engine: Make) -> None:
    """Printable ASCII keys pass the vectorised test; others (UTF-8, 1024 bytes of
    it) go through ``prepare``: filed alike, found alike."""
    e = make_engine()
    names = ["plain key", "é-ключ", "x" * 1024, "ü" * 512]
    got = e.schedule_batch(
        ScheduleBatch(topic="t", bodies=[b"1"] * 4, keys=names, if_exists=[REJECT] * 4)
    )
    assert got.errors == {} and all(got.ids)
    for name, mid in zip(names, got.ids, strict=True):
        assert pending_ids(e, name) == [mid]
        [again] = e.schedule([req(100, key=name, if_exists=KEEP)])
        assert again.id == mid and e.lookup(mid).key == name


@pytest.mark.parametrize("field", ["if_exists", "dedup_window_ms"])
@pytest.mark.parametrize("value", [1.7, 2.0, True, float("nan")])
def test_a_column_value_that_is_no_integer_is_refused_naming_its_row(
    make_engine: Make, field: str, value: object
) -> None:
    """Columns of the engine's API are not cast: 1.7 is no ``REJECT`` (nor a
    window of 1 ms); the row is refused, the others stored."""
    e = make_engine()
    cols: dict[str, object] = {"if_exists": [REJECT] * 3, "dedup_window_ms": [0, 0, 1000]}
    cols[field] = [cols[field][0], value, cols[field][2]]  # type: ignore[index]
    got = e.schedule_batch(
        ScheduleBatch(topic="t", bodies=[b"1"] * 3, keys=["a", "b", "c"], **cols)
    )  # type: ignore[arg-type]
    assert set(got.errors) == {1} and got.errors[1].field == field  # type: ignore[attr-defined]
    assert got.ids[0] and got.ids[2] and got.ids[1] is None
    assert pending_ids(e, "b") == []
