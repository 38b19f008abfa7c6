"""Forwards and the key index's build at open (real files, a fake clock): the
shard map the engine was told (``Engine.set_map_shards``, before the open) decides
at the open's build which forwards hold their key, for a shard named by the
state byte and for one named by the state map's side file (>= 128) alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq import Engine, FakeClock
from delayq.engine import ReleaseOutcome
from delayq.types import IfExists
from tests.support.engines import ids, req, small_settings


def entries_after_reopen(
    data: Path, clock: FakeClock, target: int, joining: frozenset[int]
) -> tuple[int, str | None]:
    """Hand a keyed message (no window) of shard 0 over to ``target``, kill the
    engine, and open it again told the map first (both shards listed, ``joining``):
    the index's entries, and the id a REJECT of the key answers."""
    shards = frozenset({0, target})
    e = Engine(small_settings(data), clock, background=False)
    e.set_map_shards(shards, joining)
    e.start()
    [a] = ids(e.schedule([req(60_000, key="k", if_exists=IfExists.REJECT)]))
    assert e.moving.release([a], target=target) == [ReleaseOutcome.RELEASED]
    e.abandon()  # no keys.idx: the next open builds the index
    e = Engine(small_settings(data), clock, background=False)
    e.set_map_shards(shards, joining)
    e.start()
    try:
        assert e.recovery["keys"] == "built"
        n = e.observing.gauges()["key_index_entries"]
        [again] = e.schedule([req(100, key="k", if_exists=IfExists.REJECT)])
        return n, again.id if again.id == a else None
    finally:
        e.close()


@pytest.mark.parametrize("target", [1, 200])
def test_a_forward_to_a_joining_shard_is_filed_at_the_build(
    tmp_path: Path, clock: FakeClock, target: int
) -> None:
    n, held = entries_after_reopen(tmp_path / "d", clock, target, frozenset({target}))
    assert n == 1 and held is not None


@pytest.mark.parametrize("target", [1, 200])
def test_a_forward_to_an_active_shard_without_a_window_is_not_filed(
    tmp_path: Path, clock: FakeClock, target: int
) -> None:
    n, _ = entries_after_reopen(tmp_path / "d", clock, target, frozenset())
    assert n == 0
