"""The Engine: one shard, in process. The facade the server (and embedders) talk
to, composed of parts over the opened shard; the only place that joins the timer
pipeline (``timers``) and the delivery side (``delivery``).

The parts, each an object with its own state over the one ``shard.OpenShard``
that ``lifecycle.ShardLife`` opens:

- ``accepting.Accepting``: schedule, cancel, reschedule, lookup, by id and by
  key (client input validated at this boundary, ``validation``, ``keychecks``);
- ``delivering.Delivering``: receive, ack, change invisibility, retime,
  dead-letter, the receivable hooks;
- ``grouping.Grouping``: consumer groups' delivery policies, nack, the
  topics' shard count;
- ``scheduling.Scheduling``: recurring schedules (plan messages the release
  stage's firer, ``firing``, fires);
- ``observing.Observing`` (``Engine.observing``): stats, counters, lateness,
  gauges, for the Stats call and metrics;
- ``moving.Moving`` (``Engine.moving``): rebalance, compaction blocks, exports,
  for the admin service's Spark calls;
- ``replicating.Replicating`` (``Engine.replicating``): roles, lease, the log's
  stream, as ``replication`` drives it (``replication.ports.ReplicaEngine``).

``Engine`` keeps the client-facing calls and the lifecycle (start, close,
abandon, checkpoint, pump); the other parts are its attributes, for their users.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

from ..argchecks import RECEIVE_INVISIBLE_MS, RECEIVE_MAX_MESSAGES
from ..clock import Clock, ShardClock
from ..delivery.policy import GroupPolicy
from ..delivery.types import AckOutcome, GroupStats, ReceivedBatch, ReceivedMessage
from ..errors import DelayqError, Forwarded
from ..recurrence.spec import ScheduleSpec
from ..role import Role
from ..settings import EngineSettings
from ..store.checkpoint import Checkpoint
from ..types import (
    BatchOutcome,
    CancelOutcome,
    LookupResult,
    Schedule,
    ScheduleBatch,
    ScheduleOutcome,
    SchedulePage,
    ScheduleRequest,
    TopicStats,
)
from .accepting import Accepting
from .delivering import Delivering
from .grouping import Grouping
from .inspection import Inspection
from .lifecycle import Lifecycle, ShardLife
from .moving import Moving
from .observing import Observing
from .replicating import Replicating
from .scheduling import Scheduling
from .shard import ShardSetup

__all__ = ["Engine", "Lifecycle"]


class Engine:
    """Thread-safe: calls may come from any thread (each part takes the shard's
    lock for its work)."""

    def __init__(
        self, settings: EngineSettings, clock: Clock | None = None, *, background: bool = True
    ) -> None:
        """``background=False``: nothing runs until ``pump()`` is called, which is how
        tests drive years of fake-clock time deterministically."""
        self.settings = settings
        self.clock: Clock = clock or ShardClock()
        self._life = ShardLife(ShardSetup(settings, self.clock, background))
        self._accepting = Accepting(self._life)
        self._delivering = Delivering(self._life, self._accepting.schedule_copies)
        self._grouping = Grouping(self._life)
        self._scheduling = Scheduling(self._life)
        self.observing = Observing(self._life)
        self.moving = Moving(self._life)
        self.replicating = Replicating(self._life)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        """Open (recover) the shard and run its stages; idempotent. ``EngineClosed``
        once closed."""
        self._life.start()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> dict[str, int]:
        """Stop the stages, link what is queued, flush and checkpoint.

        Returns what was left undelivered in memory (it is safe on disk and
        resumes on the next open)."""
        return self._life.close()

    def abandon(self) -> None:
        """Drop the engine as if its process had been killed: no flush, no checkpoint.

        Everything already written stays in the OS page cache, exactly as after
        SIGKILL. For crash tests and tools; the engine is CLOSED afterwards."""
        self._life.abandon()

    @property
    def running(self) -> bool:
        """Opened (recovered) and not closed: calls are taken."""
        return self._life.running

    @property
    def recovery(self) -> dict[str, Any]:
        """What the last open's recovery did (empty before it)."""
        sh = self._life.last
        return sh.state.recovery if sh is not None else {}

    def checkpoint(self) -> Checkpoint:
        """fsync everything and atomically write a checkpoint; then apply retention."""
        return self._life.latest().stages.checkpoint.checkpoint()

    def pump(self) -> None:
        """Run every stage until nothing is left to do at the clock's current time.

        For engines made with ``background=False`` (tests, tools)."""
        with self._life.held() as sh:
            sh.stages.pump()

    def inspect(self) -> Inspection:
        """A look inside the running shard, for tests and tools (see ``inspection``)."""
        sh = self._life.opened()
        return Inspection(sh.state, sh.stages)

    # ------------------------------------------------------------------ the node, for Stats
    @property
    def role(self) -> Role:
        """The node's role now (``Replicating.role``)."""
        return self.replicating.role

    @property
    def epoch(self) -> int:
        """The epoch new records and ids are written in (``Replicating.epoch``)."""
        return self.replicating.epoch

    @property
    def commitlog_end(self) -> int:
        """Bytes of CommitLog written (0 before the engine is open)."""
        return self.replicating.commitlog_end

    def stats(self, topic: str | None = None) -> list[TopicStats]:
        """Per-topic counts and due-time histogram; ``topic`` None: every topic."""
        return self.observing.stats(topic)

    def group_stats(self) -> dict[tuple[str, str], GroupStats]:
        """(topic, group) -> where that consumer group stands on this shard: backlog,
        in flight against its limit, its policy, paused, attempts... (``GroupStats``)."""
        return self.observing.group_stats()

    def lateness(self) -> dict[str, int]:
        """Release lateness so far (p50/p99 as bucket upper bounds, ms) and how far
        the oldest due, unreleased message is behind now (``release_lag_ms``)."""
        return self.observing.lateness()

    # ------------------------------------------------------------------ schedule
    def schedule(self, requests: Sequence[ScheduleRequest]) -> list[ScheduleOutcome]:
        """Schedule a batch; one outcome per request (an id, or a per-item error).

        Raises ``Congested`` (nothing written) when the enqueue queue is full."""
        return self._accepting.schedule(requests)

    def schedule_batch(self, batch: ScheduleBatch) -> BatchOutcome:
        """Schedule many messages given as columns (the bulk fast path): same rules,
        ids and errors as ``schedule``, without an object per message (0 in a time
        column means "not given").

        Raises ``InvalidArgument`` for a malformed batch (columns of different
        lengths, an invalid single topic) and ``Congested`` when the queue is full."""
        return self._accepting.schedule_batch(batch)

    # ------------------------------------------------------------------ by id
    def cancel(self, ids: Sequence[str]) -> list[CancelOutcome | DelayqError]:
        """Cancel messages by id; durable once this returns. One outcome per id (a
        ``Forwarded`` error for one a rebalance moved away: the server passes it on)."""
        return self._accepting.cancel(ids)

    def reschedule(
        self, message_id: str, *, deliver_at_ms: int | None = None, delay_ms: int | None = None
    ) -> ScheduleOutcome:
        """Atomically cancel a pending message and schedule its copy at a new time:
        a crash leaves either the old or the new message pending, never both or
        neither. Returns the new id. Raises NotFound / FailedPrecondition /
        InvalidArgument."""
        return self._accepting.reschedule(
            message_id, deliver_at_ms=deliver_at_ms, delay_ms=delay_ms
        )

    def lookup(self, message_id: str) -> LookupResult:
        """What the message is and holds; an id a rebalance moved here from another
        shard answers with the copy here (its id: the result's ``id``)."""
        return self._accepting.lookup(message_id)

    # ------------------------------------------------------------------ by key
    def lookup_key(self, topic: str, key: str) -> list[LookupResult | Forwarded]:
        """The pending messages of ``topic`` with ``key``, oldest first; one that a
        rebalance under way handed over to a joining shard is ``Forwarded`` (its id
        here and that shard: the server passes it on, ``set_map_shards``). Raises
        ``NotFound("key", ...)`` when there is none, ``InvalidArgument`` for a bad
        topic or key."""
        return self._accepting.lookup_key(topic, key)

    def cancel_keys(
        self, topic: str, keys: Sequence[str], moved: list[tuple[int, Forwarded]] | None = None
    ) -> list[int | DelayqError]:
        """Cancel every pending message of ``topic`` with each key (one CANCELS
        record for the call); durable once this returns. Per key: how many were
        cancelled (0: none pending; the server answers NOT_FOUND for it), or for a
        malformed key its ``InvalidArgument`` naming ``keys[i]`` (the others are
        cancelled all the same; a bad topic refuses the call). Those a
        rebalance under way handed over are not counted: appended to ``moved``
        (key index, ``Forwarded``) when given, for the server to pass on."""
        return self._accepting.cancel_keys(topic, keys, moved)

    def reschedule_key(
        self, topic: str, key: str, *, deliver_at_ms: int | None = None, delay_ms: int | None = None
    ) -> list[ScheduleOutcome | Forwarded]:
        """Reschedule each pending message of ``topic`` with ``key`` (as
        ``reschedule``, each atomically), oldest first: their new ids (one handed
        over, as in ``lookup_key``: ``Forwarded``, left as it is). Raises
        ``NotFound("key", ...)`` when there is none."""
        return self._accepting.reschedule_key(
            topic, key, deliver_at_ms=deliver_at_ms, delay_ms=delay_ms
        )

    def set_map_shards(self, listed: frozenset[int], joining: frozenset[int]) -> None:
        """The shards of the map the server serves by: ``listed`` (active or
        joining: not leaving) and ``joining``. A message this shard released to a
        listed one still holds its key here at calls of a key this shard owns
        (a rebalance under way: the map has not switched; ``timers.bykey``); the key
        indexes keep it whatever its window while its shard is joining. Until told,
        every forward holds."""
        self.moving.set_map_shards(listed, joining)

    def imported(self, ids: Sequence[str]) -> list[bool]:
        """Which of these ids (of other shards) name messages moved here (where a
        call by id is answered: ``Moving.imported``)."""
        return self.moving.imported(ids)

    # ------------------------------------------------------------------ consumers
    def receive(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = RECEIVE_MAX_MESSAGES,
        invisible_ms: int = RECEIVE_INVISIBLE_MS,
        wait_ms: int = 0,
        auto_ack: bool = False,
    ) -> list[ReceivedMessage]:
        """Hand out up to ``max_messages`` deliverable messages to ``group``; wait up to
        ``wait_ms`` for the first one. Unacked messages come back after ``invisible_ms``.
        ``auto_ack``: acked as handed out (at-most-once; no receipts, no redelivery),
        durable once this returns like an ``ack``."""
        return self.receive_batch(
            topic,
            group,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            wait_ms=wait_ms,
            auto_ack=auto_ack,
        ).messages()

    def receive_batch(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = RECEIVE_MAX_MESSAGES,
        invisible_ms: int = RECEIVE_INVISIBLE_MS,
        wait_ms: int = 0,
        auto_ack: bool = False,
    ) -> ReceivedBatch:
        """``receive`` with the messages as columns (no object per message)."""
        return self._delivering.receive_batch(
            topic,
            group,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            wait_ms=wait_ms,
            auto_ack=auto_ack,
        )

    def on_receivable(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook`` whenever messages may have become receivable (after each
        release step and each nack); return a function that removes it. For waiters
        outside the engine's threads, such as an event loop: the hook runs on an
        engine thread with the engine lock held, so it must be quick and must not
        call the engine. Messages coming back after their invisibility are not
        signalled: waiters look again every ``RECEIVE_LOOK_AGAIN_S``, as ``receive`` does."""
        return self._delivering.on_receivable(hook)

    def ack(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """Acknowledge received messages; durable once this returns."""
        return self._delivering.ack(topic, group, receipts)

    def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[AckOutcome | DelayqError]:
        """Move the redelivery time of received messages (0: redeliver now, a nack)."""
        return self._delivering.change_invisibility(topic, group, receipts, invisible_ms)

    def retime(
        self, topic: str, group: str, receipts: Sequence[str], invisible_ms: int
    ) -> list[str | AckOutcome | DelayqError]:
        """``change_invisibility`` that hands back a new receipt for each message it
        re-times (the old receipt is STALE from then on), as RocketMQ's
        ChangeInvisibleDuration does; an outcome for the others."""
        return self._delivering.retime(topic, group, receipts, invisible_ms)

    def dead_letter(
        self, topic: str, group: str, receipts: Sequence[str]
    ) -> list[AckOutcome | DelayqError]:
        """Send received messages to the group's dead-letter topic (``dlq.<group>``)
        now, whatever their attempt: each is ACKED once its copy there is durable and
        the group has acked it, or answered the error that refused its copy. Raises
        what the copies' schedule raises; the messages are then held for
        ``delivering.DEAD_LETTER_HOLD_MS`` and handed out again after."""
        return self._delivering.dead_letter(topic, group, receipts)

    def nack(
        self, topic: str, group: str, receipts: Sequence[str], *, at_least_ms: int = 0
    ) -> list[AckOutcome | DelayqError]:
        """Negative acknowledgements ("failed, try later"): each message is handed out
        again once its group's backoff for the attempt it had, or ``at_least_ms`` when
        longer (a push target's Retry-After), has passed (never earlier; neither: at
        once; its last attempt: the dead-letter topic at once). Same receipt checks and
        outcomes as ``change_invisibility``; durable once this returns."""
        return self._grouping.nack(topic, group, receipts, at_least_ms)

    # ------------------------------------------------------------------ groups' policies
    def set_group_policy(self, topic: str, group: str, policy: GroupPolicy) -> GroupPolicy:
        """Set a consumer group's delivery policy on ``topic`` (topic-wide: this shard
        enforces its share, ``set_topic_shards``): checked (``InvalidArgument`` naming
        ``policy.<field>``), logged (durable and replicated once this returns,
        surviving restarts and failovers), applied at once. Returns it as stored."""
        return self._grouping.set_group_policy(topic, group, policy)

    def group_policy(self, topic: str, group: str) -> GroupPolicy:
        """The group's policy: the one set, else the defaults from the settings."""
        return self._grouping.group_policy(topic, group)

    def pause_group(self, topic: str, group: str, paused: bool) -> GroupPolicy:
        """The group's policy with ``paused`` set, stored as ``set_group_policy`` does
        (read and written under one hold of the lock). A paused group is handed
        nothing; its messages wait and go in due order once resumed."""
        return self._grouping.pause_group(topic, group, paused)

    def group_policies(self, topic: str | None = None) -> list[tuple[str, str, GroupPolicy, bool]]:
        """(topic, group, policy, set explicitly?) of every group this shard knows
        (set or used), by topic and group; ``topic``: that topic's only."""
        return self._grouping.group_policies(topic)

    def push_groups(self) -> list[tuple[str, str, GroupPolicy]]:
        """(topic, group, policy) of the groups set with a push target, by topic and
        group: what a master's pushers serve."""
        return self._grouping.push_groups()

    def set_topic_shards(self, n: int) -> None:
        """How many shards the topics span now (from the shard map the server serves
        by): rate and in-flight limits set are split ``delivery.policy.share``-wise."""
        self._grouping.set_topic_shards(n)

    # ------------------------------------------------------------------ recurring schedules
    def create_schedule(self, name: str, spec: ScheduleSpec) -> Schedule:
        """Store a recurring schedule (its plan message, keyed by ``name``); durable
        once this returns. ``AlreadyExists("name", ...)`` when the name is taken,
        ``InvalidArgument`` naming the field (``name``, ``spec.<field>``)."""
        return self._scheduling.create(name, spec)

    def get_schedule(self, name: str) -> Schedule:
        """The schedule as stored; ``NotFound("name", ...)`` when there is none."""
        return self._scheduling.get(name)

    def list_schedules(self, limit: int = 100, after: str = "") -> SchedulePage:
        """The schedules by name, those named after ``after``, at most ``limit``
        (1..``scheduling.MAX_LIST``); ``next_after`` "" at the end. A pass over the
        shard's keyed messages (``docs/engine.md``)."""
        return self._scheduling.page(limit, after)

    def update_schedule(self, name: str, spec: ScheduleSpec) -> Schedule:
        """Give the schedule a new spec: its next firing recomputed from now, its
        pause and counts kept; firings written ahead and not yet delivered are
        cancelled. ``NotFound`` / ``InvalidArgument`` as ``create_schedule``."""
        return self._scheduling.update(name, spec)

    def pause_schedule(self, name: str) -> Schedule:
        """Stop firing (firings written ahead cancelled) until resumed."""
        return self._scheduling.pause(name)

    def resume_schedule(self, name: str) -> Schedule:
        """Fire again: the nominal times missed while paused go by the schedule's
        catch-up policy (``none``, ``latest``, ``all`` within its window)."""
        return self._scheduling.resume(name)

    def delete_schedule(self, name: str) -> None:
        """Delete the schedule and the firings written ahead; ``NotFound`` if none."""
        self._scheduling.delete(name)

    def next_firings(self, name: str, count: int = 10) -> list[int]:
        """The next ``count`` nominal firing times (epoch ms) after now ([] while
        paused or ended)."""
        return self._scheduling.next_firings(name, count)
