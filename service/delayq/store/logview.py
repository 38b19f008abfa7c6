"""``LogView``: the base of the logs built on a ``SegmentedLog`` (CommitLog,
TimerLog), which own one as ``log`` and add what their records mean.

A subclass names its files' ``magic`` and what it is (for errors), and may keep
files beside its segments (``_open_beside``); its ``scan`` walks ``spans`` and
advances ``valid_end``, where the last valid record ends. Opening closes the
segments again if the subclass refuses its files.

Not thread-safe, as ``SegmentedLog``: the owner serialises writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from .segment import Segment
from .segments import SegmentedLog

__all__ = ["LogView"]


class LogView:
    """Base of the logs built on a ``SegmentedLog`` (CommitLog, TimerLog): the
    plain delegations, written once. A subclass names its files' ``magic`` and
    what it is (for errors)."""

    magic: bytes
    what: str

    def __init__(
        self,
        directory: Path,
        segment_bytes: int,
        *,
        warm_bytes: int = 0,
        on_cold: Callable[[], None] | None = None,
    ) -> None:
        """See ``SegmentedLog`` for ``warm_bytes`` and ``on_cold``."""
        self.log = SegmentedLog(
            directory, self.magic, segment_bytes, self.what, warm_bytes=warm_bytes, on_cold=on_cold
        )
        self.valid_end = 0  # set by the subclass's scan(): where the last valid record ends
        try:
            self._open_beside(directory)
        except BaseException:  # refused: close the segments again
            self.log.close(cut_tail=False)
            raise

    def _open_beside(self, directory: Path) -> None:
        """Open what a subclass keeps beside its segments (none here)."""

    @property
    def end(self) -> int:
        return self.log.end

    def append(self, data: bytes | bytearray | memoryview, now_ms: int) -> int:
        return self.log.append(data, now_ms)

    def spans(self, start: int) -> Iterator[tuple[Segment, int]]:
        """For a scan from ``start``: each segment with the first position to read in
        it. The scan advances ``valid_end``; a segment it left short ends the walk."""
        self.valid_end = max(start, self.log.start)
        for seg in self.log.segments:
            if seg.end <= self.valid_end:
                continue
            yield seg, max(self.valid_end, self.log.first_record_pos(seg.base))
            if self.valid_end != seg.end:
                return

    def truncate(self, pos: int, *, zeros: int = 0) -> None:
        self.log.truncate(pos, zeros=zeros)

    def sync(self) -> None:
        self.log.sync()

    def close(self, *, cut_tail: bool = True) -> None:
        self.log.close(cut_tail=cut_tail)
