"""What a push's answer means (pure): its outcome class, its ``Retry-After`` and
the ``Verdict`` settling the message.

``Answer`` is what ``push.http.TargetClient.send`` reports: an HTTP status, or
none and an ``error`` class (``timeout``, ``connect``, ``tls``, ``refused``:
the egress check, ``other``). ``outcome`` buckets it into one of ``OUTCOMES``
(the metric's label). ``verdict``: a 2xx acknowledges; 429 and 503 wait for
their ``Retry-After`` (delay-seconds or an HTTP-date, RFC 9110 §10.2.3; garbage
or a negative value: none; at most ``MAX_RETRY_AFTER_MS``) both for the message
(its next attempt no sooner) and for the whole target (``hold_ms``); anything
else is a failed attempt left to the group's backoff. Every non-2xx counts an
attempt, so a receiver answering 429 forever ends in the dead-letter topic.
A 3xx is ``other``: redirects are not followed.
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "FAILURES",
    "MAX_RETRY_AFTER_MS",
    "OUTCOMES",
    "Answer",
    "Verdict",
    "outcome",
    "retry_after_ms",
    "verdict",
]

OUTCOMES = ("2xx", "429", "503", "4xx", "5xx", "timeout", "connect", "tls", "refused", "other")
ERRORS = ("timeout", "connect", "tls", "refused", "other")
FAILURES = frozenset({"503", "5xx", "timeout", "connect", "tls", "refused"})
"""Outcomes that say the target is down (the circuit counts them): not a 4xx or a
429, which a live receiver chose to answer."""
MAX_RETRY_AFTER_MS = 3_600_000  # an hour: a receiver cannot park a target for longer


class Answer(NamedTuple):
    """One request's answer: ``status`` (None: no HTTP answer, ``error`` says why),
    the ``Retry-After`` header's text, and how long the request took."""

    status: int | None
    retry_after: str | None
    error: str | None
    latency_s: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """How to settle a pushed message: ``ack``, or nack with its next attempt no
    sooner than ``at_least_ms`` (0: the group's backoff); ``hold_ms``: the target
    sends nothing for that long (a Retry-After), None: no hold."""

    outcome: str
    ack: bool
    at_least_ms: int = 0
    hold_ms: int | None = None


def outcome(answer: Answer) -> str:
    """The outcome class of ``answer``: one of ``OUTCOMES``."""
    s = answer.status
    if s is None:
        return answer.error if answer.error in ERRORS else "other"
    if 200 <= s < 300:
        return "2xx"
    if s in (429, 503):
        return str(s)
    if 400 <= s < 500:
        return "4xx"
    if 500 <= s < 600:
        return "5xx"
    return "other"


def retry_after_ms(value: str | None, now_ms: int) -> int | None:
    """The wait a ``Retry-After`` value asks for, in ms (an HTTP-date in the past:
    0), at most ``MAX_RETRY_AFTER_MS``; None when absent or not one."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        ms = int(text) * 1000
    else:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP-date is GMT; a date without zone is not one
            return None
        ms = max(0, int(when.timestamp() * 1000) - now_ms)
    return min(ms, MAX_RETRY_AFTER_MS)


def verdict(answer: Answer, now_ms: int) -> Verdict:
    """How to settle the message ``answer`` was pushed for."""
    kind = outcome(answer)
    if kind == "2xx":
        return Verdict(kind, True)
    if kind in ("429", "503"):
        wait = retry_after_ms(answer.retry_after, now_ms)
        if wait is not None:
            return Verdict(kind, False, at_least_ms=wait, hold_ms=wait)
    return Verdict(kind, False)
