"""delayq: a durable delayed-message service.

One public vocabulary, listed in ``__all__``:

- the client (``Client``, ``AsyncClient``, ``Producer``...) and the values its
  calls take and answer (``delayq.client.results``: ``MessageState``,
  ``CancelOutcome``, ``AckOutcome``, ``Lookup``, ``Stats``...), so that
  ``client.lookup(i).state == delayq.MessageState.PENDING`` holds for a pending
  message;
- the one exception tree (``delayq.errors``, drawn there): the embedded engine
  raises its classes, the client subclasses of them (``except
  delayq.InvalidArgument`` catches both), with the client's own kinds beside;
- the embedded engine's entry points (``Engine``, ``EngineSettings``,
  ``FlushPolicy`` and the clocks), loaded on first use (PEP 562), so that
  ``import delayq`` and the client load no engine, store or numpy. The values an
  engine takes and answers (``ScheduleRequest``, ``LookupResult``, its own
  ``MessageState``...) are named under ``delayq.engine`` only: no name here means
  two things.
"""

from __future__ import annotations

import importlib
import typing

from .client import (
    AccessDenied,
    AckOutcome,
    AsyncClient,
    AsyncSubscription,
    Backoff,
    BackoffKind,
    Cancelled,
    CancelOutcome,
    CatchUp,
    Client,
    ClientError,
    DeadlineExceeded,
    DueBucket,
    GroupInfo,
    GroupPolicy,
    GroupStats,
    IfExists,
    ItemError,
    Jitter,
    KeyLookups,
    KeyOutcome,
    Lookup,
    MessageState,
    MessageTemplate,
    NodeStats,
    Outgoing,
    Producer,
    PushStats,
    PushTarget,
    Received,
    ReceivedBatch,
    RetryPolicy,
    RouteError,
    Schedule,
    Scheduled,
    SchedulePage,
    ScheduleSpec,
    ScheduleStats,
    ServerError,
    ShardStats,
    Stats,
    Subscription,
    TlsConfig,
    TooLarge,
    TopicStats,
)
from .errors import (
    AlreadyExists,
    Congested,
    CorruptData,
    DelayqError,
    EngineClosed,
    FailedPrecondition,
    Forwarded,
    InvalidArgument,
    NotFound,
    StorageFull,
    Unavailable,
    WrongShard,
)

if typing.TYPE_CHECKING:  # what the lazy names are, for type checkers
    from .clock import Clock, FakeClock, SystemClock
    from .engine import Engine
    from .settings import EngineSettings, FlushPolicy

_LAZY = {
    "Clock": ".clock",
    "Engine": ".engine",
    "EngineSettings": ".settings",
    "FakeClock": ".clock",
    "FlushPolicy": ".settings",
    "SystemClock": ".clock",
}
"""The embedded API: each name and the module that defines it, imported on first use."""

__all__ = [
    "AccessDenied",
    "AckOutcome",
    "AlreadyExists",
    "AsyncClient",
    "AsyncSubscription",
    "Backoff",
    "BackoffKind",
    "CancelOutcome",
    "Cancelled",
    "CatchUp",
    "Client",
    "ClientError",
    "Clock",
    "Congested",
    "CorruptData",
    "DeadlineExceeded",
    "DelayqError",
    "DueBucket",
    "Engine",
    "EngineClosed",
    "EngineSettings",
    "FailedPrecondition",
    "FakeClock",
    "FlushPolicy",
    "Forwarded",
    "GroupInfo",
    "GroupPolicy",
    "GroupStats",
    "IfExists",
    "InvalidArgument",
    "ItemError",
    "Jitter",
    "KeyLookups",
    "KeyOutcome",
    "Lookup",
    "MessageState",
    "MessageTemplate",
    "NodeStats",
    "NotFound",
    "Outgoing",
    "Producer",
    "PushStats",
    "PushTarget",
    "Received",
    "ReceivedBatch",
    "RetryPolicy",
    "RouteError",
    "Schedule",
    "SchedulePage",
    "ScheduleSpec",
    "ScheduleStats",
    "Scheduled",
    "ServerError",
    "ShardStats",
    "Stats",
    "StorageFull",
    "Subscription",
    "SystemClock",
    "TlsConfig",
    "TooLarge",
    "TopicStats",
    "Unavailable",
    "WrongShard",
]


if not typing.TYPE_CHECKING:  # (hidden from type checkers: a typo stays an error there)

    def __getattr__(name: str) -> typing.Any:
        """A name of the embedded API, imported now (and kept: the next read is plain)."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
