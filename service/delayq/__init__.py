"""delayq: a durable delayed-message service.

The public API of the embedded engine is re-exported here; see ``__all__``.
"""

from .client import (
    AsyncClient,
    Client,
    Outgoing,
    Producer,
    Received,
    RetryPolicy,
    Scheduled,
    TlsConfig,
)
from .clock import Clock, FakeClock, SystemClock
from .engine import (
    AckOutcome,
    BatchOutcome,
    CancelOutcome,
    Engine,
    Lifecycle,
    LookupResult,
    MessageState,
    ReceivedBatch,
    ReceivedMessage,
    ScheduleBatch,
    ScheduleOutcome,
    ScheduleRequest,
    TopicStats,
)
from .errors import (
    Congested,
    CorruptData,
    DelayqError,
    EngineClosed,
    FailedPrecondition,
    Forwarded,
    InvalidArgument,
    NotFound,
    StorageFull,
)
from .ids import MessageId
from .settings import EngineSettings, FlushPolicy

__all__ = [
    "AckOutcome",
    "AsyncClient",
    "BatchOutcome",
    "CancelOutcome",
    "Client",
    "Clock",
    "Congested",
    "CorruptData",
    "DelayqError",
    "Engine",
    "EngineClosed",
    "EngineSettings",
    "FailedPrecondition",
    "FakeClock",
    "FlushPolicy",
    "Forwarded",
    "InvalidArgument",
    "Lifecycle",
    "LookupResult",
    "MessageId",
    "MessageState",
    "NotFound",
    "Outgoing",
    "Producer",
    "Received",
    "ReceivedBatch",
    "ReceivedMessage",
    "RetryPolicy",
    "ScheduleBatch",
    "ScheduleOutcome",
    "ScheduleRequest",
    "Scheduled",
    "StorageFull",
    "SystemClock",
    "TlsConfig",
    "TopicStats",
]
