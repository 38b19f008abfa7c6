"""The engine facade: one shard in process (``Engine``) and the values it takes
and returns. The server and embedders import from here only; the timer
pipeline (``timers``), the delivery side (``delivery``) and replication
(``replication``) are its parts, joined only here. May import those and what is
below them (types, store, formats, the leaves); imported by the server, the CLI
and embedders."""

from ..argchecks import check_receive
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
    ScheduleBatch,
    ScheduleOutcome,
    ScheduleRequest,
    TopicStats,
)
from .engine import Engine, Lifecycle
from .inspection import Inspection

__all__ = [
    "RECEIVE_LOOK_AGAIN_S",
    "AckOutcome",
    "BatchOutcome",
    "BlockOutcome",
    "BlockRow",
    "CancelOutcome",
    "Engine",
    "ExportRows",
    "ExportSnapshot",
    "GroupStats",
    "ImportRow",
    "Inspection",
    "Lifecycle",
    "LookupResult",
    "MessageState",
    "ReceivedBatch",
    "ReceivedMessage",
    "ReleaseOutcome",
    "ScheduleBatch",
    "ScheduleOutcome",
    "ScheduleRequest",
    "TopicStats",
    "check_receive",
]
