"""Any CommitLog record, by its type (pure; no file I/O): ``decode`` reads the
frame's type byte and hands the record to its type's decoder. The formats, one
module a record family (each with its byte-layout table):

| type | name     | module    | written                                   |
|-----:|----------|-----------|-------------------------------------------|
| 1    | SCHEDULE | message   | per accepted message                      |
| 2    | CANCEL   | cancel    | no longer (read only: old data dirs)      |
| 3    | ROLL     | message   | per re-parked far-future message          |
| 4    | DELIVER  | deliver   | per message moved to its ready queue      |
| 5    | ACK      | ack       | per ack call                              |
| 6    | TOPIC    | topic     | once per topic, before its first use      |
| 7    | CANCELS  | cancel    | per cancel call                           |
| 8    | PROGRESS | progress  | per move of a master's scan resume point  |
| 9    | BLOCK    | block     | per part of a compaction block added      |
| 10   | LOADED   | block     | per compaction block loaded into the wheel |
| 11   | POLICY   | grouppolicy | per change of a group's delivery policy |
| 12   | HANDOUT  | handout   | per receive's hand-outs, re-timing, nack  |

Every record starts with the 12-byte frame of ``frame`` (length, CRC32C,
type, version 1). The segment files that hold them carry magic b"DQCL".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..batchops import rows_at
from ..errors import CorruptData
from .ack import Ack, decode_ack
from .block import Block, Loaded, decode_block, decode_loaded
from .cancel import Cancel, Cancels, decode_cancel, decode_cancels
from .deliver import Deliver, decode_deliver
from .frame import FRAME, VERSION, Buffer, RecordType, open_frame, record_starts
from .grouppolicy import PolicyDef, decode_policy
from .handout import Handout, decode_handout
from .message import MESSAGE_DTYPE, MESSAGE_FIXED, Message
from .messagecolumns import decode_messages
from .progress import Progress, decode_progress
from .topic import TopicDef, decode_topic

__all__ = [
    "Record",
    "decode",
    "decode_all",
    "record_starts",
    "unchecked_messages",
    "unchecked_schedules",
]

Record = (
    Message
    | Cancel
    | Cancels
    | Deliver
    | Ack
    | TopicDef
    | Progress
    | Block
    | Loaded
    | PolicyDef
    | Handout
)

_DECODERS: dict[int, Callable[[Buffer, int], tuple[Any, int]]] = {
    RecordType.CANCEL: decode_cancel,
    RecordType.DELIVER: decode_deliver,
    RecordType.ACK: decode_ack,
    RecordType.TOPIC: decode_topic,
    RecordType.CANCELS: decode_cancels,
    RecordType.PROGRESS: decode_progress,
    RecordType.BLOCK: decode_block,
    RecordType.LOADED: decode_loaded,
    RecordType.POLICY: decode_policy,
    RecordType.HANDOUT: decode_handout,
}


def decode(data: Buffer, offset: int = 0, *, payload: bool = True) -> tuple[Record, int]:
    """Decode the record at ``offset`` of any type; return it and its length.

    ``payload=False`` leaves a message's key, headers and body empty (the CRC is
    still checked): for cancels and lookups of state, which need no body copy.
    Raises ``CorruptData`` for a short, torn or corrupt record.
    """
    rtype = data[offset + 8] if 0 <= offset <= len(data) - FRAME else 0
    if rtype == 1 or rtype == 3:  # SCHEDULE/ROLL: the hot path, a batch of one
        return decode_messages(data, (offset,), payload=payload).record(0)
    decoder = _DECODERS.get(rtype)
    if decoder is None:
        open_frame(data, offset)  # a short, torn or corrupt record says so first
        raise CorruptData(f"unknown record type {rtype}")
    rec: Record
    rec, length = decoder(data, offset)
    return rec, length


def decode_all(data: Buffer) -> list[tuple[int, Record, int]]:
    """Every record of ``data`` (offset, record, length), which must be whole
    records end to end (a replication chunk): ``CorruptData`` for a damaged one or
    bytes left over. Messages are decoded as one batch, the others one by one."""
    starts = record_starts(data, 0)
    out: list[tuple[int, Record, int]] = []
    end = 0
    for at, got in zip(starts.tolist(), decode_messages(data, starts).records(), strict=True):
        out.append((at, *(got if got is not None else decode(data, at))))
        end = at + out[-1][2]
    if end != len(data):
        raise CorruptData(f"{len(data) - end} bytes after the last whole record at {end}")
    return out


def unchecked_messages(
    data: Buffer,
    start: int,
    types: tuple[RecordType, ...] = (RecordType.SCHEDULE,),
    starts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The offsets and fixed parts (``MESSAGE_DTYPE``) of the records of ``types``
    (SCHEDULE and/or ROLL) of this version among those ``record_starts`` finds
    (or ``starts``, when the caller has them), CRCs not checked: for a walk over a
    whole segment, where a CRC per record would cost more than the walk (whoever
    reads one of them later decodes it whole, CRC and all)."""
    offsets = record_starts(data, start) if starts is None else starts
    offsets = offsets[offsets + MESSAGE_FIXED <= len(data)]
    heads = rows_at(data, offsets, MESSAGE_DTYPE)
    wanted = np.isin(heads["type"], [int(t) for t in types])
    rows = np.flatnonzero(wanted & (heads["version"] == VERSION))
    return offsets[rows], heads[rows]


def unchecked_schedules(data: Buffer, start: int) -> tuple[np.ndarray, np.ndarray]:
    """``unchecked_messages`` of the SCHEDULE records."""
    return unchecked_messages(data, start)
