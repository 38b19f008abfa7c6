"""The shard's epoch history on disk: ``<data>/epochs.json``, a ``jsonfile`` of
format "delayq-epochs", version 1, whose body is ``{"entries": [[epoch, start],
...]}`` (see ``delayq.epochs``). Saved (fsynced, atomically) before the first
write of a new epoch, so no byte of the CommitLog is ever written under an
epoch the file does not name.
"""

from __future__ import annotations

from pathlib import Path

from ..epochs import EpochHistory
from ..errors import CorruptData
from . import jsonfile
from .datadir import EPOCHS

__all__ = ["EPOCHS_FILE", "load_epochs", "save_epochs"]

EPOCHS_FILE = EPOCHS

FORMAT = "delayq-epochs"
VERSION = 1


def load_epochs(path: Path) -> EpochHistory:
    """The saved history (empty when there is no file yet)."""
    body = jsonfile.load(path, FORMAT, VERSION, "epoch history")
    if body is None:
        return EpochHistory()
    try:
        return EpochHistory.of(body["entries"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptData(f"epoch history {path}: {exc}") from exc


def save_epochs(path: Path, history: EpochHistory) -> None:
    jsonfile.save(path, FORMAT, VERSION, {"entries": [list(e) for e in history.entries]})
