"""The engine's files: restarts (clean, abandoned, a power loss, a kill between
writes), the files a data dir is made of and what it refuses (another shard's,
another engine's, damaged data, a changed window or precision), retention,
shared fsyncs, counters before start, and epochs the log lost."""

from __future__ import annotations

import fcntl
import gc
import os
from pathlib import Path

import pytest

import delayq
from delayq import Engine, EngineClosed, FailedPrecondition, FakeClock
from delayq.engine import MessageState
from tests.support.engines import (
    START_MS,
    Make,
    drain,
    ids,
    req,
    run_until,
    small_settings,
)


def test_everything_survives_a_clean_restart(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    _a, _b, c, far = ids(e.schedule([req(50, b"a"), req(50, b"b"), req(5000, b"c"), req(30_000)]))
    run_until(e, clock, clock.now_ms() + 60)
    got = e.receive("t", "g", max_messages=10)
    e.ack("t", "g", [got[0].receipt])
    e.cancel([c])
    e.close()
    with pytest.raises(EngineClosed):
        e.schedule([req(1)])
    e2 = make_engine()
    assert e2.recovery["checkpoint"] is True
    assert e2.recovery["commitlog_replayed"] == 0, "a clean close leaves nothing to replay"
    assert drain(e2) == [], "the unacked one is still in flight: its invisibility runs"
    assert e2.lookup(c).state is MessageState.CANCELLED
    run_until(e2, clock, clock.now_ms() + 31_000, step_ms=100)
    back = drain(e2)
    assert [(m.body, m.attempt) for m in back if m.id != far] == [(b"b", 2)], (
        "unacked comes back once its invisibility lapses, its attempt counted on; acked does not"
    )
    assert [m.id for m in back if m.body != b"b"] == [far]
    assert e2.stats("t")[0].pending == 0


def test_abandoned_engine_recovers_from_the_tail_without_a_checkpoint(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100 * i, str(i).encode()) for i in range(1, 40)]))
    e.cancel(sent[:5])
    run_until(e, clock, clock.now_ms() + 1000)
    before = drain(e)
    e.abandon()  # like SIGKILL: no checkpoint was ever written
    e2 = make_engine()
    assert e2.recovery["checkpoint"] is False
    # the logs' warm tails (zeros ahead of the writers) were cut, and are not data
    assert (e2.recovery["commitlog_bytes_cut"], e2.recovery["timerlog_bytes_cut"]) == (0, 0)
    run_until(e2, clock, clock.now_ms() + 5000)
    after = drain(e2)
    assert {m.id for m in before} | {m.id for m in after} == set(sent[5:])
    assert not {m.id for m in after} & set(sent[:5])


def test_an_engine_makes_the_files_its_first_writes_need_when_it_opens(
    make_engine: Make, clock: FakeClock
) -> None:
    """Creating a log file or a state chunk fsyncs it and its directory (tens of ms):
    done at open, not by the first schedule or link under the engine's lock. Files
    made by an open that then saw no write are opened again like any others."""

    def files(e: Engine) -> list[str]:
        d = e.settings.data_dir
        return sorted(
            f"{sub}/{p.name}"
            for sub in ("commitlog", "timerlog", "state")
            for p in (d / sub).iterdir()
        )

    e = make_engine()
    opened = files(e)
    assert [f.split("/")[0] for f in opened] == ["commitlog", "state", "timerlog"]
    e.abandon()  # killed before any write: the new files keep their warm tails
    e = make_engine()
    assert files(e) == opened
    sent = ids(e.schedule([req(100, str(i).encode()) for i in range(20)]))
    e.pump()  # links them: TimerLog records, wheel slots, the state map
    assert files(e) == opened, "the first writes found their files made"
    e.abandon()
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 300)
    assert sorted(m.id for m in drain(e2)) == sorted(sent)


def test_a_power_loss_that_kept_the_wheel_but_lost_the_timerlog_tail_loses_nothing(
    make_engine: Make, clock: FakeClock
) -> None:
    """After a power loss the mapped wheel may have reached the disk pointing at
    TimerLog records that did not: such slots are rebuilt from the TimerLog, and
    the messages whose records were lost are linked again from the CommitLog."""
    e = make_engine()
    first = ids(e.schedule([req(700, b"a%d" % i) for i in range(10)]))
    e.pump()
    ckpt = e.checkpoint()  # the TimerLog is synced up to here
    later = ids(e.schedule([req(700, b"b%d" % i) for i in range(10)] + [req(900, b"c")]))
    e.pump()  # linked: the slots now point past the checkpoint's TimerLog end
    e.abandon()
    # lose the TimerLog after the checkpoint (the CommitLog and the wheel survive)
    segments = sorted((e.settings.data_dir / "timerlog").glob("*.seg"))
    last = max(s for s in segments if int(s.stem) <= ckpt.timerlog_end)
    assert last.stat().st_size > ckpt.timerlog_end - int(last.stem), "nothing to lose"
    with open(last, "r+b") as f:
        f.truncate(ckpt.timerlog_end - int(last.stem))
    e2 = make_engine()
    assert e2.recovery["slots_rebuilt"] >= 1
    run_until(e2, clock, clock.now_ms() + 2000)
    got = [m.id for m in drain(e2)]
    assert sorted(got) == sorted(first + later), "each message once"
    assert e2.observing.counters["quarantined"] == 0, "no chain led into the lost records"


