"""The epoch history (``epochs.json``): readable, and not past the CommitLog.

The history is authoritative (nothing derives it again), so damage to it is
reported, never repaired: ``epochs-corrupt`` (it does not parse, fails its CRC,
or its epochs do not rise). An epoch that begins past the valid CommitLog end
(``epochs-ahead``) is a note, not damage: the engine never writes in that epoch
again and starts the next one at the end that survived. A directory without the
file (written before it existed, or never written) is fine. Its entries are
reported as the file's facts.
"""

from __future__ import annotations

from ..errors import CorruptData
from ..store.epochfile import EPOCHS_FILE, load_epochs
from .checker import Checker

__all__ = ["check"]


def check(c: Checker) -> None:
    """After the log walk: the history against the CommitLog's valid end."""
    if not (c.root / EPOCHS_FILE).exists():
        return
    try:
        history = load_epochs(c.root / EPOCHS_FILE)
    except CorruptData as exc:
        c.add(EPOCHS_FILE, "epochs-corrupt", None, str(exc), fixable=False)
        return
    c.report.file(EPOCHS_FILE).facts.update(entries=[list(e) for e in history.entries])
    if c.cl is None or not history.entries:
        return
    epoch, start = history.entries[-1]
    if start > c.cl_facts.valid_end:
        c.add(
            EPOCHS_FILE,
            "epochs-ahead",
            start,
            f"epoch {epoch} begins at {start}, past the valid CommitLog end "
            f"{c.cl_facts.valid_end}: the next start writes in epoch {epoch + 1}",
            fixable=False,
            damage=False,
        )
