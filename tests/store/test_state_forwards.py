"""Forwards in the state map (``store/statemap``, ``formats/state``): a forward to
any shard the map allows reads back as ``FORWARD_BASE + T``; one to T < 128 is
the byte it always was (a directory written before side files opens and reads
as it did), one to T >= 128 is byte 5 plus the chunk's side file, which is made
only then, fsynced, retired and deleted with its chunk. Chunks of 16 entries here."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from delayq.formats.fileheader import FileHeader
from delayq.formats.messagestate import (
    DATA_OFFSET,
    FORWARDED_FAR,
    MAX_FORWARD_SHARD,
    MessageState,
    forward_state,
)
from delayq.store import statemap
from delayq.store.statemap import MAGIC, SIDE_MAGIC, NoSideFile, StateMap

T = 1_700_000_000_000
BITS = 4
SIZE = 1 << BITS


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(statemap, "CHUNK_BITS", BITS)


def seqs(*some: int) -> np.ndarray:
    return np.array(some, dtype=np.uint64)


def chunk_bytes(d: Path, n: int) -> bytes:
    return (d / f"{n:012d}.map").read_bytes()[DATA_OFFSET:]


def side_shards(d: Path, n: int) -> list[int]:
    data = (d / f"{n:012d}.fwd").read_bytes()
    assert FileHeader.decode(data, SIDE_MAGIC, "side") == FileHeader(SIDE_MAGIC, n, T, SIZE)
    return np.frombuffer(data, dtype="<u2", offset=DATA_OFFSET).tolist()


def test_a_forward_to_any_shard_reads_back_and_far_ones_use_the_side_file(
    tmp_path: Path, batch_path: str
) -> None:
    d = tmp_path / "state"
    sm = StateMap(d, T)
    sm.set(1, forward_state(5))
    sm.set(2, forward_state(127))
    assert not list(d.glob("*.fwd")), "no side file while every forward fits the byte"
    sm.set(3, forward_state(128))
    sm.set_many(seqs(4, SIZE + 1, 2 * SIZE + 2), forward_state(700))  # three chunks
    sm.set_many(seqs(7, 8, 9, 10, 11, 12, 13, 14, 15), forward_state(MAX_FORWARD_SHARD))
    sm.set(5, MessageState.CANCELLED)
    want = {
        1: forward_state(5),
        2: forward_state(127),
        3: forward_state(128),
        4: forward_state(700),
        5: int(MessageState.CANCELLED),
        6: int(MessageState.PENDING),
        SIZE + 1: forward_state(700),
        2 * SIZE + 2: forward_state(700),
        15: forward_state(1023),
    }
    every = seqs(*want)
    assert [sm.raw(s) for s in want] == list(want.values())
    assert sm.raw_many(every).tolist() == list(want.values())
    assert sm.raw_many(every).dtype == np.uint16
    assert sm.raw_many(seqs(1, 2, 5, 6)).dtype == np.uint8, "no far forward: bytes as they are"
    assert sm.get(4) is MessageState.FORWARDED
    lo, copied = sm.copy_live(3 * SIZE)
    assert lo == 0 and [int(copied[s]) for s in want] == list(want.values())
    sm.flush()
    sm.close()

    # on disk: the bytes of the table in formats/messagestate.py, the far shards beside them
    assert chunk_bytes(d, 0)[1:7] == bytes([0x85, 0xFF, FORWARDED_FAR, FORWARDED_FAR, 1, 0])
    assert side_shards(d, 0)[3:5] == [128, 700] and side_shards(d, 0)[15] == 1023
    assert side_shards(d, 1)[1] == 700 and chunk_bytes(d, 1)[1] == FORWARDED_FAR
    sm = StateMap(d, T)  # and after a reopen
    assert sm.raw_many(every).tolist() == list(want.values())
    sm.close()


def test_a_chunk_written_before_side_files_opens_and_reads_as_it_did(tmp_path: Path) -> None:
    """A chunk file as the one-byte format wrote it (header, then 128 + T for a
    forward to T < 128), made by hand: it opens unchanged, and a far forward
    written into it later adds the side file."""
    d = tmp_path / "state"
    d.mkdir()
    old = bytes([0, 1, 2, 3, 4, 0x80, 0x85, 0xFF]) + bytes(SIZE - 8)
    header = FileHeader(MAGIC, 0, T, SIZE).encode()
    (d / f"{0:012d}.map").write_bytes(header.ljust(DATA_OFFSET, b"\0") + old)
    sm = StateMap(d, T)
    got = sm.raw_many(seqs(*range(8)))
    assert got.tolist() == [0, 1, 2, 3, 4, forward_state(0), forward_state(5), forward_state(127)]
    assert [sm.get(s).name for s in (1, 6)] == ["CANCELLED", "FORWARDED"]
    sm.set(9, forward_state(300))
    sm.flush()
    sm.close()
    assert chunk_bytes(d, 0)[:8] == old[:8], "what was there is untouched"
    assert side_shards(d, 0)[9] == 300


def test_the_side_file_goes_with_its_chunk(tmp_path: Path) -> None:
    d = tmp_path / "state"
    sm = StateMap(d, T)
    sm.set_many(seqs(*range(1, SIZE)), forward_state(900))  # chunk 0 all done: retires
    sm.set(SIZE, MessageState.PENDING)
    sm.flush()
    assert sm.take_dirty() == []
    assert sm.sweep(SIZE, lambda bits: frozenset()) == [0]
    assert not (d / f"{0:012d}.fwd").exists() and not (d / f"{0:012d}.map").exists()
    assert sm.raw(3) == MessageState.DELIVERED, "a retired chunk's entries read as done"
    sm.close()
    header = FileHeader(SIDE_MAGIC, 0, T, SIZE).encode().ljust(DATA_OFFSET, b"\0")
    (d / f"{0:012d}.fwd").write_bytes(header + bytes(2 * SIZE))  # a kill while retiring
    StateMap(d, T).close()
    assert not (d / f"{0:012d}.fwd").exists(), "a retired chunk's leftover is deleted"


def test_a_far_forward_whose_side_file_is_gone_is_corrupt(tmp_path: Path) -> None:
    d = tmp_path / "state"
    sm = StateMap(d, T)
    sm.set(3, forward_state(200))
    fds = sm.take_dirty()
    assert len(fds) == 2, "the chunk and its side file, to be fsynced"
    for fd in fds:
        os.fsync(fd)
    sm.close()
    os.unlink(d / f"{0:012d}.fwd")
    sm = StateMap(d, T)
    try:
        assert sm.raw(2) == MessageState.PENDING
        with pytest.raises(NoSideFile, match=r"000000000000\.fwd"):
            sm.raw(3)
        with pytest.raises(NoSideFile):
            sm.raw_many(seqs(*range(SIZE)))
    finally:
        sm.close()
