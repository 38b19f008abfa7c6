"""A recurring schedule's values (pure): what it fires (``ScheduleSpec`` and its
``MessageTemplate``), where it stands (``ScheduleState``), and the checks of a
spec and of a schedule's name. Every check raises ``InvalidArgument`` naming the
offending field under the caller's prefix ("spec.cron", "spec.time_zone",
"spec.template.headers"); a spec that passes is returned with its cron
expression's spaces normalised. The values are frozen: a change is a new value.

Times are epoch milliseconds; 0 means "none" for ``start_ms``, ``end_ms`` and the
state's times.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..argchecks import MAX_HEADER_BYTES, MAX_HEADERS, MAX_TOPIC_LEN, check_topic, name_problem
from ..errors import InvalidArgument, quote
from .cronexpr import parse_cron
from .zones import zone

__all__ = [
    "DAY_MS",
    "MAX_CATCH_UP_WINDOW_MS",
    "MAX_EVERY_MS",
    "MAX_JITTER_MS",
    "MAX_NAME_LEN",
    "MAX_TEMPLATE_BODY_BYTES",
    "MAX_TEMPLATE_HEADERS",
    "MAX_TIME_MS",
    "MIN_CATCH_UP_WINDOW_MS",
    "MIN_EVERY_MS",
    "RESERVED_PREFIX",
    "SCHEDULE_HEADER",
    "SCHEDULE_TIME_HEADER",
    "CatchUp",
    "MessageTemplate",
    "ScheduleSpec",
    "ScheduleState",
    "check_schedule_name",
    "check_spec",
]

DAY_MS = 86_400_000
MIN_EVERY_MS = 1000
"""The shortest interval: a second, as a cron expression's seconds field."""
MAX_EVERY_MS = 366 * DAY_MS
"""The longest interval: a year (longer rhythms are cron expressions)."""
MAX_JITTER_MS = 3_600_000
"""The most a firing is delayed past its nominal time by jitter: an hour."""
MIN_CATCH_UP_WINDOW_MS = 1000
MAX_CATCH_UP_WINDOW_MS = 7 * DAY_MS
MAX_TIME_MS = 253_370_764_800_000
"""The start of the year 9999: the last time a schedule names (its local time in
any zone, and a day either side, still fits a ``datetime``)."""
MAX_NAME_LEN = MAX_TOPIC_LEN
MAX_TEMPLATE_BODY_BYTES = 64 << 10
"""A template's largest body. The plan message holds it base64-encoded with the
spec, and must stay well within a message's body bound (256 KiB by default)."""
SCHEDULE_HEADER = "delayq-schedule"
"""Set on every firing by the firer: the schedule's name."""
SCHEDULE_TIME_HEADER = "delayq-schedule-time"
"""Set on every firing by the firer: its nominal time, epoch ms, decimal."""
RESERVED_PREFIX = "delayq-"
"""Header names a template may not use: delayq's own (the two above, dedup's...)."""
MAX_TEMPLATE_HEADERS = MAX_HEADERS - 2
"""A message's header count less the two the firer adds."""
_HEADER_OVERHEAD = 6  # a header's encoded length prefixes (formats.headers: u16 + u32)
_FIRER_ROOM = 2 * _HEADER_OVERHEAD + len(SCHEDULE_HEADER) + len(SCHEDULE_TIME_HEADER) + 20
_MAX_TEMPLATE_HEADER_BYTES = MAX_HEADER_BYTES - MAX_NAME_LEN - _FIRER_ROOM
"""A message's header bytes less what the firer adds (the name, a time's digits)."""


class CatchUp(enum.Enum):
    """What a schedule fires of the nominal times it missed (the shard was down, the
    schedule paused): within ``catch_up_window_ms`` of now, nothing (``NONE``), the
    latest (``LATEST``) or all of them in order (``ALL``); older ones never."""

    NONE = "none"
    LATEST = "latest"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class MessageTemplate:
    """The message each firing is: ``topic`` (a client topic), ``body``, ``headers``
    (a read-only copy of what was given). The firing's key is the schedule's name."""

    topic: str
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        # a frozen copy: the caller's dict may change after, this may not
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """What a schedule fires and when: exactly one of ``cron`` (5 fields, or 6 with
    seconds first; local times of ``time_zone``) and ``every_ms`` (an interval of
    elapsed time anchored at ``start_ms``, or at creation without one); firings
    at or after ``start_ms`` and at or before ``end_ms`` (0: unbounded), each
    delayed by a jitter in [0, ``jitter_ms``] fixed by its name and time, missed
    ones caught up by ``catch_up`` within ``catch_up_window_ms`` of now."""

    template: MessageTemplate
    cron: str = ""
    every_ms: int = 0
    time_zone: str = "UTC"
    start_ms: int = 0
    end_ms: int = 0
    jitter_ms: int = 0
    catch_up: CatchUp = CatchUp.LATEST
    catch_up_window_ms: int = 3_600_000


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """Where a schedule stands. ``next_fire_ms``: the nominal time its plan waits
    for (0 when ended); ``last_fire_ms``: the last one fired (0: none yet);
    ``fired`` and ``missed``: nominal times fired and skipped so far (missed ones
    the catch-up policy dropped); ``anchor_ms``: an interval's origin;
    ``created_ms``, ``updated_ms``: when the schedule was made and last changed;
    ``resumed_ms``: when it was last resumed (0: never; the nominal times before
    it, come while it was paused, are the catch-up's: ``catchup.step``)."""

    paused: bool = False
    ended: bool = False
    next_fire_ms: int = 0
    last_fire_ms: int = 0
    fired: int = 0
    missed: int = 0
    anchor_ms: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    resumed_ms: int = 0


