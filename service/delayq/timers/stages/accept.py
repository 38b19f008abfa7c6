"""The accept stage (on the caller's thread): append validated messages'
SCHEDULE records to the CommitLog and queue them for the link stage.

Admission comes first and writes nothing when it refuses: a batch that can
never fit the queue is InvalidArgument, a full queue is ``Congested`` (with a
retry hint), messages whose wheel slot is full are refused one by one
(``timingwheel.admit``). Only once the append succeeded do the messages' seqs and
new topics exist: a failed append (a full disk) leaves no gap of seqs that would
read as pending forever and no topic without its TOPIC record.

Not thread-safe: called with the shard's lock held.
"""

from __future__ import annotations

import collections
from typing import Protocol

import numpy as np

from ... import formats
from ...errors import Congested, DelayqError, InvalidArgument, StorageFull
from ...ids import MessageId
from ...settings import EngineSettings
from ...store.commitlog import CommitLog
from ...store.wheel import TimerWheel
from ..columns import Columns
from ..keyfiling import NameHashes, file_keyed, hashes_of
from ..memory.enqueue import EnqueueQueue, pending_batch
from ..memory.keyindex import KeyIndex
from ..memory.topics import TopicBook
from ..office import Office
from ..timingwheel import admit, beyond_window
from ..tuning import CHECKPOINT_BYTES, FILL_RECHECK_MS, LINK_URGENT_MS
from ..wakeups import Wakeups

__all__ = ["AcceptState", "Accepted", "Acceptor"]

Accepted = tuple[list[str | None], list[int], dict[int, DelayqError], int]
"""An id per row (None where refused), the rows' due times, the refusals by row,
and the CommitLog end the caller waits for (0: nothing written)."""


class AcceptState(Protocol):
    """What the accept stage uses of the shard's state."""

    checkpointed_end: int
    counters: collections.Counter[str]
    dedups: KeyIndex
    enqueue_q: EnqueueQueue
    fill_bound: int
    keys: KeyIndex
    next_seq: int
    office: Office
    settings: EngineSettings
    topics: TopicBook
    wakeups: Wakeups

    @property
    def cl(self) -> CommitLog: ...

    @property
    def wheel(self) -> TimerWheel: ...


