"""Retention of the ready queues: entries delivered more than ``retention_ms`` ago
expire for every group, their file pages are punched out (the file keeps its size
and offsets), and the floor survives a clean restart and a kill."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from delayq import CorruptData, FakeClock
from delayq.engine import AckOutcome
from delayq.formats.ready import ENTRY_DTYPE, ENTRY_SIZE
from delayq.store import readyindex
from delayq.store.readyindex import ReadyIndex
from tests.support.engines import Make, drain, ids, req, run_until


def entries(delivered_ms: range) -> np.ndarray:
    rows = np.zeros(len(delivered_ms), dtype=ENTRY_DTYPE)
    rows["seq"] = rows["body_pos"] = np.arange(len(delivered_ms))
    rows["delivered_ms"] = rows["deliver_at_ms"] = delivered_ms
    return rows


def test_expired_entries_are_punched_out_and_never_read(tmp_path: Path) -> None:
    path = tmp_path / "1.idx"
    idx = ReadyIndex(path, 1, 0)
    idx.append_many(entries(range(20_000)))
    os.fsync(idx.write_tail())
    size, blocks = os.stat(path).st_size, os.stat(path).st_blocks
    assert idx.expire_before(15_000) == idx.floor == 15_000
    assert idx.expire_before(10_000) == 15_000, "the floor never moves back"
    assert idx.release_blocks()
    after = os.stat(path)
    assert after.st_size == size, "offsets stay valid: the file keeps its size"
    freed = (blocks - after.st_blocks) * 512
    assert freed >= 15_000 * ENTRY_SIZE - 2 * 4096, "every whole page below the floor"
    assert idx.read_many(15_000, 2)["delivered_ms"].tolist() == [15_000, 15_001]
    with pytest.raises(CorruptData, match="expired"):
        idx.read_many(14_999, 1)
    idx.close()
    again = ReadyIndex(path, 1, 0)  # as recovery opens it (it sets the saved floor)
    again.floor = 15_000
    assert again.length == 20_000
    assert again.read_many(19_999, 1)["seq"].tolist() == [19_999]
    again.close()


def test_a_tail_written_by_append_is_still_handed_out_for_fsync(tmp_path: Path) -> None:
    idx = ReadyIndex(tmp_path / "1.idx", 1, 0)
    idx.append_many(entries(range(readyindex._TAIL_MAX)))  # a full tail: written at once
    assert idx.write_tail() >= 0, "the checkpoint must fsync what append wrote"
    assert idx.write_tail() == -1, "and only once"
    idx.close()


@pytest.mark.parametrize("restart", ["close", "kill"])
def test_retention_expires_delivered_messages_for_every_group(
    make_engine: Make, clock: FakeClock, restart: str
) -> None:
    e = make_engine(retention_ms=60_000)
    for _ in range(30):
        ids(e.schedule([req(100, b"y" * 100) for _ in range(100)]))
    run_until(e, clock, clock.now_ms() + 1000, step_ms=100)
    assert len(drain(e, group="fast")) == 3000
    held = e.receive("t", "slow", max_messages=10)  # in flight, never acked
    e.checkpoint()
    path = e.settings.data_dir / "ready" / "1.idx"
    blocks = os.stat(path).st_blocks
    clock.advance(61_000)  # every one of them is past retention now
    (new,) = ids(e.schedule([req(100, b"new")]))
    run_until(e, clock, clock.now_ms() + 500)
    e.checkpoint()
    assert e.observing.counters["expired"] == 3000, (
        "all of the slow group's; none of the fast one's"
    )
    assert (blocks - os.stat(path).st_blocks) * 512 >= 3000 * ENTRY_SIZE - 2 * 4096
    assert e.ack("t", "slow", [m.receipt for m in held]) == [AckOutcome.ALREADY_ACKED] * 10
    assert [m.id for m in drain(e, group="slow")] == [new]
    assert [m.id for m in drain(e, group="late")] == [new], "a new group starts at the floor"
    if restart == "kill":
        e.abandon()
    else:
        e.close()
    e = make_engine()
    assert [m.id for m in drain(e, group="later")] == [new], "new groups start at the floor"
    assert [m.id for m in drain(e, group="fast")] == [new], "it had not received it yet"
    assert drain(e, group="slow") == [], "its ack of it is logged: replayed after a kill"
