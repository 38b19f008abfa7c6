"""The quarantine report, ``<data>/quarantine.log``: records that could not be
read are reported here (one JSON object per line) and skipped, never retried
forever.

Line: ``{"at_ms": int, "file": str, "position": int, "error": str}``. Append
only; nothing in delayq reads it back (it is for operators and ``delayq verify``).
"""

from __future__ import annotations

import collections
import json
import logging
from collections.abc import Callable
from pathlib import Path

__all__ = ["Quarantine"]

log = logging.getLogger("delayq.engine")


class Quarantine:
    def __init__(
        self, path: Path, now_ms: Callable[[], int], counters: collections.Counter[str]
    ) -> None:
        self.path = path
        self._now_ms = now_ms
        self._counters = counters

    def __call__(self, where: str, pos: int, why: str) -> None:
        """Report the record at ``pos`` of ``where`` (a file kind) as unreadable."""
        self._counters["quarantined"] += 1
        entry = {"at_ms": self._now_ms(), "file": where, "position": pos, "error": why}
        log.error("quarantined unreadable record", extra=entry)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(entry) + "\n")
