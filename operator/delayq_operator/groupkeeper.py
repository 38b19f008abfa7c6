"""A topic's declared consumer groups kept on its shards (I/O: the typed client,
over the topic's public port; run by kopf handlers, ``handlers``).

``keep_groups`` is the handlers' round: it parses the topic's groups, finds the
lowest shard whose recorded master is in office (``topicaddress.public_target``:
the operator must run where the pods' DNS names resolve, in the cluster), runs
``keep``, posts an event per
policy set (``GroupPolicySet``) or failed (``GroupPolicyFailed``, Warning) and
writes ``status.groups``; kopf's ``TemporaryError`` retries it in
``GROUPS_RETRY_S`` while no shard serves, the shards cannot be read or a set
failed.

``keep`` is one round: it reads every group the shards know (``Client.groups``,
every shard's master; in-flight counts from ``Client.stats``), lets
``groupplan.plan`` say what to set, sets it (``Client.set_group_policy``: one
record on every shard, durable and replicated) and returns the round's
``status.groups`` (``groupplan.group_status``). A client error while reading
(a shard not serving yet) raises ``ClientError``; one while setting a group is
that group's ``failures`` entry, the others are set all the same.

``to_client``/``from_client`` map the operator's ``groups.Policy`` onto the
client's ``GroupPolicy`` and back (the same fields; a push group's
``pushspec.PushSpec`` is the client's ``PushTarget``, its Secret's name and key
the ``secret_ref``: no secret passes here). A group the shards hold
differently (``disagreeing``), or that not every shard of the map knows, is
observed with no policy: the round sets it again, which mends it, paused if
any shard's stats has it paused (unless the spec says ``paused: false``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from delayq.client import Backoff as ClientBackoff
from delayq.client import (
    BackoffKind,
    Client,
    ClientError,
    GroupInfo,
    GroupPolicy,
    Jitter,
    PushTarget,
    Stats,
)
from delayq.tls import TlsConfig

from .groupplan import Observed, group_status, managed_groups, plan
from .groups import DEFAULT_MAX_ATTEMPTS, Backoff, GroupSpec, Policy, describe, parse_groups
from .memo import Memo
from .pushspec import PushSpec, header_pairs
from .spec import SpecError, parse_spec
from .statusupdate import StatusUpdate
from .topicaddress import public_target

__all__ = [
    "GROUPS_EVERY_S",
    "GROUPS_RETRY_S",
    "Round",
    "from_client",
    "keep",
    "keep_groups",
    "observed",
    "to_client",
]

TIMEOUT_S = 5.0
"""Each call's deadline (one round runs in a kopf handler thread)."""
GROUPS_EVERY_S = 30.0
"""How often a topic's declared groups are checked on its shards (drift, in flight)."""
GROUPS_RETRY_S = 10.0
"""How soon a round that could not read the shards, or set a group, is retried."""


@dataclass(frozen=True, kw_only=True)
class Round:
    """What one round did: the policies it set (or tried to), those that failed
    (group -> why) and ``status.groups`` after it."""

    sets: tuple[tuple[str, Policy], ...] = ()
    failures: Mapping[str, str] = field(default_factory=dict)
    status: tuple[dict[str, Any], ...] = ()


def to_client(p: Policy) -> GroupPolicy:
    b = p.backoff
    return GroupPolicy(
        max_attempts=p.max_attempts,
        backoff=ClientBackoff(
            kind=BackoffKind(b.kind),
            initial_ms=b.initial_ms,
            multiplier=b.multiplier,
            max_ms=b.max_ms,
            jitter=Jitter(b.jitter),
        ),
        rate_per_s=p.rate_per_s,
        burst=p.burst,
        max_in_flight=p.max_in_flight,
        paused=p.paused,
        push=None if p.push is None else _push_to_client(p.push),
    )


def _push_to_client(p: PushSpec) -> PushTarget:
    return PushTarget(
        url=p.url,
        method=p.method,
        headers=dict(p.headers),
        timeout_ms=p.timeout_ms,
        ca_bundle=p.ca_bundle,
        secret_ref=p.secret_ref,
    )


def _push_from_client(t: PushTarget) -> PushSpec:
    name, _, key = t.secret_ref.partition("/")
    return PushSpec(
        url=t.url,
        method=t.method,
        headers=header_pairs(t.headers),
        timeout_ms=t.timeout_ms,
        ca_bundle=t.ca_bundle,
        secret_name=name,
        secret_key=key,
    )


