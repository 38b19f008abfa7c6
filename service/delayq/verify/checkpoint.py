"""The checkpoint (``checkpoint.json``): present, readable, and not past the logs.

``load`` reads it first (the log walks need its replay start); ``against_logs``
runs after both walks: its applied_end, replay_from and timerlog_end must not
lie past the valid ends of the logs, its next_seq must be above every seq
of a record before its applied_end, and no group may hold in flight an offset
past its topic's ready queue (HANDOUT records it covers, ``formats.handout``).

Everything here is damage that a replay of the whole CommitLog repairs (the fix
sets the checkpoint aside): ``checkpoint-corrupt``, ``checkpoint-ahead``,
``checkpoint-seq``, and ``checkpoint-missing`` (nothing to write: a start
without one replays everything). Its fields are reported as the file's facts.
"""

from __future__ import annotations

from ..errors import CorruptData
from ..store.checkpoint import Checkpoint
from ..store.datadir import CHECKPOINT
from .checker import Checker

__all__ = ["CHECKPOINT", "against_logs", "load"]


def load(c: Checker) -> None:
    """Read the checkpoint into ``c.ckpt`` (None if missing or corrupt)."""
    try:
        c.ckpt = Checkpoint.load(c.root / CHECKPOINT)
    except CorruptData as exc:
        c.replay(CHECKPOINT, "checkpoint-corrupt", None, str(exc))
        return
    if c.ckpt is None:
        c.replay(
            CHECKPOINT,
            "checkpoint-missing",
            None,
            "no checkpoint: the next start replays the whole CommitLog",
        )
        return
    k = c.ckpt
    c.report.file(CHECKPOINT).facts.update(
        shard=k.shard,
        epoch=k.epoch,
        applied_end=k.applied_end,
        replay_from=k.replay_from,
        timerlog_end=k.timerlog_end,
        scan_from_slot=k.scan_from_slot,
        next_seq=k.next_seq,
        groups=sum(len(gs) for gs in k.groups.values()),
        in_flight=sum(len(g.inflight) for gs in k.groups.values() for g in gs.values()),
        policies=sum(len(ps) for ps in k.policies.values()),
    )


def against_logs(c: Checker) -> None:
    """The checkpoint's positions against the walked logs' valid ends, its
    next_seq against the seqs it covers."""
    k = c.ckpt
    if k is None:
        return
    if c.cl is not None:
        valid = c.cl_facts.valid_end
        if k.applied_end > valid or k.replay_from > k.applied_end:
            c.replay(
                CHECKPOINT,
                "checkpoint-ahead",
                k.applied_end,
                f"applied_end {k.applied_end} / replay_from {k.replay_from}: past the "
                f"valid CommitLog end {valid}",
            )
    if c.tl is not None:
        valid = c.tl_facts.valid_end
        if k.timerlog_end > valid:
            c.replay(
                CHECKPOINT,
                "checkpoint-ahead",
                k.timerlog_end,
                f"timerlog_end {k.timerlog_end}: past the valid TimerLog end {valid}",
            )
    late = [(pos, seq) for pos, seq in c.max_seq if pos < k.applied_end and seq >= k.next_seq]
    if late:
        pos, seq = late[0]
        c.replay(
            CHECKPOINT,
            "checkpoint-seq",
            pos,
            f"next_seq {k.next_seq}, yet the record at {pos} before applied_end has seq {seq}",
        )
    for tid, groups in k.groups.items():
        length = k.ready_len.get(tid, 0)
        for name, g in groups.items():
            beyond = [row[0] for row in g.inflight if row[0] >= length]
            if beyond:
                c.replay(
                    CHECKPOINT,
                    "checkpoint-ahead",
                    None,
                    f"group {name!r} of topic {tid} holds offset {beyond[0]} in flight, "
                    f"past its ready queue's length {length}",
                )
                return
