"""Driving the stages: one thread each (``start``/``stop``), or ``pump`` for a
shard run without threads (tests, tools: years of fake-clock time in seconds).

Threads: link, scan and release each run ``stageloop.run_stage`` on their own
condition; flush checkpoints every ``flush_interval_ms`` (or sooner, see
``tuning.CHECKPOINT_BYTES``); warm reads the logs' new tails into the page cache
off the writers' path. ``pump`` runs link, scan and release until none has work
at the clock's current time, checkpointing when the scan waits for one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..clock import precise_waits
from ..store.warmtail import warm_pages
from .deliveries import Deliveries
from .lifecycle.checkpointing import Checkpointer
from .stages.failures import FailureRun
from .stages.link import Linker
from .stages.loop import run_stage
from .stages.release import Firer, Releaser
from .stages.scan import Scanner
from .state import ShardState
from .timingwheel import slot_of
from .tuning import LINK_GATHER_S, RELEASE_TIMER_SLACK_NS, WARM_POLL_S

__all__ = ["Stages"]

log = logging.getLogger("delayq.engine")


class Stages:
    def __init__(
        self,
        state: ShardState,
        linker: Linker,
        scanner: Scanner,
        releaser: Releaser,
        checkpointer: Checkpointer,
    ) -> None:
        self._state = state
        self.link = linker
        self.scan = scanner
        self.release = releaser
        self.checkpoint = checkpointer
        self.threads: list[threading.Thread] = []

    @classmethod
    def build(
        cls,
        state: ShardState,
        deliveries: Deliveries,
        on_released: Callable[[], None],
        wait_durable: Callable[[int], None],
        firer: Firer | None = None,
    ) -> Stages:
        """The link, scan, release and checkpoint stages of ``state``, joined;
        ``firer``: the release stage's hook for its topic's rows (``Firer``)."""
        link = Linker(state)
        release = Releaser(state, deliveries, on_released, firer)
        scan = Scanner(state, link.near, release.is_due)
        return cls(state, link, scan, release, Checkpointer(state, deliveries, scan, wait_durable))

    def start(self) -> None:
        """One thread per stage (daemon threads: ``stop`` joins them)."""
        for name, loop in (
            ("enqueue", self._link_loop),
            ("scan", self._scan_loop),
            ("release", self._release_loop),
            ("flush", self._flush_loop),
            ("warm", self._warm_loop),
        ):
            t = threading.Thread(target=loop, name=f"delayq-{name}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        """Tell every stage to end and wait for their threads."""
        self._state.wakeups.stop()
        for t in self.threads:
            t.join()

    def gauges(self) -> dict[str, int]:
        """Queue depths and positions, for metrics (lock held by the caller)."""
        st = self._state
        now_slot = slot_of(st.clock.now_ms(), st.settings.precision_ms)
        return {
            "enqueue_queue": len(st.enqueue_q),
            "release_buffer": len(st.release),
            "near_rows": self.link.near.count,
            "scan_lag_slots": max(0, now_slot - st.scan_cursor + 1),
            "pending": st.topics.total_pending(),
            "commitlog_end": st.cl.end,
            "timerlog_end": st.tl.end,
            "key_index_entries": len(st.keys),  # keyed records filed (some may have ended)
            "dedup_index_entries": len(st.dedups),
        }

    def pump(self) -> None:
        """Run every stage until nothing is left to do at the clock's current time.
        The caller holds the shard's lock once (not twice: the scan lets go of it
        while it reads chains, and other threads may come in then)."""
        while True:
            while self.link.step() | self.scan.step() | self.release.step():
                pass
            if not self._state.wakeups.scan_awaits_checkpoint:
                return
            self.checkpoint.checkpoint()  # no flush stage here: the scan waits for one

    def _run(
        self,
        cv: threading.Condition,
        step: Callable[[], bool],
        next_ms: Callable[[], int | None],
        gather_s: float | Callable[[], float] = 0.0,
        idle: Callable[[bool], None] | None = None,
    ) -> None:
        st = self._state
        run_stage(
            cv,
            step,
            stopped=lambda: st.wakeups.stopped,
            next_ms=next_ms,
            timeout_s=st.clock.timeout_s,
            gather_s=gather_s,
            idle=idle,
            name=threading.current_thread().name.removeprefix("delayq-"),
            on_failure=lambda: st.counters.update(("stage_failures",)),
        )

    def _link_loop(self) -> None:
        # After each link, gather for LINK_GATHER_S: link batches stay big (its numpy
        # work is per batch). Accept wakes the stage early only when it is idle or a
        # message is due within LINK_URGENT_MS (its slot may be about to fire).
        wake = self._state.wakeups

        def idle(flag: bool) -> None:
            wake.link_idle = flag

        self._run(wake.link, self.link.step, lambda: None, LINK_GATHER_S, idle)

    def _scan_loop(self) -> None:
        self._run(self._state.wakeups.scan, self.scan.step, self.scan.next_ms)

    def _release_loop(self) -> None:
        # This stage's waits end at due times: only its own thread's slack is changed.
        if not precise_waits(RELEASE_TIMER_SLACK_NS):
            log.debug("timer slack left at the default: release may wake up to 50 µs late")
        rel = self.release
        self._run(self._state.wakeups.release, rel.step, rel.next_ms, rel.gather_s)

    def _flush_loop(self) -> None:
        st = self._state
        interval = st.settings.flush_interval_ms / 1000.0
        failures = FailureRun(log, "checkpoint")

        def flush() -> None:
            try:
                self.checkpoint.checkpoint()
                # the CommitLog pages read through its maps count in this process's
                # RSS until unmapped: keep them to what was read since the last flush
                st.cl.log.drop_views()
            except Exception as exc:  # keep flushing; a failing disk shows in logs and metrics
                failures.failed(exc, interval)
                st.counters["checkpoint_failures"] += 1
            else:
                failures.succeeded()

        self._every(st.wakeups.flush_soon, interval, flush)

    def _warm_loop(self) -> None:
        """Read the logs' new warm tails into the page cache (see store.warmtail):
        the reads let go of the GIL and the lock is not held."""
        st = self._state

        def warm() -> None:
            with st.wakeups.lock:
                cold = st.cl.log.take_cold() + st.tl.log.take_cold()
            for fd, start, end in cold:
                warm_pages(fd, start, end)

        self._every(st.wakeups.warm_soon, WARM_POLL_S, warm)

    def _every(self, soon: threading.Event, interval_s: float, work: Callable[[], None]) -> None:
        """Run ``work`` every ``interval_s``, or sooner when ``soon`` is set, until stop."""
        wake = self._state.wakeups
        while True:
            soon.wait(interval_s)
            soon.clear()
            with wake.lock:
                if wake.stopped:
                    return
            work()
