"""A consumer group's delivery policy (pure: no I/O, no clock reads, no randomness
of its own; callers pass ``now_ms`` and a uniform draw).

``GroupPolicy`` is what a topic's group is set to: ``max_attempts`` (0: no limit;
then the dead-letter topic), the ``backoff`` before each attempt after the first
(after a lapse of invisibility or a negative acknowledgement), ``rate_per_s`` and
``burst`` (a token bucket of hand-outs; 0: no limit), ``max_in_flight`` (handed
out, not yet settled; 0: the server's default), ``paused`` (no hand-outs) and
``push`` (None: a pull group; else the HTTP target the shard's master sends each
message to, ``pushtarget``; a push group without a backoff of its own retries
after ``PUSH_BACKOFF``).
Rates and in-flight limits are the group's over the whole topic: each of the
topic's ``shards`` enforces its even share (``share``).

``check`` refuses a policy with an ``InvalidArgument`` naming the field
(``policy.backoff.max_ms``, ...); ``Backoff.delay_ms`` is the wait before attempt
n + 1; ``TokenBucket`` meters hand-outs.

Invariants of a checked policy: every field within its ``MAX_*``; a backoff's
``max_ms`` at least its ``initial_ms``; ``burst`` at least 1 when a rate is set.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace

from ..argchecks import MAX_INVISIBLE_MS
from ..errors import InvalidArgument
from . import pushtarget
from .pushtarget import PushTarget

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_BACKOFF_MS",
    "MAX_IN_FLIGHT",
    "MAX_MULTIPLIER",
    "MAX_RATE_PER_S",
    "PUSH_BACKOFF",
    "Backoff",
    "BackoffKind",
    "GroupPolicy",
    "Jitter",
    "PushTarget",
    "TokenBucket",
    "check",
    "share",
]

MAX_ATTEMPTS = 1000
MAX_BACKOFF_MS = MAX_INVISIBLE_MS  # 12 h: the longest a message may wait between attempts
MAX_MULTIPLIER = 100.0
MAX_RATE_PER_S = 1_000_000.0
MAX_IN_FLIGHT = 10_000_000


class BackoffKind(enum.Enum):
    FIXED = "fixed"
    EXPONENTIAL = "exponential"


class Jitter(enum.Enum):
    NONE = "none"
    FULL = "full"  # uniform in [0, delay]
    EQUAL = "equal"  # delay / 2 + uniform in [0, delay / 2]


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """The wait before attempt n + 1 once attempt n failed: ``initial_ms`` after the
    first failure, then (exponential) times ``multiplier`` per failure, at most
    ``max_ms``; ``jitter`` spreads it (never above the computed delay)."""

    kind: BackoffKind = BackoffKind.FIXED
    initial_ms: int = 0
    multiplier: float = 2.0
    max_ms: int = 0
    jitter: Jitter = Jitter.NONE

    def delay_ms(self, failed: int, draw: float = 1.0) -> int:
        """The wait after ``failed`` (>= 1) failed attempts; ``draw`` a uniform value
        in [0, 1) for the jitter (unused without)."""
        top = float(max(self.max_ms, self.initial_ms))
        delay = float(self.initial_ms)
        if self.kind is BackoffKind.EXPONENTIAL and failed > 1 and self.multiplier > 1 and delay:
            steps = failed - 1
            # at the top after this many steps: no overflow however many failures
            limit = math.log(top / delay, self.multiplier) if top > delay else 0.0
            delay = top if steps >= limit else delay * self.multiplier**steps
        delay = min(delay, top)
        if self.jitter is Jitter.FULL:
            delay *= draw
        elif self.jitter is Jitter.EQUAL:
            delay = delay / 2 + delay / 2 * draw
        return int(delay)


PUSH_BACKOFF = Backoff(
    kind=BackoffKind.EXPONENTIAL, initial_ms=1000, multiplier=2.0, max_ms=300_000,
    jitter=Jitter.FULL,
)  # fmt: skip
"""A push group's backoff when its own has no ``initial_ms``: no hot retry of a target."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupPolicy:
    """How a topic's group is handed its messages; the defaults are the server's."""

    max_attempts: int = 0
    backoff: Backoff = field(default_factory=Backoff)
    rate_per_s: float = 0.0
    burst: int = 0
    max_in_flight: int = 0
    paused: bool = False
    push: PushTarget | None = None

    def with_paused(self, paused: bool) -> GroupPolicy:
        return replace(self, paused=paused)


