"""Released messages on their way into the ready queues (``StagedRows``): what
``Consumers.stage`` returns once everything that can fail on the delivery side
is done (a topic's first ready-queue file made), for ``index`` to append them
after the release stage wrote their DELIVER records. One direction: delivery
never calls back into the timers.
"""

from __future__ import annotations

import numpy as np

from ..batchops import take_rows
from ..formats.ready import ENTRY_DTYPE as READY_DTYPE
from ..store.readyindex import ReadyIndex

__all__ = ["StagedRows"]


class StagedRows:
    """Released messages staged by ``Consumers.stage``: ``index`` appends them to
    their ready queues (in memory: it cannot fail), once their DELIVER records are
    written."""

    def __init__(
        self,
        rows: np.ndarray,
        now_ms: int,
        queues: list[tuple[ReadyIndex, int, slice | np.ndarray]],
    ) -> None:
        self._rows, self._now_ms, self._queues = rows, now_ms, queues

    def index(self) -> list[tuple[int, np.ndarray]]:
        """Index the rows; the rows by topic id."""
        rows, out = self._rows, []
        for queue, tid, mask in self._queues:
            part = rows if isinstance(mask, slice) else take_rows(rows, mask)
            entries = np.empty(len(part), dtype=READY_DTYPE)
            entries["seq"] = part["seq"]
            entries["body_pos"] = part["cl_pos"]
            entries["body_size"] = part["cl_size"]
            entries["deliver_at_ms"] = part["deliver_at_ms"]
            entries["delivered_ms"] = self._now_ms
            queue.append_many(entries)
            out.append((tid, part))
        return out
