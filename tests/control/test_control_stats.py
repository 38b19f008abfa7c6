"""``delayq.control.stats``: what a shard holds, asked of a real ``delayq serve``
through its public Stats RPC (the operator's drain check and map-epoch wait)."""

from __future__ import annotations

from collections.abc import Callable

import delayq
from delayq.control.resharding import drained
from delayq.control.stats import shard_stats
from tests.support.servers import ServerProcess


def test_a_nodes_pending_messages_and_map_epoch(start_server: Callable[..., ServerProcess]) -> None:
    srv = start_server()
    empty = shard_stats(srv.address)
    assert empty is not None and empty.topology_epoch >= 1 and empty.role == "master"
    assert drained(empty.topics)
    with delayq.Client(srv.address) as c:
        for i in range(3):
            c.schedule("orders", f"m{i}".encode(), delay=3600, key=f"k{i}")
    got = shard_stats(srv.address)
    assert got is not None and got.shard == 0
    (orders,) = [t for t in got.topics if t["topic"] == "orders"]
    assert orders["pending"] == 3 and not drained(got.topics)


def test_no_answer_is_none() -> None:
    assert shard_stats("127.0.0.1:1", timeout_s=0.5) is None
