"""RocketMQ clients' sessions: the Settings each is answered on its Telemetry
stream (``answer``, pure) and what the node remembers of it (``Sessions``).

A client opens ``Telemetry`` to every endpoint it routes to and writes its
Settings; it starts only once the server writes Settings back, its own merged
with the server's (a Java client refuses any backoff policy but exponential for
a producer, and sends nothing over ``max_body_size``). Here: a producer gets
exponential back-off (10 ms to 1 s, x2, 3 attempts), ``max_body_size`` = the
node's body limit and ``validate_message_type``; a consumer gets the receive
batch size, long-polling timeout and its redelivery back-off, ``fifo`` false;
both ``metric.on`` false. Settings naming neither publishing nor subscription are
refused BAD_REQUEST. Sessions are keyed by the ``x-mq-client-id`` header and last
while the stream does.

A consumer's back-off is its group's policy (``delivery.policy``) on the first
topic it subscribes to, when one was set there (``retry_policy``): an
exponential backoff as RocketMQ's ``ExponentialBackoff``, a fixed one as a
``CustomizedBackoff`` of that one wait (RocketMQ has no jitter: the server's
own redeliveries keep it), its ``max_attempts`` (0: ``NO_LIMIT``); a PushConsumer
then retries a failed message by it (``ChangeInvisibleDuration`` with that
delay). Without one set: 1 s to 1 min, x2, as many deliveries as the group gets
before its messages are dead-lettered (``EngineSettings.delivery_attempts``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..delivery.policy import BackoffKind, GroupPolicy
from ..settings import AttemptLimits
from .checks import millis
from .status import ok, status
from .v2 import definition_pb2 as rmq

__all__ = [
    "CLIENT_ID",
    "LONG_POLLING_S",
    "NO_LIMIT",
    "RECEIVE_BATCH",
    "Session",
    "Sessions",
    "answer",
    "retry_policy",
]

CLIENT_ID = "x-mq-client-id"
RECEIVE_BATCH = 32
LONG_POLLING_S = 20
NO_LIMIT = 2**31 - 1
"""The attempts a consumer is told for a group without a limit (the field's largest)."""


def _backoff(attempts: int, initial_ms: int, max_ms: int) -> rmq.RetryPolicy:
    policy = rmq.RetryPolicy(max_attempts=attempts)
    e = policy.exponential_backoff
    e.initial.FromMilliseconds(initial_ms)
    e.max.FromMilliseconds(max_ms)
    e.multiplier = 2.0
    return policy


def retry_policy(policy: GroupPolicy) -> rmq.RetryPolicy:
    """A group's delivery policy as RocketMQ's ``RetryPolicy``: exponential as
    ``ExponentialBackoff``, fixed as a ``CustomizedBackoff`` of its one wait."""
    b = policy.backoff
    out = rmq.RetryPolicy(max_attempts=policy.max_attempts or NO_LIMIT)
    if b.kind is BackoffKind.EXPONENTIAL:
        e = out.exponential_backoff
        e.initial.FromMilliseconds(b.initial_ms)
        e.max.FromMilliseconds(b.max_ms)
        e.multiplier = b.multiplier
    else:
        out.customized_backoff.next.add().FromMilliseconds(b.initial_ms)
    return out


def answer(
    client: rmq.Settings,
    max_body_bytes: int,
    attempts: AttemptLimits,
    policy: GroupPolicy | None = None,
) -> tuple[rmq.Settings, rmq.Status]:
    """The Settings to write back to ``client``'s, and their status; ``policy``: the
    consumer's group policy set on its first topic (None: none set)."""
    out = rmq.Settings()
    out.CopyFrom(client)
    kind = client.WhichOneof("pub_sub")
    if kind is None:
        return out, status(
            rmq.BAD_REQUEST, "settings: give publishing (a producer) or subscription (a consumer)"
        )
    if kind == "publishing":
        out.backoff_policy.CopyFrom(_backoff(3, 10, 1000))
        out.publishing.max_body_size = max_body_bytes
        out.publishing.validate_message_type = True
    else:
        if policy is not None:
            out.backoff_policy.CopyFrom(retry_policy(policy))
        else:
            limit = attempts.for_group(client.subscription.group.name) or NO_LIMIT
            out.backoff_policy.CopyFrom(_backoff(limit, 1000, 60_000))
        sub = out.subscription
        sub.receive_batch_size = RECEIVE_BATCH
        sub.long_polling_timeout.FromSeconds(LONG_POLLING_S)
        sub.fifo = False
    out.metric.on = False
    return out, ok()


@dataclass(frozen=True, slots=True)
class Session:
    client_id: str
    settings: rmq.Settings


class Sessions:
    """The Settings of every client with an open Telemetry stream (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_client: dict[str, Session] = {}

    def open(self, client_id: str, settings: rmq.Settings) -> None:
        with self._lock:
            self._by_client[client_id] = Session(client_id, settings)

    def close(self, client_id: str) -> None:
        with self._lock:
            self._by_client.pop(client_id, None)

    def request_timeout_ms(self, client_id: str) -> int | None:
        """The per-call timeout the client's Settings declare (``request_timeout``), if it
        has a session and declared one."""
        with self._lock:
            session = self._by_client.get(client_id)
        if session is None or not session.settings.HasField("request_timeout"):
            return None
        return millis(session.settings.request_timeout, "settings.request_timeout")

    def clients(self) -> list[str]:
        """The client ids with a session now."""
        with self._lock:
            return sorted(self._by_client)
