"""Compaction blocks (``timers.compaction``: ``adding``, ``loading``): far-future messages
taken out of the roll cycle into day blocks and loaded into the wheel when their
block comes within a window; each delivered exactly once, at or after its time;
lookup, cancel, reschedule, release and export work on them; a re-sent block makes
no second copy; kills around an add and around a load lose nothing; retention
through the year keeps them.

The clock is fake and the wheel coarse (10-minute slots, the default 2-day
window), so a year of rolls runs in seconds; ``bench.compaction.compact`` plays
the Spark job (export snapshot -> rolled rows beyond 7 days -> day blocks)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from bench.compaction import compact

from delayq import Engine, FakeClock, InvalidArgument, NotFound
from delayq.engine import (
    BlockOutcome,
    BlockRow,
    CancelOutcome,
    MessageState,
    ReleaseOutcome,
    ScheduleRequest,
)
from delayq.formats.messagestate import BLOCKED
from delayq.ids import MessageId
from delayq.store.blockfiles import BlockFiles
from delayq.timers.compaction import adding, loading
from tests.support.engines import START_MS, drain, ids, run_until, small_settings

DAY = 86_400_000
HOUR = 3_600_000
YEAR_SETTINGS: dict[str, Any] = dict(
    precision_ms=600_000,
    window_ms=2 * DAY,
    flush_interval_ms=HOUR,
    retention_ms=7 * DAY,
)


def open_engine(path: Path, clock: FakeClock, **over: Any) -> Engine:
    return Engine(
        small_settings(path, **{**YEAR_SETTINGS, **over}), clock, background=False
    ).start()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START_MS)


def far(n: int, lo_days: int, hi_days: int, seed: int = 1) -> list[ScheduleRequest]:
    rng = random.Random(seed)
    return [
        ScheduleRequest(
            topic="t",
            body=b"m%d" % i,
            key=f"k{i}",
            delay_ms=rng.randrange(lo_days * DAY, hi_days * DAY),
        )
        for i in range(n)
    ]


class Ledger:
    """What was sent and what came out: each message at most once, never early."""

    def __init__(self) -> None:
        self.due: dict[str, int] = {}
        self.got: dict[str, int] = {}

    def sent(self, e: Engine, reqs: list[ScheduleRequest]) -> list[str]:
        out = e.schedule(reqs)
        for o in out:
            assert o.id is not None
            self.due[o.id] = o.deliver_at_ms
        return ids(out)

    def take(self, e: Engine, clock: FakeClock) -> None:
        for m in drain(e):
            assert m.id not in self.got, f"{m.id} delivered twice"
            assert clock.now_ms() >= self.due[m.id], f"{m.id} delivered early"
            self.got[m.id] = clock.now_ms()


def run_days(
    e: Engine, clock: FakeClock, days: int, ledger: Ledger, *, compact_every: int = 0
) -> None:
    """Run ``days`` days in 6-hour steps, compacting every ``compact_every`` days."""
    for day in range(days):
        run_until(e, clock, clock.now_ms() + DAY, step_ms=6 * HOUR)
        if compact_every and day % compact_every == 0:
            compact(e, beyond_ms=7 * DAY, block_ms=DAY)
        ledger.take(e, clock)


def state_byte(e: Engine, mid: str) -> int:
    insp = e.inspect()
    with insp.lock:
        rec, _ = insp.commitlog.read(MessageId.parse(mid).position, payload=False)
        return insp.states.raw(rec.seq)  # type: ignore[union-attr]


def test_a_year_of_far_future_messages_in_blocks_each_delivered_once(
    tmp_path: Path, clock: FakeClock
) -> None:
    e = open_engine(tmp_path / "d", clock)
    ledger = Ledger()
    try:
        sent = ledger.sent(e, far(150, 30, 365))
        run_days(e, clock, 2, ledger, compact_every=1)
        assert e.observing.counters["blocked"] == 150, "every far-future message blocked"
        assert {state_byte(e, m) for m in sent} == {BLOCKED}
        rolled = e.observing.counters["rolled"]
        # calls by id on blocked messages: lookup says pending, cancel, reschedule
        looked = e.lookup(sent[0])
        assert (looked.state, looked.body, looked.key) == (MessageState.PENDING, b"m0", "k0")
        assert e.cancel([sent[1]]) == [CancelOutcome.CANCELLED]
        moved = e.reschedule(sent[2], delay_ms=40 * DAY)
        ledger.due[moved.id] = moved.deliver_at_ms
        assert e.lookup(sent[2]).state is MessageState.RESCHEDULED
        # the job again (a re-run): nothing blocked twice
        again = compact(e, beyond_ms=7 * DAY, block_ms=DAY)
        assert again.get("blocked", 0) == 0
        run_days(e, clock, 368, ledger, compact_every=7)
        assert e.observing.counters["rolled"] - rolled < 150, "blocked messages do not roll on"
        assert set(ledger.got) == set(sent) - {sent[1], sent[2]} | {moved.id}
        assert e.observing.counters["loaded"] >= 147
        assert e.observing.counters["early"] == 0
        assert not list((tmp_path / "d" / "blocks").glob("*.blk")), "loaded blocks' files go"
    finally:
        e.close()


def test_add_block_answers_per_row_and_refuses_bad_calls(tmp_path: Path, clock: FakeClock) -> None:
    e = open_engine(tmp_path / "d", clock)
    try:
        sent = ids(
            e.schedule([*far(6, 30, 31), ScheduleRequest(topic="u", body=b"x", delay_ms=30 * DAY)])
        )
        start = START_MS + 30 * DAY
        rows = [BlockRow(m, e.lookup(m).topic, e.lookup(m).deliver_at_ms) for m in sent]
        assert e.cancel([sent[5]]) == [CancelOutcome.CANCELLED]
        other = str(MessageId(3, 1, MessageId.parse(sent[0]).position))
        gone = str(MessageId(0, 1, MessageId.parse(sent[0]).position + 1))
        out = e.moving.add_block(
            "job-1",
            start,
            start + 2 * DAY,
            [
                rows[0],
                rows[1],
                rows[1],  # named twice
                BlockRow(rows[2].id, "nope", rows[2].deliver_at_ms),
                BlockRow(rows[3].id, "t", rows[3].deliver_at_ms + 1),
                rows[5],  # cancelled
                BlockRow(other, "t", rows[0].deliver_at_ms),
                BlockRow(gone, "t", rows[0].deliver_at_ms),
                BlockRow(rows[4].id, "t", start + 5 * DAY),
                BlockRow("garbage", "t", start),
                rows[6],
            ],
        )
        assert out[:3] == [BlockOutcome.BLOCKED, BlockOutcome.BLOCKED, BlockOutcome.ALREADY_BLOCKED]
        assert isinstance(out[3], InvalidArgument) and out[3].field == "rows[3].topic"
        assert isinstance(out[4], InvalidArgument) and out[4].field == "rows[4].deliver_at_ms"
        assert out[5] is BlockOutcome.NOT_PENDING
        assert isinstance(out[6], InvalidArgument) and "shard 3" in str(out[6])
        assert isinstance(out[7], NotFound) and out[7].field == "rows[7].id"
        assert isinstance(out[8], InvalidArgument) and "not in the block" in str(out[8])
        assert isinstance(out[9], InvalidArgument) and "rows[9]" in str(out[9])
        assert out[10] is BlockOutcome.BLOCKED
        again = e.moving.add_block("job-1", start, start + 2 * DAY, rows[:2])
        assert again == [BlockOutcome.ALREADY_BLOCKED] * 2
        assert e.observing.counters["blocked"] == 3
        with pytest.raises(InvalidArgument, match="start_ms: a block must start at least two"):
            e.moving.add_block("j", START_MS + DAY, START_MS + 2 * DAY, rows[:1])
        with pytest.raises(InvalidArgument, match="end_ms"):
            e.moving.add_block("j", start, start, rows[:1])
        with pytest.raises(InvalidArgument, match="job"):
            e.moving.add_block("", start, start + DAY, rows[:1])
    finally:
        e.close()


def test_release_and_export_of_blocked_messages(tmp_path: Path, clock: FakeClock) -> None:
    e = open_engine(tmp_path / "d", clock)
    try:
        sent = ids(e.schedule(far(4, 30, 31)))
        start = START_MS + 30 * DAY
        rows = [BlockRow(m, "t", e.lookup(m).deliver_at_ms, 3) for m in sent]
        assert e.moving.add_block("j", start, start + DAY, rows) == [BlockOutcome.BLOCKED] * 4
        snap = e.moving.begin_export(1 << 20)
        assert snap.pending == 4
        batches = [b for p in snap.partitions for b in e.moving.export(snap, *p, 100)]
        e.moving.end_export(snap)
        assert sum(int(b.blocked.sum()) for b in batches) == 4, "listed, flagged as blocked"
        assert e.moving.release([sent[0]], target=1) == [ReleaseOutcome.RELEASED]
        assert e.moving.release([sent[0]], target=1) == [ReleaseOutcome.RELEASED], "again: a no-op"
        ledger = Ledger()
        ledger.due = {m: e.lookup(m).deliver_at_ms for m in sent[1:]}
        run_days(e, clock, 32, ledger)
        assert set(ledger.got) == set(sent[1:]), "the released one stays with its target"
    finally:
        e.close()


def test_commitlog_bytes_per_far_future_message_fall_with_compaction(tmp_path: Path) -> None:
    """The same far-future messages over half a year: rolled every window, against
    compacted into day blocks after their first roll."""
    written = {}
    for compacting in (False, True):
        clock = FakeClock(START_MS)
        e = open_engine(tmp_path / str(compacting), clock)
        ledger = Ledger()
        try:
            ledger.sent(e, far(60, 150, 180))
            start = e.commitlog_end
            run_days(e, clock, 181, ledger, compact_every=7 if compacting else 0)
            assert len(ledger.got) == 60
            written[compacting] = (e.commitlog_end - start) / 60
        finally:
            e.close()
    # ~80 windows of ROLL copies against a roll or two, a BLOCK entry and its load
    # (both also hold each message's DELIVER, HANDOUT and ACK records, ~150 bytes)
    assert written[True] * 8 < written[False]


class Killed(Exception):
    """A crash injected at a point of interest (then the engine is abandoned)."""


def crash_once(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, after: int = 0) -> None:
    """Make ``target.name`` raise ``Killed`` on its call number ``after`` + 1."""
    real = getattr(target, name)
    calls = [0]

    def wrapped(*args: Any, **kw: Any) -> Any:
        calls[0] += 1
        if calls[0] == after + 1:
            monkeypatch.setattr(target, name, real)
            raise Killed(name)
        return real(*args, **kw)

    monkeypatch.setattr(target, name, wrapped)


@pytest.mark.parametrize(
    "point",
    [
        "append-to-block-file",  # the BLOCK record written, its file entry not
        "after-add-no-checkpoint",  # added, killed before any checkpoint covers it
        "mid-load",  # a block's load part done (its records loaded one a step)
        "before-file-delete",  # loaded and checkpointed, the file not deleted yet
    ],
)
def test_a_kill_around_add_and_load_loses_nothing(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    monkeypatch.setattr(adding, "BLOCK_RECORD_BYTES", 400)  # a few copies a record
    ledger = Ledger()
    e = open_engine(tmp_path / "d", clock)
    sent = ledger.sent(e, far(40, 20, 40))
    run_days(e, clock, 3, ledger)
    if point == "append-to-block-file":
        crash_once(monkeypatch, BlockFiles, "append", after=2)
    elif point == "mid-load":
        crash_once(monkeypatch, loading, "_load", after=3)
    elif point == "before-file-delete":
        crash_once(monkeypatch, BlockFiles, "delete")
    try:
        assert compact(e, beyond_ms=7 * DAY, block_ms=4 * DAY).get("blocked", 0) > 20
        if point == "after-add-no-checkpoint":
            raise Killed(point)
        run_days(e, clock, 40, ledger)
    except Killed:
        e.abandon()
    else:
        e.close()
        pytest.fail(f"no kill at {point}")
    e = open_engine(tmp_path / "d", clock)
    try:
        compact(e, beyond_ms=7 * DAY, block_ms=4 * DAY)  # the job's retry
        run_days(e, clock, 45, ledger)
        assert set(ledger.got) == set(sent), f"lost: {set(sent) - set(ledger.got)}"
        e.checkpoint()
        assert not list((tmp_path / "d" / "blocks").glob("*.blk"))
    finally:
        e.close()


def test_a_torn_block_file_tail_is_cut_and_appended_again(tmp_path: Path, clock: FakeClock) -> None:
    e = open_engine(tmp_path / "d", clock)
    ledger = Ledger()
    sent = ledger.sent(e, far(10, 30, 31))
    start = START_MS + 30 * DAY
    rows = [BlockRow(m, "t", ledger.due[m]) for m in sent]
    e.moving.add_block("j", start, start + DAY, rows[:5])
    e.checkpoint()
    e.moving.add_block("j", start, start + DAY, rows[5:])
    e.abandon()
    path = tmp_path / "d" / "blocks" / f"{start:015d}.blk"
    whole = path.read_bytes()
    with path.open("r+b") as fh:  # a power loss: the entry past the checkpoint is torn
        fh.truncate(len(whole) - 20)
        fh.seek(0, 2)
        fh.write(b"\xff" * 7)
    e = open_engine(tmp_path / "d", clock)
    try:
        assert e.recovery["block_files_cut"] == 1
        assert path.read_bytes() == whole, "cut to the checkpoint, the rest appended again"
        run_days(e, clock, 32, ledger)
        assert set(ledger.got) == set(sent)
    finally:
        e.close()


def test_retention_through_the_year_keeps_blocked_messages(
    tmp_path: Path, clock: FakeClock
) -> None:
    e = open_engine(
        tmp_path / "d", clock, commitlog_segment_bytes=8 << 10, timerlog_segment_bytes=4 << 10
    )
    ledger = Ledger()
    try:
        sent = ledger.sent(e, far(80, 30, 365, seed=5))
        for day in range(370):
            # traffic due at once fills segments, which retention then deletes
            ledger.sent(e, [ScheduleRequest(topic="t", body=b"n" * 200, delay_ms=HOUR)] * 10)
            run_days(e, clock, 1, ledger, compact_every=1 if day % 5 == 0 else 0)
            if day == 200:  # long after their SCHEDULE records' segments went
                late = [m for m in sent if ledger.due[m] > clock.now_ms() + 30 * DAY]
                assert late and all(e.lookup(m).state is MessageState.PENDING for m in late)
        assert e.observing.counters["commitlog_segments_deleted"] > 10
        assert e.observing.counters["records_kept"] > 0
        assert set(sent) <= set(ledger.got)
        assert len(ledger.got) == len(ledger.due)
    finally:
        e.close()


def test_verify_passes_a_compacted_directory_and_names_block_damage(
    tmp_path: Path, clock: FakeClock
) -> None:
    from delayq.verify import verify

    data = tmp_path / "d"
    e = open_engine(data, clock)
    ledger = Ledger()
    sent = ledger.sent(e, far(30, 30, 40))
    run_days(e, clock, 3, ledger, compact_every=1)
    assert e.observing.counters["blocked"] == 30
    e.close()
    report = verify(data)
    assert report.exit_code == 0, [f for f in report.findings if f.damage]
    files = sorted((data / "blocks").glob("*.blk"))
    assert files and any(r.startswith("blocks/") for r in report.files)
    whole = files[0].read_bytes()
    files[0].write_bytes(whole + b"\x01" * 9)  # past the checkpoint: a note
    assert {f.kind for f in verify(data).findings} == {"block-tail"}
    flipped = bytearray(whole)
    flipped[100] ^= 0xFF
    files[0].write_bytes(bytes(flipped))
    # (the messages of the damaged entry read BLOCKED, in no block that reads)
    assert {f.kind for f in verify(data).damaged} == {"block-corrupt", "block-orphan"}
    files[0].write_bytes(whole[:-10])
    assert "block-short" in {f.kind for f in verify(data).damaged}
    files[0].unlink()  # its messages: blocked, in no block
    assert {f.kind for f in verify(data).damaged} == {"block-orphan"}
    assert len(sent) == 30
