"""The commit log and the timer log on disk: batch reads across segments, growth
and truncation, records appended while a reader maps the segment, kept records,
torn tails, warm tails and flipped bytes, foreign files, deleted segments, and
the scan of message batches (the codecs' golden bytes are in ``tests/formats``)."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest

from delayq import formats
from delayq.errors import CorruptData
from delayq.formats.commitlog import record_starts
from delayq.formats.fileheader import FileHeader
from delayq.formats.timer import TimerRecord
from delayq.store import views
from delayq.store.commitlog import CommitLog
from delayq.store.keptrecords import KeptRecords
from delayq.store.timerlog import TimerLog
from delayq.store.warmtail import warm_pages
from tests.store.records import T, message


def _fill_commitlog(path: Path, n: int) -> tuple[CommitLog, list[int]]:
    cl = CommitLog(path, segment_bytes=4096)
    positions = [cl.append(formats.encode_topic(i, f"topic-{i}" * 20), T) for i in range(n)]
    return cl, positions


def _check_batch_read(cl: CommitLog, positions: list[int]) -> None:
    """The batch reads agree with ``read`` one by one, row for row."""
    cols = cl.read_messages(np.asarray(positions, dtype=np.int64))
    many = cl.read_many(positions)
    for i, pos in enumerate(positions):
        try:
            want: Any = cl.read(pos)[0]
        except CorruptData:
            want = None
        assert bool(cols.ok[i]) == isinstance(want, formats.Message), pos
        assert isinstance(many[i], CorruptData) == (want is None), pos
        if want is not None:
            assert many[i] == want
            assert int(cols.heads["seq"][i]) == want.seq
            assert (cols.keys[i], cols.bodies[i]) == (want.key, want.body)
            assert cols.headers[i] == want.headers


def test_a_record_appended_while_a_reader_maps_the_segment_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer appends while a reader outside its lock makes a segment's map
    (the mmap call lets go of the GIL). The map covers the old size only; it must
    not be kept as covering the new one, or the next read of the appended record
    finds it cut short (a receive took such a message as unreadable, quarantined
    it and acked it away: lost)."""
    cl = CommitLog(tmp_path / "cl", segment_bytes=1 << 20)
    first = cl.append(message(1, 40), T)
    real_mmap = mmap.mmap
    later: list[int] = []

    def mmap_while_the_writer_appends(*args: Any, **kwargs: Any) -> mmap.mmap:
        view = real_mmap(*args, **kwargs)
        if not later:  # the writer's append lands during the reader's system call
            later.append(cl.append(message(2, 40), T))
        return view

    monkeypatch.setattr(views.mmap, "mmap", mmap_while_the_writer_appends)
    assert cl.read_messages(np.asarray([first], dtype=np.int64)).ok.tolist() == [True]
    monkeypatch.setattr(views.mmap, "mmap", real_mmap)
    cols = cl.read_messages(np.asarray([first, later[0]], dtype=np.int64))
    assert cols.ok.tolist() == [True, True]
    assert int(cols.heads["seq"][1]) == 2
    cl.close()


def _bad_key_message(seq: int) -> bytes:
    """A message record whose key is not UTF-8, under a consistent CRC."""
    buf, _, _ = formats.encode_messages(
        formats.RecordType.SCHEDULE, [seq], [T], T, 1, 1, 0, [b"\xff\xfe"], [b""], [b"body"]
    )
    rec = bytearray(buf)
    rec[4:8] = crc32c.crc32c(bytes(rec[8:])).to_bytes(4, "little")
    return bytes(rec)


