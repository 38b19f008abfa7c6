"""Recurring schedules' calls (``Scheduling``): create, get, list, update, pause,
resume, delete, and the next firing times, of the schedules this shard owns.

A schedule is its plan message (``planrows``): one pending message of the plans
topic keyed by the schedule's name, so the key machinery gives one per name
(``timers.bykey``). Create writes it unless a live plan holds the name
(``AlreadyExists``, as ``IfExists.REJECT`` answers, checked and written under
one hold of the lock); update, pause and resume read it and write its next copy
replacing it (one SCHEDULE record: ``firing.write_plans``); delete cancels it.
Update, pause and delete also cancel, in the same append, the firings written
ahead whose nominal time is still to come (pending messages of the template's
topic keyed by the name and marked as its firings): no later nominal time fires
after the call returns (one already come, pending for its jitter, is delivered
and stays fired); the state takes them back (``fired`` less them,
``last_fire_ms`` the nominal time before them), so a resume catches them up by
the policy and an update recomputes from now.
Each read-and-write runs under one hold of the shard's lock, so it never
interleaves with the firer (the release stage, which holds it too).

A spec is checked by ``recurrence.spec.check_spec`` (errors name the field:
``spec.cron``, ``spec.template.topic``...); a state changes by
``recurrence.states`` (made, updated, paused, resumed). Writes are admitted
from a master in office and acknowledged once durable, as other writes
(``shard.OpenShard.admit``/``acked``); reads answer on any node.

List: the live entries of the key index with no hold (plans have no dedup
window), their records read to keep the plans topic's names, a part at a time
(``SCAN_ROWS``, each under the lock on its own: calls and stages go on between),
then the page's plans found by name: a pass over every keyed message of the
shard without a hold (documented in ``docs/engine.md``), fine for an admin's
call, not for a hot path. A schedule made during the scan may be missing from
the page; one deleted meanwhile is left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .. import formats
from ..errors import AlreadyExists, InvalidArgument, NotFound, Unavailable
from ..formats.headers import decode_headers
from ..formats.messagestate import MessageState, is_live
from ..ids import MessageId
from ..recurrence.calendar import firings, last_before
from ..recurrence.spec import (
    SCHEDULE_HEADER,
    SCHEDULE_TIME_HEADER,
    ScheduleSpec,
    ScheduleState,
    check_schedule_name,
    check_spec,
)
from ..recurrence.states import new_state, paused_state, resumed_state, updated_state
from ..timers.bykey import Holder, holder_columns
from ..timers.columns import Columns
from ..types import Schedule, SchedulePage
from .firing import Plan, read_plans, write_plans
from .lifecycle import ShardLife
from .planrows import PLANS_TOPIC, plan_row
from .shard import OpenShard

__all__ = ["MAX_LIST", "MAX_NEXT", "SCAN_ROWS", "Scheduling"]

MAX_LIST = 1000
"""The most schedules one page lists."""
MAX_NEXT = 1000
"""The most firing times one ``next_firings`` gives."""
SCAN_ROWS = 4096
"""Records a list's scan reads under one hold of the lock (a few ms)."""
_WHAT = "schedules"  # what a refused write names
_Change = Callable[[Plan], tuple[ScheduleSpec, ScheduleState]]
"""A rewrite's change of a plan: its new spec and state (``Scheduling._rewrite``)."""


