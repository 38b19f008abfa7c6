"""Answers into outcomes and verdicts; Retry-After by RFC 9110 (seconds or an
HTTP-date), bounded, garbage ignored."""

from __future__ import annotations

import email.utils

import pytest

from delayq.push.answers import MAX_RETRY_AFTER_MS, Answer, outcome, retry_after_ms, verdict

NOW_MS = 1_700_000_000_000


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (200, None, "2xx"),
        (204, None, "2xx"),
        (301, None, "other"),
        (404, None, "4xx"),
        (429, None, "429"),
        (500, None, "5xx"),
        (503, None, "503"),
        (None, "timeout", "timeout"),
        (None, "connect", "connect"),
        (None, "tls", "tls"),
        (None, "refused", "refused"),
        (None, "weird", "other"),
    ],
)
def test_outcome_classes(status: int | None, error: str | None, kind: str) -> None:
    assert outcome(Answer(status, None, error, 0.0)) == kind


def test_retry_after_seconds_dates_and_garbage() -> None:
    assert retry_after_ms("5", NOW_MS) == 5000
    assert retry_after_ms(" 0 ", NOW_MS) == 0
    assert retry_after_ms("99999999", NOW_MS) == MAX_RETRY_AFTER_MS
    later = email.utils.formatdate((NOW_MS + 30_000) / 1000, usegmt=True)
    assert retry_after_ms(later, NOW_MS) == 30_000
    earlier = email.utils.formatdate((NOW_MS - 30_000) / 1000, usegmt=True)
    assert retry_after_ms(earlier, NOW_MS) == 0
    for bad in (None, "-5", "soon", "1.5", "", "٣"):
        assert retry_after_ms(bad, NOW_MS) is None, bad


def test_verdicts() -> None:
    assert verdict(Answer(200, None, None, 0.1), NOW_MS).ack
    held = verdict(Answer(429, "5", None, 0.1), NOW_MS)
    assert (held.ack, held.at_least_ms, held.hold_ms) == (False, 5000, 5000)
    assert verdict(Answer(503, "2", None, 0.1), NOW_MS).hold_ms == 2000
    plain = verdict(Answer(429, None, None, 0.1), NOW_MS)  # no Retry-After: the backoff
    assert (plain.ack, plain.at_least_ms, plain.hold_ms) == (False, 0, None)
    assert verdict(Answer(500, "5", None, 0.1), NOW_MS).hold_ms is None  # only 429/503
    assert verdict(Answer(None, None, "timeout", 10.0), NOW_MS).outcome == "timeout"