def test_commitlog_batch_reads_span_segments_growth_and_truncation(
    tmp_path: Path, batch_path: str
) -> None:
    cl = CommitLog(tmp_path / "cl", segment_bytes=4096)
    good = [cl.append(message(i, 40 + 97 * (i % 7)), T) for i in range(40)]
    assert len(cl.log.segments) > 3, "records should span several segments"
    bases = [seg.base for seg in cl.log.segments]
    bad_key = cl.append(_bad_key_message(99), T)
    flipped = bytearray(message(98, 50))
    flipped[-1] ^= 1  # a body byte: the CRC no longer matches
    bad_crc = cl.append(bytes(flipped), T)
    bogus = [0, bases[1] + 5, good[3] + 1, cl.end, cl.end + 4096, 1 << 62, bad_key, bad_crc]
    mixed = good[::-1] + bogus + good[::3]
    _check_batch_read(cl, mixed)
    few = [good[5], bogus[1], good[30], bad_key, bad_crc]  # a few, in three segments
    _check_batch_read(cl, few)
    _check_batch_read(cl, good[-3:])  # one segment: the single-group path
    cl.log.drop_views()  # the flush stage lets the maps go; reads make them again
    _check_batch_read(cl, good[::2])
    cl.close()
    # records appended to a segment after it was mapped are read too
    cl = CommitLog(tmp_path / "one", segment_bytes=1 << 20)
    first = [cl.append(message(i, 100), T) for i in range(3)]
    _check_batch_read(cl, first)
    later = [cl.append(message(100 + i, 10), T) for i in range(3)]
    assert len(cl.log.segments) == 1
    _check_batch_read(cl, later + first)
    # after a truncate the cut records are gone; what is written there next is read
    cl.truncate(later[1])
    cols = cl.read_messages(np.asarray(later, dtype=np.int64))
    assert cols.ok.tolist() == [True, False, False]
    assert cl.append(message(200, 20), T) == later[1]
    _check_batch_read(cl, later)
    assert cl.read_messages(np.empty(0, dtype=np.int64)).ok.tolist() == []
    cl.close()


def test_kept_records_of_a_segment_are_its_pending_schedules_as_they_were(
    tmp_path: Path,
) -> None:
    cl = CommitLog(tmp_path / "cl", segment_bytes=1 << 16)
    # runs of one length (batches) broken by records of other lengths and types
    sizes = [50] * 30 + [51, 52] + [50] * 3 + [7] * 40 + [300]
    schedules = {cl.append(message(seq, size), T): seq for seq, size in enumerate(sizes, 1)}
    one = np.ones(1, dtype=np.int64)
    cl.append(formats.encode_cancels(one, one, one, T, one), T)
    cl.append(formats.encode_topic(3, "t"), T)
    schedules[cl.append(message(999, 60), T)] = 999
    walked = [pos for pos, _, _ in cl.scan(0)]
    seg = cl.log.segments[0]
    with mmap.mmap(seg.fd, seg.size, prot=mmap.PROT_READ) as view:
        starts = record_starts(view, cl.log.first_record_pos(seg.base) - seg.base)
    assert (starts + seg.base).tolist() == walked
    cl.append(message(1000, 60_000), T)  # seals the first segment
    base = cl.log.segments[0].base
    wanted = {pos for pos, seq in schedules.items() if seq % 3 == 0}
    cl.kept.install(cl.keep_pending(base, T, lambda seqs: seqs % 3 == 0)[0])
    assert cl.kept.count == len(wanted)
    (path,) = (tmp_path / "cl" / "kept").glob("*.kept")
    data = path.read_bytes()
    assert FileHeader.decode(data, b"DQKR", "kept") == FileHeader(b"DQKR", base, T, len(wanted))
    first = min(wanted)
    assert data[32:40] == struct.pack("<Q", first)
    assert data[40 : 40 + len(message(3, 50))] == message(3, 50), "copied as it was"
    cl.log.delete_segment(base)
    again = KeptRecords(tmp_path / "cl" / "kept")  # as an open finds it
    assert again.count == len(wanted)
    for pos, seq in schedules.items():
        rec = again.read(pos)
        assert (formats.decode(rec)[0].seq if rec else None) == (seq if pos in wanted else None)
    assert cl.read(first)[0].seq == 3  # type: ignore[union-attr]
    with pytest.raises(CorruptData):
        cl.read(first + 1)
    path.write_bytes(data[:-5])
    with pytest.raises(CorruptData, match="truncated"):
        KeptRecords(tmp_path / "cl" / "kept")
    cl.close()


def test_commitlog_torn_tail_is_cut_on_reopen(tmp_path: Path) -> None:
    cl, positions = _fill_commitlog(tmp_path / "cl", 60)
    assert len(cl.log.segments) > 1, "records should span several segments"
    end = cl.end
    last_seg = cl.log.segments[-1]
    cl.close()
    # a torn write: half of a record at the tail
    with open(tmp_path / "cl" / f"{last_seg.base:020d}.seg", "ab") as fh:
        fh.write(formats.encode_topic(99, "torn" * 30)[:50])
    cl = CommitLog(tmp_path / "cl", segment_bytes=4096)
    assert cl.end == end + 50
    seen = [pos for pos, _, _ in cl.scan(0)]
    assert seen == positions
    assert cl.valid_end == end
    cl.truncate(cl.valid_end)
    assert cl.end == end
    assert cl.append(formats.encode_topic(100, "after"), T) == end


