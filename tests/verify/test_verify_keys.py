"""``delayq verify`` on the saved key indexes (``keys.idx``): a file that matches
the CommitLog's keyed records verifies clean, one saved for another log end is a
note, and a damaged or disagreeing one is named and deleted by ``--fix``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from delayq import Engine, FakeClock
from delayq.clock import SystemClock
from delayq.engine import ScheduleRequest
from delayq.formats import Message, RecordType
from delayq.store.commitlog import CommitLog
from delayq.store.keyfile import FILE, save_keys
from delayq.timers.memory.keyindex import KeyIndex
from delayq.types import IfExists
from delayq.verify import Report, verify
from tests.support.engines import START_MS, drain, req, run_until, small_settings


def _keyed_dir(data: Path) -> None:
    """30 keyed messages (keys k0..k9, three each) and 10 without a key; 5 of the
    keyed ones cancelled; closed."""
    e = Engine(small_settings(data), FakeClock(START_MS), background=False).start()
    try:
        reqs = [
            ScheduleRequest(topic="t", body=b"%d" % i, delay_ms=60_000, key=f"k{i % 10}")
            for i in range(30)
        ]
        out = e.schedule(reqs + [ScheduleRequest(topic="t", body=b"plain", delay_ms=5)] * 10)
        e.pump()
        e.cancel([o.id for o in out[:5] if not isinstance(o, Exception)])
        e.pump()
    finally:
        e.close()


def _records(data: Path) -> tuple[list[tuple[int, Message]], int]:
    """The keyed SCHEDULE records (position, record) and the log's end."""
    cl = CommitLog(data / "commitlog", 1 << 40)
    try:
        got = [
            (pos, rec)
            for pos, rec, _ in cl.scan(0)
            if isinstance(rec, Message) and rec.type == RecordType.SCHEDULE and rec.key
        ]
        return got, cl.end
    finally:
        cl.close()


def _save(
    data: Path, records: list[tuple[int, Message]], log_end: int, *, seq_off: int = 0
) -> None:
    keys = KeyIndex()
    keys.add(
        np.array([r.topic_id for _, r in records], dtype=np.uint32),
        [r.key.encode() for _, r in records],
        np.array([r.seq + seq_off for _, r in records], dtype=np.uint64),
        np.array([p for p, _ in records], dtype=np.int64),
        np.zeros(len(records), dtype=np.int64),
    )
    save_keys(data, [keys, KeyIndex()], log_end, START_MS)


def _kinds(report: Report) -> set[str]:
    return {f.kind for f in report.findings}


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[Path, list[tuple[int, Message]], int]:
    data = tmp_path / "data"
    _keyed_dir(data)
    records, end = _records(data)
    assert len(records) == 30
    return data, records, end


def test_a_file_saved_for_the_log_verifies_clean_with_or_without_ended_messages(
    keyed: tuple[Path, list[tuple[int, Message]], int],
) -> None:
    data, records, end = keyed
    for kept in (records, records[5:]):  # the 5 cancelled ones may have been swept
        _save(data, kept, end)
        report = verify(data)
        assert report.exit_code == 0 and _kinds(report) == set()
        assert report.files[FILE].facts["entries"] == [len(kept), 0]


def test_a_file_saved_for_another_log_end_is_a_note(
    keyed: tuple[Path, list[tuple[int, Message]], int],
) -> None:
    data, records, end = keyed
    _save(data, records, end - 1)
    report = verify(data)
    assert report.exit_code == 0 and _kinds(report) == {"keys-stale"}


@pytest.mark.parametrize("spoil", ["a pending one missing", "a wrong seq", "a flipped byte"])
def test_a_damaged_or_disagreeing_file_is_named_and_deleted_by_fix(
    keyed: tuple[Path, list[tuple[int, Message]], int], spoil: str
) -> None:
    data, records, end = keyed
    if spoil == "a pending one missing":
        _save(data, records[:-1], end)
    elif spoil == "a wrong seq":
        _save(data, records, end, seq_off=1)
    else:
        _save(data, records, end)
        raw = bytearray((data / FILE).read_bytes())
        raw[100] ^= 0x40
        (data / FILE).write_bytes(bytes(raw))
    kind = "keys-corrupt" if spoil == "a flipped byte" else "keys-mismatch"
    report = verify(data)
    assert report.exit_code == 1 and _kinds(report) == {kind}
    report = verify(data, fix=True)
    assert report.exit_code == 0 and all(f.fixed for f in report.findings)
    assert not (data / FILE).exists()
    assert _kinds(verify(data)) == set()


def test_the_engines_own_indexes_saved_at_its_close_verify_clean(tmp_path: Path) -> None:
    """Keys, dedup ids and windows filed by the engine (accept, deliveries, a
    cancel): what it holds at close is what a rebuild from its log asks of the
    file; without an entry that still holds its name it is a mismatch."""
    data = tmp_path / "data"
    clock = FakeClock(SystemClock().now_ms())  # verify reads the real time: windows not over
    e = Engine(small_settings(data), clock, background=False).start()
    day = 86_400_000
    e.schedule([req(60_000, key=f"k{i}", if_exists=IfExists.REJECT) for i in range(10)])
    e.schedule(
        [req(100, key=f"w{i}", if_exists=IfExists.KEEP, dedup_window_ms=day) for i in range(5)]
    )
    e.schedule([req(100, dedup_id=f"m-{i}", dedup_window_ms=day) for i in range(5)])
    [gone] = e.schedule([req(60_000, key="cancelled")])
    e.cancel([gone.id or ""])
    run_until(e, clock, clock.now_ms() + 500)
    assert len(drain(e)) == 10  # the windowed ones ended; their names are held a day
    state = e._life.opened().state
    e.close()
    keys, dedups = state.keys, state.dedups
    assert [len(keys), len(dedups)] == [16, 5]
    end = _records(data)[1]
    save_keys(data, [keys, dedups], end, clock.now_ms())
    report = verify(data)
    assert _kinds(report) == set() and report.files[FILE].facts["entries"] == [16, 5]
    keys.discard(np.array([keys.find(1, b"w3")[0].pos]))
    save_keys(data, [keys, dedups], end, clock.now_ms())
    assert _kinds(verify(data)) == {"keys-mismatch"}