def _at_most(value: float, most: float, name: str, least: float = 0) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(name, f"is {value}; a finite number")
    if value < least:
        raise InvalidArgument(name, f"is {value}; {least} or more")
    if value > most:
        raise InvalidArgument(name, f"is {value}; at most {most}")


def check(policy: GroupPolicy, prefix: str = "policy") -> GroupPolicy:
    """``policy`` if every field is within its bounds, with ``burst`` filled in (the
    rate rounded up, at least 1) when a rate is set and the push target normalised
    (``pushtarget.check``); else InvalidArgument naming the first field out of
    bounds (``<prefix>.backoff.initial_ms``, ``<prefix>.push.url``)."""
    _at_most(policy.max_attempts, MAX_ATTEMPTS, f"{prefix}.max_attempts")
    b, bp = policy.backoff, f"{prefix}.backoff"
    _at_most(b.initial_ms, MAX_BACKOFF_MS, f"{bp}.initial_ms")
    _at_most(b.max_ms, MAX_BACKOFF_MS, f"{bp}.max_ms")
    _at_most(b.multiplier, MAX_MULTIPLIER, f"{bp}.multiplier", least=1.0)
    if b.kind is BackoffKind.EXPONENTIAL:
        if b.max_ms < b.initial_ms:
            raise InvalidArgument(f"{bp}.max_ms", f"is {b.max_ms}, below initial_ms {b.initial_ms}")
    elif b.max_ms and b.max_ms < b.initial_ms:
        raise InvalidArgument(f"{bp}.max_ms", f"is {b.max_ms}, below initial_ms {b.initial_ms}")
    _at_most(policy.rate_per_s, MAX_RATE_PER_S, f"{prefix}.rate_per_s")
    _at_most(policy.burst, MAX_IN_FLIGHT, f"{prefix}.burst")
    _at_most(policy.max_in_flight, MAX_IN_FLIGHT, f"{prefix}.max_in_flight")
    if policy.push is not None:
        policy = replace(policy, push=pushtarget.check(policy.push, f"{prefix}.push"))
    if policy.rate_per_s and not policy.burst:
        return replace(policy, burst=max(1, math.ceil(policy.rate_per_s)))
    return policy


def share(policy: GroupPolicy, shards: int) -> GroupPolicy:
    """One shard's part of a topic-wide policy over ``shards`` shards: the rate and
    the in-flight limit split evenly (rounded up, so the topic may get up to
    ``shards - 1`` more in flight, and shards whose queues are uneven less rate
    than the whole: a shard with nothing ready leaves its share unused)."""
    if shards <= 1:
        return policy
    return replace(
        policy,
        rate_per_s=policy.rate_per_s / shards,
        burst=math.ceil(policy.burst / shards) if policy.burst else 0,
        max_in_flight=math.ceil(policy.max_in_flight / shards) if policy.max_in_flight else 0,
    )


class TokenBucket:
    """Hand-outs metered at ``rate_per_s`` with up to ``burst`` at once; starts full.
    A rate of 0 lets everything through."""

    __slots__ = ("_burst", "_last_ms", "_rate", "_tokens")

    def __init__(self, rate_per_s: float, burst: int, now_ms: int) -> None:
        self._rate = rate_per_s / 1000  # tokens per ms
        self._burst = float(max(burst, 1))
        self._tokens = self._burst
        self._last_ms = now_ms

    def _refill(self, now_ms: int) -> None:
        if now_ms > self._last_ms:
            self._tokens = min(self._burst, self._tokens + (now_ms - self._last_ms) * self._rate)
            self._last_ms = now_ms

    def allowed(self, now_ms: int, wanted: int) -> int:
        """How many of ``wanted`` hand-outs may go now (not yet taken: ``take``)."""
        if not self._rate:
            return wanted
        self._refill(now_ms)
        return min(wanted, int(self._tokens))

    def take(self, n: int) -> None:
        """Count ``n`` hand-outs made (after ``allowed`` said they may go)."""
        if self._rate:
            self._tokens -= n

    def next_ms(self, now_ms: int) -> int:
        """When the next hand-out may go (``now_ms`` if one may now)."""
        if not self._rate:
            return now_ms
        self._refill(now_ms)
        if self._tokens >= 1:
            return now_ms
        return now_ms + math.ceil((1 - self._tokens) / self._rate)