def check_schedule_name(name: object, field: str = "name") -> str:
    """A schedule's name: like a topic's, ``[A-Za-z0-9][A-Za-z0-9._-]*``, at most
    ``MAX_NAME_LEN`` characters."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(field, "a schedule's name must be a non-empty string")
    problem = name_problem(name, MAX_NAME_LEN)
    if problem:
        raise InvalidArgument(field, f"schedule name {problem}")
    return name


def check_spec(spec: ScheduleSpec, field: str = "spec") -> ScheduleSpec:
    """``spec`` checked field by field (the first bad one named); returned with
    its cron expression's spaces normalised."""
    if not isinstance(spec, ScheduleSpec):
        raise InvalidArgument(field, "must be a ScheduleSpec")
    _check_template(spec.template, f"{field}.template")
    cron = _check_rhythm(spec, field)
    try:
        zone(spec.time_zone if isinstance(spec.time_zone, str) else "")
    except ValueError as exc:
        raise InvalidArgument(f"{field}.time_zone", str(exc)) from None
    _int_in(spec.start_ms, 0, MAX_TIME_MS, f"{field}.start_ms")
    _int_in(spec.end_ms, 0, MAX_TIME_MS, f"{field}.end_ms")
    if spec.end_ms and spec.end_ms <= spec.start_ms:
        raise InvalidArgument(
            f"{field}.end_ms", f"must be after start_ms ({spec.start_ms}), got {spec.end_ms}"
        )
    most = MAX_JITTER_MS if not spec.every_ms else min(MAX_JITTER_MS, spec.every_ms - 1)
    _int_in(spec.jitter_ms, 0, most, f"{field}.jitter_ms")
    if not isinstance(spec.catch_up, CatchUp):
        raise InvalidArgument(f"{field}.catch_up", "must be none, latest or all")
    _int_in(
        spec.catch_up_window_ms,
        MIN_CATCH_UP_WINDOW_MS,
        MAX_CATCH_UP_WINDOW_MS,
        f"{field}.catch_up_window_ms",
    )
    return spec if cron == spec.cron else dataclasses.replace(spec, cron=cron)


def _check_rhythm(spec: ScheduleSpec, field: str) -> str:
    """The cron expression, normalised ("" for an interval), or the interval checked."""
    if not isinstance(spec.cron, str):
        raise InvalidArgument(f"{field}.cron", "must be a string")
    if bool(spec.cron.strip()) == bool(spec.every_ms):
        raise InvalidArgument(f"{field}.cron", "give exactly one of cron and every_ms")
    if spec.every_ms:
        _int_in(spec.every_ms, MIN_EVERY_MS, MAX_EVERY_MS, f"{field}.every_ms")
        return ""
    try:
        return parse_cron(spec.cron).text
    except ValueError as exc:
        raise InvalidArgument(f"{field}.cron", f"{quote(spec.cron)} {exc}") from None


def _check_template(template: object, field: str) -> None:
    if not isinstance(template, MessageTemplate):
        raise InvalidArgument(field, "must be a MessageTemplate")
    check_topic(template.topic, f"{field}.topic")
    if not isinstance(template.body, bytes):
        raise InvalidArgument(f"{field}.body", "must be bytes")
    if len(template.body) > MAX_TEMPLATE_BODY_BYTES:
        raise InvalidArgument(
            f"{field}.body", f"is {len(template.body)} bytes; at most {MAX_TEMPLATE_BODY_BYTES}"
        )
    _check_headers(template.headers, f"{field}.headers")


def _check_headers(headers: Mapping[str, str], field: str) -> None:
    if len(headers) > MAX_TEMPLATE_HEADERS:
        raise InvalidArgument(field, f"{len(headers)} entries; at most {MAX_TEMPLATE_HEADERS}")
    size = 0
    for k, v in headers.items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise InvalidArgument(field, "keys must be non-empty strings, values strings")
        if k.lower().startswith(RESERVED_PREFIX):
            raise InvalidArgument(field, f"{quote(k)} is delayq's own header ({RESERVED_PREFIX}*)")
        try:
            size += _HEADER_OVERHEAD + len(k.encode()) + len(v.encode())
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8 for it
            raise InvalidArgument(field, f"{quote(k)} is not valid Unicode text") from None
    if size > _MAX_TEMPLATE_HEADER_BYTES:
        raise InvalidArgument(field, f"take {size} bytes; at most {_MAX_TEMPLATE_HEADER_BYTES}")


def _int_in(value: object, low: int, high: int, field: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidArgument(field, f"must be {low}..{high}, got {quote(value)}")
