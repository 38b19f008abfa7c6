"""The README's Limits table says what the code enforces: each bound there is the
constant the checks use."""

from __future__ import annotations

import pytest

from delayq.argchecks import (
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    MAX_INVISIBLE_MS,
    MAX_TOPIC_LEN,
    check_lengths,
    check_receive,
)
from delayq.delivery.policy import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_MS,
    MAX_IN_FLIGHT,
    MAX_MULTIPLIER,
    MAX_RATE_PER_S,
)
from delayq.engine.validation import MAX_KEY_BYTES
from delayq.errors import QUOTE_CHARS, InvalidArgument, quote
from delayq.idcodec import TokenError, unpack_token
from delayq.server.admin import MAX_NAME_CHARS, MAX_NODES
from delayq.server.app import MAX_REQUEST_BYTES, request_limit
from delayq.server.calls import MAX_BATCH
from delayq.server.config import ServerSettings, load
from tests.support.servers import ROOT


def limits_table() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Limits", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ")]
    return {cells[0].lstrip("| "): cells[1] for cells in rows[1:]}  # after the heading


def test_the_readme_table_states_the_bounds_the_code_checks() -> None:
    rows = limits_table()
    assert f"1 to {MAX_TOPIC_LEN} characters" in rows["topic, consumer group"]
    assert f"{MAX_KEY_BYTES:,} bytes" in rows["key"]
    assert f"at most {MAX_HEADERS} per message" in rows["headers"]
    assert f"{MAX_HEADER_BYTES >> 10} KiB" in rows["headers"]
    batch = "messages per Schedule, ids per Cancel, receipts per Ack, ChangeInvisibility or Nack"
    assert f"{MAX_BATCH:,}" in rows[batch]
    policy = rows["a group's policy (SetGroupPolicy)"]
    assert f"`max_attempts` 0 to {MAX_ATTEMPTS:,}" in policy
    assert f"0 to {MAX_BACKOFF_MS:,} (12 h)" in policy
    assert f"`backoff.multiplier` 1 to {MAX_MULTIPLIER:g}" in policy
    assert f"`rate_per_s` 0 to {MAX_RATE_PER_S:,.0f}" in policy
    assert f"`max_in_flight` 0 to {MAX_IN_FLIGHT:,}" in policy
    assert f"{MAX_INVISIBLE_MS:,}" in rows["`invisible_ms`"]
    assert f"{MAX_REQUEST_BYTES >> 20} MiB" in rows["a request"]
    admin = rows["admin API: node names, addresses, job names"]
    assert f"{MAX_NAME_CHARS} characters" in admin and f"{MAX_NODES} names" in admin
    section = (ROOT / "README.md").read_text().split("## Limits", 1)[1]
    assert f"at most {QUOTE_CHARS} characters" in section
    assert "1 to 64 characters" in rows["message id, receipt"]
    with pytest.raises(TokenError, match="too long"):
        unpack_token("A" * 65, 0x4D, 3)
    assert "1 to 10,000" in rows["`max_messages` (Receive, Subscribe)"]
    assert "0 to 60,000" in rows["`wait_ms`"]
    check_receive(10_000, MAX_INVISIBLE_MS, 60_000)
    for bad in ((10_001, 1, 0), (1, MAX_INVISIBLE_MS + 1, 0), (1, 1, 60_001)):
        with pytest.raises(InvalidArgument):
            check_receive(*bad)


def test_quote_shows_a_prefix_and_the_length() -> None:
    assert quote("short") == "'short'"
    assert quote("x" * 20_000) == f"{'x' * QUOTE_CHARS!r}... (20000 characters)"
    assert len(quote("\x00" * 10_000)) < 200


def test_lengths_and_counts_name_the_item() -> None:
    check_lengths(["a" * 256], "job", 256)
    with pytest.raises(InvalidArgument, match=r"^job: is 257 characters; at most 256$"):
        check_lengths(["a" * 257], "job", 256)
    with pytest.raises(InvalidArgument, match=r"^insync\[1\]: is 9 characters; at most 8$"):
        check_lengths(["a", "b" * 9], "insync", 8, most=4)
    with pytest.raises(InvalidArgument, match=r"^insync: 5 items; at most 4$"):
        check_lengths(["a"] * 5, "insync", 8, most=4)


def test_the_request_limit_grows_with_the_largest_body() -> None:
    assert request_limit(ServerSettings()) == MAX_REQUEST_BYTES
    big = load({"max_body_bytes": str(100 << 20)}, {})
    assert request_limit(big) == (100 << 20) + (64 << 10)


def test_the_readme_states_the_bounds_of_recurring_schedules() -> None:
    from delayq.recurrence import spec
    from delayq.server.schedulewire import MAX_COUNT, MAX_PAGE

    rows = limits_table()
    row = rows["a recurring schedule (CreateSchedule, UpdateSchedule)"]
    assert spec.MIN_EVERY_MS == 1000 and spec.MAX_EVERY_MS == 366 * spec.DAY_MS
    assert "`every_ms` (1 s to 366 days)" in row
    assert spec.MAX_JITTER_MS == 3_600_000 and "`jitter_ms` 0 to 1 h" in row
    assert (spec.MIN_CATCH_UP_WINDOW_MS, spec.MAX_CATCH_UP_WINDOW_MS) == (1000, 7 * spec.DAY_MS)
    assert "`catch_up_window_ms` 1 s to 7 days" in row
    assert f"body at most {spec.MAX_TEMPLATE_BODY_BYTES >> 10} KiB" in row
    calls = rows["ListSchedules, NextFirings"]
    assert f"`page_size` 0 to {MAX_PAGE:,}" in calls and f"`count` 0 to {MAX_COUNT:,}" in calls
