"""The TimerWheel: a memory-mapped array of fixed-size slots, ``<data>/timerwheel``.

File: a ``FileHeader`` (magic b"DQTW", base = number of slots, param =
precision_ms), padded to 64 bytes, then the slots. Slot ``s`` is stored at
index ``s % slots`` (see ``timers.timingwheel``); an entry whose stored slot
number is not the one asked for belongs to another lap and reads as empty.
Slot entries: 32 bytes each (format: ``formats.wheel``).

Not thread-safe: the engine's lock serialises access.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import CorruptData
from ..formats.fileheader import HEADER_SIZE, FileHeader
from ..formats.wheel import DATA_OFFSET, EMPTY, SLOT, SLOT_DTYPE, SLOT_MAGIC, SLOT_NUM, SlotEntry
from .datafile import open_data_file
from .newfile import create_file

__all__ = ["TimerWheel"]

MAGIC = b"DQTW"


class TimerWheel:
    def __init__(self, path: Path, slots: int, precision_ms: int, now_ms: int) -> None:
        self.slots = slots
        size = DATA_OFFSET + slots * SLOT.size
        if not path.exists():
            header = FileHeader(MAGIC, slots, now_ms, precision_ms).encode()
            fill = bytes(DATA_OFFSET - HEADER_SIZE) + EMPTY * slots
            self._fd = create_file(path, header, fill=fill)
        else:

            def same_shape(head: FileHeader) -> None:
                if head.param != precision_ms or head.base != slots:
                    raise CorruptData(
                        f"timerwheel: data dir was created with precision {head.param} ms and "
                        f"{head.base} slots; settings ask for {precision_ms} ms and {slots} "
                        "slots (precision and window are fixed for a data directory)"
                    )

            self._fd, _ = open_data_file(path, MAGIC, "timerwheel", size=size, check=same_shape)
        self._map = mmap.mmap(self._fd, size)
        self.array = np.frombuffer(self._map, dtype=SLOT_DTYPE, count=slots, offset=DATA_OFFSET)
        """A writable numpy view of every slot (for batched reads and updates)."""
        self._cols = {name: self.array[name] for name in ("slot", "first", "last", "num")}

    def update_many(
        self, slots: np.ndarray, first: np.ndarray, last: np.ndarray, num: np.ndarray
    ) -> None:
        """Write many slot entries at once (slots must map to distinct indexes)."""
        a = self.array
        idx = slots % self.slots
        a["slot"][idx] = slots
        a["first"][idx] = first
        a["last"][idx] = last
        a["num"][idx] = num
        a["magic"][idx] = SLOT_MAGIC

    def read_many(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first, last, num) of many slots; stale laps read as (-1, -1, 0)."""
        idx = slots % self.slots
        c = self._cols
        live = c["slot"][idx] == slots
        return (
            np.where(live, c["first"][idx], -1),
            np.where(live, c["last"][idx], -1),
            np.where(live, c["num"][idx], 0).astype(np.int64),
        )

    def max_num(self, slots: np.ndarray) -> int:
        """The largest count among ``slots`` (stale laps count 0)."""
        idx = slots % self.slots
        c = self._cols
        return int(np.where(c["slot"][idx] == slots, c["num"][idx], 0).max(initial=0))

    def max_num_all(self) -> int:
        """The largest count of any slot in the file (a full pass)."""
        return int(self._cols["num"].max(initial=0))

    def _off(self, slot: int) -> int:
        return DATA_OFFSET + (slot % self.slots) * SLOT.size

    def get(self, slot: int) -> SlotEntry | None:
        """The slot's entry, or None when empty or holding another lap."""
        stored, first, last, num, _ = SLOT.unpack_from(self._map, self._off(slot))
        if stored != slot:
            return None
        return SlotEntry(first, last, num)

    def num(self, slot: int) -> int:
        stored, num = SLOT_NUM.unpack_from(self._map, self._off(slot))
        return int(num) if stored == slot else 0

    def put(self, slot: int, first: int, last: int, num: int) -> None:
        SLOT.pack_into(self._map, self._off(slot), slot, first, last, num, SLOT_MAGIC)

    def clear(self, slot: int) -> None:
        self._map[self._off(slot) : self._off(slot) + SLOT.size] = EMPTY

    def occupied(self) -> Iterator[tuple[int, SlotEntry]]:
        """Every non-empty entry (slot number, entry); a full pass over the file."""
        for stored, first, last, num, _ in SLOT.iter_unpack(self._map[DATA_OFFSET:]):
            if stored >= 0:
                yield stored, SlotEntry(first, last, num)

    @property
    def fd(self) -> int:
        """The file behind the map: ``os.fsync`` of it writes back the slots changed
        through the map (on Linux that is what msync does), and unlike
        ``mmap.flush`` it lets go of the GIL while the disk works."""
        return self._fd

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        del self.array, self._cols  # the views pin the map; drop them first
        self._map.close()
        os.close(self._fd)
