"""Fired slots read from the timer log: the pump lets other threads in while a
slot is read, a failed release or a checkpoint mid-slot loses nothing, chains
are walked run by run in growing blocks up to a damaged record, slots about to
fire come from their near rows, and unreadable records or bodies are
quarantined once, not retried."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from delayq import Engine, FakeClock
from delayq.ids import MessageId
from delayq.store.readyindex import ReadyIndex
from delayq.timers.stages import chainwalk, link
from delayq.timers.stages.scan import Scanner
from tests.support.engines import (
    Make,
    drain,
    ids,
    req,
    run_until,
)


def test_pump_lets_other_threads_in_while_a_fired_slot_is_read(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan reads a fired slot's chain with the lock let go, under pump too: a
    receive or schedule on another thread is not held up for the whole walk."""
    e = make_engine()
    lock = e.inspect().lock
    took: list[bool] = []
    read = Scanner.fired_rows

    def meanwhile(self: Scanner, *args: Any) -> Any:
        def other() -> None:
            if lock.acquire(timeout=2):
                lock.release()
                took.append(True)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        return read(self, *args)

    monkeypatch.setattr(Scanner, "fired_rows", meanwhile)
    sent = ids(e.schedule([req(500, str(i).encode()) for i in range(10)]))
    run_until(e, clock, clock.now_ms() + 1000)
    assert took == [True], "another thread took the lock while the chain was read"
    assert sorted(m.id for m in drain(e)) == sorted(sent)


def test_a_release_that_fails_after_its_deliver_records_loses_nothing(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indexing a released batch fails after its DELIVER records were written: the
    batch goes back to the release buffer, the retry delivers it, and it is still
    there after a restart."""
    e = make_engine()
    sent = ids(e.schedule([req(100, str(i).encode()) for i in range(20)]))
    e.pump()

    def broken(self: ReadyIndex, entries: Any) -> int:
        raise MemoryError("indexing failed")

    monkeypatch.setattr(ReadyIndex, "append_many", broken)
    clock.advance(200)
    with pytest.raises(MemoryError):
        e.pump()
    assert e.observing.counters["delivered"] == 0
    monkeypatch.undo()
    e.pump()  # the retry
    assert e.observing.counters["delivered"] == 20
    got = [m.id for m in e.receive("t", "g", max_messages=100)]
    assert sorted(got) == sorted(sent), "each message received, once here"
    e.close()
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 200)
    assert sorted(m.id for m in drain(e2, group="late")) == sorted(sent), "nothing lost"


def test_a_checkpoint_while_a_fired_slot_is_read_resumes_the_scan_at_that_slot(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (found by the SIGKILL test): the scan reads a fired slot's chain
    with the lock let go; a checkpoint taken then recorded a resume point past the
    slot, and a kill before release lost the slot's messages for good."""
    e = make_engine()
    sent = ids(e.schedule([req(500, str(i).encode()) for i in range(30)]))
    e.pump()  # linked into their slot

    class Killed(Exception):
        pass

    def read_then_die(*args: object) -> object:
        e.checkpoint()  # the flush thread's turn, while the chain is being read
        raise Killed  # SIGKILL before the chain reached the release buffer

    monkeypatch.setattr(Scanner, "fired_rows", read_then_die)
    clock.advance(500)
    with pytest.raises(Killed):
        e.pump()
    e.abandon()
    monkeypatch.undo()  # the next process reads chains as usual
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 200)
    assert sorted(m.id for m in drain(e2)) == sorted(sent)


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fired slots are read from their TimerLog chains, as after a restart: damage
    written to the files while the engine runs would otherwise not be seen, the
    slots' near rows (kept in memory) serving them."""
    monkeypatch.setattr(link, "NEAR_SLOTS", 0)


