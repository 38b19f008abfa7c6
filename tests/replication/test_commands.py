"""Role commands run whole (in process, one ``ShardNode`` and its engine): a Follow
whose caller stops waiting halfway (its RPC's deadline passed while the old
follower loop was still stopping: a partitioned master's stream) still ends with
one follower loop, to the new master. Cut there, the node reported the new master
in its Status while following no one, so the control plane never told it again
and it never rejoined the in-sync set (found by
``tests/partition/test_nemeses.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from delayq import Engine
from delayq.errors import FailedPrecondition
from delayq.replication.node import ShardNode
from tests.support.engines import small_settings

OLD, NEW = "127.0.0.1:9", "127.0.0.1:10"  # nothing answers: the loops keep retrying


def test_a_follow_whose_caller_gives_up_halfway_still_follows_the_new_master(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(small_settings(tmp_path / "n", replicated=True))
    node = ShardNode(engine.replicating, name="n", address="127.0.0.1:1", follow=OLD)
    engine.start()
    stop = node._stop_follower

    async def slow_stop() -> None:  # the old loop takes its time to end
        await asyncio.sleep(0.3)
        await stop()

    monkeypatch.setattr(node, "_stop_follower", slow_stop)

    async def main() -> None:
        node.started()
        first = node._follower
        assert first is not None and node.master == OLD
        call = asyncio.ensure_future(node.follow(3, NEW))
        await asyncio.sleep(0.1)
        call.cancel()  # the RPC's deadline: the handler is cancelled
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(0.6)
        assert node.master == NEW and first.done()
        assert node._follower is not None and not node._follower.done(), "no loop runs"
        # commands run one at a time, in order: a stale one after it is refused
        with pytest.raises(FailedPrecondition):
            await node.follow(2, OLD)
        assert node.master == NEW
        await node.stop()

    try:
        asyncio.run(main())
    finally:
        engine.close()
