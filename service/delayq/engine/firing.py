"""The firer (``Firer``): what the release stage hands the due plan messages of
recurring schedules to, instead of delivering them (``timers.stages.release``),
with the shard's lock held.

For each due plan (a pending message of ``planrows.PLANS_TOPIC``) it reads the
plan's record (the schedule: ``recurrence.plans``), decides with pure code
(``recurrence.catchup.step``) which nominal times to fire now and the plan's
next state, and writes in ONE append (``Acceptor.accept``) the firings
(``planrows.firing_row``, firings first) and the plan's next copy, which
replaces the old one (its SCHEDULE record's ``replaces_seq``: the old plan is
RESCHEDULED by it). So the firings and the next plan are atomic: a crash leaves
the old plan (it fires again, and finds the firings of a torn append by their
dedup ids: written once) or the new one with every firing before it.

A nominal time whose dedup id a live, delivered or handed-over firing of the
schedule holds is not written again (one cancelled, by an update, pause or
delete, does not hold it; a client's message with the same dedup id is not a
firing: its ``delayq-schedule`` header, which clients may not set, is not the
schedule's name). A step's plans share a budget of nominal times computed (``STEP_BUDGET``) and
of time (``STEP_TIME_S``):
those past it are handed back to the release step, which puts them back in
its buffer, due at once (the next step goes on). The plans of one step are
written in chunks of at most ``CHUNK_ROWS`` rows, and at most half the shard's
enqueue queue (each chunk one append, each plan whole in one: a plan's step is
bounded to fit a chunk). A chunk the shard refuses for now (``Congested``: the
enqueue queue or a wheel slot full, the disk full) is not an error of the
release step (its ordinary deliveries go on): the plans of that chunk and after
are handed back, due again when the refusal says to retry, and until then the
firer hands back every plan it is given without reading it. Anything else a
chunk raises fails the step (the release step puts its rows back: those of
plans already written are no longer pending, dropped).

Counted (``counters``): ``schedule_firings`` (firings written),
``schedule_plans`` (plan copies written, here and by the schedule calls),
``schedule_missed`` (nominal times the catch-up policy skipped),
``schedule_corrupt`` (plans whose body does not decode: left pending, logged);
the lateness of each firing's write after its nominal time goes into
``lateness`` (written ahead: 0).

Not thread-safe: ``fire`` runs with the shard's lock held (the release step).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import Congested, CorruptData
from ..formats.headers import decode_headers
from ..formats.imports import MOVED_FROM
from ..formats.messagestate import MessageState
from ..ids import MessageId
from ..recurrence.catchup import Step, step
from ..recurrence.plans import decode_plan, firing_id
from ..recurrence.spec import SCHEDULE_HEADER, ScheduleSpec, ScheduleState
from ..recurrence.states import MAX_LEAD_MS, lead_of
from ..timers.bykey import ByKey, Holder, holder_columns
from ..timers.columns import Columns, Prepared
from ..timers.memory.lateness import LatenessHistogram
from ..timers.stages.accept import Acceptor
from ..timers.state import ShardState
from .planrows import PLANS_TOPIC, firing_row, plan_row

__all__ = [
    "CHUNK_ROWS",
    "READ_ROWS",
    "STEP_BUDGET",
    "STEP_TIME_S",
    "Firer",
    "Plan",
    "read_plans",
    "write_plans",
]

log = logging.getLogger("delayq.engine")

STEP_BUDGET = 4096
"""Nominal times one release step's plans compute together (``catchup.Step.cost``:
cron times walked over, one per interval's count, one per firing; at least one a
plan): a step of plans far behind (a long outage of schedules every second in a
zone with daylight saving) stops there, the plans not stepped back in the
buffer, due at once; so a step holds the lock some tens of ms at most
(``docs/engine.md``), not a plan's ``MAX_PASSED_PER_STEP`` walk times 1,024."""
STEP_TIME_S = 0.02
"""And the time one release step's plans are stepped for (the shard clock's
``monotonic_s``), the first plan always: the decode, step and cron walk of a
plan cost ~0.1 ms, so a herd of 1,024 plans (``FIRE_BATCH``) would hold the
lock ~0.1 s; its writes come after (one append a ``CHUNK_ROWS``)."""
READ_ROWS = 64
"""Plans the firer reads and steps between its checks of the step's budgets."""
CHUNK_ROWS = 4096
"""Rows (firings and plans) of one append of the firer: far below any enqueue
queue, so a step of many plans never makes a batch the queue can never take."""


