"""The checkpoint: fsync what the derived files hold, then atomically record how
far they go (``store.checkpoint``), so a restart replays only what follows.

Order (each step needs the one before on disk): snapshot the positions under
the lock (and write the ready queues' tails); wait for the CommitLog to be
durable up to the snapshot (group commit); fsync the TimerLog, the ready
queues, then the mapped files (the wheel after the TimerLog its slots point
into, the state map), and the block files; save the checkpoint file (with each
block file's length), and only then delete the files of the blocks loaded before
the snapshot (``compaction.loading``). Only then may the scan run a window past the new
cursor, and retention delete what the checkpoint no longer needs; the key
indexes are swept last (``keyfiling.KeySweep``). One
checkpoint at a time (the flush stage's and a caller's write the same file, and
retention deletes segments outside the shard's lock).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from ... import formats
from ...store.checkpoint import Checkpoint
from ...store.datadir import CHECKPOINT
from ...store.importfile import save_imports
from ..deliveries import Deliveries
from ..keyfiling import KeySweep
from ..stages.scan import Scanner
from ..state import ShardState
from .retention import Retention

__all__ = ["Checkpointer"]

log = logging.getLogger("delayq.engine")


class Checkpointer:
    def __init__(
        self,
        state: ShardState,
        deliveries: Deliveries,
        scanner: Scanner,
        wait_durable: Callable[[int], None],
    ) -> None:
        self._state = state
        self._deliveries = deliveries
        self._scanner = scanner
        self._wait_durable = wait_durable  # the CommitLog's group commit
        self._retention = Retention(state, deliveries)
        self._one_at_a_time = threading.Lock()  # see the module docstring
        self._key_sweep = KeySweep()

    def checkpoint(self) -> Checkpoint:
        """fsync everything and atomically write a checkpoint; then apply retention."""
        with self._one_at_a_time:
            return self._checkpoint()

    def _checkpoint(self) -> Checkpoint:
        st = self._state
        with st.wakeups.lock:
            self._expire_ready()
            ckpt = self._snapshot()
            self._record_progress(ckpt.scan_from_slot)
            # the ready queues as of the snapshot go to their files now (save_to); the
            # fsyncs of those and the TimerLog run without the lock
            fds = st.tl.log.take_unsynced() + self._deliveries.save_to(ckpt)
            # then the mapped files (after the TimerLog their slots point into)
            fds += [st.wheel.fd, *st.states.take_dirty()]
            imports = st.imports.entries() if st.imports.dirty else None
            st.imports.dirty = False
            block_fds = st.blocks.files.take_dirty()  # ours to close (see blockfiles)
            loaded = st.blocks.done()  # their LOADED records are before applied_end
        self._wait_durable(ckpt.applied_end)
        try:
            for fd in fds + block_fds:
                os.fsync(fd)
        finally:
            for fd in block_fds:
                os.close(fd)
        if imports is not None:  # before the checkpoint that no longer replays their records
            try:
                save_imports(st.files.dir, imports, ckpt.written_ms)
            except BaseException:
                st.imports.dirty = True
                raise
        ckpt.save(st.files.dir / CHECKPOINT)
        with st.wakeups.lock:  # a restart resumes the scan there now
            st.durable_scan_from = ckpt.scan_from_slot
            if st.wakeups.scan_awaits_checkpoint:
                st.wakeups.scan.notify()
        st.checkpointed_end = ckpt.applied_end
        st.counters["checkpoints"] += 1
        if loaded:  # no replay needs their files now
            with st.wakeups.lock:
                st.blocks.drop(loaded)
        self._retention.apply(ckpt)
        with st.wakeups.lock:  # the key indexes' ended entries (amortised: see keyfiling)
            st.counters["key_entries_swept"] += self._key_sweep.run(
                (st.keys, st.dedups), st.key_held, st.clock.now_ms()
            )
        return ckpt

    def _snapshot(self) -> Checkpoint:
        st = self._state
        s = st.settings
        # the scan resumes at the first slot whose messages are not all released:
        # those waiting in the release buffer and those whose chain is being read
        lows = [st.release.lowest_slot(), self._scanner.reading_slot, st.scan_cursor]
        ckpt = Checkpoint(
            shard=s.shard,
            epoch=st.office.epoch,
            written_ms=st.clock.now_ms(),
            replay_from=st.enqueue_q.head_pos() or st.cl.end,
            applied_end=st.cl.end,
            timerlog_end=st.tl.end,
            scan_from_slot=min(x for x in lows if x is not None),
            next_seq=st.next_seq,
        )
        st.topics.save_to(ckpt)
        ckpt.blocks = st.blocks.lengths()
        return ckpt

    def _record_progress(self, scan_from: int) -> None:
        """A replicated master writes where its scan now resumes into its log (a
        PROGRESS record), when that moved: its replicas fire up to there, and one
        promoted resumes there (see ``formats.progress``)."""
        st = self._state
        if (
            st.settings.replicated
            and st.office.delivering()
            and scan_from != st.office.progress_written
        ):
            now = st.clock.now_ms()
            st.cl.append(formats.encode_progress(scan_from, now), now)
            st.office.progress_written = scan_from

    def _expire_ready(self) -> None:
        """Expire ready entries delivered more than the retention period ago: no
        group can receive them any more, whether it acked them or not."""
        st = self._state
        lost = self._deliveries.expire_before(st.clock.now_ms() - st.settings.retention_ms)
        for (tid, group), count in lost.items():
            st.counters["expired"] += count
            topic = st.topics.names.get(tid, str(tid))
            log.warning(
                "messages expired before their group acked them",
                extra={"topic": topic, "group": group, "count": count},
            )
