"""Opening a shard: lock its data directory, open its files, recover.

The directory's ``LOCK`` file is flocked for as long as the shard is open, so a
second process (a server, ``delayq verify``) cannot open it meanwhile. A failed
open (corrupt data, another shard's directory, a full disk) closes what it
opened and lets go of the lock, so the directory can be opened again at once;
OS errors become one clear ``FailedPrecondition`` line.
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ...clock import Clock
from ...errors import FailedPrecondition, no_space
from ...settings import EngineSettings
from ...store import datadir, dirlock
from ...store.blockfiles import BlockFiles
from ...store.commitlog import CommitLog
from ...store.epochfile import EPOCHS_FILE, load_epochs
from ...store.quarantine import Quarantine
from ...store.statemap import StateMap
from ...store.timerlog import TimerLog
from ...store.wheel import TimerWheel
from ..deliveries import Deliveries
from ..shardfiles import ShardFiles
from ..state import ShardState
from ..tuning import CL_WARM_BYTES, TL_WARM_BYTES
from ..wakeups import Wakeups
from .keyrecovery import open_keys
from .newepoch import begin_epoch
from .recovery import recover

__all__ = ["cannot_use", "lock_data_dir", "open_shard"]

D = TypeVar("D", bound=Deliveries)


def cannot_use(data_dir: Path, exc: OSError) -> FailedPrecondition:
    """The error for a data directory whose files could not be opened or made."""
    where = f" ({exc.filename})" if exc.filename else ""
    hint = "; free space or grow the volume" if no_space(exc) else ""
    why = exc.strerror or str(exc)
    return FailedPrecondition(f"data directory {data_dir} cannot be used: {why}{where}{hint}")


def lock_data_dir(data_dir: Path) -> int:
    """Create ``data_dir`` if needed and flock its ``LOCK`` file; return the
    descriptor (closing it lets go). FailedPrecondition if another process holds it."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        return dirlock.hold(data_dir)
    except BlockingIOError as exc:
        raise FailedPrecondition(
            f"data directory {data_dir} is in use by another delayq process"
        ) from exc
    except OSError as exc:  # a file in the way, no permission, a read-only disk
        raise cannot_use(data_dir, exc) from exc


def open_shard(
    settings: EngineSettings,
    clock: Clock,
    wakeups: Wakeups,
    make_deliveries: Callable[[Path, CommitLog, Quarantine], D],
    counters: collections.Counter[str],
    map_shards: tuple[frozenset[int] | None, frozenset[int] | None] = (None, None),
) -> tuple[ShardState, D]:
    """Open and recover the shard in ``settings.data_dir``; ``make_deliveries``
    builds the delivery side over ``<data>/ready``, the CommitLog and the
    quarantine; ``counters`` is where the shard counts its events; ``map_shards``
    the served map's shards as last told (``ShardState.listed``, ``joining``), set
    before the key index's build, which keeps the forwards they hold."""
    s = settings
    d = Path(s.data_dir)
    lock_fd = lock_data_dir(d)
    try:
        with contextlib.ExitStack() as undo:
            undo.callback(os.close, lock_fd)
            now = clock.now_ms()
            warm = wakeups.warm_soon.set
            cl = CommitLog(
                d / datadir.COMMITLOG,
                s.commitlog_segment_bytes,
                warm_bytes=CL_WARM_BYTES,
                on_cold=warm,
            )
            undo.callback(cl.close, cut_tail=False)
            tl = TimerLog(
                d / datadir.TIMERLOG,
                s.timerlog_segment_bytes,
                warm_bytes=TL_WARM_BYTES,
                on_cold=warm,
            )
            undo.callback(tl.close, cut_tail=False)
            wheel = TimerWheel(d / datadir.TIMERWHEEL, 2 * s.window_slots, s.precision_ms, now)
            undo.callback(wheel.close)
            states = StateMap(d / datadir.STATE, now)
            undo.callback(states.close)
            blocks = BlockFiles(d / datadir.BLOCKS)
            undo.callback(blocks.close)
            quarantine = Quarantine(d / datadir.QUARANTINE, clock.now_ms, counters)
            (d / datadir.READY).mkdir(exist_ok=True)
            deliveries = make_deliveries(d / datadir.READY, cl, quarantine)
            undo.callback(deliveries.close, write_tails=False)
            files = ShardFiles(d, lock_fd, cl, tl, wheel, states, blocks)
            state = ShardState(s, clock, files, wakeups, quarantine, counters=counters)
            state.listed, state.joining = map_shards
            state.office.epochs = load_epochs(d / EPOCHS_FILE)
            state.office.epoch = max(s.epoch, state.office.epochs.last)
            recover(state, deliveries)
            open_keys(state)
            begin_epoch(state, state.office.epoch)
            cl.log.prepare(now)
            tl.log.prepare(now)
            states.prepare(state.next_seq)
            undo.pop_all()
    except OSError as exc:  # no space, no permission, an I/O error: one clear line
        raise cannot_use(d, exc) from exc
    state.checkpointed_end = cl.end
    state.office.firing_since_ms = clock.now_ms()  # (recovered: it may fire from now)
    state.durable_scan_from = state.scan_cursor  # where a restart would resume now
    state.fill_bound = wheel.max_num_all()
    return state, deliveries
