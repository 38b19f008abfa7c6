"""A DelayTopic's consumer groups (``spec.groups[]``) as the delivery policies the
operator sets on the topic's shards (pure: no cluster, no I/O).

``parse_groups`` reads ``spec.groups`` into ``GroupSpec`` values or raises
``SpecError`` naming the field (``spec.groups[1].backoff.max``); the CRD's
schema refuses the same at the API server. ``GroupSpec.desired`` is the
``Policy`` to set: the shape of ``delivery.policy.GroupPolicy`` (which the
operator may not import), every field explicit, as the server's ``check``
stores it, so a policy read back compares equal to the one set:

- unset ``maxAttempts`` is the server's default, ``DEFAULT_MAX_ATTEMPTS`` (the
  operator passes the pods no flag that changes it; 0 is no limit); unset or 0
  ``maxInFlight`` is 0, the server's default (``max_inflight_per_group``, per
  shard); ``rate`` 0 is no limit; ``burst`` defaults to the rate rounded up (as
  ``check`` fills it);
- a fixed backoff's ``max`` defaults to its ``initial``, an exponential one's
  to ``MAX_BACKOFF_MS``;
- unset ``paused`` leaves the group as the shards have it (a pause by ``delayq
  group pause`` during an incident stays); true or false is enforced;
- ``push`` makes it a push group (``pushspec.PushSpec``: the shard's master
  sends each message to the target); unset, a pull group (a push group whose
  ``push`` is removed goes back to pull).

``DEFAULT_POLICY`` is what a group removed from the spec goes back to (not
paused). The bounds mirror ``delivery.policy``'s ``MAX_*`` (a test checks them,
and the CRD's, against it).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from .pushspec import PushSpec, describe_push, parse_push
from .spec import SpecError, duration_ms

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_POLICY",
    "MAX_ATTEMPTS",
    "MAX_BACKOFF_MS",
    "MAX_GROUP_LEN",
    "MAX_IN_FLIGHT",
    "MAX_MULTIPLIER",
    "MAX_RATE_PER_S",
    "Backoff",
    "GroupSpec",
    "Policy",
    "describe",
    "parse_groups",
]

MAX_ATTEMPTS = 1000
MAX_BACKOFF_MS = 12 * 3_600_000
MAX_MULTIPLIER = 100.0
MAX_RATE_PER_S = 1_000_000.0
MAX_IN_FLIGHT = 10_000_000
MAX_GROUP_LEN = 124
"""``argchecks.MAX_GROUP_LEN``: the dead-letter topic ``dlq.<group>`` is a topic name."""
DEFAULT_MAX_ATTEMPTS = 16
"""The server's ``delivery_attempts`` default (``--max-delivery-attempts``)."""
KINDS = ("fixed", "exponential")
JITTERS = ("none", "full", "equal")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """``delivery.policy.Backoff``'s fields; ``kind`` and ``jitter`` its enums' values."""

    kind: str = "fixed"
    initial_ms: int = 0
    multiplier: float = 2.0
    max_ms: int = 0
    jitter: str = "none"


@dataclass(frozen=True, kw_only=True)
class Policy:
    """``delivery.policy.GroupPolicy``'s fields, topic-wide."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = field(default_factory=Backoff)
    rate_per_s: float = 0.0
    burst: int = 0
    max_in_flight: int = 0
    paused: bool = False
    push: PushSpec | None = None
    """A push group's target (``pushspec``); None: a pull group."""


DEFAULT_POLICY = Policy()


def describe(p: Policy) -> str:
    """A policy in a line, in the spec's words (an event's message)."""
    b = p.backoff
    wait = f"{b.initial_ms}ms" if b.kind == "fixed" else f"{b.initial_ms}ms x{b.multiplier:g}"
    return (
        f"maxAttempts {p.max_attempts}, backoff {b.kind} {wait} max {b.max_ms}ms jitter "
        f"{b.jitter}, rate {p.rate_per_s:g}/s burst {p.burst}, maxInFlight {p.max_in_flight}, "
        f"paused {str(p.paused).lower()}" + (f", {describe_push(p.push)}" if p.push else "")
    )