class Scheduling:
    """Thread-safe: each call takes the shard's lock for its work."""

    def __init__(self, life: ShardLife) -> None:
        self._life = life
        self._settings = life.setup.settings
        self._clock = life.setup.clock

    # ------------------------------------------------------------------ writes
    def create(self, name: str, spec: ScheduleSpec, paused: bool = False) -> Schedule:
        """See ``Engine.create_schedule``."""
        check_schedule_name(name, "name")
        now = self._clock.now_ms()
        spec = self._checked(spec)
        state = new_state(spec, now)
        if paused:
            state = paused_state(state, now)
        cols = Columns.of([plan_row(name, spec, state, now)])
        with self._life.held() as sh:
            epoch = sh.admit(_WHAT)
            st = sh.state
            tid = st.topics.ids.get(PLANS_TOPIC)
            for h in sh.bykey.holders(tid, name.encode(), now):
                if h.live:
                    held = MessageId(st.settings.shard, h.epoch, h.pos)
                    raise AlreadyExists("name", str(held), h.deliver_at_ms)
                if h.target >= 0:  # (handed over: its rebalance is under way)
                    raise sh.bykey.moving(h, "name")
            ids, _, refused, end = sh.accept.accept(cols, now, counted=False)
            if not refused:
                st.counters["schedule_plans"] += 1
        if refused:
            raise refused[0]
        sh.acked(end, epoch, _WHAT)
        new_id = ids[0]
        assert new_id is not None
        return Schedule(name, spec, state, new_id)

    def update(self, name: str, spec: ScheduleSpec) -> Schedule:
        """See ``Engine.update_schedule``."""
        check_schedule_name(name, "name")
        now = self._clock.now_ms()
        spec = self._checked(spec)
        return self._rewrite(name, now, lambda p: (spec, updated_state(spec, p.state, now)))

    def pause(self, name: str) -> Schedule:
        """See ``Engine.pause_schedule``."""
        check_schedule_name(name, "name")
        now = self._clock.now_ms()
        return self._rewrite(name, now, lambda p: (p.spec, paused_state(p.state, now)))

    def resume(self, name: str) -> Schedule:
        """See ``Engine.resume_schedule``."""
        check_schedule_name(name, "name")
        now = self._clock.now_ms()
        return self._rewrite(name, now, lambda p: (p.spec, resumed_state(p.spec, p.state, now)))

    def delete(self, name: str) -> None:
        """See ``Engine.delete_schedule``."""
        check_schedule_name(name, "name")
        now = self._clock.now_ms()
        with self._life.held() as sh:
            epoch = sh.admit(_WHAT)
            plan = _find(sh, name, now)
            st = sh.state
            ahead, _ = _ahead(sh, plan, now)
            gone = [plan.holder, *ahead]
            seqs, tids, dues, positions = holder_columns(gone)
            st.cl.append(formats.encode_cancels(seqs, positions, tids, now, dues), now)
            st.left_pending(seqs, tids, dues, MessageState.CANCELLED)
            st.counters["cancelled"] += len(ahead)  # (messages; the plan is not one)
            end = st.cl.end
        sh.acked(end, epoch, _WHAT)

    def _rewrite(self, name: str, now: int, change: _Change) -> Schedule:
        """Read the plan, write its next copy (``change`` of it) replacing it, and
        cancel the firings written ahead, in one append."""
        with self._life.held() as sh:
            epoch = sh.admit(_WHAT)
            plan = _find(sh, name, now)
            ahead, nominal = _ahead(sh, plan, now)
            spec, state = change(plan._replace(state=_unfired(plan.spec, plan.state, nominal)))
            st = sh.state
            prefix = b""
            if ahead:
                seqs, tids, dues, positions = holder_columns(ahead)
                prefix = formats.encode_cancels(seqs, positions, tids, now, dues)
            row = plan_row(name, spec, state, now)
            [new_id], end = write_plans(st, sh.accept, [row], [plan.holder], now, prefix)
            if ahead:
                st.left_pending(seqs, tids, dues, MessageState.CANCELLED)
                st.counters["cancelled"] += len(ahead)
        sh.acked(end, epoch, _WHAT)
        return Schedule(name, spec, state, new_id)

    def _checked(self, spec: ScheduleSpec) -> ScheduleSpec:
        """``check_spec``, and the template's body within the shard's
        ``max_body_bytes`` (a firing is a message of this shard)."""
        spec = check_spec(spec, "spec")
        size, most = len(spec.template.body), self._settings.max_body_bytes
        if size > most:
            raise InvalidArgument(
                "spec.template.body",
                f"is {size} bytes; at most {most} (the shard's max_body_bytes)",
            )
        return spec

    # ------------------------------------------------------------------ reads
    def get(self, name: str) -> Schedule:
        """See ``Engine.get_schedule``."""
        check_schedule_name(name, "name")
        now = self._clock.now_ms()
        with self._life.held() as sh:
            plan = _find(sh, name, now)
            return Schedule(name, plan.spec, plan.state, plan.id(sh.setup.settings.shard))

    def page(self, limit: int = 100, after: str = "") -> SchedulePage:
        """See ``Engine.list_schedules``."""
        if not 1 <= limit <= MAX_LIST:
            raise InvalidArgument("limit", f"must be 1..{MAX_LIST}, got {limit}")
        names = sorted(n for n in self._names() if n > after)
        page = names[:limit]
        now = self._clock.now_ms()
        out: list[Schedule] = []
        with self._life.held() as sh:
            shard = sh.setup.settings.shard
            for name in page:
                try:
                    plan = _find(sh, name, now)
                except (NotFound, Unavailable):
                    continue  # deleted or handed over since the scan
                out.append(Schedule(name, plan.spec, plan.state, plan.id(shard)))
        return SchedulePage(out, page[-1] if len(names) > limit else "")

    def _names(self) -> set[str]:
        """The names of the shard's schedules: its key index's live entries without
        a hold (plans have no dedup window) taken under the lock, then their records
        read ``SCAN_ROWS`` at a time, each part under the lock on its own (see the
        module docstring)."""
        with self._life.held() as sh:
            st = sh.state
            tid = st.topics.ids.get(PLANS_TOPIC)
            if tid is None or not len(st.keys):
                return set()
            _, seqs, positions, holds = st.keys.columns()
            rows = np.flatnonzero(holds == 0)
            rows = rows[is_live(st.states.raw_many(seqs[rows]))]
            seqs, positions = seqs[rows], positions[rows]  # copies: the index may change
        names: set[str] = set()
        for k in range(0, len(rows), SCAN_ROWS):
            with self._life.held() as sh:
                cols = sh.state.cl.read_scheduled(positions[k : k + SCAN_ROWS], payload=True)
            heads = cols.heads
            mine = cols.ok & (heads["topic_id"] == tid) & (heads["seq"] == seqs[k : k + SCAN_ROWS])
            keys = cols.keys
            names.update(keys[i] for i in np.flatnonzero(mine).tolist())
        return names

    def next_firings(self, name: str, count: int = 10) -> list[int]:
        """See ``Engine.next_firings``."""
        if not 1 <= count <= MAX_NEXT:
            raise InvalidArgument("count", f"must be 1..{MAX_NEXT}, got {count}")
        got = self.get(name)
        if got.state.paused or got.state.ended:
            return []
        return firings(got.spec, self._clock.now_ms(), count, got.state.anchor_ms)


