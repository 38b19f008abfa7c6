"""The delivery policies of one shard's consumer groups (``GroupPolicies``): the
ones set (durable as POLICY records, ``formats.grouppolicy``, and in the
checkpoint), the defaults of the others from the server's settings, what this
shard enforces of each (``share`` over the topic's shards), the token buckets
of rated groups, and the backoff with its jitter drawn from a seeded RNG of its
own (so a run is reproducible; jitter only ever shortens a computed delay),
and the push groups among the ones set (``pushing``; a push group without a
backoff of its own backs off by ``PUSH_BACKOFF``).

A group without a policy set keeps the server's behaviour: attempts from
``settings.delivery_attempts``, at most ``settings.max_inflight_per_group`` in
flight on this shard (not split: it is a shard's flag), redelivered as soon as
its invisibility lapses, no rate, not paused.

Not thread-safe: the engine's lock serialises calls.
"""

from __future__ import annotations

import collections
import random
from dataclasses import replace
from typing import Any

from ..formats.grouppolicy import PolicyDef
from ..settings import EngineSettings
from ..store.checkpoint import Checkpoint
from . import pushtarget
from .groups import Backoff as BackoffFn
from .policy import PUSH_BACKOFF, Backoff, BackoffKind, GroupPolicy, Jitter, TokenBucket, share

__all__ = ["GroupPolicies", "policy_of", "record_of"]

Key = tuple[int, str]
_KINDS = list(BackoffKind)
_JITTERS = list(Jitter)


def record_of(topic_id: int, group: str, p: GroupPolicy) -> PolicyDef:
    """A POLICY record's values of ``p``."""
    b = p.backoff
    return PolicyDef(
        topic_id, group, p.max_attempts, _KINDS.index(b.kind), b.initial_ms, b.multiplier,
        b.max_ms, _JITTERS.index(b.jitter), p.rate_per_s, p.burst, p.max_in_flight, p.paused,
        pushtarget.encode(p.push) if p.push is not None else b"",
    )  # fmt: skip


def policy_of(rec: PolicyDef) -> GroupPolicy:
    """The ``GroupPolicy`` a POLICY record holds (an unknown kind or jitter: the first)."""
    backoff = Backoff(
        kind=_KINDS[rec.backoff_kind] if rec.backoff_kind < len(_KINDS) else _KINDS[0],
        initial_ms=rec.initial_ms,
        multiplier=rec.multiplier,
        max_ms=rec.max_ms,
        jitter=_JITTERS[rec.jitter] if rec.jitter < len(_JITTERS) else _JITTERS[0],
    )
    return GroupPolicy(
        max_attempts=rec.max_attempts,
        backoff=backoff,
        rate_per_s=rec.rate_per_s,
        burst=rec.burst,
        max_in_flight=rec.max_in_flight,
        paused=rec.paused,
        push=pushtarget.decode(rec.push) if rec.push else None,
    )