class Plan(NamedTuple):
    """A plan message read: the schedule's name, spec and state, and where its
    record is (its seq, position, epoch, topic id, due time); ``imported_ms``:
    when a rebalance's import wrote it here (0: written here by this shard)."""

    name: str
    spec: ScheduleSpec
    state: ScheduleState
    seq: int
    pos: int
    epoch: int
    topic_id: int
    deliver_at_ms: int
    imported_ms: int = 0

    def since_ms(self, firing_since_ms: int) -> int:
        """Before when the plan's nominal times were missed: before this master
        began firing, or, for a plan a rebalance imported, before its import less
        the longest lead (no shard could fire it between its release on the old
        shard and its import: a job killed between them and run again later leaves
        a gap; a prompt import is within the lead, and its late times fire)."""
        if not self.imported_ms:
            return firing_since_ms
        return max(firing_since_ms, self.imported_ms - MAX_LEAD_MS)

    @property
    def holder(self) -> Holder:
        """The plan as the by-key calls name a message (``ByKey.holders``)."""
        return Holder(self.pos, self.epoch, self.seq, self.topic_id, self.deliver_at_ms, True)

    def id(self, shard: int) -> str:
        """The plan message's id."""
        return str(MessageId(shard, self.epoch, self.pos))


def read_plans(st: ShardState, positions: np.ndarray, seqs: np.ndarray) -> list[Plan | None]:
    """The plan records at ``positions`` (expected to hold ``seqs``); None for one
    that is not a plan of this shard's plans topic or whose body does not decode
    (counted ``schedule_corrupt`` and logged)."""
    tid = st.topics.ids.get(PLANS_TOPIC)
    cols = st.cl.read_scheduled(positions, payload=True)
    heads = cols.heads
    ok = cols.ok & (heads["seq"] == seqs) & (heads["topic_id"] == tid)
    keys, bodies, headers = cols.keys, cols.bodies, cols.headers
    dues, epochs, at = heads["deliver_at_ms"].tolist(), heads["epoch"].tolist(), positions.tolist()
    accepted = heads["accepted_ms"].tolist()
    out: list[Plan | None] = []
    for i, (good, seq) in enumerate(zip(ok.tolist(), seqs.tolist(), strict=True)):
        if not good:
            out.append(None)
            continue
        try:
            spec, state = decode_plan(bodies[i])
        except CorruptData as exc:
            st.counters["schedule_corrupt"] += 1
            log.error("a schedule's plan does not decode", extra={"pos": at[i]})
            log.debug("plan body", exc_info=exc)
            out.append(None)
            continue
        assert tid is not None  # (a row is a plan only of a topic that exists)
        imported = accepted[i] if headers[i] and MOVED_FROM in decode_headers(headers[i]) else 0
        out.append(Plan(keys[i], spec, state, seq, at[i], epochs[i], tid, dues[i], imported))
    return out