def test_unreadable_records_are_quarantined_not_retried(
    make_engine: Make, clock: FakeClock, walked: None
) -> None:
    e = make_engine()
    ids(e.schedule([req(300, b"early")]))
    e.pump()
    ids(e.schedule([req(700, b"victim"), req(700, b"victim2")]))
    e.pump()
    ids(e.schedule([req(900, b"fine")]))
    e.pump()
    # corrupt the TimerLog record of the second batch's head (chain of slot +7)
    tl_dir = e.settings.data_dir / "timerlog"
    seg = sorted(tl_dir.iterdir())[-1]
    with open(seg, "r+b") as fh:
        fh.seek(32 + 64 * 2 + 20)
        fh.write(b"\xff\xff")
    run_until(e, clock, clock.now_ms() + 1000)
    assert sorted(m.body for m in drain(e)) == [b"early", b"fine"]
    assert e.observing.counters["quarantined"] == 1
    lines = (e.settings.data_dir / "quarantine.log").read_text().splitlines()
    assert json.loads(lines[0])["file"] == "timerlog"
    run_until(e, clock, clock.now_ms() + 1000)
    assert e.observing.counters["quarantined"] == 1, "reported once, not retried forever"


def _three_linked_batches(e: Engine) -> dict[bytes, int]:
    """Three link batches, each with five messages for slot +7 and three for slot
    +15 (interleaved in the request): each slot's chain runs through a contiguous
    run per batch. Returns each body's TimerLog position."""
    for batch in range(3):
        reqs = [
            req(700 if i % 2 else 1500, f"{'ab'[i % 2]}{batch}-{i}".encode()) for i in range(10)
        ]
        ids(e.schedule(reqs[1::2] + reqs[::2][:3]))
        e.pump()
    return _timer_positions(e)


def _timer_positions(e: Engine) -> dict[bytes, int]:
    """Each message body's TimerLog record position."""
    look = e.inspect()
    cl, tl = look.commitlog, look.timerlog
    return {cl.read(r.cl_pos)[0].body: pos for pos, r in tl.scan(0)}  # type: ignore[union-attr]