def test_a_data_dir_of_another_shard_is_refused_and_the_epoch_never_goes_back(
    make_engine: Make, tmp_path: Path
) -> None:
    """The data directory records its epochs (epoch -> first CommitLog position):
    a node reopened with a lower ``settings.epoch`` stays in the recorded one, a
    lower epoch is refused at run time, and a higher one starts at the log's end,
    on disk before anything is written in it."""
    from delayq.ids import MessageId
    from delayq.store.epochfile import EPOCHS_FILE, load_epochs

    e = make_engine(epoch=3)
    (first,) = ids(e.schedule([req(100)]))
    start3 = e.replicating.epochs.entries[0][1]
    assert e.replicating.epochs.entries == ((3, start3),) and MessageId.parse(first).epoch == 3
    e.close()
    with pytest.raises(FailedPrecondition, match="holds shard 0; this engine is shard 1"):
        make_engine(shard=1, epoch=3)
    e = make_engine(epoch=2)  # a restart with an older setting keeps the recorded epoch
    assert e.epoch == 3
    (again,) = ids(e.schedule([req(100)]))
    assert MessageId.parse(again).epoch == 3
    with pytest.raises(FailedPrecondition, match="epoch 2 is below the shard's current epoch 3"):
        e.replicating.begin_epoch(2)
    end = e.commitlog_end
    e.replicating.begin_epoch(4)  # a failover raises the epoch
    assert load_epochs(tmp_path / "data" / EPOCHS_FILE).entries == ((3, start3), (4, end))
    (later,) = ids(e.schedule([req(100)]))
    assert MessageId.parse(later).epoch == 4 and MessageId.parse(later).position >= end
    assert e.lookup(first).state is MessageState.PENDING  # old ids still resolve
    e.close()
    assert make_engine().epoch == 4


def test_a_kill_loses_the_ready_queue_tail_and_recovery_rebuilds_it(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100, str(i).encode()) for i in range(20)]))
    run_until(e, clock, clock.now_ms() + 300)
    assert e.stats("t")[0].delivered == 20
    e.abandon()  # like SIGKILL: the ready entries were only in memory
    sizes = [f.stat().st_size for f in (e.settings.data_dir / "ready").glob("*.idx")]
    assert sizes == [32], "the file holds its header only"
    e2 = make_engine()
    assert sorted(m.id for m in drain(e2)) == sorted(sent), "rebuilt from DELIVER records"


def test_two_engines_cannot_share_a_data_dir(make_engine: Make) -> None:
    make_engine()
    with pytest.raises(FailedPrecondition, match="in use"):
        make_engine()


