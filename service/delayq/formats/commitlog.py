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

Every record starts with the 12-byte frame of ``frame`` (length, CRC32C,
type, version 1). The segment files that hold them carry magic b"DQCL".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CorruptData
from .ack import Ack, decode_ack
from .cancel import Cancel, Cancels, decode_cancel, decode_cancels
from .deliver import Deliver, decode_deliver
from .frame import FRAME, Buffer, RecordType, open_frame
from .message import Message, decode_messages
from .topic import TopicDef, decode_topic

__all__ = ["Record", "decode"]

Record = Message | Cancel | Cancels | Deliver | Ack | TopicDef

_DECODERS: dict[int, Callable[[Buffer, int], tuple[Any, int]]] = {
    RecordType.CANCEL: decode_cancel,
    RecordType.DELIVER: decode_deliver,
    RecordType.ACK: decode_ack,
    RecordType.TOPIC: decode_topic,
    RecordType.CANCELS: decode_cancels,
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
