"""A full disk, in the engine, on real files: the writes to chosen files fail with
ENOSPC (injected into ``os.pwrite``; ``tests/integration/test_disk_full.py`` fills a
real small filesystem). A refused call changes nothing, a call whose messages were
accepted is not failed by later work, and everything resumes once space returns."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from delayq import Engine, FailedPrecondition, FakeClock, StorageFull
from delayq.argchecks import RECEIVE_INVISIBLE_MS
from delayq.engine import AckOutcome, MessageState, ScheduleBatch, ScheduleRequest, accepting
from delayq.store import readyindex
from delayq.store.datafile import write_at
from delayq.store.holes import punch_hole
from delayq.store.statemap import StateMap
from tests.support.engines import Make, drain, ids, req, run_until


class FullDisk:
    """While ``on``, a write to a file whose path holds ``part`` fails with ENOSPC."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.on = True
        self.refused = 0

    def hits(self, fd: int) -> bool:
        return self.on and self.part in os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], FullDisk]]:
    made: list[FullDisk] = []
    real = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        for disk in made:
            if disk.hits(fd):
                disk.refused += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)

    def make(part: str) -> FullDisk:
        made.append(FullDisk(part))
        return made[-1]

    yield make


def test_a_schedule_refused_for_a_full_disk_leaves_nothing_behind(
    make_engine: Make, clock: FakeClock, full_disk: Callable[[str], FullDisk]
) -> None:
    e = make_engine()
    before = ids(e.schedule([req(100 + i) for i in range(10)]))
    next_seq = e.inspect().next_seq
    disk = full_disk("/commitlog/")
    batch = ScheduleBatch(topic="fresh", bodies=[b"f"] * 20, delay_ms=[200] * 20)
    with pytest.raises(StorageFull, match=r"no space left to append to the commitlog in .*data"):
        e.schedule_batch(batch)
    assert disk.refused == 1
    assert e.observing.counters["congested_disk"] == 20
    # no seqs used up (they would read as pending for ever) and no topic without its record
    assert e.inspect().next_seq == next_seq
    assert "fresh" not in e.inspect().topics.ids
    with pytest.raises(StorageFull):
        e.schedule([ScheduleRequest(topic="t", body=b"y", delay_ms=100)])

    disk.on = False  # space again: the same calls go through
    fresh = ids(e.schedule_batch(batch).outcomes())
    run_until(e, clock, clock.now_ms() + 400)
    assert sorted(m.id for m in drain(e)) == sorted(before)
    assert sorted(m.id for m in drain(e, "fresh")) == sorted(fresh)
    e.close()
    again = make_engine()  # the topic's record went to disk with its first messages
    looked = again.lookup(fresh[0])
    assert (looked.topic, looked.state) == ("fresh", MessageState.DELIVERED)


def test_a_failed_link_on_the_callers_thread_does_not_fail_its_accepted_call(
    make_engine: Make,
    clock: FakeClock,
    full_disk: Callable[[str], FullDisk],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(accepting, "HELP_LINK", 5)  # the caller links from 5 queued on
    e = make_engine()
    disk = full_disk("/timerlog/")
    accepted = ids(e.schedule([req(100 + i) for i in range(10)]))  # written to the CommitLog
    assert disk.refused == 1, "the caller tried to link the batch itself, and failed"
    assert e.inspect().enqueue_queue_len == 10, "the batch stays queued for the link stage"
    disk.on = False
    run_until(e, clock, clock.now_ms() + 300)
    assert sorted(m.id for m in drain(e)) == sorted(accepted)


def test_an_auto_ack_receive_that_cannot_log_its_acks_loses_nothing(
    make_engine: Make, clock: FakeClock, full_disk: Callable[[str], FullDisk]
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100 + i) for i in range(5)]))
    run_until(e, clock, clock.now_ms() + 300)  # released: ready to receive
    disk = full_disk("/commitlog/")
    with pytest.raises(StorageFull):
        e.receive("t", "g", max_messages=10, auto_ack=True)
    assert disk.refused == 1
    disk.on = False
    got = e.receive("t", "g", max_messages=10, auto_ack=True)
    assert sorted(m.id for m in got) == sorted(sent), "handed out after all, not lost"
    assert {m.attempt for m in got} == {2}
    assert e.receive("t", "g", max_messages=10, auto_ack=True) == [], "and acked this time"


