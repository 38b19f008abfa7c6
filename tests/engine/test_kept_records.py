"""A far-future message stays cancellable, reschedulable and visible to lookup by
its id after retention deleted the CommitLog segment its id points into: the
SCHEDULE records of pending messages are kept (``store/keptrecords``), across
restarts, and dropped once their messages are done and retention has passed."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from delayq import Engine, FakeClock, NotFound, SystemClock
from delayq.engine import CancelOutcome, MessageState
from delayq.ids import MessageId
from tests.support.engines import SMALL, Make, churn, drain, ids, req, run_until, small_settings


def first_segment(data: Path) -> int:
    return min(int(p.stem) for p in (data / "commitlog").glob("*.seg"))


def test_pending_far_messages_outlive_their_segment(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine(retention_ms=5_000, **SMALL)
    far = ids(e.schedule([req(60_000 + i, b"far%d" % i, key=f"k{i}") for i in range(4)]))
    (done,) = ids(e.schedule([req(100, b"soon")]))
    churn(e, clock, 30)
    data = e.settings.data_dir
    assert first_segment(data) > MessageId.parse(far[-1]).position, "their segment is gone"
    assert e.observing.counters["records_kept"] == 4, "the four pending ones, not the delivered one"
    with pytest.raises(NotFound, match="removed by retention"):
        e.lookup(done)
    looked = e.lookup(far[0])
    assert (looked.state, looked.body, looked.key) == (MessageState.PENDING, b"far0", "k0")
    assert e.cancel([far[0], far[1]]) == [CancelOutcome.CANCELLED] * 2
    moved = e.reschedule(far[2], delay_ms=500)
    e.close()  # the kept records are files: a restart reads them again
    e = make_engine(retention_ms=5_000, **SMALL)
    assert e.lookup(far[1]).state is MessageState.CANCELLED
    assert e.cancel([far[1]]) == [CancelOutcome.ALREADY_CANCELLED]
    run_until(e, clock, clock.now_ms() + 1000, step_ms=100)
    assert [m.id for m in drain(e)] == [moved.id]
    run_until(e, clock, clock.now_ms() + 40_000, step_ms=500)
    assert [m.body for m in drain(e)] == [b"far3"], "the cancelled ones never come"
    assert e.lookup(far[3]).state is MessageState.DELIVERED
    # done and past retention: the next deletions drop their kept records
    churn(e, clock, 20)
    assert e.observing.counters["kept_records_retired"] == 4
    assert not list((data / "commitlog" / "kept").glob("*.kept"))
    with pytest.raises(NotFound, match="removed by retention"):
        e.lookup(far[3])


def test_a_kill_between_keeping_and_deleting_keeps_everything(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine(retention_ms=5_000, **SMALL)
    (far,) = ids(e.schedule([req(60_000, b"far")]))
    log = e.inspect().commitlog.log

    def killed(base: int) -> None:
        raise SystemExit("killed before the segment was deleted")

    monkeypatch.setattr(log, "delete_segment", killed)
    with pytest.raises(SystemExit):
        churn(e, clock, 30)
    e.abandon()
    monkeypatch.undo()
    assert list((e.settings.data_dir / "commitlog" / "kept").glob("*.kept"))
    e = make_engine(retention_ms=5_000, **SMALL)
    churn(e, clock, 5)  # keeps again (the same file) and deletes this time
    assert first_segment(e.settings.data_dir) > MessageId.parse(far).position
    assert len(os.listdir(e.settings.data_dir / "commitlog" / "kept")) == 1
    assert e.lookup(far).body == b"far" and e.cancel([far]) == [CancelOutcome.CANCELLED]


def test_retention_keeps_records_while_other_threads_read_them(tmp_path: Path) -> None:
    """Real threads: the flush stage deletes segments and keeps records while a
    reader looks the far messages up by id the whole time."""
    settings = small_settings(
        tmp_path / "data", window_ms=1000, retention_ms=200, flush_interval_ms=50, **SMALL
    )
    with Engine(settings, SystemClock()) as e:
        far = ids(e.schedule([req(60_000, b"far%d" % i) for i in range(20)]))
        stop, seen, failures = threading.Event(), [0], []

        def look() -> None:
            while not stop.is_set():
                try:
                    assert {e.lookup(i).state for i in far} == {MessageState.PENDING}
                    seen[0] += 1
                except Exception as exc:  # reported below, with what it was
                    failures.append(exc)
                    return

        reader = threading.Thread(target=look)
        reader.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # traffic: segments fill and go
            ids(e.schedule([req(0, b"y" * 300) for _ in range(20)]))
            while e.receive("t", "g", max_messages=1000, auto_ack=True):
                pass
            time.sleep(0.01)
        stop.set()
        reader.join()
        assert failures == [] and seen[0] > 0
        assert e.observing.counters["commitlog_segments_deleted"] > 0
        assert e.observing.counters["records_kept"] >= 20
        assert first_segment(settings.data_dir) > MessageId.parse(far[-1]).position
        assert e.cancel(far) == [CancelOutcome.CANCELLED] * 20


def test_retire_rewrites_a_kept_file_without_its_done_messages(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(retention_ms=5_000, **SMALL)
    stays, goes = ids(e.schedule([req(90_000, b"stays"), req(90_000, b"goes")]))
    churn(e, clock, 30)
    assert e.observing.counters["records_kept"] == 2
    assert e.cancel([goes]) == [CancelOutcome.CANCELLED]
    churn(e, clock, 10)  # the kept file is older than retention when segments go again
    assert e.observing.counters["kept_records_retired"] == 1
    assert e.lookup(stays).body == b"stays", "the pending one is kept, read from the new file"
    with pytest.raises(NotFound, match="removed by retention"):
        e.lookup(goes)