class GroupPolicies:
    def __init__(self, settings: EngineSettings, seed: int = 0) -> None:
        self._settings = settings
        self.stored: dict[Key, GroupPolicy] = {}
        """The policies set, by (topic id, group)."""
        self.pushing: dict[Key, GroupPolicy] = {}
        """Those of ``stored`` with a push target."""
        self.shards = 1
        """How many shards the topics span (``set_shards``)."""
        self._buckets: dict[Key, TokenBucket] = {}
        self._defaults: dict[str, GroupPolicy] = {}
        self._enforced: dict[str, GroupPolicy] = {}
        self._rng = random.Random(seed)
        self.throttled: collections.Counter[Key] = collections.Counter()
        """Receive looks the group's rate cut short or refused (something was ready),
        per group."""

    def default(self, group: str) -> GroupPolicy:
        """The policy of a group none was set for, topic-wide: the server's settings'
        attempts, ``max_in_flight`` 0 (the settings' per-shard flag, which is no
        topic-wide figure: ``enforced`` fills it in). Made once a group."""
        got = self._defaults.get(group)
        if got is None:
            attempts = self._settings.delivery_attempts.for_group(group)
            got = self._defaults[group] = GroupPolicy(max_attempts=attempts)
        return got

    def _default_enforced(self, group: str) -> GroupPolicy:
        """``default`` as this shard enforces it (made once a group: every receive asks)."""
        got = self._enforced.get(group)
        if got is None:
            got = self._enforced[group] = self._filled(self.default(group))
        return got

    def _filled(self, policy: GroupPolicy) -> GroupPolicy:
        """``policy`` with ``max_in_flight`` filled in (0: the settings')."""
        if policy.max_in_flight:
            return policy
        return replace(policy, max_in_flight=self._settings.max_inflight_per_group)

    def get(self, topic_id: int | None, group: str) -> GroupPolicy:
        """The group's policy, topic-wide: the one set, else the default."""
        got = self.stored.get((topic_id, group)) if topic_id is not None else None
        return got if got is not None else self.default(group)

    def enforced(self, topic_id: int, group: str) -> GroupPolicy:
        """What this shard enforces of the group's policy: its ``share`` of the one
        set, else the default; ``max_in_flight`` filled in (0: the settings')."""
        got = self.stored.get((topic_id, group))
        if got is None:
            return self._default_enforced(group)
        return self._filled(share(got, self.shards))

    def set(self, topic_id: int, group: str, policy: GroupPolicy) -> None:
        """Apply a policy set (or replayed): its rate starts afresh."""
        self.stored[topic_id, group] = policy
        if policy.push is not None:
            self.pushing[topic_id, group] = policy
        else:
            self.pushing.pop((topic_id, group), None)
        self._buckets.pop((topic_id, group), None)

    def apply_record(self, rec: PolicyDef) -> None:
        self.set(rec.topic_id, rec.group, policy_of(rec))

    def set_shards(self, n: int) -> None:
        """The topics span ``n`` shards from now on; rates start afresh."""
        if n != self.shards:
            self.shards = max(1, n)
            self._buckets.clear()

    def bucket(
        self, topic_id: int, group: str, policy: GroupPolicy, now_ms: int
    ) -> TokenBucket | None:
        """The token bucket metering the group's hand-outs (None: no rate)."""
        if not policy.rate_per_s:
            return None
        got = self._buckets.get((topic_id, group))
        if got is None:
            got = self._buckets[topic_id, group] = TokenBucket(
                policy.rate_per_s, policy.burst, now_ms
            )
        return got

    def backoff(self, policy: GroupPolicy) -> BackoffFn | None:
        """The wait before attempt n + 1 of ``policy`` (None: none, redelivered at once;
        a push group's without one of its own: ``PUSH_BACKOFF``)."""
        b = policy.backoff
        if not b.initial_ms:
            if policy.push is None:
                return None
            b = PUSH_BACKOFF
        if b.jitter is Jitter.NONE:
            return b.delay_ms
        draw = self._rng.random
        return lambda failed: b.delay_ms(failed, draw())

    def save_to(self, ckpt: Checkpoint) -> None:
        ckpt.policies = {}
        for (tid, group), p in sorted(self.stored.items()):
            values: dict[str, Any] = record_of(tid, group, p)._asdict()
            del values["topic_id"], values["group"]
            if values["push"]:
                values["push"] = values["push"].decode()
            else:
                del values["push"]  # a pull group: the checkpoint as before push groups
            ckpt.policies.setdefault(str(tid), {})[group] = values

    def restore(self, ckpt: Checkpoint) -> None:
        for tid_text, groups in ckpt.policies.items():
            for group, values in groups.items():
                push = str(values.get("push", "")).encode()
                fields = {k: v for k, v in values.items() if k != "push"}
                self.apply_record(PolicyDef(int(tid_text), group, **fields, push=push))
