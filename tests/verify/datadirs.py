"""Data directories made by a real engine (fake clock, no threads), what an engine
delivers from one afterwards, and where its records lie (for damaging them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from delayq import Engine, FakeClock
from delayq.engine import ScheduleRequest
from delayq.formats import Message
from delayq.store.commitlog import CommitLog
from tests.support.engines import START_MS, small_settings


@dataclass
class Made:
    data: Path
    clock: FakeClock
    before: list[bytes]
    """Bodies scheduled and covered by the checkpoint."""
    after: list[bytes]
    """Bodies scheduled after the last checkpoint."""

    @property
    def bodies(self) -> list[bytes]:
        return self.before + self.after


def _req(body: bytes, delay_ms: int) -> ScheduleRequest:
    return ScheduleRequest(topic="t", body=body, delay_ms=delay_ms)


def make_data_dir(data: Path, *, kill: bool = False) -> Made:
    """A data dir with 40 messages behind a checkpoint and 10 after it (all due 1-6 s
    ahead), closed, or abandoned as a kill would leave it."""
    clock = FakeClock(START_MS)
    e = Engine(small_settings(data), clock, background=False).start()
    before = [b"before-%d" % i for i in range(40)]
    after = [b"after-%d" % i for i in range(10)]
    e.schedule([_req(b, 1_000 + 97 * i) for i, b in enumerate(before)])
    e.pump()
    e.checkpoint()
    e.schedule([_req(b, 5_000 + 31 * i) for i, b in enumerate(after)])
    e.pump()
    if kill:
        e.abandon()
    else:
        e.close()
    return Made(data, clock, before, after)


def deliver_all(data: Path, clock: FakeClock, until_ms: int = 20_000) -> list[bytes]:
    """Open an engine on ``data``, run the clock ``until_ms`` ahead and receive
    (and ack) everything that comes due; the bodies, sorted."""
    e = Engine(small_settings(data), clock, background=False).start()
    got: list[bytes] = []
    try:
        end = clock.now_ms() + until_ms
        while clock.now_ms() < end:
            clock.advance(50)
            e.pump()
            while batch := e.receive("t", "g", max_messages=1000):
                got += [m.body for m in batch]
                e.ack("t", "g", [m.receipt for m in batch])
    finally:
        e.close()
    return sorted(got)


def message_positions(data: Path) -> dict[bytes, tuple[int, int]]:
    """Each message's body -> (position, length) of its SCHEDULE record."""
    cl = CommitLog(data / "commitlog", 1 << 40)
    try:
        out: dict[bytes, tuple[int, int]] = {}
        for pos, rec, length in cl.scan(0):
            if isinstance(rec, Message):
                out[rec.body] = (pos, length)
        return out
    finally:
        cl.close(cut_tail=False)


def segment_of(data: Path, log: str, pos: int) -> tuple[Path, int]:
    """The segment file of ``log`` holding global position ``pos``, and its base."""
    bases = sorted(int(p.stem) for p in (data / log).glob("*.seg"))
    base = max(b for b in bases if b <= pos)
    return data / log / f"{base:020d}.seg", base


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x40]))