def write_plans(
    st: ShardState,
    acceptor: Acceptor,
    rows: list[Prepared],
    olds: list[Holder],
    now: int,
    prefix: bytes = b"",
) -> tuple[list[str], int]:
    """Append ``rows`` (firings first, then one plan copy for each of ``olds``,
    the last ``len(olds)`` rows, in order) as one batch: each plan copy replaces
    its old plan, all or nothing (a refusal raises it). ``prefix``: records
    written first in the same append (a call's CANCELS). The plans' new ids and
    the CommitLog end. Counted: ``schedule_plans`` (the copies; the firings are
    the caller's ``schedule_firings``), not ``scheduled`` (a client's)."""
    k = len(rows) - len(olds)
    replaces = np.zeros(len(rows), dtype=np.uint64)
    at = np.full(len(rows), -1, dtype=np.int64)
    replaces[k:] = [h.seq for h in olds]
    at[k:] = [h.pos for h in olds]
    ids, _, refused, end = acceptor.accept(
        Columns.of(rows), now, replaces=replaces, replaces_pos=at, prefix=prefix, counted=False
    )
    if refused:
        raise next(iter(refused.values()))
    seqs, tids, dues, _ = holder_columns(olds)
    st.left_pending(seqs, tids, dues, MessageState.RESCHEDULED)
    st.counters["schedule_plans"] += len(olds)
    return [i for i in ids[k:] if i is not None], end


@dataclass(slots=True)
class _Batch:
    """One chunk of a step's writes: the firings, the plans' copies, the old plans
    they replace, the firings' nominal times and the nominal times skipped."""

    firings: list[Prepared] = field(default_factory=list)
    plans: list[Prepared] = field(default_factory=list)
    olds: list[Holder] = field(default_factory=list)
    nominal: list[int] = field(default_factory=list)
    missed: int = 0
    first_row: int = 0  # the step's row of its first plan

    def rows(self) -> int:
        return len(self.firings) + len(self.plans)


def _due_at(rows: np.ndarray, at_ms: int) -> np.ndarray:
    """``rows`` (a copy) due at ``at_ms`` in the release buffer: a plan row's due
    time there only orders and wakes the release stage (the firer reads the plan's
    own from its record)."""
    out = rows.copy()
    out["deliver_at_ms"] = np.maximum(out["deliver_at_ms"], at_ms)
    return out


