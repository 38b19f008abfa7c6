"""What the client's calls answer, typed: enums for outcomes and states, frozen
dataclasses for records.

- ``MessageState``, ``CancelOutcome``, ``AckOutcome``, ``IfExists``, ``KeyOutcome``:
  ``StrEnum``s, one member per value of the wire enum, each valued its lower-case
  name (``"cancelled"``; ``IfExists`` has no member for the wire's unspecified).
- ``ItemError``: one item of a batch that failed (a malformed id or receipt, a
  refused message, or the shard of that item failing while others answered).
- ``Lookup``: one message. ``Stats``: every shard summed, ``shards`` each one's own
  (``ShardStats``, with the ``NodeStats`` of the node that answered).
- ``GroupPolicy`` (with its ``Backoff``, ``BackoffKind``, ``Jitter``): a consumer
  group's delivery policy on a topic, as the client sets and reads it; ``GroupInfo``:
  a group as the shards know it (``Client.groups``); ``GroupStats``: its delivery on
  one shard (``TopicStats.groups``); ``PushTarget``: a push group's HTTP target
  (``GroupPolicy.push``); ``PushStats``: its pusher on a shard's master.

Invariants: records are frozen dataclasses read by attribute; sequences in them
are tuples. ``dataclasses.asdict`` turns one into plain data for JSON (the enums
encode as their values; a ``Lookup``'s ``body`` stays bytes).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from ..v1 import delayq_pb2 as pb

__all__ = [
    "AckOutcome",
    "Backoff",
    "BackoffKind",
    "CancelOutcome",
    "DueBucket",
    "GroupInfo",
    "GroupPolicy",
    "GroupStats",
    "IfExists",
    "ItemError",
    "Jitter",
    "KeyLookups",
    "KeyOutcome",
    "Lookup",
    "MessageState",
    "NodeStats",
    "PushStats",
    "PushTarget",
    "ShardStats",
    "Stats",
    "TopicStats",
]


T = TypeVar("T")


class MessageState(enum.StrEnum):
    """Where a message is: ``pending`` (waiting for its time), ``delivered``,
    ``cancelled``, or ``rescheduled`` (replaced by a new id)."""

    UNSPECIFIED = "unspecified"
    PENDING = "pending"
    CANCELLED = "cancelled"
    DELIVERED = "delivered"
    RESCHEDULED = "rescheduled"


class CancelOutcome(enum.StrEnum):
    UNSPECIFIED = "unspecified"
    CANCELLED = "cancelled"
    NOT_FOUND = "not_found"
    ALREADY_DELIVERED = "already_delivered"
    ALREADY_CANCELLED = "already_cancelled"


class AckOutcome(enum.StrEnum):
    """An ack's (or change of invisibility's) answer per receipt: ``stale`` is an
    earlier attempt's receipt; ``invalid_receipt`` one this shard did not hand out
    to this group (nothing is acked)."""

    UNSPECIFIED = "unspecified"
    ACKED = "acked"
    ALREADY_ACKED = "already_acked"
    STALE = "stale"
    NOT_FOUND = "not_found"
    INVALID_RECEIPT = "invalid_receipt"


class IfExists(enum.StrEnum):
    """What a keyed schedule does when a pending message of its topic has its key
    (or had it within its dedup window): ``reject`` (nothing stored; raises
    ``AlreadyExists`` naming the message that stands), ``keep`` (nothing stored; that
    message's id answered, ``KeyOutcome.KEPT``) or ``replace`` (the key's pending
    messages cancelled and this one stored, atomically). Not given: no check."""

    REJECT = "reject"
    KEEP = "keep"
    REPLACE = "replace"


class KeyOutcome(enum.StrEnum):
    """What a schedule's key did: ``new`` (stored), ``exists`` (``reject`` found the
    key taken), ``kept`` (``keep`` found it taken: the id is the existing message's),
    ``replaced`` (``replace`` cancelled the key's pending messages and stored this)."""

    NEW = "new"
    EXISTS = "exists"
    KEPT = "kept"
    REPLACED = "replaced"


class BackoffKind(enum.StrEnum):
    """How a group's wait between attempts grows: ``fixed`` (``initial_ms`` each
    time) or ``exponential`` (times ``multiplier`` per failed attempt, at most
    ``max_ms``)."""

    FIXED = "fixed"
    EXPONENTIAL = "exponential"


class Jitter(enum.StrEnum):
    """How a backoff's wait is spread: ``none``; ``full`` (uniform in [0, wait]);
    ``equal`` (wait / 2 plus uniform in [0, wait / 2])."""

    NONE = "none"
    FULL = "full"
    EQUAL = "equal"


def _by_number(enum_type: Any, wire: Any, prefix: str) -> tuple[Any, ...]:
    """``enum_type``'s members indexed by their wire number (the proto enum ``wire``)."""
    names = {v.number: v.name.removeprefix(prefix).lower() for v in wire.DESCRIPTOR.values}
    return tuple(enum_type(names[n]) for n in range(max(names) + 1))


STATE_BY_NUMBER: tuple[MessageState, ...] = _by_number(
    MessageState, pb.MessageState, "MESSAGE_STATE_"
)
CANCEL_BY_NUMBER: tuple[CancelOutcome, ...] = _by_number(
    CancelOutcome, pb.CancelOutcome, "CANCEL_OUTCOME_"
)
ACK_BY_NUMBER: tuple[AckOutcome, ...] = _by_number(AckOutcome, pb.AckOutcome, "ACK_OUTCOME_")
KIND_BY_NUMBER: tuple[BackoffKind, ...] = _by_number(BackoffKind, pb.BackoffKind, "BACKOFF_KIND_")
JITTER_BY_NUMBER: tuple[Jitter, ...] = _by_number(Jitter, pb.Jitter, "JITTER_")
KEY_OUTCOME_BY_NUMBER: tuple[KeyOutcome, ...] = _by_number(
    KeyOutcome, pb.KeyOutcome, "KEY_OUTCOME_"
)
IF_EXISTS_NUMBER: dict[str, int] = {
    IfExists(v.name.removeprefix("IF_EXISTS_").lower()): v.number
    for v in pb.IfExists.DESCRIPTOR.values
    if v.number
}
"""The wire number of each ``IfExists``, by member or its text (the wire's 0, unspecified,
is no check)."""


@dataclass(frozen=True, slots=True)
class ItemError:
    """One item of a batch that failed: ``code`` is the gRPC status number (as
    ``google.rpc.Code``), ``field`` the offending field when the server named one."""

    code: int
    message: str
    field: str = ""
    retry_after_ms: int = 0

    @property
    def status(self) -> grpc.StatusCode:
        for s in grpc.StatusCode:
            if s.value[0] == self.code:
                return s
        return grpc.StatusCode.UNKNOWN

    def __str__(self) -> str:
        """Its one-line form, ``error: <message>`` (as the CLI prints it in place
        of an outcome)."""
        return f"error: {self.message}"

    @classmethod
    def of(cls, wire: Any) -> ItemError:
        """The ItemError of a wire ``delayq.v1.ItemError``."""
        return cls(wire.code, wire.message, wire.field, wire.retry_after_ms)


@dataclass(frozen=True, slots=True)
class Lookup:
    """One message, as its shard knows it."""

    id: str
    state: MessageState
    topic: str
    deliver_at_ms: int
    accepted_at_ms: int
    key: str
    headers: Mapping[str, str] = field(hash=False)
    body: bytes


class KeyLookups(list[Lookup]):
    """``lookup_key``'s answer: the pending messages of a key, oldest first, at
    most the oldest 1000 (the server's bound); ``total``: how many the key has
    (all of them, exact)."""

    def __init__(self, found: Iterable[Lookup], total: int) -> None:
        super().__init__(found)
        self.total = total


@dataclass(frozen=True, slots=True)
class DueBucket:
    """``count`` pending messages due within ``within_ms`` (0: overdue; -1: later)."""

    within_ms: int
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """The wait before attempt n + 1 once attempt n failed (its invisibility ran
    out, or it was nacked): ``initial_ms`` after the first failure, then
    (exponential) times ``multiplier`` per failure, at most ``max_ms``; spread by
    ``jitter``, never above the wait computed."""

    kind: BackoffKind = BackoffKind.FIXED
    initial_ms: int = 0
    multiplier: float = 2.0
    max_ms: int = 0
    jitter: Jitter = Jitter.NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class PushTarget:
    """A push group's HTTP target: each message is sent to ``url`` (http or https;
    userinfo is sent as Basic auth, never shown) by ``method`` (POST, PUT or PATCH)
    with ``headers``, the whole request within ``timeout_ms`` (0: the server's 10 s),
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
    credentials), ``state`` (pushing, throttled, backing_off, refused, no_secret,
    stopped), requests by outcome (2xx, 429, 503, 4xx, 5xx, timeout, connect, tls,
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


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupPolicy:
    """A consumer group's delivery policy on a topic. ``max_attempts``: deliveries
    before its dead-letter topic (0: unlimited; None: the server's default for the
    group, which the server stores and answers); ``rate_per_s`` and ``burst``:
    hand-outs per second (a token bucket; 0: no limit; a burst of 0: the rate
    rounded up); ``max_in_flight``: handed out and not settled (0: the server's
    default); ``paused``: nothing handed out; ``push``: None for a pull group (its
    consumers receive), else the HTTP target the shards' masters send each message
    to. Limits are the group's over the whole topic, each shard enforcing its even
    share."""

    max_attempts: int | None = None
    backoff: Backoff = field(default_factory=Backoff)
    rate_per_s: float = 0.0
    burst: int = 0
    max_in_flight: int = 0
    paused: bool = False
    push: PushTarget | None = None

    @classmethod
    def of(cls, wire: Any) -> GroupPolicy:
        """The GroupPolicy of a wire ``delayq.v1.GroupPolicy``: ValueError for an
        enum value this client does not know (never read as a default)."""
        b = wire.backoff
        return cls(
            max_attempts=wire.max_attempts if wire.HasField("max_attempts") else None,
            backoff=Backoff(
                kind=_known(KIND_BY_NUMBER, b.kind, "backoff kind"),
                initial_ms=b.initial_ms,
                multiplier=b.multiplier,
                max_ms=b.max_ms,
                jitter=_known(JITTER_BY_NUMBER, b.jitter, "jitter"),
            ),
            rate_per_s=wire.rate_per_s,
            burst=wire.burst,
            max_in_flight=wire.max_in_flight,
            paused=wire.paused,
            push=PushTarget.of(wire.push) if wire.HasField("push") else None,
        )


def _known(by_number: tuple[T, ...], number: int, name: str) -> T:
    if not 0 <= number < len(by_number):
        raise ValueError(f"the server answered {name} {number}, unknown to this client")
    return by_number[number]


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group of a topic as the shards know it (``Client.groups``): its
    ``policy`` (the shards' when they agree, else the lowest shard's), whether it was
    ``explicit``ly set (else the server's defaults), the ``shards`` that know it, and
    those whose policy differs from ``policy`` (``disagreeing``: a shard that missed a
    set, or was added since; setting the policy again mends it)."""

    topic: str
    group: str
    policy: GroupPolicy
    explicit: bool
    shards: tuple[int, ...]
    disagreeing: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Where a consumer group's delivery stands on one shard: the ``policy`` in force
    (topic-wide; ``explicit``: set, else the server's defaults), whether it is
    ``paused``, messages ``in_flight`` against this shard's ``in_flight_limit`` (its
    share; 0: none), those ``waiting`` out their backoff, handed-out messages by
    attempt (``attempts``: a bucket's lowest attempt, 1, 2, 3, 4 or 8 -> count), when
    the soonest retry may go (``next_retry_at_ms``; 0: none), how many receives
    the group's rate cut short (``throttled``) and how many retries its backoff
    scheduled, a lapse or a nack (``retries``; both since the shard opened); a push
    group's pusher when this shard's master pushes it (``push``; else None). The
    policy's push target is shown by its URL without credentials or query, with
    neither headers nor CA bundle (``group_policy`` reads it as set)."""

    group: str
    policy: GroupPolicy
    explicit: bool
    paused: bool
    in_flight: int
    in_flight_limit: int
    waiting: int
    attempts: Mapping[int, int] = field(hash=False)
    next_retry_at_ms: int
    throttled: int
    retries: int
    push: PushStats | None = None


@dataclass(frozen=True, slots=True)
class TopicStats:
    topic: str
    pending: int
    delivered: int
    cancelled: int
    group_backlog: Mapping[str, int] = field(hash=False)
    """Per consumer group: messages delivered and not yet acked."""
    due: tuple[DueBucket, ...]
    group_dead_lettered: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Per consumer group: messages sent to its dead-letter topic (``dlq.<group>``)
    since each shard opened."""
    groups: tuple[GroupStats, ...] = ()
    """Each consumer group's delivery, by name: one shard's (``ShardStats``); in the
    summed ``Stats``, none (each shard's is under ``Stats.shards``)."""


@dataclass(frozen=True, slots=True)
class NodeStats:
    """The node that answered a shard's Stats."""

    shard: int
    epoch: int
    role: str
    commitlog_end: int
    topology_epoch: int
    address: str


@dataclass(frozen=True, slots=True)
class ScheduleStats:
    """Recurring schedules: how many a shard holds (paused and ended ones included),
    the nominal times its firer fired and those it missed and skipped under their
    catch-up policy (since its master's process started), and how late a firing
    was written after its nominal time (ms, bucket bounds; 0: written ahead). In
    the summed ``Stats``: counts summed, lateness the worst shard's."""

    schedules: int = 0
    firings: int = 0
    missed: int = 0
    lateness_ms_p50: int = 0
    lateness_ms_p99: int = 0


@dataclass(frozen=True, slots=True)
class ShardStats:
    """One shard's Stats."""

    topics: tuple[TopicStats, ...]
    lateness_ms_p50: int
    lateness_ms_p99: int
    release_lag_ms: int
    node: NodeStats
    schedules: ScheduleStats = ScheduleStats()


@dataclass(frozen=True, slots=True)
class Stats:
    """Every shard's Stats as one: counts, backlogs and due buckets summed per topic,
    lateness and release lag the worst shard's; ``shards``: each shard's own."""

    topics: tuple[TopicStats, ...]
    lateness_ms_p50: int
    lateness_ms_p99: int
    release_lag_ms: int
    shards: tuple[ShardStats, ...] = ()
    schedules: ScheduleStats = ScheduleStats()

    def topic(self, name: str) -> TopicStats | None:
        """The summed stats of topic ``name`` (None: no shard has it)."""
        return next((t for t in self.topics if t.topic == name), None)
