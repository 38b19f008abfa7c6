"""Beginning an epoch on a shard (``begin_epoch``): the epoch history names the
new epoch from the CommitLog's end, saved in ``epochs.json`` before the first
record written in it; a node never goes back to an older epoch. Used when a
shard opens and when a node is promoted."""

from __future__ import annotations

from typing import Protocol

from ...errors import FailedPrecondition
from ...store.commitlog import CommitLog
from ...store.epochfile import EPOCHS_FILE, save_epochs
from ..office import Office
from ..shardfiles import ShardFiles

__all__ = ["EpochState", "begin_epoch"]


class EpochState(Protocol):
    """What beginning an epoch uses of the shard's state."""

    files: ShardFiles
    next_seq: int
    office: Office

    @property
    def cl(self) -> CommitLog: ...


def begin_epoch(state: EpochState, epoch: int) -> None:
    """Write from now on in ``epoch`` (not below the current one): the history
    names it, from the CommitLog's end, on disk before the first record of it.
    Messages written before the history existed are epoch 1's (from the log's start)."""
    history = state.office.epochs
    end = state.cl.end
    if not history.entries and state.next_seq > 1:
        history = history.begin(1, state.cl.log.start)
    if history.entries and history.entries[-1][1] > end:
        # the log lost writes back past where the last epoch began (a power loss
        # under async flush): its ids may have been handed out, so never write in
        # it again: the next epoch starts at the end that survived
        lost = history.last
        history = history.truncated(end).begin(lost + 1, end)
        epoch = max(epoch, lost + 1)
    if epoch < history.last:
        raise FailedPrecondition(
            f"epoch {epoch} is below the shard's current epoch {history.last}: a node "
            "never goes back to an older epoch"
        )
    if epoch > history.last:
        history = history.begin(epoch, end)
    if history != state.office.epochs:
        save_epochs(state.files.dir / EPOCHS_FILE, history)
        state.office.epochs = history
    state.office.epoch = epoch