def _file_sizes(path: Path) -> list[int]:
    return [f.stat().st_size for f in sorted(path.glob("*.seg"))]


def test_warm_tails_are_zeros_past_the_end_that_sealing_close_and_recovery_cut(
    tmp_path: Path,
) -> None:
    """A log with a warm tail: only the newest file is longer than what was written;
    every range handed out for warming lies in it; a kill leaves zeros that the
    reopened log's scan stops at, and ``warm_tail`` tells them from data."""
    path = tmp_path / "cl"
    woken: list[int] = []
    cl = CommitLog(path, 4096, warm_bytes=1024, on_cold=lambda: woken.append(1))
    positions = [cl.append(formats.encode_topic(i, f"topic-{i}" * 20), T) for i in range(60)]
    segs = cl.log.segments
    assert len(segs) > 2 and woken
    sizes = _file_sizes(path)
    assert sizes[:-1] == [s.size for s in segs[:-1]], "sealed files are exact"
    assert sizes[-1] > segs[-1].size, "the newest file has a warm tail"
    for fd, start, end in cl.log.take_cold():
        assert 0 < start < end
        warm_pages(fd, start, end)
    assert cl.log.take_cold() == []
    end, written = cl.end, segs[-1].size
    cl.close(cut_tail=False)  # as a kill leaves it

    cl = CommitLog(path, 4096, warm_bytes=1024)
    assert cl.end > end
    assert [pos for pos, _, _ in cl.scan(0)] == positions
    assert cl.valid_end == end
    assert cl.log.warm_tail(end) == cl.end - end
    assert cl.log.warm_tail(positions[-1]) == cl.end - end, "a record is data"
    cl.truncate(cl.valid_end)
    assert cl.end == end and _file_sizes(path)[-1] == written
    assert cl.append(formats.encode_topic(100, "after"), T) == end
    cl.close()
    assert _file_sizes(path)[-1] == written + len(formats.encode_topic(100, "after"))
    warm_pages(10_000, 0, 100)  # a closed descriptor: nothing to read, no error
    warm_pages(10_000, 100, 100)  # an empty range


def test_a_kill_leaves_a_warm_tail_that_recovery_keeps_and_a_torn_record_that_it_cuts(
    tmp_path: Path,
) -> None:
    """Only zeros past the last record: they stay as the warm tail (no write, no
    fsync). A torn record in front of them: it is data, and the cut takes both."""
    path = tmp_path / "cl"
    cl = CommitLog(path, 1 << 20, warm_bytes=8192)
    positions = [cl.append(formats.encode_topic(i, "t" * 50), T) for i in range(20)]
    end, length = cl.end, _file_sizes(path)[-1]
    cl.close(cut_tail=False)

    cl = CommitLog(path, 1 << 20, warm_bytes=8192)
    assert [p for p, _, _ in cl.scan(0)] == positions
    zeros = cl.log.warm_tail(cl.valid_end)
    assert zeros == cl.end - end > 0
    cl.truncate(cl.valid_end, zeros=zeros)
    assert cl.end == end and _file_sizes(path)[-1] == length, "the tail is kept"
    assert cl.append(formats.encode_topic(99, "next"), T) == end
    end = cl.end
    cl.close(cut_tail=False)
    torn = formats.encode_topic(100, "torn" * 10)[:30]
    (only,) = path.glob("*.seg")  # one file, base 0: a position is its offset
    with open(only, "r+b") as fh:
        fh.seek(end)
        fh.write(torn)

    cl = CommitLog(path, 1 << 20, warm_bytes=8192)
    list(cl.scan(0))
    assert cl.valid_end == end
    zeros = cl.log.warm_tail(cl.valid_end)
    assert zeros == cl.end - end - len(torn.rstrip(b"\0"))
    cl.truncate(cl.valid_end, zeros=zeros)
    assert cl.end == end and _file_sizes(path)[-1] == end, "torn bytes and tail cut"