class Firer:
    """The release stage's hook for the plans topic (``timers.stages.release.Firer``)."""

    topic = PLANS_TOPIC

    def __init__(
        self, state: ShardState, acceptor: Acceptor, bykey: ByKey, lateness: LatenessHistogram
    ) -> None:
        self._state = state
        self._acceptor = acceptor
        self._bykey = bykey
        self._lateness = lateness
        self._refused_until = 0  # a refused chunk: plans wait until then (clock ms)

    def fire(self, rows: np.ndarray, now: int) -> np.ndarray:
        """Fire the due plans ``rows`` (release-buffer rows), read ``READ_ROWS`` at a
        time, within ``STEP_BUDGET`` and ``STEP_TIME_S``; the rows left for the
        next step (see the module docstring): due at once, or when a refused
        chunk's retry comes (their ``deliver_at_ms`` moved there)."""
        if now < self._refused_until:
            return _due_at(rows, self._refused_until)
        rows = rows[np.sort(np.unique(rows["seq"], return_index=True)[1])]  # one copy each
        clock = self._state.clock
        until = clock.monotonic_s() + STEP_TIME_S
        chunk = self._chunk_rows()
        budget, done = STEP_BUDGET, 0
        batch = _Batch()
        while done < len(rows) and budget > 0 and (not done or clock.monotonic_s() < until):
            part = rows[done : done + READ_ROWS]
            plans, steps, used = self._steps(part, now, budget, chunk - 2)
            budget -= sum(max(1, got.cost) for got in steps)
            unheld = self._unheld(
                [(p, got.fire) for (_, p), got in zip(plans, steps, strict=True)], now
            )
            for (k, plan), got, fired in zip(plans, steps, unheld, strict=True):
                if batch.olds and batch.rows() + len(fired) + 1 > chunk:
                    if not self._write(batch, now):
                        return _due_at(rows[batch.first_row :], self._refused_until)
                    batch = _Batch()
                if not batch.olds:
                    batch.first_row = done + k
                batch.firings.extend(firing_row(plan.name, plan.spec, t, now) for t in fired)
                batch.plans.append(plan_row(plan.name, plan.spec, got.state, now))
                batch.olds.append(plan.holder)
                batch.nominal.extend(fired)
                batch.missed += got.skipped
            done += used
        if batch.olds and not self._write(batch, now):
            return _due_at(rows[batch.first_row :], self._refused_until)
        return rows[done:]

    def _chunk_rows(self) -> int:
        """Rows of one append: ``CHUNK_ROWS``, and at most half the enqueue queue."""
        return max(4, min(CHUNK_ROWS, self._state.settings.enqueue_queue_messages // 2))

    def _steps(
        self, part: np.ndarray, now: int, budget: int, most: int
    ) -> tuple[list[tuple[int, Plan]], list[Step], int]:
        """The plans of ``part`` stepped (``catchup.step``, each within ``most``
        nominal times: it fits a chunk) while ``budget`` lasts: the plans with
        their row in ``part``, their steps, and how many rows of ``part`` were
        taken (those after are left; a row that is no plan is taken, and dropped)."""
        since = self._state.office.firing_since_ms
        plans: list[tuple[int, Plan]] = []
        steps: list[Step] = []
        for i, p in enumerate(read_plans(self._state, part["cl_pos"], part["seq"])):
            if budget <= 0:
                return plans, steps, i
            if p is not None:
                got = step(
                    p.spec, p.state, now, lead_of(p.name), p.since_ms(since), min(budget, most)
                )
                plans.append((i, p))  # (a paused plan's step fires nothing)
                steps.append(got)
                budget -= max(1, got.cost)
        return plans, steps, len(part)

    def _write(self, batch: _Batch, now: int) -> bool:
        """One chunk's append, then its counts; False when the shard refused it for
        now (``Congested``: nothing of it written; ``_refused_until`` set)."""
        try:
            self._append(batch, now)
        except Congested as exc:
            self._refused_until = now + max(1, exc.retry_after_ms)
            log.info("schedule firings refused for now; retrying", extra={"why": str(exc)})
            return False
        return True

    def _append(self, batch: _Batch, now: int) -> None:
        """One chunk's append, then its counts."""
        st = self._state
        write_plans(st, self._acceptor, batch.firings + batch.plans, batch.olds, now)
        st.counters["schedule_firings"] += len(batch.nominal)
        st.counters["schedule_missed"] += batch.missed
        if batch.nominal:
            self._lateness.add(np.maximum(now - np.array(batch.nominal, dtype=np.int64), 0))

    def _unheld(self, fire: list[tuple[Plan, list[int]]], now: int) -> list[list[int]]:
        """Per plan, the nominal times it fires whose dedup id no firing holds (a
        live, delivered or handed-over one: see the module docstring)."""
        ids = self._state.topics.ids
        out: list[list[int]] = []
        for plan, times in fire:
            tid = ids.get(plan.spec.template.topic)
            if tid is None:  # (its topic's first firing)
                out.append(times)
                continue
            out.append([t for t in times if not self._held(tid, plan.name, t, now)])
        return out

    def _held(self, tid: int, plan: str, t: int, now: int) -> bool:
        """Whether a firing of schedule ``plan`` at nominal time ``t`` holds its
        dedup id in topic ``tid``: live, handed over, or delivered within its
        window (a cancelled one does not). Only the schedule's own firings count
        (their ``SCHEDULE_HEADER`` names it): a client's message sent with the same
        dedup id never suppresses a firing."""
        got = self._bykey.holders(tid, firing_id(plan, t).encode(), now, dedup=True)
        if not got:
            return False
        cols = self._state.cl.read_scheduled(
            np.array([h.pos for h in got], dtype=np.int64), payload=True
        )
        mine = [
            h
            for i, h in enumerate(got)
            if cols.ok[i]
            and cols.headers[i]
            and decode_headers(cols.headers[i]).get(SCHEDULE_HEADER) == plan
        ]
        if any(h.live or h.target >= 0 for h in mine):
            return True
        ended = [h.seq for h in mine]
        if not ended:
            return False
        raw = self._state.states.raw_many(np.array(ended, dtype=np.uint64))
        return bool((raw == int(MessageState.DELIVERED)).any())