@dataclass(frozen=True, kw_only=True)
class GroupSpec:
    """One ``spec.groups[]`` entry: its group's policy, and ``pause`` (None: as
    the shards have it)."""

    name: str
    policy: Policy
    pause: bool | None = None

    def desired(self, paused_now: bool) -> Policy:
        """The policy to set, the group being ``paused_now`` on the shards."""
        return replace(self.policy, paused=paused_now if self.pause is None else self.pause)


def _number(
    doc: dict[str, Any], key: str, path: str, most: float, *, least: float = 0, real: bool = False
) -> Any:
    value = doc[key]
    kinds = (int, float) if real else (int,)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not least <= value <= most:
        what = "a number" if real else "an integer"
        raise SpecError(f"{path}.{key}", f"must be {what} in {least:g}..{most:g}, got {value!r}")
    return value


def _choice(doc: dict[str, Any], key: str, path: str, choices: tuple[str, ...]) -> str:
    value = doc.get(key, choices[0])
    if value not in choices:
        raise SpecError(f"{path}.{key}", f"must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _backoff(doc: Any, path: str) -> Backoff:
    if not isinstance(doc, dict):
        raise SpecError(path, f"must be an object, got {doc!r}")
    kind = _choice(doc, "kind", path, KINDS)
    initial = duration_ms(doc["initial"], f"{path}.initial") if "initial" in doc else 0
    top = initial if kind == "fixed" else MAX_BACKOFF_MS
    most = duration_ms(doc["max"], f"{path}.max") if "max" in doc else top
    if most < initial:
        raise SpecError(f"{path}.max", f"is {doc['max']}, below initial {doc['initial']}")
    multiplier = float(
        _number(doc, "multiplier", path, MAX_MULTIPLIER, least=1, real=True)
        if "multiplier" in doc
        else 2.0
    )
    return Backoff(
        kind=kind,
        initial_ms=initial,
        multiplier=multiplier,
        max_ms=most,
        jitter=_choice(doc, "jitter", path, JITTERS),
    )


def _group(doc: Any, path: str) -> GroupSpec:
    if not isinstance(doc, dict):
        raise SpecError(path, f"must be an object, got {doc!r}")
    name = doc.get("name")
    if not isinstance(name, str) or len(name) > MAX_GROUP_LEN or not _NAME.fullmatch(name):
        raise SpecError(
            f"{path}.name",
            f"must be a group name of at most {MAX_GROUP_LEN} letters, digits, '.', '_' "
            f"and '-', starting with a letter or digit, got {name!r}",
        )

    def count(key: str, default: int, most: float) -> int:
        return int(_number(doc, key, path, most)) if key in doc else default

    rate = float(_number(doc, "rate", path, MAX_RATE_PER_S, real=True)) if "rate" in doc else 0.0
    burst = count("burst", 0, MAX_IN_FLIGHT)
    pause = doc.get("paused")
    if pause is not None and not isinstance(pause, bool):
        raise SpecError(f"{path}.paused", f"must be true or false, got {pause!r}")
    policy = Policy(
        max_attempts=count("maxAttempts", DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS),
        backoff=_backoff(doc.get("backoff") or {}, f"{path}.backoff"),
        rate_per_s=rate,
        burst=burst or (max(1, math.ceil(rate)) if rate else 0),
        max_in_flight=count("maxInFlight", 0, MAX_IN_FLIGHT),
        push=parse_push(doc["push"], f"{path}.push") if "push" in doc else None,
    )
    return GroupSpec(name=name, policy=policy, pause=pause)


def parse_groups(body: dict[str, Any]) -> tuple[GroupSpec, ...]:
    """A DelayTopic's ``spec.groups``, in order; SpecError names the bad field
    (a name declared twice too)."""
    docs = (body.get("spec") or {}).get("groups") or []
    if not isinstance(docs, list):
        raise SpecError("spec.groups", f"must be a list, got {docs!r}")
    out: list[GroupSpec] = []
    for i, doc in enumerate(docs):
        group = _group(doc, f"spec.groups[{i}]")
        if any(g.name == group.name for g in out):
            raise SpecError(f"spec.groups[{i}].name", f"{group.name!r} is declared twice")
        out.append(group)
    return tuple(out)
