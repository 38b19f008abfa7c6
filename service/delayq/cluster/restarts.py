"""When to start a dead node again (pure): an exponential back-off that resets once
a node has stayed up for a while, as a Kubernetes pod's CrashLoopBackOff does.

Invariants: the first delay is ``first_s``; each death within ``stable_s`` of its
start, before the node served, multiplies the last delay by ``factor``, never
beyond ``max_s``; a death after a run of ``stable_s`` or more, or after the node
served (it came up: a kill is not a crash loop), starts again from ``first_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RestartPolicy"]


@dataclass(frozen=True, kw_only=True)
class RestartPolicy:
    first_s: float = 0.5
    factor: float = 2.0
    max_s: float = 30.0
    stable_s: float = 10.0
    """A node up this long before it died is not crash-looping."""

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.max_s:
            raise ValueError(f"first_s: must be in (0, max_s={self.max_s}], got {self.first_s}")
        if self.factor < 1:
            raise ValueError(f"factor: must be >= 1, got {self.factor}")
        if self.stable_s < 0:
            raise ValueError(f"stable_s: must be >= 0, got {self.stable_s}")

    def delay_s(self, last_delay_s: float | None, ran_s: float, *, served: bool = False) -> float:
        """Seconds to wait before the next start of a node that ran ``ran_s`` (and
        ``served`` meanwhile, or not) and waited ``last_delay_s`` before that run
        (None: it never died before)."""
        if last_delay_s is None or served or ran_s >= self.stable_s:
            return self.first_s
        return min(self.max_s, last_delay_s * self.factor)
