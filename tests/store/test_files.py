"""Making data files: checkpoints are atomic and checked, and a kill at any step
of creating a data file leaves it whole or absent (what each file holds:
``test_logs.py``, ``test_wheel.py``, ``test_statemap.py``, ``test_readyindex.py``)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from delayq import formats
from delayq.errors import CorruptData
from delayq.formats.messagestate import MessageState
from delayq.store.checkpoint import Checkpoint, GroupCheckpoint
from delayq.store.commitlog import CommitLog
from delayq.store.readyindex import ReadyIndex
from delayq.store.statemap import StateMap
from delayq.store.wheel import TimerWheel
from tests.store.records import T, message


def test_checkpoint_is_atomic_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    assert Checkpoint.load(path) is None
    ck = Checkpoint(shard=0, epoch=3, replay_from=99, groups={"1": {"g": GroupCheckpoint(5, [7])}})
    ck.save(path)
    assert Checkpoint.load(path) == ck
    assert not path.with_suffix(".tmp").exists()
    path.write_text(path.read_text().replace('"replay_from":99', '"replay_from":98'))
    with pytest.raises(CorruptData, match="CRC"):
        Checkpoint.load(path)


class _Crash(Exception):
    """Stands for the process dying at one system call."""


class _CrashAt:
    """Make the ``n``-th file system call from now raise ``_Crash`` (a kill there:
    what was done before it stays on disk, nothing after it happens). Descriptors
    opened meanwhile are closed when the block ends, as the kernel does on exit."""

    CALLS = ("open", "write", "pwrite", "ftruncate", "fsync", "rename", "replace")

    def __init__(self, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
        self.monkeypatch, self.left, self.crashed = monkeypatch, n, False
        self.opened: list[int] = []

    def __enter__(self) -> _CrashAt:
        for name in self.CALLS:
            self.monkeypatch.setattr(os, name, self._wrap(getattr(os, name), name == "open"))
        return self

    def _wrap(self, real: Any, is_open: bool) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.left -= 1
            if self.left == 0:
                self.crashed = True
                raise _Crash
            out = real(*args, **kwargs)
            if is_open:
                self.opened.append(out)
            return out

        return call

    def __exit__(self, *exc: object) -> bool:
        self.monkeypatch.undo()
        for fd in self.opened:
            with contextlib.suppress(OSError):  # the code under test may have closed it
                os.close(fd)
        return exc[0] is _Crash


@pytest.mark.parametrize("kind", ["segment", "wheel", "state", "ready"])
def test_a_kill_at_any_step_of_creating_a_data_file_leaves_it_whole_or_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Regression: a new segment cut short before its header was written made every
    later start fail ("file shorter than its header")."""
    for n in range(1, 50):
        d = tmp_path / str(n)
        d.mkdir()
        if kind == "segment":  # a roll: the first segment exists, the second is made
            cl = CommitLog(d / "cl", segment_bytes=4096)
            cl.append(message(1, 4000), T)
            with _CrashAt(monkeypatch, n) as crash:
                cl.append(message(2, 100), T)
            with contextlib.suppress(OSError):  # its descriptors, as the exit closes them
                cl.close()
            cl = CommitLog(d / "cl", segment_bytes=4096)  # what a restart opens
            kinds = [type(f) for _, f, _ in cl.scan(0)]
            assert kinds in ([formats.Message], [formats.Message] * 2)
            assert cl.append(message(3, 100), T) > 0
            cl.close()
        elif kind == "wheel":
            with _CrashAt(monkeypatch, n) as crash:
                TimerWheel(d / "wheel", slots=8, precision_ms=100, now_ms=T).close()
            w = TimerWheel(d / "wheel", slots=8, precision_ms=100, now_ms=T)
            assert list(w.occupied()) == [] and w.get(3) is None
            w.close()
        elif kind == "state":
            with _CrashAt(monkeypatch, n) as crash:
                sm = StateMap(d / "state", T)
                sm.set(7, MessageState.CANCELLED)  # makes the first chunk
                sm.close()
            sm = StateMap(d / "state", T)
            assert sm.get(7) in (MessageState.PENDING, MessageState.CANCELLED)
            sm.close()
        else:
            with _CrashAt(monkeypatch, n) as crash:
                ReadyIndex(d / "1.idx", 1, T).close()
            assert ReadyIndex(d / "1.idx", 1, T).length == 0
        if not crash.crashed:
            assert n > 2, "creating a file takes several calls"
            return
    raise AssertionError("creation never finished")