def from_client(p: GroupPolicy) -> Policy:
    """``p`` as the operator's (the shards always answer ``max_attempts``; None,
    the server's default, is ``DEFAULT_MAX_ATTEMPTS``)."""
    b = p.backoff
    return Policy(
        max_attempts=DEFAULT_MAX_ATTEMPTS if p.max_attempts is None else p.max_attempts,
        backoff=Backoff(
            kind=b.kind.value,
            initial_ms=b.initial_ms,
            multiplier=b.multiplier,
            max_ms=b.max_ms,
            jitter=b.jitter.value,
        ),
        rate_per_s=p.rate_per_s,
        burst=p.burst,
        max_in_flight=p.max_in_flight,
        paused=p.paused,
        push=None if p.push is None else _push_from_client(p.push),
    )


def observed(
    topic: str, infos: Sequence[GroupInfo], shards: int, stats: Stats | None
) -> dict[str, Observed]:
    """``topic``'s groups as the ``shards`` shards of the map hold them, with their
    in-flight counts summed over the shards' ``stats`` and whether any shard's
    stats has them paused."""
    in_flight: dict[str, int] = {}
    paused: set[str] = set()
    for shard in stats.shards if stats is not None else ():
        for t in shard.topics:
            if t.topic == topic:
                for g in t.groups:
                    in_flight[g.group] = in_flight.get(g.group, 0) + g.in_flight
                    if g.paused:
                        paused.add(g.group)
    out = {}
    for info in infos:
        if info.topic != topic:
            continue
        agreed = not info.disagreeing and len(info.shards) >= shards
        out[info.group] = Observed(
            name=info.group,
            policy=from_client(info.policy) if agreed else None,
            explicit=info.explicit,
            in_flight=in_flight.get(info.group, 0),
            paused_on_a_shard=info.group in paused,
        )
    return out


def keep(
    address: str,
    tls: TlsConfig | None,
    topic: str,
    declared: Sequence[GroupSpec],
    managed: frozenset[str],
) -> Round:
    """One round on ``topic``'s shards, through the node at ``address``. Raises
    ``ClientError`` when the shards cannot be read."""
    with Client(address, tls=tls, timeout_s=TIMEOUT_S) as client:
        shards = client.refresh_route().count
        # (every topic's stats: a topic no message was scheduled to yet is unknown
        # to the shards, its Stats NOT_FOUND, while its groups may be set)
        seen = observed(topic, client.groups(topic), shards, client.stats())
        sets = plan(declared, managed, seen)
        failures: dict[str, str] = {}
        for group, policy in sets:
            try:
                client.set_group_policy(topic, group, to_client(policy))
            except ClientError as exc:
                failures[group] = str(exc)
    entries = group_status(declared, seen, sets, failures)
    return Round(sets=tuple(sets), failures=failures, status=tuple(entries))


def keep_groups(
    ours: Memo,
    body: kopf.Body,
    plain: dict[str, Any],
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    """Set the declared consumer groups' policies on every shard (``groupkeeper``),
    groups removed from the spec back to the defaults; write ``status.groups``.
    ``plain``: ``body`` as plain values. Raises kopf's TemporaryError while the
    shards cannot be read or a set failed."""
    namespace, name = plain["metadata"]["namespace"], plain["metadata"]["name"]
    if plain["metadata"].get("deletionTimestamp"):
        return
    try:
        spec = parse_spec(plain, ours.settings.topic_defaults)
        declared = parse_groups(plain)
    except SpecError as e:
        raise kopf.PermanentError(str(e)) from e  # (the reconcile handler reports it)
    managed = managed_groups(plain.get("status"))
    if not declared and not managed:
        return
    target = public_target(ours, plain, spec)
    if target is None:
        raise kopf.TemporaryError("no shard serves yet; trying again", delay=GROUPS_RETRY_S)
    try:
        done = keep(target.address, target.tls, name, declared, managed)
    except ClientError as e:
        why = f"consumer groups: the shards cannot be read ({e}); trying again"
        raise kopf.TemporaryError(why, delay=GROUPS_RETRY_S) from e
    for group, policy in done.sets:
        if group not in done.failures:
            kopf.info(body, reason="GroupPolicySet", message=f"{group}: {describe(policy)}")
    for group, why in done.failures.items():
        kopf.warn(body, reason="GroupPolicyFailed", message=f"{group}: {why}")
    ours.status.write(namespace, name, StatusUpdate(groups=done.status))
    logger.debug(
        "groups of %s/%s: %d set, %d failed", namespace, name, len(done.sets), len(done.failures)
    )
    if done.failures:
        raise kopf.TemporaryError(
            f"consumer groups not set: {', '.join(sorted(done.failures))}; trying again",
            delay=GROUPS_RETRY_S,
        )
