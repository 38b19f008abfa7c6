"""A push group's target and its pusher's figures on ``delayq.v1``'s wire and back
(pure), for the servicer's group policies and Stats.

Invariants: a target comes in unchecked (``delivery.policy.check`` checks it with
the rest of the policy, naming ``policy.push.<field>``); one goes out as set
(GetGroupPolicy, ListGroups: resharding copies it, the operator compares it), or,
shown in Stats, by its URL's safe form (``pushtarget.safe_url``: no userinfo, no
query) with neither headers nor CA bundle. A pusher's histograms go out as their
p50 and p99 bucket bounds in ms.
"""

from __future__ import annotations

from typing import Any

from ..delivery.pushtarget import PushTarget, safe_url
from ..push.snapshot import LATENCY_BOUNDS_S, LATENESS_BOUNDS_S, PushSnapshot, quantile_ms

__all__ = ["push_stats_wire", "push_target", "push_target_wire"]


def push_target(t: Any) -> PushTarget:
    """A wire ``PushTarget`` as the engine's, unchecked."""
    return PushTarget(
        url=t.url,
        method=t.method,
        headers=tuple(t.headers.items()),
        timeout_ms=t.timeout_ms,
        ca_bundle=t.ca_bundle,
        secret_ref=t.secret_ref,
    )


def push_target_wire(t: PushTarget, into: Any, *, shown: bool = False) -> None:
    """``t`` into the wire ``PushTarget`` ``into`` (in place): as set, or (``shown``)
    by its safe URL, method, timeout and secret's name only."""
    into.url = safe_url(t.url) if shown else t.url
    into.method = t.method
    into.timeout_ms = t.timeout_ms
    into.secret_ref = t.secret_ref
    if not shown:
        into.headers.update(t.headers)
        into.ca_bundle = t.ca_bundle


def push_stats_wire(s: PushSnapshot, into: Any) -> None:
    """A pusher's snapshot into the wire ``PushStats`` ``into`` (in place)."""
    into.target = s.target
    into.state = s.state.value
    into.requests.update({k: v for k, v in s.requests.items() if v})
    into.in_flight = s.in_flight
    into.consecutive_failures = s.consecutive_failures
    into.last_success_ms = s.last_success_ms
    into.not_before_ms = s.not_before_ms
    into.acks_lost = s.acks_lost
    into.latency_ms_p50 = quantile_ms(s.latency_counts, LATENCY_BOUNDS_S, 0.5)
    into.latency_ms_p99 = quantile_ms(s.latency_counts, LATENCY_BOUNDS_S, 0.99)
    into.lateness_ms_p50 = quantile_ms(s.lateness_counts, LATENESS_BOUNDS_S, 0.5)
    into.lateness_ms_p99 = quantile_ms(s.lateness_counts, LATENESS_BOUNDS_S, 0.99)
