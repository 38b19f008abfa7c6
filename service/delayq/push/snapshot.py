"""What one push group's pusher reports (pure values): its state (``PushState``),
and a ``PushSnapshot`` of its counters and histograms, read by Stats, the
metrics and ``delayq top``.

Histograms are counts per bucket, not cumulative: ``counts[i]`` holds values
``x`` with ``bounds[i-1] < x <= bounds[i]`` (seconds), the last one those above
the last bound (+Inf), so ``len(counts) == len(bounds) + 1``. ``target`` is the
target's ``origin``: never the URL's credentials, path or query.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from .answers import OUTCOMES  # a request's outcome classes (``requests`` keys)

__all__ = [
    "LATENCY_BOUNDS_S",
    "LATENESS_BOUNDS_S",
    "OUTCOMES",
    "PushSnapshot",
    "PushState",
    "quantile_ms",
]

LATENCY_BOUNDS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""A request's duration, start to answer (or error)."""
LATENESS_BOUNDS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0)
"""A first attempt's start minus the message's due time."""


class PushState(enum.Enum):
    PUSHING = "pushing"  # sending as fast as messages come due
    THROTTLED = "throttled"  # a Retry-After holds the target
    BACKING_OFF = "backing_off"  # the circuit is open: probes only
    REFUSED = "refused"  # the target resolves only to refused addresses
    NO_SECRET = "no_secret"  # its secret_ref does not resolve: nothing sent


@dataclass(frozen=True, slots=True, kw_only=True)
class PushSnapshot:
    """One push group's pusher, on one shard's master, since it started."""

    topic: str
    group: str
    target: str
    state: PushState
    requests: Mapping[str, int]
    """By outcome class (``OUTCOMES``)."""
    in_flight: int
    consecutive_failures: int
    last_success_ms: int
    """The last 2xx (0: none yet)."""
    not_before_ms: int
    """Nothing sent before this (Retry-After, the circuit's probe); 0: none."""
    acks_lost: int
    """2xx whose ack the shard refused (no longer master): a duplicate follows."""
    latency_counts: tuple[int, ...]
    latency_sum_s: float
    lateness_counts: tuple[int, ...]
    lateness_sum_s: float


def quantile_ms(counts: tuple[int, ...], bounds_s: tuple[float, ...], q: float) -> int:
    """The upper bound (ms) of the bucket holding the ``q`` quantile: 0 when empty,
    the last bound for the +Inf bucket."""
    total = sum(counts)
    if not total:
        return 0
    running = 0
    for i, n in enumerate(counts):
        running += n
        if running >= q * total and n:
            return round(bounds_s[min(i, len(bounds_s) - 1)] * 1000)
    return round(bounds_s[-1] * 1000)
