"""POLICY (11) records: a consumer group's delivery policy on one topic, as set
(pure; no file I/O). One encoder, ``encode_policy``, one decoder,
``decode_policy``; the values are plain numbers here (the delivery side turns
them into its ``GroupPolicy``). The last POLICY record of a (topic, group) is
its policy. Format version 1 (the frame's, see ``frame``); no magic of its own.
Little-endian, after the 12-byte frame:

| offset | size | type | meaning                                        |
|-------:|-----:|------|------------------------------------------------|
| 12     | 4    | u32  | topic_id                                       |
| 16     | 2    | u16  | group length G                                 |
| 18     | 1    | u8   | backoff kind: 0 fixed, 1 exponential           |
| 19     | 1    | u8   | jitter: 0 none, 1 full, 2 equal                |
| 20     | 4    | u32  | max_attempts (0: no limit)                     |
| 24     | 8    | u64  | backoff initial_ms                             |
| 32     | 8    | f64  | backoff multiplier                             |
| 40     | 8    | u64  | backoff max_ms                                 |
| 48     | 8    | f64  | rate_per_s (0: no limit)                       |
| 56     | 4    | u32  | burst                                          |
| 60     | 4    | u32  | max_in_flight (0: the server's default)        |
| 64     | 1    | u8   | paused (0 or 1)                                |
| 65     | 3    |      | reserved, 0                                    |
| 68     | G    |      | group name (utf-8)                             |
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import CorruptData
from .frame import FRAME, Buffer, RecordType, frame, open_record

__all__ = ["PolicyDef", "decode_policy", "encode_policy"]

_POLICY = struct.Struct("<IHBBIQdQdIIB3x")


class PolicyDef(NamedTuple):
    topic_id: int
    group: str
    max_attempts: int
    backoff_kind: int
    initial_ms: int
    multiplier: float
    max_ms: int
    jitter: int
    rate_per_s: float
    burst: int
    max_in_flight: int
    paused: bool


def encode_policy(p: PolicyDef) -> bytes:
    g = p.group.encode()
    head = _POLICY.pack(
        p.topic_id, len(g), p.backoff_kind, p.jitter, p.max_attempts, p.initial_ms,
        p.multiplier, p.max_ms, p.rate_per_s, p.burst, p.max_in_flight, int(p.paused),
    )  # fmt: skip
    return frame(RecordType.POLICY, head + g)


def decode_policy(data: Buffer, offset: int = 0) -> tuple[PolicyDef, int]:
    """The POLICY record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.POLICY)
    p = offset + FRAME
    try:
        tid, gl, kind, jitter, attempts, initial, mult, most, rate, burst, flight, paused = (
            _POLICY.unpack_from(data, p)
        )
        g0 = p + _POLICY.size
        if g0 + gl > offset + length:
            raise struct.error("group name runs past the record")
        group = bytes(data[g0 : g0 + gl]).decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptData(f"malformed POLICY record: {exc}") from exc
    rec = PolicyDef(
        tid, group, attempts, kind, initial, mult, most, jitter, rate, burst, flight, bool(paused)
    )
    return rec, length
