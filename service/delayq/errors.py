"""The exception tree of delayq, drawn here once::

    DelayqError
    ├── InvalidArgument      bad input; ``field`` names the offending field
    ├── NotFound             unknown, expired or foreign message id / receipt
    ├── Congested            a bounded queue or a wheel slot is full;
    │   │                    retry after ``retry_after_ms``
    │   └── StorageFull      the data directory's disk (or quota) is full
    ├── FailedPrecondition   valid call, wrong state (e.g. reschedule of a delivered message)
    ├── CorruptData          a file failed its magic/CRC/version check
    └── EngineClosed         the engine was stopped (or never started)

The gRPC layer translates these to status codes at one boundary; storage never
swallows an unknown error.
"""

from __future__ import annotations

import errno

__all__ = [
    "Congested",
    "CorruptData",
    "DelayqError",
    "EngineClosed",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "StorageFull",
    "no_space",
    "storage_full",
]


class DelayqError(Exception):
    """Base of every error delayq raises on purpose."""


class InvalidArgument(DelayqError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFound(DelayqError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Congested(DelayqError):
    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(f"{message}; retry after {retry_after_ms} ms")
        self.retry_after_ms = retry_after_ms


class StorageFull(Congested):
    """A write found no space (ENOSPC) or no quota (EDQUOT) left: nothing of the call
    was kept; the same call succeeds once space is freed (retention, a bigger volume)."""

    RETRY_AFTER_MS = 1000

    def __init__(self, message: str) -> None:
        super().__init__(message, self.RETRY_AFTER_MS)


def no_space(exc: OSError) -> bool:
    """Whether ``exc`` says the disk (ENOSPC) or the quota (EDQUOT) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def storage_full(exc: OSError, what: str) -> StorageFull | None:
    """``exc`` as a ``StorageFull`` if it says the disk or quota is full (None else);
    ``what`` names what was being written, e.g. "append to the commitlog in /data"."""
    if not no_space(exc):
        return None
    return StorageFull(f"no space left to {what} ({exc.strerror}); free space or grow the volume")


class FailedPrecondition(DelayqError):
    pass


class CorruptData(DelayqError):
    pass


class EngineClosed(DelayqError):
    pass
