"""Shared fixtures of the codec tests (pure: no files)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from delayq.formats.frame import RecordType
from delayq.formats.headers import encode_headers
from delayq.formats.message import encode_messages

T = 1_700_000_000_000

OneMessage = Callable[..., bytes]


def _one_message(
    rtype: RecordType,
    seq: int,
    deliver_at_ms: int,
    accepted_ms: int,
    epoch: int,
    topic_id: int,
    roll_count: int,
    key: bytes,
    headers: bytes,
    body: bytes,
    replaces_seq: int = 0,
    origin_pos: int = -1,
) -> bytes:
    buf, offsets, lengths = encode_messages(
        rtype,
        [seq],
        [deliver_at_ms],
        accepted_ms,
        epoch,
        topic_id,
        roll_count,
        [key],
        [headers],
        [body],
        replaces_seq,
        origin_pos,
    )
    assert offsets.tolist() == [0] and lengths.tolist() == [len(buf)]
    return bytes(buf)


@pytest.fixture(scope="session")
def one_message() -> OneMessage:
    """One SCHEDULE/ROLL record, encoded as a batch of one."""
    return _one_message


@pytest.fixture(scope="session")
def schedule() -> bytes:
    """The SCHEDULE record of the golden bytes in ``test_message``."""
    return _one_message(
        RecordType.SCHEDULE,
        seq=7,
        deliver_at_ms=T + 1234,
        accepted_ms=T,
        epoch=2,
        topic_id=3,
        roll_count=0,
        key=b"k",
        headers=encode_headers({"a": "b"}),
        body=b"hello",
    )
