"""The byte formats of delayq: pure codecs, no file I/O (``store`` reads and
writes the files). One module a record family, each with its byte-layout table,
magic and version, and one encoder and one decoder (a single record is a batch
of one):

- ``frame``: the 12-byte frame of every CommitLog record, record types, CRCs;
- ``message`` (SCHEDULE, ROLL: the layout and the encoder; its decoder, to
  columns, in ``messagecolumns``), ``cancel`` (CANCELS, old CANCEL), ``deliver``,
  ``ack``, ``topic``, ``progress``, ``block`` (BLOCK, LOADED), ``grouppolicy``
  (POLICY), ``handout`` (HANDOUT): the CommitLog records; ``headers``: a message's headers;
- ``commitlog``: ``decode`` of a record of any type;
- ``fileheader``: the 32-byte header of every data file;
- ``fixedrecord``: magic + checksum records; ``timer`` (TimerLog) and ``ready``
  (ready-queue entries) are two of them;
- ``wheel``: the TimerWheel's slot entries;
- ``kept``, ``imports``, ``blockfile``, ``keyindex``: the files retention,
  rebalances, compaction and a clean close (the key indexes) keep beside the logs.

The CommitLog record API is re-exported here (``formats.encode_messages``, ...).
May import the leaves only.
"""

from __future__ import annotations

from .ack import Ack, encode_ack
from .block import Block, Loaded, encode_block, encode_loaded
from .cancel import Cancel, Cancels, encode_cancels
from .commitlog import Record, decode
from .deliver import Deliver, encode_delivers
from .frame import FRAME, VERSION, RecordType, frame_length
from .grouppolicy import PolicyDef, encode_policy
from .handout import Handout, encode_handout
from .headers import decode_headers, encode_headers
from .message import MESSAGE_DTYPE, MESSAGE_FIXED, Message, encode_messages
from .messagecolumns import MessageColumns, decode_messages
from .progress import Progress, encode_progress
from .topic import TopicDef, encode_topic

__all__ = [
    "FRAME",
    "MESSAGE_DTYPE",
    "MESSAGE_FIXED",
    "VERSION",
    "Ack",
    "Block",
    "Cancel",
    "Cancels",
    "Deliver",
    "Handout",
    "Loaded",
    "Message",
    "MessageColumns",
    "PolicyDef",
    "Progress",
    "Record",
    "RecordType",
    "TopicDef",
    "decode",
    "decode_headers",
    "decode_messages",
    "encode_ack",
    "encode_block",
    "encode_cancels",
    "encode_delivers",
    "encode_handout",
    "encode_headers",
    "encode_loaded",
    "encode_messages",
    "encode_policy",
    "encode_progress",
    "encode_topic",
    "frame_length",
]
