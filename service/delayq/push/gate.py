"""One push target's gate (pure): how many requests may start now, and its
counters (``TargetGate``).

The window is the caller's limit less the requests in flight, and closes:
- while a ``Retry-After`` holds the target (``hold_ms`` of a 429 or 503): no
  request at all before ``not_before_ms``;
- while the circuit is open: after ``OPEN_AFTER`` consecutive answers of a
  failing class (``answers.FAILURES``: connect, timeout, TLS, refused, 5xx, 503) the
  window is one probe, started no sooner than ``probe_ms(n)`` after the last
  failure (n: 1 + the probes failed since it opened; requests already under way
  when it opened fail as they may, counting no probe: a burst of 200 timeouts
  does not push the next probe to the backoff's longest wait), and none while it
  is in flight; the first 2xx, or any answer a live receiver chose (a 4xx, 429,
  3xx), closes the circuit. So during an outage
  only probes spend attempts, and the untried backlog stays in the ready queue,
  drained in due order once the receiver answers.

Counters: requests by outcome, in flight, consecutive non-2xx answers (what the
"target failing" alert watches), the last 2xx, acks lost, and the histograms of
latency and lateness (counts per bucket of ``LATENCY_BOUNDS_S`` /
``LATENESS_BOUNDS_S``, the last the overflow, and their sums).

Not thread-safe: one pusher's task on the event loop owns it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from .answers import FAILURES, OUTCOMES
from .snapshot import LATENCY_BOUNDS_S, LATENESS_BOUNDS_S, PushSnapshot, PushState

__all__ = ["OPEN_AFTER", "Histogram", "TargetGate"]

OPEN_AFTER = 5
"""Consecutive failures of a target that open its circuit (one probe at a time)."""


class Histogram:
    """Observations counted by bucket (``bounds`` upper bounds, then the overflow)
    and summed. Not thread-safe."""

    __slots__ = ("_bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.total += value


class TargetGate:
    """One target's window and counters; ``probe_ms(n)``: the wait before the
    open circuit's probe after ``n - 1`` failed probes. Not thread-safe."""

    def __init__(self, *, probe_ms: Callable[[int], int], now_ms: int) -> None:
        self._probe_ms = probe_ms
        self.started_ms = now_ms
        self.in_flight = 0
        self.consecutive_failures = 0  # non-2xx answers since the last 2xx
        self._down = 0  # failing-class answers in a row: the circuit's count
        self._last_failure_ms = 0
        self._opened_ms = 0  # when the circuit last opened
        self._probes = 0  # probes failed since
        self.not_before_ms = 0  # a Retry-After's hold: nothing starts before
        self.last_success_ms = 0
        self.last_outcome = ""
        self.acks_lost = 0
        self.requests = dict.fromkeys(OUTCOMES, 0)
        self.latency = Histogram(LATENCY_BOUNDS_S)
        self.lateness = Histogram(LATENESS_BOUNDS_S)

    @property
    def open(self) -> bool:
        """Whether the circuit is open (probes only)."""
        return self._down >= OPEN_AFTER

    def held(self, now_ms: int) -> bool:
        return now_ms < self.not_before_ms

    def window(self, now_ms: int, limit: int) -> int:
        """How many requests may start now, ``limit`` at most in flight."""
        if self.held(now_ms):
            return 0
        if self.open:
            if self.in_flight or now_ms < self._probe_at():
                return 0
            return 1
        return max(0, limit - self.in_flight)

    def wake_ms(self, now_ms: int) -> int:
        """When the window may open again by time alone (``now_ms``: it is not shut
        by time), for a caller that found it shut."""
        if self.held(now_ms):
            return self.not_before_ms
        if self.open and not self.in_flight:
            return max(now_ms, self._probe_at())
        return now_ms

    def _probe_at(self) -> int:
        return self._last_failure_ms + self._probe_ms(self._probes + 1)

    def started(self) -> None:
        """Count a request in flight (from when it is spawned)."""
        self.in_flight += 1

    def unstarted(self) -> None:
        """Undo ``started`` for a request that was never sent (no answer to count)."""
        self.in_flight -= 1

    def answered(self, outcome: str, now_ms: int, latency_s: float, hold_ms: int | None) -> None:
        """Count a request's answer (``outcome``: one of ``OUTCOMES``); ``hold_ms``:
        a Retry-After that holds the whole target."""
        self.in_flight -= 1
        self.requests[outcome] = self.requests.get(outcome, 0) + 1
        self.last_outcome = outcome
        if outcome != "refused":  # none was sent: no latency to tell
            self.latency.observe(latency_s)
        if outcome == "2xx":
            self.consecutive_failures = 0
            self._down = 0
            self.last_success_ms = now_ms
        else:
            self.consecutive_failures += 1
            if outcome in FAILURES:
                self._down += 1
                self._last_failure_ms = now_ms
                if self._down == OPEN_AFTER:
                    self._opened_ms, self._probes = now_ms, 0
                elif self._down > OPEN_AFTER and now_ms - latency_s * 1000 > self._opened_ms:
                    self._probes += 1  # started once open: a probe
            else:  # a live receiver answered: not down
                self._down = 0
        if hold_ms is not None:
            self.not_before_ms = max(self.not_before_ms, now_ms + hold_ms)

    def lost_ack(self, n: int = 1) -> None:
        """Count 2xx answers whose ack the shard refused (a duplicate follows)."""
        self.acks_lost += n

    def late(self, seconds: float) -> None:
        """Count a first attempt's lateness (its start less its due time)."""
        self.lateness.observe(max(0.0, seconds))

    def state(self, now_ms: int) -> PushState:
        """The state the gate alone tells (the pusher's own come first)."""
        if self.last_outcome == "refused":
            return PushState.REFUSED
        if self.held(now_ms):
            return PushState.THROTTLED
        if self.open:
            return PushState.BACKING_OFF
        return PushState.PUSHING

    def snapshot(self, topic: str, group: str, target: str, state: PushState) -> PushSnapshot:
        return PushSnapshot(
            topic=topic,
            group=group,
            target=target,
            state=state,
            requests=dict(self.requests),
            in_flight=self.in_flight,
            consecutive_failures=self.consecutive_failures,
            last_success_ms=self.last_success_ms,
            not_before_ms=self.not_before_ms,
            acks_lost=self.acks_lost,
            latency_counts=tuple(self.latency.counts),
            latency_sum_s=self.latency.total,
            lateness_counts=tuple(self.lateness.counts),
            lateness_sum_s=self.lateness.total,
        )
