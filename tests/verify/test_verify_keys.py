"""``delayq verify`` on the saved key indexes (``keys.idx``): a file that matches
the CommitLog's keyed records verifies clean, one saved for another log end is a
note, and a damaged or disagreeing one is named and deleted by ``--fix``."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from delayq import Engine, FakeClock
from delayq.clock import SystemClock
from delayq.engine import ScheduleRequest
from delayq.formats import Message, RecordType
from delayq.formats.keyindex import Columns
from delayq.store.commitlog import CommitLog
from delayq.store.keyfile import FILE, read_keys, save_keys
from delayq.timers.memory.keyindex import HASH_KIND, KeyIndex
from delayq.types import IfExists
from delayq.verify import Report, keyindex, verify
from delayq.verify.checks import checked
from tests.support.engines import (
    SMALL,
    START_MS,
    churn,
    drain,
    ids,
    req,
    run_until,
    small_settings,
)


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


class _Table:
    """Saved columns as given (``store.keyfile.Table``)."""

    hash_kind = HASH_KIND

    def __init__(self, cols: Columns) -> None:
        self._cols = cols

    def columns(self) -> Columns:
        return self._cols


def _spoilt(cols: Columns, row: int, *, seq: int | None = None, pos: int | None = None) -> Columns:
    """``cols`` with row ``row``'s seq or position changed (rows kept by position)."""
    h, s, p, hold = (np.array(c) for c in cols)
    if seq is not None:
        s[row] = seq
    if pos is not None:
        p[row] = pos
    order = np.argsort(p, kind="stable")
    return h[order], s[order], p[order], hold[order]


def test_after_retention_an_index_with_entries_of_deleted_records_verifies_clean(
    tmp_path: Path,
) -> None:
    """Retention deleted the segments of delivered keyed messages (their entries
    stay: a small index is never swept) and kept those of pending ones: the
    engine's index verifies clean; an entry the kept record or the segments say
    otherwise of is a mismatch."""
    data = tmp_path / "data"
    clock = FakeClock(START_MS)
    e = Engine(small_settings(data, retention_ms=5_000, **SMALL), clock, background=False).start()
    ids(e.schedule([req(50, key=f"gone{i}") for i in range(20)]))
    ids(e.schedule([req(600_000, key=f"kept{i}") for i in range(20)]))
    churn(e, clock, 30)
    state = e._life.opened().state
    start = state.cl.log.start
    kept, _ = state.cl.kept.below(start)
    e.close()
    assert start > 0 and len(kept) == 20
    report = verify(data)
    assert report.exit_code == 0 and _kinds(report) == set()
    assert report.files[FILE].facts["entries"] == [40, 0]
    head, [keys, dedups] = read_keys(data) or (None, [])
    assert head is not None
    gone = int(np.flatnonzero(~np.isin(keys[2], kept))[0])  # a delivered one's entry
    at_kept = int(np.searchsorted(keys[2], kept[0]))
    for spoilt, want in (
        (_spoilt(keys, gone, pos=int(keys[2][gone]) + 1), set()),  # still no record there
        (_spoilt(keys, at_kept, seq=int(keys[1][at_kept]) + 1000), {"keys-mismatch"}),
        (_spoilt(keys, gone, pos=start + 1), {"keys-mismatch"}),  # no record begins there
    ):
        save_keys(data, [_Table(spoilt), _Table(dedups)], head.log_end, START_MS)
        assert _kinds(verify(data)) == want


def test_the_check_holds_no_bodies_nor_a_name_per_record(tmp_path: Path) -> None:
    """Keyed messages of 8 KB bodies, kept past retention and in the segments,
    and as many keyed ones delivered: the key check (heads first, keys cut out,
    kept records a chunk at a time) peaks below half the kept ones' bodies."""
    data = tmp_path / "data"
    clock = FakeClock(START_MS)
    settings = small_settings(data, retention_ms=5_000, commitlog_segment_bytes=1 << 20)
    e = Engine(settings, clock, background=False).start()
    body = b"b" * (8 << 10)
    n = 1200
    for part, wait in ((0, 16_000), (1, 1_000)):  # the first part's segments go
        reqs = [req(600_000, body, key=f"p{part}-{i}") for i in range(n)]
        reqs += [req(50, key=f"d{part}-{i}") for i in range(n)]
        ids(e.schedule(reqs))
        run_until(e, clock, clock.now_ms() + wait, step_ms=500)
        assert len(drain(e)) == n
        e.checkpoint()
    state = e._life.opened().state
    kept = len(state.cl.kept.below(state.cl.log.start)[0])
    e.close()
    assert kept >= n
    with checked(data, Report(str(data), False), SystemClock().now_ms(), open_state=False) as c:
        assert _kinds(c.report) == set() and c.report.files[FILE].facts["entries"][0] >= 2 * n
        tracemalloc.start()
        try:
            keyindex.check(c)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert _kinds(c.report) == set()
    assert peak < n * len(body) // 2
