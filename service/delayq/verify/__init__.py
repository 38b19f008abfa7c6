"""``delayq verify``: an offline check (and repair) of a shard's data directory.

Does file I/O: it opens the directory's files through their ``store`` classes,
reads every record, and with ``fix`` writes the repairs described in ``fix``.
It takes the directory's ``LOCK`` first, as an engine does, and holds it to the
end, so it refuses a directory a server holds and no server can start while it
works.

    report = verify(Path("data"), fix=False)
    print(render_text(report)); sys.exit(report.exit_code)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ..clock import SystemClock
from ..store import dirlock
from ..store.datadir import MARKERS as _MARKERS
from .checks import checked
from .findings import KINDS, FileReport, Finding, Report
from .fix import repair
from .report import render_json, render_text

__all__ = [
    "KINDS",
    "DirectoryError",
    "FileReport",
    "Finding",
    "Report",
    "render_json",
    "render_text",
    "verify",
]

# what every data directory an engine opened has at least one of


class DirectoryError(Exception):
    """The directory cannot be checked: missing, not a data directory, or held by a
    running server (the message is one line)."""


def verify(data_dir: Path, *, fix: bool = False) -> Report:
    """Check ``data_dir``; with ``fix``, repair what can be, then check again (a
    repair that did not hold is reported as not fixed). Raises ``DirectoryError``."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DirectoryError(f"{root}: no such directory")
    if not any((root / m).exists() for m in _MARKERS):
        raise DirectoryError(
            f"{root}: not a delayq data directory (no commitlog/, timerlog/, timerwheel "
            "or checkpoint.json)"
        )
    now = SystemClock().now_ms()
    with _locked(root):
        report = Report(str(root), fix)
        with checked(root, report, now, open_state=fix) as first:
            if fix and report.damaged:
                repair(first)
        if fix and any(f.fixed for f in report.findings):
            _confirm(root, report, now)
    return report


def _confirm(root: Path, report: Report, now: int) -> None:
    """Check again after a fix: what is still there was not fixed after all, and
    damage the fix revealed (behind a cut, say) is added."""
    again = Report(str(root), False)
    with checked(root, again, now, open_state=False):
        pass
    before = {(f.file, f.kind, f.position): f for f in report.findings}
    for f in again.findings:
        if not f.damage or (f.kind == "checkpoint-missing" and f.fixable):
            continue  # no checkpoint, complete logs: the replay the fix left for the start
        old = before.get((f.file, f.kind, f.position))
        if old is None:
            report.add(f)
        elif old.fixed:
            old.fixed = False
            old.action += "; still found when checked again"


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold ``root/LOCK`` as an engine does (``flock``, not waiting)."""
    try:
        fd = dirlock.hold(root, read_only_ok=True)  # a read-only directory can be checked
    except BlockingIOError as exc:
        raise DirectoryError(
            f"{root}: in use by a running delayq process (its LOCK is held); stop it first"
        ) from exc
    except OSError as exc:
        raise DirectoryError(f"{root}: cannot open its LOCK: {exc.strerror}") from exc
    try:
        yield
    finally:
        os.close(fd)
