"""Python clients of a delayq server: ``Client`` (blocking; generated from the
asyncio one), ``AsyncClient`` (asyncio) and ``Producer`` (auto-batching), all over
the pure ``core`` and ``outgoing``; what their calls answer (``results``) and raise (``errors``).

Invariants: every name here is in ``__all__`` (tests/test_public_api.py); every
failure of a call raises a ``ClientError``; no result is a raw dict or protobuf
(``route()``, the GetRoute reply, aside).
"""

from ..recurrence.spec import CatchUp, MessageTemplate, ScheduleSpec
from ..shardmap import jump_hash
from ..tls import TlsConfig
from .aio import AsyncClient
from .aiosubscription import AsyncSubscription
from .core import Received, RetryPolicy
from .errors import (
    AccessDenied,
    AlreadyExists,
    Cancelled,
    ClientError,
    Congested,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    RouteError,
    ServerError,
    TooLarge,
    Unavailable,
    WrongShard,
)
from .outgoing import Outgoing, Scheduled
from .producer import Producer
from .received import ReceivedBatch
from .results import (
    AckOutcome,
    Backoff,
    BackoffKind,
    CancelOutcome,
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
    NodeStats,
    PushStats,
    PushTarget,
    ScheduleStats,
    ShardStats,
    Stats,
    TopicStats,
)
from .schedules import Schedule, SchedulePage
from .subscription import Subscription
from .sync import Client

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
    "Congested",
    "DeadlineExceeded",
    "DueBucket",
    "FailedPrecondition",
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
    "Subscription",
    "TlsConfig",
    "TooLarge",
    "TopicStats",
    "Unavailable",
    "WrongShard",
    "jump_hash",
]