def test_a_data_dir_that_cannot_be_made_is_a_failed_precondition(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for where in (tmp_path / "file", tmp_path / "file" / "below"):
        with pytest.raises(FailedPrecondition, match="cannot be used"):
            Engine(small_settings(where), background=False).start()


def test_retention_deletes_old_segments_but_keeps_live_messages(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(
        commitlog_segment_bytes=8 << 10, timerlog_segment_bytes=2 << 10, retention_ms=5_000
    )
    (far,) = ids(e.schedule([req(60_000, b"far" * 50)]))
    for _ in range(30):
        ids(e.schedule([req(50, b"y" * 300) for _ in range(5)]))
        run_until(e, clock, clock.now_ms() + 1000, step_ms=100)
        drain(e)
        e.checkpoint()
    run_until(e, clock, clock.now_ms() + 35_000, step_ms=100)
    e.checkpoint()
    assert e.observing.counters["commitlog_segments_deleted"] > 0
    assert e.observing.counters["timerlog_segments_deleted"] > 0
    assert int(sorted(os.listdir(e.settings.data_dir / "timerlog"))[0].split(".")[0]) > 0
    got = drain(e)
    assert [m.id for m in got] == [far], "a rolled message outlives its first segment"
    oldest = sorted(os.listdir(e.settings.data_dir / "commitlog"))[0]
    assert int(oldest.split(".")[0]) > 0


def test_window_and_precision_are_fixed_for_a_data_dir(make_engine: Make, tmp_path: Path) -> None:
    make_engine().close()
    with pytest.raises(delayq.CorruptData, match="precision"):
        make_engine(precision_ms=50)


def _damage(data: Path, how: str) -> None:
    if how == "checkpoint":
        (data / "checkpoint.json").write_text("{not json")
    elif how == "renamed segment":
        seg = sorted((data / "timerlog").glob("*.seg"))[0]
        seg.rename(seg.with_name(f"{int(seg.stem) + 64:020d}.seg"))
    elif how == "short segment":
        with open(sorted((data / "commitlog").glob("*.seg"))[0], "r+b") as f:
            f.truncate(10)


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("checkpoint", "checkpoint unreadable"),
        ("renamed segment", "!= name"),
        ("short segment", "shorter than its header"),
        ("precision", "precision"),
    ],
)
def test_damaged_data_is_refused_and_the_refusal_leaves_nothing_open(
    make_engine: Make, how: str, says: str
) -> None:
    e = make_engine()
    e.schedule([req(100)])
    e.pump()
    e.close()
    data = e.settings.data_dir
    _damage(data, how)
    gc.collect()  # an earlier test's file objects, closed now rather than during the open
    fds = set(os.listdir("/proc/self/fd"))
    with pytest.raises(delayq.CorruptData, match=says):
        make_engine(**({"precision_ms": 50} if how == "precision" else {}))
    # none left open (one closed meanwhile by another thread or the collector is not ours)
    assert set(os.listdir("/proc/self/fd")) <= fds, "a refused open closed every file"
    with open(data / "LOCK", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: raises if still held


def test_kill_between_commitlog_append_and_wheel_link_requeues_once(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    e.checkpoint()
    sent = ids(e.schedule([req(200 + i) for i in range(30)]))  # appended, not yet linked
    assert e.observing.gauges()["enqueue_queue"] == 30
    e.abandon()
    e2 = make_engine()
    assert e2.recovery["requeued"] == 30
    run_until(e2, clock, clock.now_ms() + 300)
    assert sorted(m.id for m in drain(e2)) == sorted(sent)
    assert e2.observing.gauges()["pending"] == 0


def test_sync_flush_shares_fsyncs_between_concurrent_callers(tmp_path: Path) -> None:
    import threading

    from delayq import EngineSettings, FlushPolicy

    settings = EngineSettings(data_dir=tmp_path / "d", flush=FlushPolicy.SYNC)
    with Engine(settings) as e:
        errors: list[BaseException] = []

        def producer() -> None:
            try:
                for _ in range(50):
                    assert e.schedule([req(60_000)])[0].error is None
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=producer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        commit = e.observing.group_commit
        assert commit.durable >= e.observing.gauges()["commitlog_end"] - 1, (
            "every ack waited for fsync"
        )
        assert 0 < commit.fsyncs < 400, "400 synchronous schedules shared their fsyncs"


def test_counters_and_closed_state_read_before_start(tmp_path: Path) -> None:
    """Metrics may scrape an engine that is still recovering: it says it is not
    running and counts nothing yet, without raising."""
    e = Engine(small_settings(tmp_path / "data"), FakeClock(START_MS), background=False)
    assert not e.running and dict(e.observing.counters) == {}
    e.start()
    e.schedule([req(100)])
    assert e.observing.counters["scheduled"] == 1
    e.close()


def test_an_epoch_whose_writes_the_log_lost_is_never_written_in_again(
    make_engine: Make, tmp_path: Path
) -> None:
    """The history says epoch 2 began at a position the CommitLog no longer
    reaches (its tail was lost): ids of epoch 2 may be out there, so the node
    writes in epoch 3 from the end that survived."""
    from delayq.epochs import EpochHistory
    from delayq.ids import MessageId
    from delayq.store.epochfile import EPOCHS_FILE, save_epochs

    e = make_engine()
    (kept,) = ids(e.schedule([req(100)]))
    end = e.commitlog_end
    e.close()
    path = tmp_path / "data" / EPOCHS_FILE
    save_epochs(path, EpochHistory.of([(1, 0), (2, end + 4096)]))
    e = make_engine()
    assert e.epoch == 3 and e.replicating.epochs.entries == ((1, 0), (3, end))
    (new,) = ids(e.schedule([req(100)]))
    assert MessageId.parse(new).epoch == 3
    assert e.lookup(kept).state is MessageState.PENDING


def test_a_segment_a_retime_starts_is_made_now_not_at_the_new_deadline(
    make_engine: Make, clock: FakeClock, tmp_path: Path
) -> None:
    from delayq.store.commitlog import MAGIC
    from delayq.store.segment import Segment

    e = make_engine()
    e.schedule([req(10)])
    run_until(e, clock, clock.now_ms() + 300)
    [m] = e.receive("t", "g", invisible_ms=1000)
    segs = lambda: sorted((tmp_path / "data").rglob("commitlog/*.seg"))  # noqa: E731
    before = len(segs())
    receipt = m.receipt
    while len(segs()) == before:  # each re-timing logs a HANDOUT record: one rolls
        [receipt] = e.retime("t", "g", [receipt], 12 * 3600_000)  # type: ignore[list-item]
    made = [Segment.open(p, MAGIC, "commitlog") for p in segs()]
    assert all(s.created_ms <= clock.now_ms() for s in made), [s.created_ms for s in made]
    for s in made:
        os.close(s.fd)
