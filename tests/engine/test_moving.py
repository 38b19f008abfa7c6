"""Moving messages between shards (``timers.rebalance.transfer``): a release forwards pending
messages to another shard (never delivered here; calls by their id are passed on),
an import schedules one copy per source id (a re-run makes no second copy), and
the old id works on the target, across restarts and checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq import Engine, FakeClock, Forwarded, InvalidArgument
from delayq.engine import CancelOutcome, ImportRow, MessageState, ReleaseOutcome
from delayq.formats.imports import MOVED_FROM
from delayq.ids import MessageId
from tests.support.engines import START_MS, drain, ids, req, run_until, small_settings


def shard(tmp: Path, clock: FakeClock, n: int) -> Engine:
    return Engine(small_settings(tmp / f"s{n}", shard=n), clock, background=False).start()


def rows_of(e: Engine, some: list[str]) -> list[ImportRow]:
    out = []
    for mid in some:
        m = e.lookup(mid)
        out.append(ImportRow(mid, m.topic, m.body, m.deliver_at_ms, m.key, m.headers))
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START_MS)


def test_a_released_message_is_never_delivered_by_its_source(
    tmp_path: Path, clock: FakeClock
) -> None:
    src = shard(tmp_path, clock, 0)
    try:
        sent = ids(src.schedule([req(1_000 + i, b"m%d" % i, key=f"k{i}") for i in range(6)]))
        rows = rows_of(src, sent[:4])  # read before they go
        assert src.moving.release(sent[:4], target=2) == [ReleaseOutcome.RELEASED] * 4
        assert src.moving.release(sent[:4], target=2) == [ReleaseOutcome.RELEASED] * 4, (
            "again: no-op"
        )
        with pytest.raises(Forwarded) as moved:
            src.lookup(sent[0])
        assert (moved.value.target, moved.value.id) == (2, sent[0])
        out = src.cancel([sent[1], sent[4]])
        assert isinstance(out[0], Forwarded) and out[0].target == 2
        assert out[1] is CancelOutcome.CANCELLED
        bad = src.moving.release([sent[2]], target=3)[0]
        assert "moved to shard 2, not 3" in str(bad)
        with pytest.raises(InvalidArgument, match="this shard"):
            src.moving.release([sent[5]], target=0)
        run_until(src, clock, clock.now_ms() + 2_000, step_ms=100)
        assert [m.id for m in drain(src)] == [sent[5]], "only the one left here"
        assert src.moving.release([sent[5]], target=2) == [ReleaseOutcome.ALREADY_DELIVERED]
        assert src.moving.release([sent[4]], target=2) == [ReleaseOutcome.ALREADY_CANCELLED]
        assert src.observing.counters["released"] == 4
        snap = src.moving.begin_export(1 << 20)  # the forwarded ones are listed, with their target
        exported = [b for p in snap.partitions for b in src.moving.export(snap, *p, 100)]
        src.moving.end_export(snap)
        targets = {
            int(b.positions[i]): int(b.forwarded_to[i]) for b in exported for i in range(len(b))
        }
        assert targets == {MessageId.parse(m).position: 2 for m in sent[:4]}
        assert rows[0].body == b"m0"
    finally:
        src.close()


def test_an_import_makes_one_copy_per_source_and_the_old_id_works(
    tmp_path: Path, clock: FakeClock
) -> None:
    src, dst = shard(tmp_path, clock, 0), shard(tmp_path, clock, 1)
    try:
        sent = ids(
            src.schedule(
                [req(60_000 + i, b"m%d" % i, key=f"k{i}", headers={"h": "v"}) for i in range(5)]
            )
        )
        rows = rows_of(src, sent)
        assert src.moving.release(sent, target=1) == [ReleaseOutcome.RELEASED] * 5
        copies = dst.moving.import_messages(rows[:3])
        assert all(isinstance(c, str) and MessageId.parse(c).shard == 1 for c in copies)
        again = dst.moving.import_messages([*rows, rows[4]])  # re-run, one named twice
        assert again[:3] == copies and again[4] == again[5]
        assert len(set(again)) == 5
        assert dst.observing.counters["imported"] == 5
        looked = dst.lookup(sent[0])  # the old id, here
        assert (looked.id, looked.body, looked.key) == (copies[0], b"m0", "k0")
        assert looked.headers == {"h": "v", MOVED_FROM: sent[0]}
        assert dst.cancel([sent[1]]) == [CancelOutcome.CANCELLED]
        assert dst.lookup(str(copies[1])).state is MessageState.CANCELLED
        moved = dst.reschedule(sent[2], delay_ms=500)
        dst.checkpoint()
        dst.close()
        dst = shard(tmp_path, clock, 1)  # the index survives (saved, then replayed)
        assert dst.lookup(sent[3]).id == again[3]
        assert dst.moving.import_messages(rows) == again[:5]
        assert dst.lookup(sent[2]).state is MessageState.RESCHEDULED
        run_until(dst, clock, clock.now_ms() + 70_000, step_ms=200)
        got = {m.id for m in drain(dst)}
        assert got == {moved.id, again[0], again[3], again[4]}, "each once, the cancelled not"
        run_until(src, clock, clock.now_ms(), step_ms=200)
        assert drain(src) == [], "the source delivers none of them"
    finally:
        src.close()
        dst.close()


def test_the_index_is_rebuilt_from_the_log_without_a_checkpoint(
    tmp_path: Path, clock: FakeClock
) -> None:
    src, dst = shard(tmp_path, clock, 0), shard(tmp_path, clock, 1)
    try:
        sent = ids(src.schedule([req(60_000, b"x")]))
        src.moving.release(sent, target=1)
        (copy,) = dst.moving.import_messages(rows_of_released(sent))
        dst.abandon()  # as a SIGKILL: no checkpoint since
        dst = shard(tmp_path, clock, 1)
        assert dst.lookup(sent[0]).id == copy
        assert dst.moving.import_messages(rows_of_released(sent)) == [copy]
    finally:
        src.close()
        dst.close()


def rows_of_released(sent: list[str]) -> list[ImportRow]:
    return [ImportRow(m, "t", b"x", START_MS + 60_000) for m in sent]


def test_clients_cannot_set_the_moved_from_header(tmp_path: Path, clock: FakeClock) -> None:
    e = shard(tmp_path, clock, 0)
    try:
        (out,) = e.schedule([req(10, b"x", headers={MOVED_FROM: "TQABADHa"})])
        assert out.error is not None and "delayq's own" in str(out.error)
    finally:
        e.close()


def test_a_message_moved_there_and_back_keeps_every_old_id(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, b = shard(tmp_path, clock, 0), shard(tmp_path, clock, 2)
    try:
        first = ids(a.schedule([req(60_000, b"trip", key="k", headers={"h": "v"})]))
        out = rows_of(a, first)
        a.moving.release(first, target=2)
        (on_b,) = b.moving.import_messages(out)
        assert isinstance(on_b, str)
        row = rows_of(b, [on_b])[0]  # what the job exports: b's copy, marker and all
        assert b.moving.release([on_b], target=0) == [ReleaseOutcome.RELEASED]
        assert row.headers[MOVED_FROM] == first[0]
        (home,) = a.moving.import_messages([row])
        assert isinstance(home, str) and MessageId.parse(home).shard == 0
        looked = a.lookup(first[0])  # its first id, back home: the copy, not "forwarded"
        assert (looked.id, looked.body, looked.state) == (home, b"trip", MessageState.PENDING)
        assert looked.headers == {"h": "v", MOVED_FROM: f"{first[0]} {on_b}"}
        assert a.lookup(on_b).id == home, "b's id works here too"
        a.checkpoint()
        a.close()
        a = shard(tmp_path, clock, 0)
        assert a.cancel([first[0]]) == [CancelOutcome.CANCELLED]
        run_until(a, clock, clock.now_ms() + 70_000, step_ms=200)
        run_until(b, clock, clock.now_ms(), step_ms=200)
        assert drain(a) == [] and drain(b) == [], "cancelled through its first id"
    finally:
        a.close()
        b.close()


def test_a_release_to_shard_700_forwards_the_old_ids_there(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Shards past 127 (the map allows 1024): the release, the old id's answers on
    the source (lookup and cancel say shard 700), the export's target column, a
    re-run, replay after a kill, and the import on shard 700 by the old id."""
    src, far = shard(tmp_path, clock, 0), shard(tmp_path, clock, 700)
    try:
        sent = ids(src.schedule([req(60_000 + i, b"m%d" % i, key=f"k{i}") for i in range(3)]))
        rows = rows_of(src, sent)
        assert src.moving.release(sent[:2], target=700) == [ReleaseOutcome.RELEASED] * 2
        assert src.moving.release(sent[:2], target=700) == [ReleaseOutcome.RELEASED] * 2, "a re-run"
        bad = src.moving.release(sent[:1], target=129)[0]
        assert "moved to shard 700, not 129" in str(bad)
        with pytest.raises(InvalidArgument, match=r"0\.\.1023, not 1024"):
            src.moving.release(sent[2:], target=1024)
        src.abandon()  # as a SIGKILL: the forwards come back from the CommitLog
        src = shard(tmp_path, clock, 0)
        with pytest.raises(Forwarded) as moved:
            src.lookup(sent[0])
        assert (moved.value.target, moved.value.id) == (700, sent[0])
        out = src.cancel([sent[1], sent[2]])
        assert isinstance(out[0], Forwarded) and out[0].target == 700
        assert out[1] is CancelOutcome.CANCELLED
        snap = src.moving.begin_export(1 << 20)
        exported = [b for p in snap.partitions for b in src.moving.export(snap, *p, 100)]
        src.moving.end_export(snap)
        targets = {
            int(b.positions[i]): int(b.forwarded_to[i]) for b in exported for i in range(len(b))
        }
        assert targets == {MessageId.parse(m).position: 700 for m in sent[:2]}
        copies = far.moving.import_messages(rows[:2])
        assert all(isinstance(c, str) and MessageId.parse(c).shard == 700 for c in copies)
        assert far.lookup(sent[0]).id == copies[0], "the old id, where it was forwarded"
        assert far.cancel([sent[1]]) == [CancelOutcome.CANCELLED]
        for _ in range(140):  # 70 s, both shards running
            clock.advance(500)
            src.pump()
            far.pump()
        assert drain(src) == [] and [m.id for m in drain(far)] == [copies[0]]
    finally:
        src.close()
        far.close()