def _find(sh: OpenShard, name: str, now: int) -> Plan:
    """The schedule's plan (its oldest live plan message); ``Unavailable`` when
    the only plans of the name are handed over (a rebalance under way: the new
    shard holds it once the map switches), NotFound if none."""
    st = sh.state
    tid = st.topics.ids.get(PLANS_TOPIC)
    holders = sh.bykey.holders(tid, name.encode(), now)
    got = [h for h in holders if h.live]
    if not got:
        moved = [h for h in holders if h.target >= 0]
        if moved:
            raise sh.bykey.moving(moved[0], "name")
    if got:
        h = got[0]
        pos, seq = np.array([h.pos], np.int64), np.array([h.seq], np.uint64)
        [plan] = read_plans(st, pos, seq)
        if plan is not None:
            return plan
    raise NotFound("name", f"no schedule named {name!r}")


def _ahead(sh: OpenShard, plan: Plan, now: int) -> tuple[list[Holder], list[int]]:
    """The plan's firings written ahead and still pending whose nominal time is
    after ``now`` (its template topic's live messages keyed by its name and
    marked as its firings; those a rebalance handed over are left), and their
    nominal times. A firing whose nominal time has come, still pending for its
    jitter, is left: it was fired, and is delivered."""
    st = sh.state
    tid = st.topics.ids.get(plan.spec.template.topic)
    live = [h for h in sh.bykey.holders(tid, plan.name.encode(), now) if h.live]
    if not live:
        return [], []
    cols = st.cl.read_scheduled(np.array([h.pos for h in live], dtype=np.int64), payload=True)
    out: list[Holder] = []
    nominal: list[int] = []
    for i, h in enumerate(live):
        marks = decode_headers(cols.headers[i]) if cols.ok[i] and cols.headers[i] else {}
        if marks.get(SCHEDULE_HEADER) != plan.name or SCHEDULE_TIME_HEADER not in marks:
            continue
        t = int(marks[SCHEDULE_TIME_HEADER])
        if t > now:
            out.append(h)
            nominal.append(t)
    return out, nominal


def _unfired(spec: ScheduleSpec, state: ScheduleState, nominal: list[int]) -> ScheduleState:
    """``state`` with the firings at ``nominal`` (cancelled before they were
    due, all after now) counted as not fired: the plan waits for the first of
    them again (``next_fire_ms``), so a resume fires it by the catch-up policy
    and an update recomputes from now; ``last_fire_ms`` is the nominal time of
    ``spec`` before it (0: none fired before them, or none found within
    ``last_before``'s bounds)."""
    if not nominal:
        return state
    first = min(nominal)
    if first > state.last_fire_ms:
        return state  # (not this state's: nothing to take back)
    fired = max(0, state.fired - len(nominal))
    last = last_before(spec, first, state.created_ms, state.anchor_ms) if fired else 0
    return dataclasses.replace(
        state, ended=False, next_fire_ms=first, last_fire_ms=last, fired=fired
    )
