"""A replica promoted in sync mode (in process, one ``ShardNode`` and its engine):
from the instant the engine holds the master's role, a write waits for the
in-sync set and nothing of the new epoch is indexed for delivery before the set
holds it. A call served right as the role changed (the producer of a failover
retries at once) must not find the replica's settings: no ack wait (acked on
this node's fsync alone) and no index limit (linked and delivered before any
replica has it)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from delayq import Engine
from delayq.engine import MessageState
from delayq.errors import Unavailable
from delayq.replication.node import ShardNode
from delayq.settings import FlushPolicy
from tests.replication.nodes import wait_for
from tests.support.engines import ids, req, small_settings


def test_a_write_the_instant_a_replica_becomes_master_waits_for_the_insync_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = small_settings(tmp_path / "n", replicated=True, flush=FlushPolicy.SYNC)
    engine = Engine(settings)
    node = ShardNode(
        engine.replicating,
        name="n",
        address="127.0.0.1:1",
        replication="sync",
        ack_timeout_s=0.3,
        replica=True,
    )
    engine.start()
    seen: dict[str, Any] = {}
    promote = engine.replicating.promote

    def promote_then_write(*args: Any, **kwargs: Any) -> None:
        promote(*args, **kwargs)
        # a Schedule served the moment the role changed, before the node's coroutine
        # goes on (it runs on the event loop; this is the engine's thread)
        try:
            engine.schedule([req(0)])
            seen["write"] = "acked"
        except Unavailable:
            seen["write"] = "unavailable"

    monkeypatch.setattr(engine.replicating, "promote", promote_then_write)

    async def main() -> None:
        node.started()
        await node.promote(2, frozenset({"n"}), 0)

    try:
        asyncio.run(main())
        # no replica holds the write: it is not delivered either
        assert engine.receive("t", "g", wait_ms=500) == []
        assert seen == {"write": "unavailable"}
        assert engine.role == "master" and engine.epoch == 2
    finally:
        engine.close()


def test_a_mark_raised_while_the_master_takes_its_role_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report that raises the mark between the master reading it and setting its
    index limit: the older value must not win (the limit would stay below
    acknowledged writes until the mark moved again)."""
    settings = small_settings(tmp_path / "n", replicated=True, flush=FlushPolicy.SYNC)
    engine = Engine(settings)
    node = ShardNode(engine.replicating, name="m", address="127.0.0.1:1", replication="sync")
    engine.start()
    try:
        engine.replicating.set_index_limit(0)  # (as the node would have it) nothing linked yet
        ends, sent = [], []
        for _ in range(4):
            sent += ids(engine.schedule([req(0)]))
            ends.append(engine.replicating.flushed)
        book = node.followers
        book.tell_insync(frozenset({"m", "r"}))
        book.connected("r")
        book.report("r", ends[1], ends[1])  # half the writes held by the set
        set_limit = engine.replicating.set_index_limit
        armed = [True]

        def racing(pos: int | None) -> None:
            if armed[0]:  # the first call, from taking the role: a report comes in now
                armed[0] = False
                late = threading.Thread(target=book.report, args=("r", ends[-1], ends[-1]))
                late.start()
                late.join(0.3)  # (blocks on the book's lock when the read holds it)
            set_limit(pos)

        monkeypatch.setattr(engine.replicating, "set_index_limit", racing)
        node.started()
        # every write the set holds is delivered (a receive would wait for "r" to hold
        # its hand-out record: there is no "r" here)
        wait_for(
            "every write delivered",
            lambda: all(engine.lookup(i).state is MessageState.DELIVERED for i in sent),
        )
    finally:
        engine.close()
