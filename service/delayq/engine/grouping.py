"""The engine's calls about consumer groups (``Grouping``): their delivery
policies (set, read, pause, list; the push groups), negative acknowledgements
(with a least wait: a push target's Retry-After), and how many shards the
topics span (what each shard enforces of a topic-wide policy).

A policy set is checked (``delivery.policy.check``), logged as a POLICY record
(after a TOPIC record when the topic is new here) from a master in office,
durable (and held by the in-sync replicas) before the call returns, and applied
at once; a resume wakes the receivers waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..argchecks import check_group, check_topic
from ..delivery.policy import GroupPolicy, check
from ..delivery.types import AckOutcome
from ..errors import DelayqError
from ..formats import encode_topic
from .lifecycle import ShardLife

__all__ = ["Grouping"]

_Change = Callable[[GroupPolicy], GroupPolicy]


class Grouping:
    """Thread-safe: each call takes the shard's lock."""

    def __init__(self, life: ShardLife) -> None:
        self._life = life
        self._clock = life.setup.clock

    def set_group_policy(self, topic: str, group: str, policy: GroupPolicy) -> GroupPolicy:
        """See ``Engine.set_group_policy``."""
        check_topic(topic)
        check_group(group)
        checked = check(policy)
        return self._store(topic, group, lambda _: checked)

    def pause_group(self, topic: str, group: str, paused: bool) -> GroupPolicy:
        """See ``Engine.pause_group``."""
        check_topic(topic)
        check_group(group)
        return self._store(topic, group, lambda now: now.with_paused(paused))

    def _store(self, topic: str, group: str, change: _Change) -> GroupPolicy:
        """Log and apply ``change`` of the group's policy, read and written under one
        hold of the lock; durable before it returns."""
        with self._life.held() as sh:
            epoch = sh.admit("policy")
            book, consumers = sh.state.topics, sh.consumers
            tid = book.ids.get(topic)
            prefix = b""
            if tid is None:  # its TOPIC record first, as schedule writes it
                tid = book.next_id()
                prefix = encode_topic(tid, topic)
            policy = change(consumers.policies.get(tid, group))
            end = consumers.set_policy(tid, group, policy, self._clock.now_ms(), prefix)
            if prefix:
                book.define(tid, topic)
            sh.receiving.wake()  # a resume, a higher rate: waiting receivers look again
        sh.acked(end, epoch, "policy")
        return policy

    def group_policy(self, topic: str, group: str) -> GroupPolicy:
        """See ``Engine.group_policy``."""
        check_topic(topic)
        check_group(group)
        with self._life.held() as sh:
            return sh.consumers.policies.get(sh.state.topics.ids.get(topic), group)

    def group_policies(self, topic: str | None = None) -> list[tuple[str, str, GroupPolicy, bool]]:
        """See ``Engine.group_policies``."""
        if topic is not None:
            check_topic(topic)
        with self._life.held() as sh:
            consumers, ids = sh.consumers, sh.state.topics.ids
            names = {tid: name for name, tid in ids.items()}
            out = []
            for tid, groups in consumers.groups.items():
                name = names.get(tid)
                if name is None or (topic is not None and name != topic):
                    continue
                for group in groups:
                    stored = (tid, group) in consumers.policies.stored
                    out.append((name, group, consumers.policies.get(tid, group), stored))
            return sorted(out, key=lambda row: (row[0], row[1]))

    def nack(
        self, topic: str, group: str, receipts: Sequence[str], at_least_ms: int = 0
    ) -> list[AckOutcome | DelayqError]:
        """See ``Engine.nack``."""
        with self._life.held() as sh:
            sh.admit("receipts")
            receiving = sh.receiving
        return receiving.nack(topic, group, receipts, at_least_ms)

    def push_groups(self) -> list[tuple[str, str, GroupPolicy]]:
        """See ``Engine.push_groups``."""
        with self._life.held() as sh:
            names = sh.state.topics.names
            pushing = sh.consumers.policies.pushing.items()
            out = [(names[tid], g, p) for (tid, g), p in pushing if tid in names]
        return sorted(out, key=lambda row: (row[0], row[1]))

    def set_topic_shards(self, n: int) -> None:
        """See ``Engine.set_topic_shards``; kept for the shard's later opens."""
        with self._life.lock:
            self._life.setup.topic_shards = max(1, n)
            if self._life.running:
                policies = self._life.opened().consumers.policies
                policies.set_shards(self._life.setup.topic_shards)
