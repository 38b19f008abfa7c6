"""Compaction blocks on a replica (in process, fake clock): the master's BLOCK,
LOADED and load copies reach the replica through its log, applied by recovery's
own ``apply_record``: it ends with the master's state bytes and block files;
promoted, it loads the blocks still due and delivers every message once, none
early."""

from __future__ import annotations

from pathlib import Path

from bench.compaction import compact

from delayq import Engine, FakeClock
from delayq.ids import MessageId
from tests.engine.test_blocks import DAY, YEAR_SETTINGS, Ledger, far, run_days
from tests.replication.test_replica_engine import replicate
from tests.support.engines import START_MS, small_settings


def open_node(path: Path, clock: FakeClock, *, replica: bool) -> Engine:
    e = Engine(small_settings(path, replicated=True, **YEAR_SETTINGS), clock, background=False)
    if replica:
        e.replicating.start_as_replica()
    return e.start()


def raw_states(e: Engine, sent: list[str]) -> list[int]:
    insp = e.inspect()
    with insp.lock:
        out = []
        for mid in sent:
            rec, _ = insp.commitlog.read(MessageId.parse(mid).position, payload=False)
            out.append(insp.states.raw(rec.seq))  # type: ignore[union-attr]
        return out


def block_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes()[32:] for p in sorted((path / "blocks").glob("*.blk"))}


def test_a_replica_holds_the_masters_blocks_and_promoted_delivers_them(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    master = open_node(tmp_path / "m", clock, replica=False)
    replica = open_node(tmp_path / "r", clock, replica=True)
    ledger = Ledger()
    try:
        sent = ledger.sent(master, far(60, 20, 60))
        run_days(master, clock, 3, ledger)
        assert compact(master, beyond_ms=7 * DAY, block_ms=DAY).get("blocked", 0) > 40
        master.cancel(sent[:3])
        master.checkpoint()
        replicate(master, replica)
        replica.pump()
        replica.checkpoint()
        assert raw_states(replica, sent) == raw_states(master, sent)
        assert block_files(tmp_path / "r") == block_files(tmp_path / "m")
        # the first blocks load at the master; the replica gets their copies and LOADED
        run_days(master, clock, 25, ledger)
        assert master.observing.counters["loaded"] > 0
        master.checkpoint()
        replicate(master, replica)
        replica.pump()
        replica.checkpoint()
        assert raw_states(replica, sent) == raw_states(master, sent)
        assert block_files(tmp_path / "r").keys() == block_files(tmp_path / "m").keys()
        assert replica.observing.counters["delivered"] == 0
        left = set(sent) - set(ledger.got) - set(sent[:3])
        assert left, "some blocks still to load"
        ledger.got.clear()
        master.close()
        replica.replicating.promote(2)
        run_days(replica, clock, 40, ledger)
        assert left <= set(ledger.got)
        assert replica.observing.counters["early"] == 0
        replica.checkpoint()
        assert not block_files(tmp_path / "r")
    finally:
        master.close()
        replica.close()
