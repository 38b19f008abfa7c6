"""What the timer pipeline needs of the delivery side, as a protocol.

The pipeline never imports ``delivery``: the engine facade hands it an object
with these methods (``delivery.consumers.Consumers``). Released messages go in through
``stage`` then ``Staged.index`` (one direction: delivery never calls back into
the timers); recovery replays DELIVER, ACK, HANDOUT and POLICY records through ``replay_*``; a
checkpoint saves and a restart restores the consumers' state through it.
All calls are made with the shard's lock held.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .. import formats
from ..store.checkpoint import Checkpoint

__all__ = ["Deliveries", "Staged"]


class Staged(Protocol):
    def index(self) -> list[tuple[int, np.ndarray]]:
        """Index the staged messages in their ready queues (cannot fail); the rows
        by topic id."""
        ...


class Deliveries(Protocol):
    def stage(self, rows: np.ndarray, now_ms: int) -> Staged:
        """Get ready to index released messages (release-buffer rows): whatever can
        fail on the delivery side happens here, nothing is indexed. The release
        stage then writes their DELIVER records and calls ``Staged.index``, so a
        failure at either step leaves nothing half done, and delivery never calls
        back into the timers."""
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

    def replay_handout(self, rec: formats.Handout) -> None:
        """Re-apply a HANDOUT record (messages held in flight, their attempts)."""
        ...

    def replay_policy(self, rec: formats.PolicyDef) -> None:
        """Re-apply a POLICY record (a group's delivery policy)."""
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
