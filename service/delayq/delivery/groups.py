"""One consumer group's progress through one topic's ready queue (pure: no I/O,
no clock reads; the caller passes ``now_ms``).

Offsets index the topic's ready queue. Invariants: every offset below
``committed`` is acked; ``acked`` holds acked offsets at or above it;
``inflight`` maps each handed-out, unacked offset to (due, ticket); ``waiting``
are those of them whose attempt failed (a lapse of invisibility followed by a
backoff, or a negative acknowledgement) and that wait until their due for the
next attempt: they are not in flight for the group's limit (``flying``). An
offset whose invisibility lapsed is handed out again with attempt + 1
(at-least-once), after the group's backoff if it has one, unless it has had
the group's maximum of attempts: then it is held (still in flight, with a new
ticket) and queued in ``dead`` for the caller to forward to the dead-letter
topic and ack. The caller logs every hand-out, re-timing and nack (HANDOUT
records) and restores them after a restart (``restore_held``), so attempts
continue where they were.

A ticket is what a receipt's attempt field carries: the attempt in its low 32
bits and a turn above them, which ``change_invisibility(rotate=True)`` bumps so
that the receipt handed out before is refused (STALE) from then on.

Not thread-safe: the engine's lock serialises calls.
"""

from __future__ import annotations

import collections
import heapq
import itertools
from collections.abc import Callable, Sequence
from operator import itemgetter

from .types import ATTEMPT_BUCKETS, AckOutcome

__all__ = ["TURN", "AckOutcome", "Backoff", "GroupState", "attempt_of"]

Backoff = Callable[[int], int]
"""The wait (ms) before attempt n + 1 once attempt n failed."""

_RUN = 8
"""Acks of at least this many receipts try the batch pass first (``_ack_held``)."""
TURN = 1 << 32
"""A ticket's turn unit: ticket = attempt + turn * TURN."""


def attempt_of(ticket: int) -> int:
    """The delivery attempt a ticket names."""
    return ticket & (TURN - 1)


