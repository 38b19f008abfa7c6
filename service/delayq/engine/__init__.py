"""The engine facade: one shard in process (``Engine``), the parts it exposes
(``Observing``, ``Moving``, ``Replicating``) and the values it takes and
returns. The server and embedders import from here only; the timer pipeline
(``timers``) and the delivery side (``delivery``) are joined only here. May
import those and what is below them (types, store, formats, the leaves);
imported by the server, the CLI and embedders. Replication sits above it and
drives ``Replicating`` through ``replication.ports``: nothing here imports it."""

from ..argchecks import check_receive
from ..delivery.policy import Backoff, BackoffKind, GroupPolicy, Jitter
from ..delivery.pushtarget import PushTarget
from ..delivery.receiving import RECEIVE_LOOK_AGAIN_S
from ..delivery.types import AckOutcome, GroupStats, ReceivedBatch, ReceivedMessage
from ..formats.messagestate import MessageState
from ..timers.compaction.adding import BlockOutcome, BlockRow
from ..timers.rebalance.snapshot import ExportRows, ExportSnapshot
from ..timers.rebalance.transfer import ImportRow, ReleaseOutcome
from ..types import (
    BatchOutcome,
    CancelOutcome,
    LookupResult,
    Schedule,
    ScheduleBatch,
    ScheduleOutcome,
    SchedulePage,
    ScheduleRequest,
    TopicStats,
)
from .engine import Engine
from .inspection import Inspection
from .lifecycle import Lifecycle
from .moving import Moving
from .observing import Observing
from .replicating import Replicating

__all__ = [
    "RECEIVE_LOOK_AGAIN_S",
    "AckOutcome",
    "Backoff",
    "BackoffKind",
    "BatchOutcome",
    "BlockOutcome",
    "BlockRow",
    "CancelOutcome",
    "Engine",
    "ExportRows",
    "ExportSnapshot",
    "GroupPolicy",
    "GroupStats",
    "ImportRow",
    "Inspection",
    "Jitter",
    "Lifecycle",
    "LookupResult",
    "MessageState",
    "Moving",
    "Observing",
    "PushTarget",
    "ReceivedBatch",
    "ReceivedMessage",
    "ReleaseOutcome",
    "Replicating",
    "Schedule",
    "ScheduleBatch",
    "ScheduleOutcome",
    "SchedulePage",
    "ScheduleRequest",
    "TopicStats",
    "check_receive",
]
