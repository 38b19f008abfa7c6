"""Undecodable requests (``server.decoding``, ``server.wire``): the refusal text
names the method, or the field whose string is not UTF-8; refusals are logged at
most once per interval, with a count. (Over a real server: tests/integration/
test_hostile.py.)"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest

from delayq.admin.v1 import admin_pb2 as apb
from delayq.server.decoding import RefusalLog, refusal
from delayq.server.wire import MAX_FIELDS, bad_utf8_field
from delayq.v1 import delayq_pb2 as pb

BAD = b"\xc3\x28"  # a lead byte without its continuation


def spoiled(msg: object, marker: str) -> bytes:
    """``msg``'s bytes with the two-character string ``marker`` made invalid UTF-8."""
    data: bytes = msg.SerializeToString()  # type: ignore[attr-defined]
    assert data.count(marker.encode()) == 1
    return data.replace(marker.encode(), BAD)


@pytest.mark.parametrize(
    ("msg", "field"),
    [
        (pb.StatsRequest(topic="QQ"), "topic"),
        (pb.ReceiveRequest(topic="t", group="QQ", max_messages=3), "group"),
        (pb.CancelRequest(ids=["a", "b", "QQ"]), "ids[2]"),
        (
            pb.ScheduleRequest(
                messages=[pb.NewMessage(topic="t"), pb.NewMessage(topic="t", key="QQ")]
            ),
            "messages[1].key",
        ),
        (
            pb.ScheduleRequest(messages=[pb.NewMessage(topic="t", headers={"h": "QQ"})]),
            "messages[0].headers",
        ),
        (pb.AckRequest(topic="t", group="g", receipts=["r", "QQ"]), "receipts[1]"),
        (apb.ImportRequest(messages=[apb.MovedMessage(topic="QQ")]), "messages[0].topic"),
    ],
)
def test_the_first_string_that_is_not_utf8_is_named_by_its_path(msg: object, field: str) -> None:
    assert bad_utf8_field(msg.DESCRIPTOR, spoiled(msg, "QQ")) == field  # type: ignore[attr-defined]


def test_bytes_fields_and_other_breakage_name_no_field() -> None:
    body = pb.ScheduleRequest(messages=[pb.NewMessage(topic="t", body=b"QQ")])
    assert bad_utf8_field(body.DESCRIPTOR, spoiled(body, "QQ")) is None  # bytes may be anything
    desc = pb.StatsRequest.DESCRIPTOR
    assert bad_utf8_field(desc, b"\x0a\x05ab") is None  # truncated
    assert bad_utf8_field(desc, b"\xff") is None
    assert bad_utf8_field(desc, pb.StatsRequest(topic="fine").SerializeToString()) is None


def test_the_walk_gives_up_after_max_fields() -> None:
    """It runs on the event loop: 64 MiB of tiny fields would take half a minute."""
    desc = pb.StatsRequest.DESCRIPTOR
    spoiled_topic = b"\x0a\x01\xff"
    assert bad_utf8_field(desc, b"\x08\x01" * (MAX_FIELDS - 1) + spoiled_topic) == "topic"
    many = b"\x08\x01" * (1 << 20) + spoiled_topic
    started = time.monotonic()
    assert bad_utf8_field(desc, many) is None
    assert time.monotonic() - started < 1


def test_refusal_texts_name_the_method_or_the_field_and_quote_nothing() -> None:
    garbage = b"\xff\xff\xff" + b"A" * 1000
    assert refusal("/delayq.v1.DelayQueue/Schedule", garbage) == (
        "Schedule: request is not a valid delayq.v1 message"
    )
    assert refusal("/delayq.admin.v1.ShardAdmin/Status", garbage) == (
        "Status: request is not a valid delayq.admin.v1 message"
    )
    assert refusal("/delayq.v1.DelayQueue/Stats", spoiled(pb.StatsRequest(topic="QQ"), "QQ")) == (
        "topic: not valid UTF-8; the Stats request is not a valid delayq.v1 message"
    )
    assert refusal("/no.such.Service/Call", garbage) == (
        "Call: request is not a valid no.such message"
    )


class Later:
    """A stand-in for ``loop.call_later``: keeps what was scheduled."""

    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, delay: float, fn: Callable[[], None]) -> None:
        self.pending.append((delay, fn))

    def fire(self) -> None:
        _, fn = self.pending.pop(0)
        fn()


def test_refusals_are_logged_at_most_once_per_interval_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    later = Later()
    refusals = RefusalLog(every_s=60, call_later=later)
    caplog.set_level(logging.WARNING, "delayq.server")

    def lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.msg == "refused undecodable requests"]

    refusals.note("Schedule", "Schedule: bad")
    assert [r.refused for r in lines()] == [1]  # type: ignore[attr-defined]
    assert [d for d, _ in later.pending] == [60]
    for _ in range(500):
        refusals.note("Stats", "Stats: bad")
    refusals.note("Ack", "Ack: bad")
    assert len(lines()) == 1, "within the interval: counted, not logged"
    later.fire()
    last = lines()[-1]
    assert (last.refused, last.by_method, last.last) == (  # type: ignore[attr-defined]
        501,
        {"Stats": 500, "Ack": 1},
        "Ack: bad",
    )
    assert not last.exc_info, "never a traceback"
    later.fire()  # a quiet interval: nothing to say, and the next refusal is logged at once
    assert len(lines()) == 2 and not later.pending
    refusals.note("Lookup", "Lookup: bad")
    assert len(lines()) == 3
    refusals.note("Lookup", "Lookup: bad")
    refusals.flush()  # at shutdown
    assert [r.refused for r in lines()] == [1, 501, 1, 1]  # type: ignore[attr-defined]
    assert refusals.total == 504
