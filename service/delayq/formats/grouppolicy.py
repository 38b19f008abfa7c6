"""POLICY (11) records: a consumer group's delivery policy on one topic, as set
(pure; no file I/O). One encoder, ``encode_policy``, one decoder,
``decode_policy``; the values are plain numbers here (the delivery side turns
them into its ``GroupPolicy``). The last POLICY record of a (topic, group) is
its policy. Format version 1 (the frame's, see ``frame``); no magic of its own.
A push group's target follows the group name when flag bit 0 is set: canonical
JSON (``delivery.pushtarget.encode``; no secret, only its name). Decoders that
predate the tail read the name by its length and ignore the rest (a pull group).
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
| 65     | 1    | u8   | flags: bit 0 a push target follows (else 0)    |
| 66     | 2    |      | reserved, 0                                    |
| 68     | G    |      | group name (utf-8)                             |
| 68+G   | 4    | u32  | push length P (only with flag bit 0)           |
| 72+G   | P    |      | push target (JSON, utf-8; only with bit 0)     |
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..errors import CorruptData
from .frame import FRAME, Buffer, RecordType, frame, open_record

__all__ = ["PolicyDef", "decode_policy", "encode_policy"]

_POLICY = struct.Struct("<IHBBIQdQdIIBB2x")
_LEN = struct.Struct("<I")
PUSH_FLAG = 1


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
    push: bytes = b""
    """The push target's canonical JSON; empty: a pull group."""


def encode_policy(p: PolicyDef) -> bytes:
    g = p.group.encode()
    head = _POLICY.pack(
        p.topic_id, len(g), p.backoff_kind, p.jitter, p.max_attempts, p.initial_ms,
        p.multiplier, p.max_ms, p.rate_per_s, p.burst, p.max_in_flight, int(p.paused),
        PUSH_FLAG if p.push else 0,
    )  # fmt: skip
    tail = _LEN.pack(len(p.push)) + p.push if p.push else b""
    return frame(RecordType.POLICY, head + g + tail)


def decode_policy(data: Buffer, offset: int = 0) -> tuple[PolicyDef, int]:
    """The POLICY record at ``offset`` and its length; ``CorruptData`` if it is not one."""
    length = open_record(data, offset, RecordType.POLICY)
    p = offset + FRAME
    try:
        tid, gl, kind, jitter, attempts, initial, mult, most, rate, burst, flight, paused, flags = (
            _POLICY.unpack_from(data, p)
        )
        g0 = p + _POLICY.size
        end = offset + length
        if g0 + gl > end:
            raise struct.error("group name runs past the record")
        group = bytes(data[g0 : g0 + gl]).decode()
        push = b""
        if flags & PUSH_FLAG:
            (pl,) = _LEN.unpack_from(data, g0 + gl)
            p0 = g0 + gl + _LEN.size
            if p0 + pl > end:
                raise struct.error("push target runs past the record")
            push = bytes(data[p0 : p0 + pl])
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptData(f"malformed POLICY record: {exc}") from exc
    rec = PolicyDef(
        tid, group, attempts, kind, initial, mult, most, jitter, rate, burst, flight, bool(paused),
        push,
    )  # fmt: skip
    return rec, length