def test_a_receive_that_cannot_log_its_hand_outs_loses_nothing(
    make_engine: Make, clock: FakeClock, full_disk: Callable[[str], FullDisk]
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100 + i) for i in range(5)]))
    run_until(e, clock, clock.now_ms() + 300)
    disk = full_disk("/commitlog/")
    with pytest.raises(StorageFull):
        e.receive("t", "g", max_messages=10, invisible_ms=60_000)
    assert disk.refused == 1
    disk.on = False
    got = e.receive("t", "g", max_messages=10, invisible_ms=60_000)  # at once, not in 60 s
    assert sorted(m.id for m in got) == sorted(sent) and {m.attempt for m in got} == {2}
    assert e.ack("t", "g", [m.receipt for m in got]) == [AckOutcome.ACKED] * 5


def test_acks_that_cannot_be_logged_are_undone_and_their_messages_come_again(
    make_engine: Make, clock: FakeClock, full_disk: Callable[[str], FullDisk]
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100 + i) for i in range(5)]))
    run_until(e, clock, clock.now_ms() + 300)
    got = e.receive("t", "g", max_messages=10, invisible_ms=60_000)
    assert e.ack("t", "g", [got[0].receipt]) == [AckOutcome.ACKED]
    disk = full_disk("/commitlog/")
    with pytest.raises(StorageFull):  # four acks to log (the first is acked already)
        e.ack("t", "g", [m.receipt for m in got])
    assert disk.refused == 1
    disk.on = False
    again = e.receive("t", "g", max_messages=10, invisible_ms=60_000)  # at once, not in 60 s
    assert sorted(m.id for m in again) == sorted(sent[1:]) and {m.attempt for m in again} == {2}
    assert e.ack("t", "g", [m.receipt for m in again]) == [AckOutcome.ACKED] * 4
    clock.advance(60_001)
    assert e.receive("t", "g", max_messages=10) == []


def test_a_release_whose_ready_queue_file_cannot_be_written_still_delivers(
    make_engine: Make,
    clock: FakeClock,
    full_disk: Callable[[str], FullDisk],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(readyindex, "_TAIL_MAX", 4)  # the release step writes the tail
    e = make_engine()
    first = ids(e.schedule([req(100)]))
    run_until(e, clock, clock.now_ms() + 200)  # the topic's ready queue file exists
    assert [m.id for m in e.receive("t", "g", max_messages=20, auto_ack=True)] == first
    sent = ids(e.schedule([req(100 + i) for i in range(10)]))
    disk = full_disk("/ready/")
    run_until(e, clock, clock.now_ms() + 300)  # the release step does not fail
    assert disk.refused >= 1, "the release step tried to write the ready queue"
    assert e.lookup(sent[0]).state is MessageState.DELIVERED
    got = e.receive("t", "g", max_messages=20)  # from the entries held in memory
    assert sorted(m.id for m in got) == sorted(sent)
    with pytest.raises(OSError):
        e.checkpoint()  # the checkpoint writes the held tail: there it is reported
    disk.on = False
    e.checkpoint()
    e.close()
    again = make_engine()  # unacked: handed out again once their invisibility lapses
    clock.advance(RECEIVE_INVISIBLE_MS)
    assert sorted(m.id for m in again.receive("t", "g", max_messages=20)) == sorted(sent)


def test_a_release_that_cannot_make_a_topics_first_ready_file_is_retried_whole(
    make_engine: Make, clock: FakeClock, full_disk: Callable[[str], FullDisk]
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100 + i, topic="new") for i in range(10)]))
    disk = full_disk("/ready/")
    with pytest.raises(OSError):
        run_until(e, clock, clock.now_ms() + 300)  # the step fails before any fact
    assert e.lookup(sent[0]).state is MessageState.PENDING, "nothing half delivered"
    disk.on = False
    run_until(e, clock, clock.now_ms() + 100)  # the retry delivers all of them
    assert sorted(m.id for m in drain(e, "new")) == sorted(sent)
    e.close()
    again = make_engine()  # one DELIVER record each: a replay hands none out again
    assert again.receive("new", "g", max_messages=20) == []


