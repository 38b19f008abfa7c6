"""A push group's HTTP target and its pusher's figures, as the client sets and
reads them (``GroupPolicy.push``, ``GroupStats.push`` of ``results``): frozen
dataclasses read from the wire's ``PushTarget`` and ``PushStats``.

Invariants: a target read back is the one set (its URL with any credentials and
query: the caller's own), except in Stats, which shows the URL without them and
neither headers nor CA bundle; ``PushStats.target`` is an origin, never holding
credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PushStats", "PushTarget"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PushTarget:
    """A push group's HTTP target: each message is sent to ``url`` (http or https;
    userinfo is sent as Basic auth, never shown) by ``method`` (POST, PUT or PATCH)
    with ``headers``, each request (from its connection to its answer) within
    ``timeout_ms`` (0: the server's 10 s),
    https checked against ``ca_bundle`` (PEM; "": the system's roots), signed by the
    Standard Webhooks scheme with the secrets the server holds under ``secret_ref``
    ("": unsigned)."""

    url: str
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    timeout_ms: int = 0
    ca_bundle: str = ""
    secret_ref: str = ""

    @classmethod
    def of(cls, wire: Any) -> PushTarget:
        """The PushTarget of a wire ``delayq.v1.PushTarget``."""
        return cls(
            url=wire.url,
            method=wire.method or "POST",
            headers=dict(sorted(wire.headers.items(), key=lambda kv: kv[0].lower())),
            timeout_ms=wire.timeout_ms,
            ca_bundle=wire.ca_bundle,
            secret_ref=wire.secret_ref,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PushStats:
    """A push group's pusher on one shard's master: its ``target`` (the origin, no
    credentials), ``state`` (pushing, throttled, backing_off, refused, no_secret),
    requests by outcome (2xx, 429, 503, 4xx, 5xx, timeout, connect, tls,
    refused, other), requests ``in_flight``, ``consecutive_failures``, the last 2xx
    (``last_success_ms``; 0: none), nothing sent before ``not_before_ms`` (0: none),
    2xx whose ack was lost (``acks_lost``: a duplicate follows), request latency and
    first attempts' lateness (ms, bucket bounds)."""

    target: str
    state: str
    requests: Mapping[str, int] = field(hash=False)
    in_flight: int
    consecutive_failures: int
    last_success_ms: int
    not_before_ms: int
    acks_lost: int
    latency_ms_p50: int
    latency_ms_p99: int
    lateness_ms_p50: int
    lateness_ms_p99: int

    @classmethod
    def of(cls, wire: Any) -> PushStats:
        """The PushStats of a wire ``delayq.v1.PushStats``."""
        return cls(
            target=wire.target,
            state=wire.state,
            requests=dict(wire.requests),
            in_flight=wire.in_flight,
            consecutive_failures=wire.consecutive_failures,
            last_success_ms=wire.last_success_ms,
            not_before_ms=wire.not_before_ms,
            acks_lost=wire.acks_lost,
            latency_ms_p50=wire.latency_ms_p50,
            latency_ms_p99=wire.latency_ms_p99,
            lateness_ms_p50=wire.lateness_ms_p50,
            lateness_ms_p99=wire.lateness_ms_p99,
        )