def _overwrite_timerlog(e: Engine, pos: int, data: bytes) -> None:
    seg = e.inspect().timerlog.log.segment_at(pos)
    assert seg is not None
    with open(e.settings.data_dir / "timerlog" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(pos - seg.base)
        fh.write(data)


def test_a_slot_chain_is_walked_run_by_run_up_to_a_damaged_record(
    make_engine: Make, clock: FakeClock, walked: None
) -> None:
    e = make_engine()
    where = _three_linked_batches(e)
    victim = where[b"b1-5"]  # the middle of batch 1's run in slot +7's chain
    _overwrite_timerlog(e, victim + 20, b"\xff")
    run_until(e, clock, clock.now_ms() + 2000)
    got = sorted(m.body for m in drain(e))
    # newest first: batch 2's run whole, batch 1's down to the damaged record
    assert [b for b in got if b.startswith(b"b")] == sorted(
        [f"b2-{i}".encode() for i in (1, 3, 5, 7, 9)] + [b"b1-7", b"b1-9"]
    )
    assert len([b for b in got if b.startswith(b"a")]) == 9, "the other slot is untouched"
    assert e.observing.counters["quarantined"] == 1
    entry = json.loads((e.settings.data_dir / "quarantine.log").read_text())
    assert entry["position"] == victim
    assert entry["error"].endswith("checksum, magic or slot mismatch; 8 unreachable")


def test_a_long_chain_is_read_in_growing_blocks_up_to_a_damaged_record(
    make_engine: Make, clock: FakeClock, walked: None
) -> None:
    """Runs longer than the first read (512 records) cross block boundaries."""
    e = make_engine(timerlog_segment_bytes=1 << 20)
    for batch in range(3):
        ids(e.schedule([req(700, b"%d-%d" % (batch, i)) for i in range(1200)]))
        e.pump()
    where = _timer_positions(e)
    _overwrite_timerlog(e, where[b"1-600"] + 20, b"\xff")
    run_until(e, clock, clock.now_ms() + 1000)
    got = {m.body for m in drain(e)}
    assert got == {b"2-%d" % i for i in range(1200)} | {b"1-%d" % i for i in range(601, 1200)}
    entry = json.loads((e.settings.data_dir / "quarantine.log").read_text())
    assert entry["error"].endswith("1801 unreachable")


def test_a_chain_walk_naps_while_release_is_due_or_its_slice_is_up_and_reads_the_same(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk holds the GIL; it naps between blocks while a release stage is past
    its wake-up time, and after each WALK_SLICE_S it held (the event loop waits for
    the GIL too); the chain read is the same either way."""
    e = make_engine(timerlog_segment_bytes=1 << 20)
    for batch in range(3):  # three runs of 300: read in two blocks (512, then 1024)
        ids(e.schedule([req(700, b"%d-%d" % (batch, i)) for i in range(300)]))
        e.pump()
    slot = (clock.now_ms() + 700) // e.settings.precision_ms
    entry = e.inspect().wheel.get(slot)
    assert entry is not None and entry.num == 900
    naps: list[float] = []
    monkeypatch.setattr(chainwalk.time, "sleep", naps.append)
    monkeypatch.setattr(chainwalk, "WALK_SLICE_S", 60.0)  # first: release alone

    def walk(wake_ms: int | None) -> list[int]:
        naps.clear()
        e.inspect().wakeups.release_wake_ms = wake_ms
        due, parked, problems = e.inspect().read_chain(slot, entry.last, entry.num)
        assert not len(parked) and not problems
        return sorted(due["seq"].tolist())

    idle = walk(None)
    assert naps == [], "release idle, slice not up: no nap"
    assert walk(clock.now_ms() + 50) == idle and naps == [], "release not due yet"
    assert walk(clock.now_ms()) == idle, "same records with naps"
    assert len(naps) == 2 and set(naps) == {chainwalk.WALK_NAP_S}
    monkeypatch.setattr(chainwalk, "WALK_SLICE_S", 0.0)
    assert walk(None) == idle, "same records with naps"
    assert len(naps) == 2, "the slice is up before every block: a nap before each"


def test_a_chain_link_that_does_not_point_back_ends_the_walk(
    make_engine: Make, clock: FakeClock, walked: None
) -> None:
    e = make_engine()
    where = _three_linked_batches(e)
    head = where[b"b2-9"]  # the newest record of slot +7: where its walk starts
    loop = (
        e.inspect().timerlog.read(head)._replace(prev=head)
    )  # well-formed, but pointing at itself
    _overwrite_timerlog(e, head, loop.encode())
    run_until(e, clock, clock.now_ms() + 2000)
    got = [m.body for m in drain(e)]
    assert b"b2-9" in got and not [b for b in got if b.startswith(b"b") and b != b"b2-9"]
    entry = json.loads((e.settings.data_dir / "quarantine.log").read_text())
    assert "link does not point back; 14 unreachable" in entry["error"]


def _count_walks(e: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the chain walks of the scan stage (each fired slot's count of records)."""
    walks: list[int] = []
    walk = Scanner.read_chain

    def counted(self: Scanner, slot: int, last: int, num: int) -> Any:
        walks.append(num)
        return walk(self, slot, last, num)

    monkeypatch.setattr(Scanner, "read_chain", counted)
    return walks


def test_slots_about_to_fire_are_released_from_their_near_rows_without_a_walk(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine()
    _three_linked_batches(e)  # 24 messages in two slots, well inside the near slots
    assert e.observing.gauges()["near_rows"] == 24
    walks = _count_walks(e, monkeypatch)
    run_until(e, clock, clock.now_ms() + 2000)
    got = drain(e)
    assert walks == [], "no chain was read"
    assert len(got) == 24 and e.observing.gauges()["near_rows"] == 0
    assert [m.deliver_at_ms for m in got] == sorted(m.deliver_at_ms for m in got)


@pytest.mark.parametrize("first", ["before a restart", "while the slot was far"])
def test_a_slot_whose_near_rows_are_not_its_whole_chain_is_walked(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """Near rows are kept only in memory and only for slots about to fire: a slot
    linked partly before a restart, or first while it was far, is read from its
    chain, all of it."""
    far = first == "while the slot was far"
    e = make_engine()
    at = clock.now_ms() + (5_000 if far else 700)  # 50 slots ahead, or 7
    early = ids(e.schedule([req(at - clock.now_ms(), b"early-%d" % i) for i in range(5)]))
    e.pump()
    if far:
        assert e.observing.gauges()["near_rows"] == 0
        run_until(e, clock, at - 1_000, step_ms=100)  # now 10 slots ahead
    else:
        e.close()
        e = make_engine()
    late = ids(e.schedule([req(at - clock.now_ms(), b"late-%d" % i) for i in range(3)]))
    e.pump()
    assert e.observing.gauges()["near_rows"] == 3
    walks = _count_walks(e, monkeypatch)
    run_until(e, clock, at + 200)
    assert sorted(m.id for m in drain(e)) == sorted(early + late)
    assert walks == [8] and e.observing.gauges()["near_rows"] == 0


def test_near_rows_stop_at_the_release_buffer_bound_and_the_rest_is_walked(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine(release_buffer_messages=10)
    sent = ids(e.schedule([req(300, b"a%d" % i) for i in range(8)]))
    e.pump()
    sent += ids(e.schedule([req(500, b"b%d" % i) for i in range(8)]))
    e.pump()
    assert e.observing.gauges()["near_rows"] == 8, "the second batch would pass the bound"
    walks = _count_walks(e, monkeypatch)
    run_until(e, clock, clock.now_ms() + 1000)
    assert sorted(m.id for m in drain(e)) == sorted(sent)
    assert walks == [8], "the slot kept in memory is not walked, the other one is"


def test_a_near_slot_holding_a_parked_roll_is_walked_and_the_roll_goes_on(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a window shorter than the near slots, a message due past the window is
    parked in the window's last slot, which is near: that slot's messages are not
    kept in memory (its ROLL would be released as a plain message), the others are."""
    e = make_engine(window_ms=2_000)  # 20 slots: the last one is near
    start = clock.now_ms()
    (rolled,) = ids(e.schedule([req(5_000, b"rolled")]))
    ids(e.schedule([req(1_950, b"plain"), req(300, b"soon")]))
    e.pump()
    assert e.observing.gauges()["near_rows"] == 1, "only the message of the slot without a ROLL"
    walks = _count_walks(e, monkeypatch)
    run_until(e, clock, start + 2_100)
    assert walks == [2], "the slot shared with the parked ROLL"
    got = drain(e)
    assert [m.body for m in got] == [b"soon", b"plain"] and e.observing.counters["rolled"] == 1
    run_until(e, clock, start + 5_200)
    (late,) = drain(e)
    assert late.id == rolled and late.deliver_at_ms == start + 5_000


def test_an_unreadable_body_is_quarantined_once_and_others_still_arrive(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    good, bad = ids(e.schedule([req(10, b"good" * 10), req(10, b"bad!" * 10)]))
    run_until(e, clock, clock.now_ms() + 20)
    pos = MessageId.parse(bad).position
    seg = e.inspect().commitlog.log.segment_at(pos)
    assert seg is not None
    with open(e.settings.data_dir / "commitlog" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(pos - seg.base + 80)  # inside the body
        fh.write(b"XX")
    got = e.receive("t", "g", max_messages=10, invisible_ms=1000)
    assert [m.id for m in got] == [good]
    assert e.observing.counters["quarantined"] == 1
    clock.advance(2000)
    again = e.receive("t", "g", max_messages=10)
    assert [m.id for m in again] == [good], "the unreadable one was acked away, not retried"
    assert e.observing.counters["quarantined"] == 1


def test_a_record_a_map_shows_torn_is_read_again_before_it_is_quarantined(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receive's batch read through a segment's map that sees a whole record as
    torn (a stale map, say) reads it once more with pread: the message arrives,
    nothing is quarantined or acked away."""
    from delayq.store.commitlog import CommitLog

    e = make_engine()
    sent = ids(e.schedule([req(10, b"one" * 10), req(10, b"two" * 10)]))
    run_until(e, clock, clock.now_ms() + 20)
    real = CommitLog.read_messages

    def torn(self: CommitLog, positions: Any, *, payload: bool = True) -> Any:
        cols = real(self, positions, payload=payload)
        cols.ok[-1] = False  # as a map too short for the last record would show it
        return cols

    monkeypatch.setattr(CommitLog, "read_messages", torn)
    got = e.receive("t", "g", max_messages=10)
    assert sorted(m.id for m in got) == sorted(sent)
    assert {m.body for m in got} == {b"one" * 10, b"two" * 10}
    assert e.observing.counters["quarantined"] == 0