def test_close_on_a_full_disk_closes_as_a_kill_would_and_loses_nothing(
    make_engine: Make,
    clock: FakeClock,
    full_disk: Callable[[str], FullDisk],
    caplog: pytest.LogCaptureFixture,
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100 + i) for i in range(10)]))  # queued, not linked yet
    disk = full_disk("/timerlog/")
    with caplog.at_level(logging.ERROR, logger="delayq.engine"):
        assert e.close() == {"enqueue_queue": 10, "release_buffer": 0}
    assert not e.running
    assert [r.getMessage() for r in caplog.records] == [
        "closing without a final checkpoint; the next start replays the log"
    ]
    disk.on = False
    again = make_engine()  # the CommitLog had them all: linked again by the replay
    run_until(again, clock, clock.now_ms() + 300)
    assert sorted(m.id for m in drain(again)) == sorted(sent)


def test_a_short_write_is_finished_not_taken_for_whole(tmp_path: Path) -> None:
    """A write that fills the disk part-way comes back short: the rest is written
    (here the second call is whole), or the next call raises."""
    calls: list[int] = []
    real = os.pwrite

    def short_once(fd: int, data: bytes, offset: int) -> int:
        calls.append(len(data))
        return real(fd, bytes(data)[: 3 if len(calls) == 1 else None], offset)

    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "pwrite", short_once)
            write_at(fd, b"abcdefgh", 2)
    finally:
        os.close(fd)
    assert calls == [8, 5] and path.read_bytes() == b"\0\0abcdefgh"


def test_an_engine_that_cannot_make_its_files_says_so_and_leaves_none_half_made(
    tmp_path: Path, clock: FakeClock, full_disk: Callable[[str], FullDisk]
) -> None:
    from tests.support.engines import small_settings

    settings = small_settings(tmp_path / "data")
    disk = full_disk("timerwheel")
    with pytest.raises(FailedPrecondition) as got:
        Engine(settings, clock, background=False).start()
    assert str(got.value) == (
        f"data directory {tmp_path / 'data'} cannot be used: No space left on device; "
        "free space or grow the volume"
    )
    assert not list((tmp_path / "data").glob("*.new")), "the part-built file was removed"
    disk.on = False
    e = Engine(settings, clock, background=False).start()  # nothing in the way afterwards
    assert ids(e.schedule([req(100)]))
    e.close()


def test_state_chunks_own_all_their_blocks_even_those_an_older_version_left_sparse(
    tmp_path: Path,
) -> None:
    """A state chunk is written through a memory map: a page without its block, on a
    full disk, would be a SIGBUS. Its blocks are allocated when it is opened."""
    d = tmp_path / "state"
    m = StateMap(d, 0)
    m.set(5, MessageState.DELIVERED)  # makes chunk 0
    m.close()
    path = next(d.glob("*.map"))

    def unallocated() -> int:
        return path.stat().st_size - path.stat().st_blocks * 512

    assert unallocated() <= 0
    fd = os.open(path, os.O_RDWR)  # as older versions left them: holes past the header
    try:
        assert punch_hole(fd, 4096, path.stat().st_size - 4096)
    finally:
        os.close(fd)
    assert unallocated() > 0
    m = StateMap(d, 0)
    assert m.get(5) is MessageState.DELIVERED  # opens chunk 0 again
    m.close()
    assert unallocated() <= 0
