"""What the timer pipeline needs of the delivery side, as a protocol.

The pipeline never imports ``delivery``: the engine facade hands it an object
with these methods (``delivery.Consumers``). Released messages go in through
``deliver``; recovery replays DELIVER and ACK records through ``replay_*``; a
checkpoint saves and a restart restores the consumers' state through it.
All calls are made with the shard's lock held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from .. import formats
from ..store.checkpoint import Checkpoint

__all__ = ["Deliveries"]


class Deliveries(Protocol):
    def deliver(
        self, rows: np.ndarray, now_ms: int, commit: Callable[[], None]
    ) -> list[tuple[int, np.ndarray]]:
        """Index released messages (release-buffer rows) in their topics' ready
        queues. ``commit`` writes their DELIVER records: it runs after whatever can
        fail on the delivery side and before anything is indexed, so a failure
        leaves nothing half done. Returns the rows by topic id."""
        ...

    def restore(self, ckpt: Checkpoint, now_ms: int) -> None:
        """Load the consumers' state as of ``ckpt`` (the start of recovery)."""
        ...

    def replay_deliver(self, rec: formats.Deliver) -> None:
        """Re-apply a DELIVER record written after the checkpoint."""
        ...

    def replay_ack(self, rec: formats.Ack) -> None:
        """Re-apply an ACK record written after the checkpoint."""
        ...

    def save_to(self, ckpt: Checkpoint) -> list[int]:
        """Put the consumers' state into ``ckpt``; write the ready queues' tails and
        return their descriptors, for the checkpoint to fsync."""
        ...

    def expire_before(self, cut_ms: int) -> dict[tuple[int, str], int]:
        """Expire ready entries delivered before ``cut_ms``: unacked counts by
        (topic id, group)."""
        ...

    def release_blocks(self) -> None:
        """Give back the disk blocks of expired ready entries."""
        ...

    def close(self, *, write_tails: bool = True) -> None: ...