def test_commitlog_flipped_byte_stops_the_scan_there(tmp_path: Path) -> None:
    cl, positions = _fill_commitlog(tmp_path / "cl", 10)
    seg = cl.log.segments[0]
    cl.close()
    victim = positions[4]
    with open(tmp_path / "cl" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(victim - seg.base + 20)
        b = fh.read(1)
        fh.seek(victim - seg.base + 20)
        fh.write(bytes([b[0] ^ 0xFF]))
    cl = CommitLog(tmp_path / "cl", segment_bytes=4096)
    assert [p for p, _, _ in cl.scan(0)] == positions[:4]
    assert cl.valid_end == victim
    with pytest.raises(CorruptData):
        cl.read(victim)
    assert isinstance(cl.read(positions[3])[0], formats.TopicDef)


def test_timerlog_torn_tail_and_flipped_byte(tmp_path: Path) -> None:
    tl = TimerLog(tmp_path / "tl", segment_bytes=1 << 20)
    recs = [TimerRecord(-1, i, i * 10, 90, 1, T + i, i, 0, 0, 0) for i in range(10)]
    first = tl.append(b"".join(r.encode() for r in recs), T)
    seg = tl.log.segments[0]
    tl.close()
    with open(tmp_path / "tl" / f"{seg.base:020d}.seg", "ab") as fh:
        fh.write(recs[0].encode()[:40])  # torn
    tl = TimerLog(tmp_path / "tl", segment_bytes=1 << 20)
    assert [r for _, r in tl.scan(0)] == recs
    assert tl.valid_end == first + 640
    with open(tmp_path / "tl" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(first - seg.base + 64 * 6 + 17)
        fh.write(b"\x99")
    assert len(list(tl.scan(0))) == 6
    with pytest.raises(CorruptData):
        tl.read(first + 64 * 6)


def test_segments_reject_a_foreign_file(tmp_path: Path) -> None:
    d = tmp_path / "cl"
    d.mkdir()
    (d / f"{0:020d}.seg").write_bytes(b"NOPE" + bytes(60))
    with pytest.raises(CorruptData, match="bad magic"):
        CommitLog(d, segment_bytes=4096)


def test_deleting_a_segment_leaves_a_readers_snapshot_of_the_old_ones_whole(
    tmp_path: Path,
) -> None:
    """A receive reads bodies without the engine lock while retention deletes the
    oldest segment: the lists a read already took must not shift under it."""
    cl = CommitLog(tmp_path / "cl", segment_bytes=4096)
    positions = [cl.append(message(i, 300), T) for i in range(40)]
    log = cl.log
    taken = log._live  # what a read in progress holds
    segs, bases = list(taken[0]), list(taken[1])
    log.delete_segment(bases[0])
    assert (taken[0], taken[1]) == (segs, bases), "the old lists are left as they were"
    assert log._live[1] == bases[1:] and log.start == bases[1] + 32
    live = np.asarray([p for p in positions if p >= log.start], dtype=np.int64)
    _check_batch_read(cl, live.tolist())
    assert not cl.read_messages(np.asarray(positions[:2], dtype=np.int64)).ok.any()
    cl.close()


def test_commitlog_scan_of_message_batches_matches_decoding_one_by_one(tmp_path: Path) -> None:
    """Scan decodes the messages of a chunk as one batch: what it yields is what
    decoding each record alone gives, and it stops at the first damaged message."""
    cl = CommitLog(tmp_path / "cl", segment_bytes=1 << 20)
    n = 50
    buf, offs, _ = formats.encode_messages(
        formats.RecordType.SCHEDULE,
        np.arange(1, n + 1, dtype=np.uint64),
        np.arange(n) + T,
        T,
        1,
        1,
        0,
        None,
        None,
        [bytes([i]) * 30 for i in range(n)],
    )
    base = cl.append(bytes(buf), T)
    mixed = [cl.append(formats.encode_topic(7, "t"), T), cl.append(message(99, 10), T)]
    positions = (base + offs).tolist() + mixed
    scanned = list(cl.scan(0))
    assert [p for p, _, _ in scanned] == positions
    for p, rec, size in scanned:
        assert (rec, size) == cl.read(p)
    seg = cl.log.segments[0]
    cl.close()
    victim = positions[20]
    with open(tmp_path / "cl" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(victim - seg.base + 75)  # a body byte of the 21st message
        b = fh.read(1)
        fh.seek(victim - seg.base + 75)
        fh.write(bytes([b[0] ^ 0x10]))
    cl = CommitLog(tmp_path / "cl", segment_bytes=1 << 20)
    assert [p for p, _, _ in cl.scan(0)] == positions[:20]
    assert cl.valid_end == victim
    got = cl.read_many(positions)
    assert isinstance(got[20], CorruptData) and "CRC" in str(got[20])
    assert [r for i, r in enumerate(got) if i != 20] == [
        cl.read(p)[0] for i, p in enumerate(positions) if i != 20
    ]
    cl.close()
