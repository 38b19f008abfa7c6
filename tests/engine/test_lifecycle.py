"""The engine's lifecycle over its parts (``engine.lifecycle.ShardLife``): before
the shard is open and after it closes, every part's call is refused with
``EngineClosed`` (one explicit check), while what a node is (role, epoch, log
end) answers whatever the lifecycle; a rewind reopens the shard under the same
parts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from delayq import Engine, EngineClosed, FakeClock
from delayq.epochs import EpochHistory
from delayq.ids import MessageId
from delayq.role import Role
from tests.support.engines import ids, req, run_until, small_settings

CALLS: dict[str, Callable[[Engine], Any]] = {
    "schedule": lambda e: e.schedule([req(10)]),
    "cancel": lambda e: e.cancel(["0-1-2"]),
    "lookup": lambda e: e.lookup(str(MessageId(0, 3, 32))),
    "receive": lambda e: e.receive("t", "g"),
    "ack": lambda e: e.ack("t", "g", ["x"]),
    "stats": lambda e: e.stats(),
    "pump": lambda e: e.pump(),
    "inspect": lambda e: e.inspect(),
    "imported": lambda e: e.imported(["1-1-2"]),
    "release": lambda e: e.moving.release(["0-1-2"], 1),
    "begin_export": lambda e: e.moving.begin_export(1 << 20),
    "promote": lambda e: e.replicating.promote(5),
    "follow": lambda e: e.replicating.follow(),
    "apply_replicated": lambda e: e.replicating.apply_replicated(0, b"", EpochHistory()),
}


def _engine(tmp_path: Path, clock: FakeClock) -> Engine:
    return Engine(small_settings(tmp_path / "data", epoch=3), clock, background=False)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_before_the_shard_opens_every_part_refuses(
    call: str, tmp_path: Path, clock: FakeClock
) -> None:
    e = _engine(tmp_path, clock)
    with pytest.raises(EngineClosed):
        CALLS[call](e)
    assert not e.running


def test_before_the_shard_opens_the_node_answers_from_its_settings(
    tmp_path: Path, clock: FakeClock
) -> None:
    e = _engine(tmp_path, clock)
    r = e.replicating
    assert (e.role, e.epoch, e.commitlog_end, e.recovery) == (Role.MASTER, 3, 0, {})
    assert (r.flushed, r.fenced, r.delivering(), r.lease_bounded()) == (0, False, False, False)
    assert r.epochs == EpochHistory() and r.lease_left_s() is None
    r.start_as_replica()
    assert e.role is Role.REPLICA, "the role it will start in"
    e.close()
    with pytest.raises(EngineClosed):
        e.start()


@pytest.mark.parametrize("call", sorted(CALLS))
def test_after_close_every_part_refuses(call: str, tmp_path: Path, clock: FakeClock) -> None:
    e = _engine(tmp_path, clock).start()
    e.schedule([req(10)])
    e.close()
    with pytest.raises(EngineClosed):
        CALLS[call](e)


def test_after_close_the_node_and_metrics_read_the_shard_last_opened(
    tmp_path: Path, clock: FakeClock
) -> None:
    e = _engine(tmp_path, clock).start()
    assert e.start() is e, "start is idempotent"
    e.schedule([req(10), req(20)])
    end = e.commitlog_end
    e.close()
    assert (e.role, e.epoch, e.replicating.flushed) == (Role.MASTER, 3, end)
    assert e.observing.pending_by_topic() == {"t": 2}
    assert e.observing.release_lag_ms() == 0


def test_a_rewind_reopens_the_shard_under_the_same_parts(tmp_path: Path, clock: FakeClock) -> None:
    e = _engine(tmp_path, clock).start()
    try:
        parts = (e.observing, e.moving, e.replicating)
        kept = ids(e.schedule([req(10_000, b"kept")]))
        at = e.commitlog_end
        e.schedule([req(10_000, b"cut")])
        e.replicating.follow()
        cut = e.replicating.rewind(at)
        assert cut > 0 and e.commitlog_end == at and e.role is Role.REPLICA
        assert (e.observing, e.moving, e.replicating) == parts
        assert e.observing.pending_by_topic() == {"t": 1}
        e.replicating.promote(4)
        run_until(e, clock, clock.now_ms() + 10_100, step_ms=50)
        got = e.receive("t", "g")
        assert [(m.id, m.body) for m in got] == [(kept[0], b"kept")]
    finally:
        e.close()


def test_a_close_during_a_rewind_is_final(tmp_path: Path, clock: FakeClock) -> None:
    # a server stopping while its follower rewinds: the rewind's thread outlives the
    # cancelled follower, and the close must not be undone by the reopen after it
    e = _engine(tmp_path, clock).start()
    e.schedule([req(10_000)])
    e.replicating.follow()

    def close_meanwhile() -> int:  # the close lands between the cut and the reopen
        e.close()
        return 0

    with pytest.raises(EngineClosed, match="closed while its log was rewound"):
        e._life.reopen(close_meanwhile)
    assert not e.running
    with pytest.raises(EngineClosed):
        e.start()