class GroupState:
    def __init__(
        self,
        committed: int = 0,
        acked: list[int] | None = None,
        inflight: Sequence[Sequence[int]] = (),
    ) -> None:
        """``inflight``: [offset, ticket, due, waiting] rows (a checkpoint's)."""
        self.committed = committed
        self.acked: set[int] = set(acked or ())
        self.next = committed
        self._held_top = 0  # above every offset ``restore_held`` put in flight
        self.inflight: dict[int, tuple[int, int]] = {}
        self.waiting: set[int] = set()
        # Redelivery heap of (deadline, tiebreak, [(offset, attempt), ...]): one entry per
        # hand-out (they share a deadline), stale pairs skipped lazily when popped.
        self._expiry: list[tuple[int, int, list[tuple[int, int]]]] = []
        self._pushes = 0
        self._unheaped = False  # ``inflight`` holds what the heap does not: ``_heap``
        self._due: list[tuple[int, int, int]] = []
        """(due, offset, ticket) of waiting offsets whose next attempt is due, a heap:
        handed out as the in-flight limit leaves room (``_expired``)."""
        self.dead: list[tuple[int, int]] = []
        """(offset, ticket) of messages past their last attempt, held in flight until
        the caller has forwarded them to the dead-letter topic (``take_dead``)."""
        self.redelivered = 0
        """Offsets handed out again since this state was made (the shard opened, or the
        group was first used): their invisibility ran out, or they were nacked."""
        self.retries: list[int] = [0] * len(ATTEMPT_BUCKETS)
        """Retries scheduled (lapses and nacks) by the attempt that failed, bucketed as
        ``ATTEMPT_BUCKETS``."""
        for row in inflight:
            self.restore_held([row[0]], [row[1]], [row[2]], waiting=bool(row[3]))

    def restore_held(
        self, offsets: Sequence[int], tickets: Sequence[int], dues: Sequence[int], *, waiting: bool
    ) -> None:
        """Hold offsets in flight under ``tickets`` until ``dues`` as logged (a HANDOUT
        record replayed, a checkpoint restored); those acked since are skipped."""
        for off, ticket, due in zip(offsets, tickets, dues, strict=True):
            if off < self.committed or off in self.acked:
                continue
            self.inflight[off] = (due, ticket)
            if waiting:
                self.waiting.add(off)
            else:
                self.waiting.discard(off)
            self._held_top = max(self._held_top, off + 1)
        self._unheaped = True  # a replica replays many: the heap is made at the next take

    def flying(self) -> int:
        """Messages in flight for the group's limit: handed out, not settled, not
        waiting for their next attempt."""
        return len(self.inflight) - len(self.waiting)

    def _count_retry(self, attempt: int) -> None:
        self.retries[sum(attempt >= b for b in ATTEMPT_BUCKETS) - 1] += 1

    def take(
        self,
        now_ms: int,
        ready_len: int,
        max_n: int,
        invisible_ms: int,
        max_inflight: int,
        max_attempts: int = 0,
        backoff: Backoff | None = None,
    ) -> list[tuple[int, int]]:
        """Hand out up to ``max_n`` offsets, at most ``max_inflight`` in flight
        (``flying``): due redeliveries first, then new ones. Returns (offset,
        attempt) pairs. An offset whose invisibility lapsed after ``max_attempts``
        (0: no limit) goes to ``dead`` instead; otherwise, given a ``backoff``, it
        waits that much longer before its next attempt."""
        deadline = now_ms + invisible_ms
        if self._unheaped:
            self._heap()
        out, room = self._expired(
            now_ms, max_n, deadline, max_attempts, max_inflight - self.flying(), backoff
        )
        inflight, acked = self.inflight, self.acked
        room = min(max_n - len(out), ready_len - self.next, room)
        run = range(self.next, self.next + room)
        if room > 0 and self.next >= self._held_top and (not acked or acked.isdisjoint(run)):
            # the usual case, none of the run acked out of order: the loop below in C
            self.next += room
            inflight.update(dict.fromkeys(run, (deadline, 1)))
            out += zip(run, itertools.repeat(1))
        while len(out) < max_n and self.next < ready_len and self.flying() < max_inflight:
            off = self.next
            self.next += 1
            if off not in acked and off not in inflight:
                out.append((off, 1))
                inflight[off] = (deadline, 1)
        if out:
            self._push(deadline, out)
        return out

    def _expired(
        self,
        now_ms: int,
        max_n: int,
        deadline: int,
        max_attempts: int,
        room: int,
        backoff: Backoff | None,
    ) -> tuple[list[tuple[int, int]], int]:
        """Up to ``max_n`` in-flight offsets due again, with their next attempt, now
        held until ``deadline`` (the caller pushes them to the heap), and the room
        left under the in-flight limit (``room`` as it was). A lapse past
        ``max_attempts`` is held until then too, and queued in ``dead``; a lapse with
        a ``backoff`` waits that much more; a waiting offset whose next attempt is
        due moves to ``_due`` once, which gives them out in due order as room allows
        (a group at its limit does not go through them again at every take)."""
        out: list[tuple[int, int]] = []
        dead: list[tuple[int, int]] = []
        inflight, waiting, due_q = self.inflight, self.waiting, self._due
        while self._expiry and self._expiry[0][0] <= now_ms and len(out) < max_n:
            due, _, group = heapq.heappop(self._expiry)
            for i, (off, ticket) in enumerate(group):
                if len(out) >= max_n:  # put back what this call cannot take
                    self._push(due, group[i:])
                    break
                if inflight.get(off) != (due, ticket):  # acked or re-timed since
                    continue
                attempt = attempt_of(ticket)
                if max_attempts and attempt >= max_attempts:  # held for the dead letters
                    room += off not in waiting  # not in flight to a consumer
                    self._to_dead(off, attempt, deadline, dead)
                elif off in waiting:  # its next attempt is due: when there is room
                    heapq.heappush(due_q, (due, off, ticket))
                else:  # its invisibility lapsed: attempt failed
                    self._count_retry(attempt)
                    wait = backoff(attempt) if backoff is not None else 0
                    if wait > 0:
                        self._wait(off, ticket, due + wait)
                        room += 1
                    else:
                        inflight[off] = (deadline, attempt + 1)
                        out.append((off, attempt + 1))
        while due_q and room > 0 and len(out) < max_n:
            due, off, ticket = heapq.heappop(due_q)
            if inflight.get(off) != (due, ticket) or off not in waiting:  # settled since
                continue
            attempt = attempt_of(ticket)
            if max_attempts and attempt >= max_attempts:  # (the policy changed since)
                self._to_dead(off, attempt, deadline, dead)
                continue
            waiting.discard(off)
            room -= 1
            inflight[off] = (deadline, attempt + 1)
            out.append((off, attempt + 1))
        if dead:  # if forwarding them fails they come back at the deadline
            self._push(deadline, dead)
            self.dead += dead
        self.redelivered += sum(1 for _, attempt in out if attempt > 1)
        return out, room

    def _to_dead(self, off: int, attempt: int, deadline: int, dead: list[tuple[int, int]]) -> None:
        """Hold ``off`` (past its last attempt) until ``deadline`` for the dead letters."""
        self.waiting.add(off)
        self.inflight[off] = (deadline, attempt + 1)
        dead.append((off, attempt + 1))

    def _heap(self) -> None:
        """The redelivery heap made anew of ``inflight`` (after ``restore_held``)."""
        self._expiry = [
            (due, i, [(off, t)]) for i, (off, (due, t)) in enumerate(self.inflight.items())
        ]
        heapq.heapify(self._expiry)
        self._due = []  # in the heap again
        self._pushes = len(self._expiry)
        self._unheaped = False

    def _wait(self, offset: int, ticket: int, due: int) -> None:
        """Hold ``offset`` (its attempt failed) until ``due`` for its next attempt."""
        self.inflight[offset] = (due, ticket)
        self.waiting.add(offset)
        self._push(due, [(offset, ticket)])

    def nack(
        self,
        offset: int,
        ticket: int,
        now_ms: int,
        backoff: Backoff | None,
        max_attempts: int = 0,
        at_least_ms: int = 0,
    ) -> int | AckOutcome:
        """A negative acknowledgement: the attempt ``ticket`` names failed; the
        message waits the ``backoff`` for it (none: 0), or ``at_least_ms`` when that
        is longer (a push target's Retry-After), before its next attempt, or, that
        attempt its last, is due for the dead-letter topic at once. Returns when it is
        due again, or the AckOutcome that refuses it."""
        refused = self._refused(offset, ticket)
        if refused is not None:
            return refused
        attempt = attempt_of(ticket)
        due = now_ms
        if not max_attempts or attempt < max_attempts:
            self._count_retry(attempt)
            due += max(backoff(attempt) if backoff is not None else 0, at_least_ms)
        self._wait(offset, ticket, due)
        return due

    def take_dead(self) -> list[tuple[int, int]]:
        """The (offset, ticket) pairs queued for the dead-letter topic since the last
        call, still held as they were queued (dropped: those acked or re-timed since)."""
        dead, self.dead = self.dead, []
        inflight = self.inflight
        return [(off, t) for off, t in dead if (held := inflight.get(off)) and held[1] == t]

    def hold(self, offset: int, ticket: int, until_ms: int) -> int | AckOutcome:
        """Hold an in-flight message (named by its current ticket) until ``until_ms``
        under a new ticket, which is returned: the receipt of the old one acks nothing
        from then on. An AckOutcome says why it is not held (not in flight, stale)."""
        refused = self._refused(offset, ticket)
        if refused is not None:
            return refused
        self._retime(offset, until_ms, ticket + TURN)
        return ticket + TURN

    def take_acked(
        self,
        now_ms: int,
        ready_len: int,
        max_n: int,
        max_attempts: int = 0,
        backoff: Backoff | None = None,
    ) -> tuple[Sequence[int], list[int]]:
        """Hand out up to ``max_n`` offsets and ack them at once (at-most-once):
        expired redeliveries of earlier receives first (as ``take``: after the
        ``backoff``, past ``max_attempts`` to ``dead``), then new ones. Returns the
        offsets (a ``range`` in the common case: a contiguous run) and attempts."""
        if not self.inflight and not self.acked and self.next == self.committed:
            start = self.next  # the common case: a contiguous run, acked in O(1)
            end = max(start, min(ready_len, start + max_n))
            self.next = self.committed = end
            return range(start, end), [1] * (end - start)
        out = self.take(
            now_ms, ready_len, max_n, 1, len(self.inflight) + max_n, max_attempts, backoff
        )
        for off, _ in out:
            self.mark_acked(off)
        return [off for off, _ in out], [attempt for _, attempt in out]

    def give_back(
        self,
        offsets: Sequence[int],
        attempts: Sequence[int],
        now_ms: int,
        *,
        handed: bool = False,
    ) -> None:
        """Undo acks or hand-outs whose record could not be written: the offsets are
        no longer acked but due again at once. Acks of an Ack call (their consumer
        had them) come back as lapsed: the next take hands them out, attempt + 1.
        ``handed``: hand-outs of a receive that failed (``take``'s, ``take_acked``'s),
        which no consumer saw, wait under the attempt before theirs: the next take
        hands them out with the same attempt, no retry counted. Offsets
        ``committed`` moved over that were acked before stay acked."""
        if not offsets:
            return
        taken = set(offsets)
        low = min(taken)
        if low < self.committed:
            self.acked.update(off for off in range(low, self.committed) if off not in taken)
            self.committed = low
        self.acked.difference_update(taken)
        if handed:
            pairs = [(off, t - 1) for off, t in zip(offsets, attempts, strict=True)]
            self.waiting.update(taken)
            self.redelivered -= sum(attempt_of(t) > 1 for t in attempts)
        else:
            pairs = list(zip(offsets, attempts, strict=True))
            self.waiting.difference_update(taken)
        self.inflight.update((off, (now_ms, ticket)) for off, ticket in pairs)
        self._push(now_ms, pairs)

    def _push(self, deadline: int, group: list[tuple[int, int]]) -> None:
        self._pushes += 1
        heapq.heappush(self._expiry, (deadline, self._pushes, list(group)))

    def ack(self, offset: int, attempt: int, ready_len: int) -> AckOutcome:
        return self.ack_many([offset], [attempt], ready_len)[0]

    def ack_many(
        self, offsets: Sequence[int], attempts: Sequence[int], ready_len: int
    ) -> list[AckOutcome]:
        """Ack receipts given as (offset, attempt) columns, in order: an offset acked
        twice in one call is ALREADY_ACKED the second time. ``committed`` moves once,
        after the last (offsets it passes sit in ``acked`` meanwhile)."""
        if len(offsets) >= _RUN and self._ack_held(offsets, attempts):
            return [AckOutcome.ACKED] * len(offsets)
        out: list[AckOutcome] = []
        inflight, acked, committed = self.inflight, self.acked, self.committed
        for offset, attempt in zip(offsets, attempts, strict=True):
            if offset >= ready_len:
                out.append(AckOutcome.NOT_FOUND)
            elif offset < committed or offset in acked:
                out.append(AckOutcome.ALREADY_ACKED)
            elif (held := inflight.get(offset)) is not None and held[1] != attempt:
                out.append(AckOutcome.STALE)
            else:
                if held is not None:
                    del inflight[offset]
                    self.waiting.discard(offset)
                acked.add(offset)
                out.append(AckOutcome.ACKED)
        self._advance()
        return out

    def _ack_held(self, offsets: Sequence[int], attempts: Sequence[int]) -> bool:
        """The usual ack, done in passes at C speed: distinct offsets, all in flight
        under the tickets given (so none acked, all below the ready queue's end).
        False, with nothing changed, when the receipts are anything else."""
        inflight = self.inflight
        held = list(map(inflight.get, offsets))
        if None in held or list(map(itemgetter(1), held)) != list(attempts):  # type: ignore[arg-type]
            return False
        if len(set(offsets)) != len(offsets):
            return False
        collections.deque(map(inflight.pop, offsets), maxlen=0)
        if self.waiting:
            self.waiting.difference_update(offsets)
        self.acked.update(offsets)
        self._advance()
        return True

    def mark_acked(self, offset: int) -> None:
        """Record an ack (also used when replaying ACK records)."""
        if offset < self.committed:
            return
        self.inflight.pop(offset, None)
        self.waiting.discard(offset)
        self.acked.add(offset)
        self._advance()

    def _advance(self) -> None:
        """Move ``committed`` over the acked offsets that now follow it (all of them
        at once when they run on from it without a gap: the in-order ack)."""
        acked = self.acked
        if self.committed in acked and max(acked) == self.committed + len(acked) - 1:
            self.committed += len(acked)  # offsets are distinct and >= committed: a run
            acked.clear()
        while self.committed in self.acked:
            self.acked.discard(self.committed)
            self.committed += 1
        self.next = max(self.next, self.committed)

    def change_invisibility(
        self, offset: int, ticket: int, now_ms: int, invisible_ms: int
    ) -> AckOutcome:
        """Move an in-flight message's redelivery deadline (0 ms: redeliver now, a nack)."""
        refused = self._refused(offset, ticket)
        if refused is not None:
            return refused
        self._retime(offset, now_ms + invisible_ms, ticket)
        return AckOutcome.ACKED

    def _refused(self, offset: int, ticket: int) -> AckOutcome | None:
        """Why ``ticket`` does not name ``offset`` in flight now (None: it does). A
        receipt whose attempt failed (the message waits for its next attempt) is
        STALE: re-timing or nacking it again would put the message back in flight
        past the group's limit, or count its failure twice (an ack still takes)."""
        held = self.inflight.get(offset)
        if held is None:
            done = offset < self.committed or offset in self.acked
            return AckOutcome.ALREADY_ACKED if done else AckOutcome.NOT_FOUND
        return AckOutcome.STALE if held[1] != ticket or offset in self.waiting else None

    def _retime(self, offset: int, deadline: int, ticket: int) -> None:
        self.inflight[offset] = (deadline, ticket)
        self.waiting.discard(offset)
        self._push(deadline, [(offset, ticket)])

    def skip_to(self, floor: int) -> int:
        """Forget every offset below ``floor`` (expired by retention), acked or not;
        returns how many of them were not acked. Their receipts then ack as
        ALREADY_ACKED; redeliveries of them are dropped from the heap lazily."""
        if floor <= self.committed:
            return 0
        below = [off for off in self.acked if off < floor]
        self.acked.difference_update(below)
        for off in [off for off in self.inflight if off < floor]:
            del self.inflight[off]
            self.waiting.discard(off)
        unacked = floor - self.committed - len(below)
        self.committed = floor
        self._advance()
        return unacked

    def backlog(self, ready_len: int) -> int:
        """Messages delivered to the topic but not yet acked by this group."""
        return ready_len - self.committed - len(self.acked)

    def unhanded(self, ready_len: int) -> int:
        """Messages delivered to the topic this group has not been handed yet."""
        return max(0, ready_len - self.next - sum(1 for off in self.acked if off >= self.next))
