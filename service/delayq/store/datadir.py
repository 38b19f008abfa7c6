"""The entries of a shard's data directory, named once (what each holds and its
format: ``docs/engine.md``, "Data files").

``DERIVED`` are the entries rebuilt from the CommitLog when missing (what a
rewind removes); ``MARKERS`` are those whose presence says a directory is a
shard's data directory (``delayq verify`` refuses another).
"""

from __future__ import annotations

__all__ = [
    "BLOCKS",
    "CHECKPOINT",
    "COMMITLOG",
    "DERIVED",
    "EPOCHS",
    "IMPORTS",
    "KEYS",
    "LOCK",
    "MARKERS",
    "QUARANTINE",
    "READY",
    "RECEIPT_KEY",
    "STATE",
    "TIMERLOG",
    "TIMERWHEEL",
]

COMMITLOG = "commitlog"
"""Segments of the CommitLog (``kept/`` inside: records kept past retention)."""
TIMERLOG = "timerlog"
TIMERWHEEL = "timerwheel"
STATE = "state"
"""The state map's segments (a byte per message) and ``retired.json``."""
BLOCKS = "blocks"
"""Compaction blocks' files."""
READY = "ready"
"""Ready queues and consumer groups."""
CHECKPOINT = "checkpoint.json"
EPOCHS = "epochs.json"
IMPORTS = "imports.idx"
KEYS = "keys.idx"
"""The key indexes as a clean close left them (``store.keyfile``)."""
RECEIPT_KEY = "receipt.key"
QUARANTINE = "quarantine.log"
LOCK = "LOCK"

DERIVED = (TIMERLOG, TIMERWHEEL, STATE, READY, CHECKPOINT, IMPORTS, KEYS)
MARKERS = (COMMITLOG, TIMERLOG, TIMERWHEEL, CHECKPOINT, STATE)