class Acceptor:
    def __init__(self, state: AcceptState) -> None:
        self._state = state
        self._fill_checked_ms = 0  # when the wheel was last passed for the fill bound

    def accept(
        self,
        cols: Columns,
        now: int,
        replaces: np.ndarray | int = 0,
        replaces_pos: np.ndarray | int = -1,
        prefix: bytes = b"",
        hashes: NameHashes = (None, None),
        counted: bool = True,
    ) -> Accepted:
        """Append SCHEDULE records for validated rows and queue them. ``replaces``:
        the seq (and position) of the message a reschedule replaces, or one per row
        (several copies, each replacing its message: then a row refused refuses
        them all, nothing written); ``prefix``: records written first in the same
        append (a replace's CANCELS), only if a row is written. Keyed rows are
        filed in the key indexes (``keyfiling``; ``hashes``: the rows' names
        hashed already, a column per index or None). ``counted``: the rows count as
        ``scheduled`` (new messages of a client's); False for what has a counter of
        its own (a reschedule's copy, an import, a dead letter's copy, a
        schedule's plans and firings)."""
        st = self._state
        s = st.settings
        n = len(cols.bodies)
        if not n:
            return [], [], {}, 0
        if n > s.enqueue_queue_messages:
            raise InvalidArgument(
                "messages",
                f"a batch of {n} can never fit the accept queue "
                f"({s.enqueue_queue_messages} messages); send smaller batches",
            )
        if len(st.enqueue_q) + n > s.enqueue_queue_messages:
            st.counters["congested_queue"] += n
            st.wakeups.link.notify()  # drain now, not after the link stage's gather
            raise Congested(
                f"enqueue queue full ({len(st.enqueue_q)} messages waiting)",
                retry_after_ms=max(10, s.flush_interval_ms // 10),
            )
        all_dues = cols.deliver_at_ms.tolist()
        refused = self._over_slot_limit(cols.deliver_at_ms, now)
        keep = cols
        if refused and isinstance(replaces, np.ndarray):  # copies: all or none
            first = next(iter(refused.values()))
            return [None] * n, all_dues, {i: refused.get(i, first) for i in range(n)}, 0
        if refused:
            mask = np.ones(n, dtype=bool)
            mask[list(refused)] = False
            if not mask.any():
                return [None] * n, all_dues, refused, 0
            keep = cols.take(np.flatnonzero(mask))._replace(origin=None)
            hashes = hashes_of(hashes, mask)
        dues = keep.deliver_at_ms
        new_topics: dict[str, int] = {}
        tids: int | list[int] = self._topic_ids_of(keep.topics, new_topics)
        m = len(keep.bodies)
        seqs = np.arange(st.next_seq, st.next_seq + m, dtype=np.uint64)
        buf, offsets, sizes = formats.encode_messages(
            formats.RecordType.SCHEDULE,
            seqs,
            dues,
            now,
            st.office.epoch,
            tids,
            0,
            keep.keys,
            keep.headers,
            keep.bodies,
            replaces,
            replaces_pos,
            keep.body_sizes,
        )
        # TOPIC records of new topics go first
        prefix = b"".join(formats.encode_topic(t, name) for name, t in new_topics.items()) + prefix
        try:
            base = st.cl.append(prefix + buf if prefix else buf, now) + len(prefix)
        except StorageFull:
            st.counters["congested_disk"] += m
            raise
        # written: only now do the seqs and new topics exist
        st.next_seq += m
        for name, topic_id in new_topics.items():
            st.topics.define(topic_id, name)
        if st.cl.end - st.checkpointed_end > CHECKPOINT_BYTES:
            st.wakeups.flush_soon.set()
        positions = offsets + base
        if keep.keys is not None or keep.dedup_ids is not None:
            file_keyed(st.keys, st.dedups, tids, keep.keys, keep.headers, seqs, positions, hashes)
        st.enqueue_q.put(pending_batch(positions, sizes, seqs, tids, dues))
        st.topics.accepted(tids, dues, now)
        ids: list[str | None] = list(
            MessageId.texts(s.shard, st.office.epoch, positions, ascending=True)
        )
        if counted:
            st.counters["scheduled"] += m
        if st.wakeups.link_idle or int(np.minimum.reduce(dues)) < now + LINK_URGENT_MS:
            st.wakeups.link.notify()  # else the link stage, gathering, comes in its own time
        if refused:
            it = iter(ids)
            ids = [None if i in refused else next(it) for i in range(n)]
        return ids, all_dues, refused, st.cl.end

    def _topic_ids_of(self, topics: str | list[str], new: dict[str, int]) -> int | list[int]:
        """Topic ids (one, or one per row). Topics not seen before get the next ids,
        listed in ``new``: the caller defines them once their TOPIC records are written."""
        book = self._state.topics
        known = book.ids
        for name in (topics,) if isinstance(topics, str) else set(topics):
            if name not in known:
                new[name] = book.next_id() + len(new)
        if new:
            known = {**known, **new}
        if isinstance(topics, str):
            return known[topics]
        first = known[topics[0]]
        tids = list(map(known.__getitem__, topics))
        return first if tids.count(first) == len(tids) else tids

    def _over_slot_limit(self, dues: np.ndarray, now: int) -> dict[int, DelayqError]:
        """Refusals for messages whose wheel slot would pass ``slot_limit``, by index."""
        st = self._state
        s = st.settings
        p, w, limit = s.precision_ms, s.window_slots, s.slot_limit
        if st.fill_bound + len(dues) <= limit:
            return {}  # the common case: even the fullest slot could take them all
        if beyond_window(dues, now, p, w):
            return {}  # all rolled: counted where they land
        # The bound only grows as slots fill; a full pass of the wheel lowers it again.
        # A roll slot may hold more than the limit (its messages are re-parked, not
        # released) and keeps the bound high until it fires: then the exact check
        # is what decides, and the pass is repeated at most once a second.
        if now - self._fill_checked_ms >= FILL_RECHECK_MS:
            st.fill_bound, self._fill_checked_ms = st.wheel.max_num_all(), now
        wheel = st.wheel
        over = admit(dues, now, p, w, limit, wheel.max_num, lambda u: wheel.read_many(u)[2])
        refused: dict[int, DelayqError] = {}
        for i in over.tolist():
            why = f"the wheel slot of {int(dues[i])} is full (limit {limit} messages)"
            refused[i] = Congested(why, p)
        st.counters["congested_slot"] += len(refused)
        return refused
